"""``manage.py queueworker`` with no ``--handler`` runs Django tasks, driven
through a GroupCommitter standing in for the BrokerClient."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from io import StringIO
from typing import TYPE_CHECKING

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.tasks import TaskResultStatus

from engine import GroupCommitter, MemoryStore, Policy
from queueadmin import runtime
from queueadmin.tasks import read_result
from queueadmin.tasks.payload import task_payload
from tests.e2e import sample_tasks as st

if TYPE_CHECKING:
    from pytest_django.fixtures import SettingsWrapper

BACKEND = "queueadmin.tasks.ObjectStoreBackend"


def run(*args: str) -> str:
    err = StringIO()
    call_command(*args, stdout=StringIO(), stderr=err)
    return err.getvalue()


@pytest.fixture
def committer(settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch) -> Iterator[GroupCommitter]:
    runtime.stop_broker()
    settings.QUEUE_STORE_URL = f"memory://worker-{uuid.uuid4().hex}"  # where results go
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default", "mail"]}}
    committer = GroupCommitter(MemoryStore(), policy=Policy(max_attempts=1)).start()
    monkeypatch.setattr("queueadmin.management.commands.queueworker.broker_client", lambda **_: committer)
    yield committer
    committer.stop()


def push_task(committer: GroupCommitter, queue: str, *args: int) -> str:
    payload = task_payload(st.add.using(queue_name=queue), args, {}, backend="default")
    [job_id] = committer.push(queue, [payload])
    return job_id


def test_without_handler_it_runs_tasks_from_the_backends_queues(committer: GroupCommitter) -> None:
    first, second = push_task(committer, "default", 1, 2), push_task(committer, "mail", 3, 4)
    err = run("queueworker", "--burst", "--token", "t", "--worker-id", "w-cmd")
    assert "queues default, mail" in err
    assert "claimed 2, completed 2" in err
    for job_id, value in ((first, 3), (second, 7)):
        stored = read_result(job_id)
        assert stored is not None and stored.status == TaskResultStatus.SUCCESSFUL
        assert stored.return_value == value and stored.worker_ids == ("w-cmd",)


def test_queue_narrows_the_task_queues(committer: GroupCommitter) -> None:
    push_task(committer, "default", 1, 2)
    mail = push_task(committer, "mail", 3, 4)
    assert "claimed 1, completed 1" in run("queueworker", "--burst", "--token", "t", "--queue", "mail")
    assert read_result(mail) is not None
    assert committer.document()["jobs"][0]["queue"] == "default"


def test_without_handler_or_task_queues_it_says_what_to_do(committer: GroupCommitter,
                                                          settings: SettingsWrapper) -> None:
    settings.TASKS = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
    with pytest.raises(CommandError, match="no queues: pass --queue"):
        run("queueworker", "--burst", "--token", "t")
