"""The Django Tasks backend against this process's embedded broker on a
memory store: enqueue, defer, get_result at every moment of a job's life,
signals, the worker's handling of tasks and of what is not a task, and the
system checks. Tasks are in ``tests/e2e/sample_tasks.py``."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.tasks import TaskResultStatus, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone

from engine import Broker, ClaimedJob, GroupCommitter, MemoryStore, StoreUnavailable, Worker
from engine.ops import Tick, stop_op
from queueadmin import runtime
from queueadmin.tasks import ObjectStoreBackend, describe, read_result
from queueadmin.tasks.payload import MARKER
from queueadmin.tasks.worker import TaskRunner, task_queues
from tests.e2e import sample_tasks as st
from tests.helpers import FAST_WORKER, wait_for

if TYPE_CHECKING:
    from pytest_django.fixtures import SettingsWrapper

BACKEND = "queueadmin.tasks.ObjectStoreBackend"
FAST_BURST = replace(FAST_WORKER, burst=True)


@pytest.fixture
def node(settings: SettingsWrapper) -> Iterator[Broker]:
    """This process's broker, leading on a fresh memory store; TASKS uses it."""
    runtime.stop_broker()
    settings.QUEUE_STORE_URL = f"memory://tasks-{uuid.uuid4().hex}"
    settings.QUEUE_ADVERTISE_URL = None
    settings.QUEUE_API_TOKEN = None
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default", "other"],
                                  "OPTIONS": {"MAX_ATTEMPTS": 2}}}
    broker = runtime.start_broker()
    wait_for(lambda: broker.role == "leader")
    yield broker
    runtime.stop_broker()


def committer(node: Broker) -> GroupCommitter:
    assert node.committer is not None
    return node.committer


def work(node: Broker, worker_id: str = "w1", queues: tuple[str, ...] = ("default",)) -> Any:
    """One burst of a real Worker running tasks, as queueworker does."""
    client = committer(node)
    return Worker(client, queues=queues, handler=TaskRunner(client, worker_id=worker_id), pass_job=True,
                  worker_id=worker_id, options=FAST_BURST).run()


def claim(node: Broker, worker_id: str = "w1") -> ClaimedJob:
    [job] = committer(node).claim(worker_id, ["default"])
    return job


# -- enqueue and defer ---------------------------------------------------------------


def test_enqueue_pushes_a_task_job_and_returns_a_ready_result(node: Broker) -> None:
    result = st.add.enqueue(2, b=3)
    assert result.status == TaskResultStatus.READY
    assert (result.args, result.kwargs, result.backend) == ([2], {"b": 3}, "default")
    job = committer(node).get_job(result.id)
    assert job["queue"] == "default" and job["status"] == "pending"
    view = describe(job["payload"])
    assert view is not None
    assert (view.task, view.name, view.args, view.kwargs) == ("tests.e2e.sample_tasks.add", "add", [2], {"b": 3})
    assert job["max_attempts"] == 2  # OPTIONS["MAX_ATTEMPTS"]


def test_the_task_queue_name_is_the_engine_queue(node: Broker) -> None:
    result = st.add.using(queue_name="other").enqueue(1, 1)
    assert committer(node).get_job(result.id)["queue"] == "other"
    with pytest.raises(InvalidTask, match="not valid for backend"):
        st.add.using(queue_name="elsewhere").enqueue(1, 1)


def test_priority_is_not_supported(node: Broker) -> None:
    assert ObjectStoreBackend.supports_priority is False
    with pytest.raises(InvalidTask, match="priority"):
        st.add.using(priority=5)


def test_arguments_must_be_json(node: Broker) -> None:
    with pytest.raises(TypeError):
        st.add.enqueue({1, 2}, 3)
    assert committer(node).document()["jobs"] == []


def test_run_after_becomes_not_before_and_the_job_waits(node: Broker) -> None:
    run_after = timezone.now() + timedelta(hours=1)
    result = st.add.using(run_after=run_after).enqueue(1, 2)
    job = committer(node).get_job(result.id)
    not_before = timezone.datetime.fromisoformat(job["not_before"])
    assert abs((not_before - run_after).total_seconds()) < 5
    assert work(node).claimed == 0
    assert st.add.get_result(result.id).status == TaskResultStatus.READY
    assert describe(job["payload"]).run_after == run_after  # type: ignore[union-attr]


