"""``ENQUEUE_ON_COMMIT``: a task enqueued inside a database transaction is
pushed when the transaction commits, and never if it rolls back. Real
transactions on the test database (``transaction=True``: Django's test
transaction would never commit), the embedded broker on a memory store."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth.models import Group
from django.db import transaction
from django.tasks import TaskResultStatus
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_enqueued

from engine import Broker
from tests.e2e import sample_tasks as st
from tests.queueadmin.test_tasks_backend import BACKEND, committer, node, work  # noqa: F401 (node: a fixture)

if TYPE_CHECKING:
    from pytest_django.fixtures import SettingsWrapper

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def on_commit(node: Broker, settings: SettingsWrapper) -> Broker:  # noqa: F811 (the imported fixture)
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default"],
                                  "OPTIONS": {"ENQUEUE_ON_COMMIT": True}}}
    return node


def pending(broker: Broker) -> list[str]:
    return [job["id"] for job in committer(broker).document()["jobs"]]


def test_a_task_enqueued_in_a_transaction_is_pushed_when_it_commits(on_commit: Broker) -> None:
    with transaction.atomic():
        Group.objects.create(name="made-with-the-task")
        result = st.add.enqueue(2, 3)
        assert result.status == TaskResultStatus.READY and result.id
        assert pending(on_commit) == []  # a worker cannot see it before the row it refers to
        with pytest.raises(TaskResultDoesNotExist):
            st.add.get_result(result.id)
    assert pending(on_commit) == [result.id]  # the id given at enqueue is the job's
    work(on_commit)
    assert st.add.get_result(result.id).return_value == 5


def test_a_task_enqueued_in_a_transaction_that_rolls_back_is_never_pushed(on_commit: Broker) -> None:
    class Abort(Exception):
        pass

    with pytest.raises(Abort), transaction.atomic():
        result = st.add.enqueue(2, 3)
        raise Abort
    with transaction.atomic():
        kept = st.add.enqueue(1, 1)
        try:
            with transaction.atomic():  # a savepoint rolled back: its push goes with it
                st.add.enqueue(9, 9)
                raise Abort
        except Abort:
            pass
    assert pending(on_commit) == [kept.id]
    with pytest.raises(TaskResultDoesNotExist):
        st.add.get_result(result.id)


def test_outside_a_transaction_the_task_is_pushed_at_once(on_commit: Broker) -> None:
    result = st.add.enqueue(2, 3)
    assert pending(on_commit) == [result.id]


def test_without_the_option_a_task_is_pushed_inside_the_transaction(node: Broker) -> None:  # noqa: F811
    with transaction.atomic():
        result = st.add.enqueue(2, 3)
        assert pending(node) == [result.id]


def test_bad_arguments_are_refused_at_enqueue_not_at_the_commit(on_commit: Broker) -> None:
    with transaction.atomic():
        with pytest.raises(TypeError):
            st.add.enqueue({1, 2}, 3)
        Group.objects.create(name="committed-anyway")
    assert pending(on_commit) == []
    assert Group.objects.filter(name="committed-anyway").exists()


def test_task_enqueued_is_sent_when_the_push_happens(on_commit: Broker) -> None:
    seen: list[tuple[str, list[str]]] = []

    def receiver(sender: type, task_result: Any, **_: Any) -> None:
        seen.append((task_result.id, pending(on_commit)))

    task_enqueued.connect(receiver)
    try:
        with transaction.atomic():
            result = st.add.enqueue(2, 3)
            assert seen == []
    finally:
        task_enqueued.disconnect(receiver)
    assert seen == [(result.id, [result.id])]


def test_an_alias_names_the_database_whose_transactions_hold_the_push(
    on_commit: Broker, settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default"],
                                  "OPTIONS": {"ENQUEUE_ON_COMMIT": "default"}}}
    registered: list[str | None] = []
    real: Callable[..., Any] = transaction.on_commit
    monkeypatch.setattr(transaction, "on_commit",
                        lambda func, using=None, robust=False: (registered.append(using), real(func, using))[1])
    with transaction.atomic():
        result = st.add.enqueue(2, 3)
    assert registered == ["default"] and pending(on_commit) == [result.id]
