"""Cancelling a running job (engine.cancellation): a Worker whose lease on a
job is lost, or that abandons it, tells the job's handler, and a handler
that checks stops. Driven against a GroupCommitter on a MemoryStore, with
both protocols (batched acknowledgements and heartbeats, and one call each);
tests wait on events, never on fixed sleeps."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from engine import (
    Cancellation,
    GroupCommitter,
    JobCancelled,
    JobNotFound,
    MemoryStore,
    Policy,
    cancelled,
    check_cancelled,
    current_cancellation,
)
from engine.cancellation import handling
from engine.worker import Worker, WorkerOptions
from tests.helpers import FAST_WORKER, start, wait_for

TIMEOUT = 10.0


@pytest.fixture(params=[True, False], ids=["batch", "single"])
def options(request: pytest.FixtureRequest) -> WorkerOptions:
    """Quick heartbeats, so a lost lease is found within a few milliseconds."""
    return replace(FAST_WORKER, batch=bool(request.param), lease_seconds=5, heartbeat_interval=0.02)


@pytest.fixture
def client() -> Iterator[GroupCommitter]:
    committer = GroupCommitter(MemoryStore(), policy=Policy(max_attempts=3, backoff_base_seconds=0)).start()
    yield committer
    committer.stop()


class Handler:
    """A handler that runs until its job is cancelled, checking as a loop
    over work would, and records how it ended."""

    def __init__(self) -> None:
        self.running = threading.Event()
        self.ended = threading.Event()
        self.reasons: list[str] = []

    def __call__(self, payload: Any) -> None:
        self.running.set()
        try:
            for _ in range(int(TIMEOUT / 0.005)):
                try:
                    check_cancelled()
                except JobCancelled as exc:
                    self.reasons.append(exc.reason)
                    raise
                current_cancellation().wait(0.005)
        finally:
            self.ended.set()


def test_a_purged_running_job_stops_its_handler_and_nothing_is_reported(
    client: GroupCommitter, options: WorkerOptions
) -> None:
    [job_id] = client.push("q", ["long"])
    handler = Handler()
    worker = Worker(client, queues=["q"], handler=handler, options=options)
    thread, result = start(worker)
    assert handler.running.wait(TIMEOUT)

    client.purge([job_id])  # an operator removes the running job

    assert handler.ended.wait(TIMEOUT), "the handler was never told"
    [reason] = handler.reasons
    assert "lease was lost" in reason and job_id in reason  # JobNotFound names the job
    wait_for(lambda: worker.stats.lost == 1)
    worker.stop()
    thread.join(TIMEOUT)
    assert result == [worker.stats]
    assert (worker.stats.cancelled, worker.stats.lost, worker.stats.completed, worker.stats.failed) == (1, 1, 0, 0)
    counters = client.document()["queues"]["q"]
    assert (counters["purged"], counters["failed"], counters["completed"]) == (1, 0, 0)
    with pytest.raises(JobNotFound):
        client.get_job(job_id)


def test_a_requeued_running_job_wakes_a_handler_waiting_on_its_cancellation(
    client: GroupCommitter, options: WorkerOptions
) -> None:
    [job_id] = client.push("q", ["long"])
    running, woke = threading.Event(), []

    def handler(_: Any) -> None:
        running.set()
        woke.append(current_cancellation().wait(TIMEOUT))  # an interruptible sleep; returns normally

    worker = Worker(client, queues=["q"], handler=handler, options=replace(options, concurrency=1))
    thread, _ = start(worker)
    assert running.wait(TIMEOUT)
    worker.stop(grace_seconds=TIMEOUT)  # claim nothing more: the requeued job must not come back here

    client.requeue([job_id])

    thread.join(TIMEOUT)
    assert not thread.is_alive()
    assert woke == [True]
    # It returned normally, but its lease was gone: lost, not completed, and no JobCancelled to count.
    assert (worker.stats.lost, worker.stats.completed, worker.stats.cancelled) == (1, 0, 0)
    job = client.get_job(job_id)
    assert job["status"] == "pending" and job["attempts"] == 1


def test_a_handler_that_never_checks_runs_to_its_end_and_its_result_is_not_sent(
    client: GroupCommitter, options: WorkerOptions
) -> None:
    [job_id] = client.push("q", ["x"])
    running, release = threading.Event(), threading.Event()
    seen: list[bool] = []

    def handler(_: Any) -> None:
        running.set()
        release.wait(TIMEOUT)
        seen.append(cancelled())

    worker = Worker(client, queues=["q"], handler=handler, options=options)
    thread, _ = start(worker)
    assert running.wait(TIMEOUT)
    client.purge([job_id])
    wait_for(lambda: cancelled_in(worker, job_id))
    worker.stop(grace_seconds=TIMEOUT)
    release.set()
    thread.join(TIMEOUT)
    assert seen == [True]
    assert (worker.stats.lost, worker.stats.cancelled, worker.stats.completed) == (1, 0, 0)


def cancelled_in(worker: Worker, job_id: str) -> bool:
    """Whether ``worker`` has cancelled its running job ``job_id``."""
    with worker._cond:
        record = worker._running.get(job_id)
        return record is not None and record.cancellation.cancelled


def test_job_cancelled_raised_with_no_cancellation_fails_the_attempt_like_any_exception(
    client: GroupCommitter, options: WorkerOptions
) -> None:
    [job_id] = client.push("q", ["x"])

    def handler(_: Any) -> None:
        raise JobCancelled("the handler's own idea")

    stats = Worker(client, queues=["q"], handler=handler, options=replace(options, burst=True)).run()
    assert (stats.failed, stats.lost, stats.cancelled) == (3, 0, 0)
    [dead] = client.document()["dead"]
    assert dead["id"] == job_id and "JobCancelled: the handler's own idea" in dead["error"]


def test_a_job_abandoned_at_the_end_of_the_grace_period_is_cancelled(
    client: GroupCommitter, options: WorkerOptions
) -> None:
    [job_id] = client.push("q", ["long"])
    handler = Handler()
    worker = Worker(client, queues=["q"], handler=handler, options=options)
    thread, _ = start(worker)
    assert handler.running.wait(TIMEOUT)

    worker.stop(grace_seconds=0)

    thread.join(TIMEOUT)
    assert handler.ended.wait(TIMEOUT), "an abandoned handler was never told"
    [reason] = handler.reasons
    assert "worker stopped" in reason
    wait_for(lambda: worker.stats.cancelled == 1)
    assert (worker.stats.abandoned, worker.stats.lost, worker.stats.completed) == (1, 1, 0)
    assert client.get_job(job_id)["status"] == "running"  # nothing sent: its lease runs out


def test_outside_a_handler_nothing_is_cancelled() -> None:
    assert cancelled() is False
    check_cancelled()  # returns
    first = current_cancellation()
    assert not first.cancelled and first.reason == "" and first.wait(0) is False
    first.cancel("not anybody's job")
    assert current_cancellation() is not first and not cancelled()  # a fresh one each time: nothing is shared


def test_a_cancellation_keeps_its_first_reason_and_handling_nests() -> None:
    outer, inner = Cancellation(), Cancellation()
    with handling(outer):
        assert current_cancellation() is outer
        with handling(inner):
            assert inner.cancel("first") is True
            assert inner.cancel("second") is False
            assert cancelled()
            with pytest.raises(JobCancelled, match="first"):
                check_cancelled()
        assert current_cancellation() is outer and not cancelled()
    assert not cancelled()