def test_run_after_in_the_past_runs_at_once(node: Broker) -> None:
    result = st.add.using(run_after=timezone.now() - timedelta(minutes=5)).enqueue(1, 2)
    assert committer(node).get_job(result.id)["not_before"] is None
    work(node)
    assert st.add.get_result(result.id).return_value == 3


def test_run_after_too_far_away_is_refused(node: Broker) -> None:
    with pytest.raises(InvalidTask, match="at most"):
        st.add.using(run_after=timezone.now() + timedelta(days=400)).enqueue(1, 2)


def test_aenqueue_and_aget_result(node: Broker) -> None:
    async def main() -> tuple[Any, Any]:
        result = await st.add.aenqueue(4, 5)
        return result, await st.add.aget_result(result.id)

    enqueued, read = asyncio.run(main())
    assert read.status == TaskResultStatus.READY and read.id == enqueued.id
    work(node)
    assert asyncio.run(st.add.aget_result(enqueued.id)).return_value == 9


def test_without_an_embedded_broker_http_needs_a_token(settings: SettingsWrapper) -> None:
    runtime.stop_broker()
    settings.QUEUE_STORE_URL = f"memory://tasks-{uuid.uuid4().hex}"
    settings.QUEUE_API_TOKEN = None
    settings.TASKS = {"default": {"BACKEND": BACKEND}}
    with pytest.raises(ImproperlyConfigured, match="QUEUE_API_TOKEN"):
        st.add.enqueue(1, 2)
    assert runtime._broker is None  # the backend never builds a broker of its own


# -- results at every moment ------------------------------------------------------------


def test_get_result_of_an_unknown_id_raises(node: Broker) -> None:
    for unknown in (uuid.uuid4().hex, "../../queue.json", "", "x" * 300):
        with pytest.raises(TaskResultDoesNotExist):
            task_backends["default"].get_result(unknown)


def test_get_result_of_a_task_waiting_in_a_segment_is_ready(settings: SettingsWrapper) -> None:
    """Format 2 with tiny segments: a task enqueued behind a backlog sits in
    a segment object; its result is READY with its arguments, not "does
    not exist" (``Broker.get_job`` looks in the segments)."""
    runtime.stop_broker()
    settings.QUEUE_STORE_URL = f"memory://tasks-{uuid.uuid4().hex}"
    settings.QUEUE_ADVERTISE_URL = None
    settings.QUEUE_API_TOKEN = None
    settings.QUEUE_SEGMENT_JOBS, settings.QUEUE_HEAD_JOBS, settings.QUEUE_REFILL_BELOW = 10, 20, 10
    settings.TASKS = {"default": {"BACKEND": BACKEND}}
    broker = runtime.start_broker()
    try:
        wait_for(lambda: broker.role == "leader")
        results = [st.add.enqueue(n, 1) for n in range(60)]

        def sealed() -> bool:
            state = committer(broker).state
            if state is not None and state.lanes and results[50].id not in state.jobs:
                return True
            committer(broker).execute(Tick())  # the keeper takes its next step as a commit lands
            return False

        wait_for(sealed, what="the task sealed into a segment")
        read = task_backends["default"].get_result(results[50].id)
        assert read.status == TaskResultStatus.READY and read.args == [50, 1]
        read = asyncio.run(st.add.aget_result(results[51].id))
        assert read.status == TaskResultStatus.READY and read.args == [51, 1]
    finally:
        runtime.stop_broker()


def test_get_result_of_a_job_that_is_not_a_task_raises(node: Broker) -> None:
    [job_id] = committer(node).push("default", [{"to": "ada@example.com"}])
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(job_id)


