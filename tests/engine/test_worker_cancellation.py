"""Cancelling a running job (engine.cancellation): a Worker whose lease on a
job is lost, or that abandons it, tells the job's handler, and a handler
that checks stops. Driven against a GroupCommitter on a MemoryStore, with
both protocols (batched acknowledgements and heartbeats, and one call each);
tests wait on events, never on fixed sleeps."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from engine import (
    Cancellation,
    EngineError,
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
        return any(r.job.id == job_id and r.cancellation.cancelled for r in worker._running.values())


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


def test_a_handler_past_the_timeout_is_cancelled_and_the_attempt_fails_with_a_timeout(
    client: GroupCommitter, options: WorkerOptions
) -> None:
    [job_id] = client.push("q", ["long"], max_attempts=1)
    handler = Handler()
    worker = Worker(client, queues=["q"], handler=handler, options=replace(options, timeout_seconds=0.2))
    thread, _ = start(worker)

    assert handler.ended.wait(TIMEOUT), "the handler was never told"
    [reason] = handler.reasons
    assert reason == "it ran longer than the worker's timeout (0.2 s)"
    wait_for(lambda: worker.stats.dead == 1)
    worker.stop()
    thread.join(TIMEOUT)
    [dead] = client.document()["dead"]
    assert dead["id"] == job_id and dead["error"] == (
        "JobTimeout: the handler ran longer than the worker's timeout (0.2 s); it was cancelled")
    assert (worker.stats.timed_out, worker.stats.cancelled, worker.stats.failed, worker.stats.lost) == (1, 1, 1, 0)


def test_a_timed_out_handler_that_finishes_anyway_still_fails_and_one_that_raises_keeps_its_traceback(
    client: GroupCommitter, options: WorkerOptions
) -> None:
    quiet, loud = client.push("q", ["quiet", "loud"])
    told = threading.Event()

    def handler(payload: Any) -> None:
        current_cancellation().wait(TIMEOUT)  # told, but returns on its own terms
        told.set()
        if payload == "loud":
            raise ValueError("cleaning up went wrong")

    worker = Worker(client, queues=["q"], handler=handler,
                    options=replace(options, timeout_seconds=0.1, burst=True, concurrency=2))
    stats = worker.run()
    assert told.is_set() and stats.completed == 0 and stats.timed_out == 6  # three attempts each
    dead = {d["id"]: d["error"] for d in client.document()["dead"]}
    assert dead[quiet] == "JobTimeout: the handler ran longer than the worker's timeout (0.1 s); it was cancelled"
    assert dead[loud].startswith("Traceback (most recent call last)")
    assert "ValueError: cleaning up went wrong\nJobTimeout: the handler ran longer" in dead[loud]


def test_a_handler_that_ignores_the_timeout_stops_being_heartbeated_and_its_lease_runs_out(
    client: GroupCommitter, options: WorkerOptions
) -> None:
    [job_id] = client.push("q", ["stuck"])
    running, release = threading.Event(), threading.Event()

    def handler(_: Any) -> None:
        running.set()
        release.wait(TIMEOUT)  # never looks at its cancellation

    worker = Worker(client, queues=["q"], handler=handler,
                    options=replace(options, lease_seconds=0.6, heartbeat_interval=0.05, timeout_seconds=0.1))
    thread, _ = start(worker)
    assert running.wait(TIMEOUT)
    # Without heartbeats the lease runs out; the next commit hands the job back.
    wait_for(lambda: client.claim("other", ["q"]) != [], what="the stuck job's lease to run out")
    assert worker.stats.timed_out == 1 and "lease expired" in client.get_job(job_id)["history"][0]["error"]
    worker.stop(grace_seconds=TIMEOUT)
    release.set()
    thread.join(TIMEOUT)
    assert (worker.stats.lost, worker.stats.completed) == (1, 0)  # its late fail was refused: the lease was gone


def test_timeout_seconds_must_be_positive_and_finite() -> None:
    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="timeout_seconds"):
            WorkerOptions(timeout_seconds=bad)


def test_a_requeued_job_the_same_worker_claims_again_is_heartbeated_while_the_old_handler_ends(
    client: GroupCommitter, options: WorkerOptions
) -> None:
    """The worker holds the same job twice: the attempt an operator requeued,
    whose handler is still ending, and the new one it claimed. The old
    handler's end must not drop the new attempt (which then went
    unheartbeated, and its lease ran out while it ran)."""
    [job_id] = client.push("q", ["again"])
    first_running, first_may_end, second_running, second_may_end = (threading.Event() for _ in range(4))
    ended: list[int] = []

    def handler(_: Any) -> None:
        if not first_running.is_set():
            first_running.set()
            first_may_end.wait(TIMEOUT)
        else:
            second_running.set()
            second_may_end.wait(TIMEOUT)
        ended.append(len(ended) + 1)

    worker = Worker(client, queues=["q"], handler=handler,
                    options=replace(options, concurrency=2, lease_seconds=0.6, heartbeat_interval=0.05))
    thread, _ = start(worker)
    assert first_running.wait(TIMEOUT)
    client.requeue([job_id])
    assert second_running.wait(TIMEOUT)  # the same worker claimed it again, in its free slot
    first_may_end.set()
    wait_for(lambda: ended == [1])
    # Two leases' worth of time on the second attempt: it must still be ours.
    deadline = time.monotonic() + 1.2
    while time.monotonic() < deadline:
        job = client.get_job(job_id)
        assert (job["status"], job["attempts"]) == ("running", 2), job
        time.sleep(0.05)
    second_may_end.set()
    wait_for(lambda: worker.stats.completed == 1)
    worker.stop()
    thread.join(TIMEOUT)
    assert (worker.stats.lost, worker.stats.completed) == (1, 1)
    assert client.document()["queues"]["q"]["completed"] == 1


class Watching(GroupCommitter):
    """A client with lease watches (as BrokerClient's ``POST /leases/watch``),
    answered from the committer's own state: polled, the way a test can."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.watches = 0

    def watch_leases(self, leases: list[tuple[str, str]], wait_seconds: float) -> list[tuple[str, Any]]:
        from engine.leasewatch import lost_leases

        self.watches += 1
        deadline = time.monotonic() + wait_seconds
        while time.monotonic() < deadline:
            state = self.state
            if state is not None and (lost := lost_leases(state, leases)):
                return lost  # type: ignore[return-value]
            time.sleep(0.005)
        return []


@pytest.mark.parametrize("revoke", ["purge", "requeue"])
def test_a_worker_watching_its_leases_cancels_a_revoked_job_before_its_next_heartbeat(revoke: str) -> None:
    """Heartbeats every 20 s: only the lease watch can tell the handler within the test's time."""
    client = Watching(MemoryStore(), policy=Policy(max_attempts=3, backoff_base_seconds=0)).start()
    try:
        [job_id] = client.push("q", ["long"])
        handler = Handler()
        options = replace(FAST_WORKER, lease_seconds=60, heartbeat_interval=20)
        worker = Worker(client, queues=["q"], handler=handler, options=options)
        thread, _ = start(worker)
        assert handler.running.wait(TIMEOUT)

        client.purge([job_id]) if revoke == "purge" else client.requeue([job_id])

        assert handler.ended.wait(TIMEOUT), "the handler was never told"
        assert "lease was lost" in handler.reasons[0] and job_id in handler.reasons[0]
        wait_for(lambda: worker.stats.lost == 1)
        assert worker.stats.heartbeats == 0  # the watch found it, not a heartbeat
        worker.stop(0)  # a requeued job runs again: abandon it, so no report outlives the client
        thread.join(TIMEOUT)
        assert not thread.is_alive()
    finally:
        client.stop()


class Older(Watching):
    """A broker of a release without lease watches: 404 not_found, a plain EngineError."""

    def watch_leases(self, leases: list[tuple[str, str]], wait_seconds: float) -> list[tuple[str, Any]]:
        self.watches += 1
        raise EngineError("POST /api/v1/leases/watch: the broker answered 404 not_found: no such URL")


@pytest.mark.parametrize(("broker", "watch_leases", "watches"), [(Older, True, 1), (Watching, False, 0)],
                         ids=["older-broker-asked-once", "watch-leases-off"])
def test_without_lease_watches_heartbeats_alone_find_a_lost_lease(broker: type[Watching], watch_leases: bool,
                                                                  watches: int) -> None:
    client = broker(MemoryStore(), policy=Policy(max_attempts=3, backoff_base_seconds=0)).start()
    try:
        [job_id] = client.push("q", ["long"])
        handler = Handler()
        options = replace(FAST_WORKER, lease_seconds=5, heartbeat_interval=0.05, watch_leases=watch_leases)
        worker = Worker(client, queues=["q"], handler=handler, options=options)
        thread, _ = start(worker)
        assert handler.running.wait(TIMEOUT)
        wait_for(lambda: client.watches == watches and worker.stats.heartbeats >= 3)
        client.purge([job_id])
        assert handler.ended.wait(TIMEOUT)  # found by a heartbeat
        assert client.watches == watches  # the older broker was asked once, then never again
        worker.stop(0)
        thread.join(TIMEOUT)
        assert not thread.is_alive()
    finally:
        client.stop()