def test_success_status_at_every_moment(node: Broker) -> None:
    client = committer(node)
    result = st.add.enqueue(20, 22)
    assert st.add.get_result(result.id).status == TaskResultStatus.READY

    job = claim(node, "w1")
    running = st.add.get_result(result.id)
    assert running.status == TaskResultStatus.RUNNING
    assert running.worker_ids == ["w1"] and running.attempts == 1
    assert running.started_at is not None and running.finished_at is None
    with pytest.raises(ValueError, match="not finished"):
        _ = running.return_value

    # The worker writes the result before it commits the completion: in
    # between, the document still says running, and so does get_result.
    TaskRunner(client, worker_id="w1")(job)
    stored = read_result(result.id)
    assert stored is not None and stored.status == "SUCCESSFUL" and stored.return_value == 42
    assert st.add.get_result(result.id).status == TaskResultStatus.RUNNING

    client.complete(job.id, job.lease)
    done = st.add.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == 42
    assert done.worker_ids == ["w1"] and done.errors == []
    assert done.enqueued_at <= done.started_at <= done.finished_at  # type: ignore[operator]

    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 42


def test_failure_status_at_every_moment_until_dead(node: Broker) -> None:
    client = committer(node)
    result = st.explode.enqueue("boom")

    first = claim(node, "w1")
    with pytest.raises(ValueError, match="exploded: boom"):
        TaskRunner(client, worker_id="w1")(first)
    assert st.explode.get_result(result.id).status == TaskResultStatus.RUNNING  # result written, fail not yet
    client.fail(first.id, first.lease, error="ValueError", retry_in_seconds=0)
    retrying = st.explode.get_result(result.id)
    assert retrying.status == TaskResultStatus.READY  # it will run again
    assert len(retrying.errors) == 1 and retrying.worker_ids == ["w1"]

    second = claim(node, "w2")
    assert st.explode.get_result(result.id).worker_ids == ["w1", "w2"]
    with pytest.raises(ValueError):
        TaskRunner(client, worker_id="w2")(second)
    assert client.fail(second.id, second.lease, error="ValueError").status == "dead"

    failed = st.explode.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.attempts == 2 and failed.worker_ids == ["w1", "w2"]
    assert [e.exception_class for e in failed.errors] == [ValueError, ValueError]
    assert "exploded: boom" in failed.errors[-1].traceback
    assert 'sample_tasks.py", line' in failed.errors[-1].traceback
    with pytest.raises(ValueError, match="failed"):
        _ = failed.return_value

    # Once the dead letter is gone the result object alone still says FAILED.
    client.purge([result.id])
    assert st.explode.get_result(result.id).status == TaskResultStatus.FAILED


def test_a_real_worker_runs_a_failing_task_to_failed(node: Broker, settings: SettingsWrapper) -> None:
    settings.TASKS = {"default": {"BACKEND": BACKEND, "OPTIONS": {"MAX_ATTEMPTS": 1}}}
    result = st.explode.enqueue("once")
    stats = work(node)
    assert (stats.failed, stats.dead) == (1, 1)
    failed = st.explode.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED and "exploded: once" in failed.errors[0].traceback


def test_an_attempt_whose_lease_expired_shows_as_an_error(node: Broker, settings: SettingsWrapper) -> None:
    settings.TASKS = {"default": {"BACKEND": BACKEND, "OPTIONS": {"MAX_ATTEMPTS": 1}}}
    result = st.add.enqueue(1, 1)
    committer(node).claim("vanished", ["default"], lease_seconds=0.05)
    wait_for(lambda: st.add.get_result(result.id).status == TaskResultStatus.FAILED)
    failed = st.add.get_result(result.id)
    assert failed.worker_ids == ["vanished"]
    assert failed.errors[-1].exception_class_path == "queueadmin.tasks.backend.LeaseExpired"
    assert "lease expired" in failed.errors[-1].traceback
    assert failed.errors[-1].exception_class.__name__ == "LeaseExpired"


def test_a_task_an_operator_stopped_is_failed_and_says_so(node: Broker) -> None:
    result = st.add.enqueue(1, 1)
    [claimed] = committer(node).claim("w1", ["default"])
    assert st.add.get_result(result.id).status == TaskResultStatus.RUNNING
    node.execute(stop_op([claimed.id]))
    stopped = st.add.get_result(result.id)
    assert stopped.status == TaskResultStatus.FAILED and stopped.worker_ids == ["w1"]
    assert stopped.errors[-1].exception_class_path == "queueadmin.tasks.backend.JobStopped"
    assert stopped.errors[-1].traceback == "JobStopped: stopped by an operator"


# -- the worker side -----------------------------------------------------------------------


def test_context_attempts_and_worker_ids_follow_the_claims(node: Broker) -> None:
    client = committer(node)
    result = st.attempt_info.enqueue(fail_before=2)
    first = claim(node, "w1")
    with pytest.raises(RuntimeError, match="attempt 1 fails"):
        TaskRunner(client, worker_id="w1")(first)
    client.fail(first.id, first.lease, error="x", retry_in_seconds=0)
    second = claim(node, "w2")
    TaskRunner(client, worker_id="w2")(second)
    client.complete(second.id, second.lease)
    done = st.attempt_info.get_result(result.id)
    assert done.return_value == {"attempt": 2, "id": result.id, "worker_ids": ["w1", "w2"], "status": "RUNNING"}
    assert done.worker_ids == ["w1", "w2"] and done.attempts == 2 and len(done.errors) == 1


def test_return_values_are_json_normalised_and_unserialisable_ones_fail(node: Broker) -> None:
    ok = st.echo.enqueue(1, "two", three=[3])
    bad = st.unserialisable.enqueue()
    work(node)
    assert st.echo.get_result(ok.id).return_value == {"args": [1, "two"], "kwargs": {"three": [3]}}
    assert st.unserialisable.get_result(bad.id).errors[0].exception_class is TypeError


def test_async_tasks_run(node: Broker) -> None:
    assert ObjectStoreBackend.supports_async_task is True
    result = st.async_add.enqueue(2, 2)
    work(node)
    assert st.async_add.get_result(result.id).return_value == 4


def test_signals_are_sent_with_the_right_statuses(node: Broker) -> None:
    seen: list[tuple[str, str, type]] = []

    def on(name: str) -> Callable[..., None]:
        def receiver(sender: type, task_result: Any, **_: Any) -> None:
            seen.append((name, str(task_result.status), sender))
        return receiver

    receivers = {task_enqueued: on("enqueued"), task_started: on("started"), task_finished: on("finished")}
    for signal, receiver in receivers.items():
        signal.connect(receiver)
    try:
        st.add.enqueue(1, 2)
        work(node)
        st.explode.enqueue("signal")
        work(node, queues=("default",))
    finally:
        for signal, receiver in receivers.items():
            signal.disconnect(receiver)
    assert seen == [
        ("enqueued", "READY", ObjectStoreBackend),
        ("started", "RUNNING", ObjectStoreBackend),
        ("finished", "SUCCESSFUL", ObjectStoreBackend),
        ("enqueued", "READY", ObjectStoreBackend),
        ("started", "RUNNING", ObjectStoreBackend),
        ("finished", "FAILED", ObjectStoreBackend),
    ]


def _task_payload(path: str) -> dict[str, Any]:
    return {MARKER: 1, "task": path, "args": [1], "kwargs": {}, "takes_context": False, "backend": "default",
            "queue_name": "default", "run_after": None}


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("tests.e2e.sample_tasks.plain_function", "is not a Task (it is a function)"),
        ("tests.e2e.sample_tasks.not_a_task", "is not a Task (it is a int)"),
        ("tests.e2e.no_such_module.thing", "cannot be imported"),
    ],
)
def test_anything_that_is_not_a_task_is_dead_lettered_with_a_clear_error(node: Broker, path: str, why: str) -> None:
    client = committer(node)
    [job_id] = client.push("default", [_task_payload(path)], max_attempts=3)
    stats = work(node)
    # Refused once, for good: dead on the first attempt with two left.
    assert (stats.failed, stats.dead, stats.completed) == (1, 1, 0)
    dead = client.get_job(job_id)
    assert dead["status"] == "dead" and why in dead["error"] and "PermanentFailure" in dead["error"]
    stored = read_result(job_id)
    assert stored is not None and stored.status == "FAILED"
    assert stored.errors[-1].exception_class_path == "django.tasks.exceptions.InvalidTask"
    with pytest.raises(InvalidTask, match=r"is not a Task|cannot be imported"):
        task_backends["default"].get_result(job_id)


def test_a_job_that_is_not_a_task_job_is_dead_lettered(node: Broker) -> None:
    client = committer(node)
    [job_id] = client.push("default", [{"to": "ada@example.com"}], max_attempts=1)
    assert work(node).dead == 1
    assert "is not a task job" in client.get_job(job_id)["error"]


def test_worker_queues_default_to_the_backends_queues(node: Broker, settings: SettingsWrapper) -> None:
    assert task_queues() == ["default", "other"]
    settings.TASKS = {
        "default": {"BACKEND": BACKEND, "QUEUES": ["b", "a"]},
        "fast": {"BACKEND": BACKEND, "QUEUES": ["a", "c"]},
        "local": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"},
    }
    assert task_queues() == ["a", "b", "c"]


# -- checks ----------------------------------------------------------------------------------


def _check_ids(settings: SettingsWrapper, **params: Any) -> list[str]:
    settings.TASKS = {"default": {"BACKEND": BACKEND, **params}}
    return [m.id for m in task_backends["default"].check()]  # type: ignore[misc]


def test_checks_pass_for_a_good_configuration(node: Broker, settings: SettingsWrapper) -> None:
    settings.QUEUE_API_TOKEN = "t"
    assert _check_ids(settings) == []


def test_checks_report_bad_options_and_queues(node: Broker, settings: SettingsWrapper) -> None:
    settings.QUEUE_API_TOKEN = "t"
    for params in (
        {"OPTIONS": {"NOPE": 1}},
        {"OPTIONS": {"BROKERS": "http://one-url-not-a-list"}},
        {"OPTIONS": {"RESULT_TTL_SECONDS": 0}},
        {"OPTIONS": {"MAX_ATTEMPTS": 0}},
        {"OPTIONS": {"TOKEN": ""}},
        {"OPTIONS": {"ENQUEUE_ON_COMMIT": "no-such-database"}},
        {"OPTIONS": {"ENQUEUE_ON_COMMIT": 1}},
        {"QUEUES": ["bad queue"]},
        {"QUEUES": []},
    ):
        assert _check_ids(settings, **params) == ["queueadmin.tasks.E001"], params
    settings.TASKS = {"default": {"BACKEND": BACKEND, "OPTIONS": {"NOPE": 1}}}
    with pytest.raises(ImproperlyConfigured, match="NOPE"):  # and a misconfigured backend is not used
        st.add.enqueue(1, 2)


def test_checks_report_a_store_that_cannot_be_opened(node: Broker, settings: SettingsWrapper) -> None:
    settings.QUEUE_API_TOKEN = "t"
    assert _check_ids(settings, OPTIONS={"STORE_URL": "nope://x"}) == ["queueadmin.tasks.E002"]


def test_checks_report_an_unreachable_store(
    node: Broker, settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.QUEUE_API_TOKEN = "t"

    class Unreachable(MemoryStore):
        def etag(self, key: str) -> str | None:
            raise StoreUnavailable("connection refused")

    monkeypatch.setattr("queueadmin.tasks.connection.BrokerLink.store", lambda self: Unreachable())
    assert _check_ids(settings) == ["queueadmin.tasks.W001"]


def test_checks_report_a_missing_token(node: Broker, settings: SettingsWrapper) -> None:
    settings.QUEUE_API_TOKEN = None
    assert _check_ids(settings) == ["queueadmin.tasks.W002"]
    assert _check_ids(settings, OPTIONS={"TOKEN": "t"}) == []


def test_init_does_no_io(settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_io(url: str, **credentials: object) -> None:
        raise AssertionError("opened a store")

    monkeypatch.setattr("queueadmin.config.open_store", no_io)
    backend = ObjectStoreBackend("x", {"OPTIONS": {"STORE_URL": "file:///nonexistent/never-created"}})
    assert backend.problems == []


def test_get_result_reads_the_job_before_the_result_object(node: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker writes the result object before committing the outcome, so
    reading in the other order could miss both (job already gone, object read
    before it was written) and call a finished task unknown."""
    result = st.add.enqueue(1, 2)
    backend = task_backends["default"]
    order: list[str] = []
    get_job, stored = backend.link.get_job, backend._stored
    monkeypatch.setattr(backend.link, "get_job", lambda job_id: (order.append("job"), get_job(job_id))[1])
    monkeypatch.setattr(backend, "_stored", lambda job_id: (order.append("result"), stored(job_id))[1])
    backend.get_result(result.id)
    assert order == ["job", "result"]
