"""The Worker, driven against a GroupCommitter on a MemoryStore (it has the
client's methods). Tests wait on events and conditions, never fixed sleeps.

Every test runs twice, batching (acknowledgements and heartbeats through
``execute_many``, the default) and not (``batch=False``: one call each, the
single-job protocol); the spy records both as the same per-job calls.
tests/engine/test_worker_batch.py checks what only batching does."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

from engine import (
    ClaimedJob,
    GroupCommitter,
    JobNotFound,
    LeaseLost,
    MemoryStore,
    NotLeader,
    Policy,
    StoreUnavailable,
    ValidationError,
)
from engine.errors import Unauthorized
from engine.ops import Claim, Complete, Fail, Heartbeat, Operation
from engine.policy import MAX_CLAIM_JOBS
from engine.worker import Worker, WorkerOptions, WorkerStats
from tests.helpers import FAST_WORKER, start, wait_for

PROTOCOL = {"batch": True}


@pytest.fixture(autouse=True, params=[True, False], ids=["batch", "single"])
def protocol(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Run the test with batching on, then off (through :func:`fast`)."""
    monkeypatch.setitem(PROTOCOL, "batch", request.param)
    return bool(request.param)


def fast(**changes: Any) -> WorkerOptions:
    """The fast test options, with this run's protocol and ``changes``."""
    return replace(FAST_WORKER, **{**PROTOCOL, **changes})
TIMEOUT = 10.0
NAMES = {Complete: "complete", Fail: "fail", Heartbeat: "heartbeat", Claim: "claim"}


class SpyCommitter(GroupCommitter):
    """A GroupCommitter that records calls and can be told to fail some."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[str] = []
        self.faults: dict[str, list[Exception]] = {}
        self.lease_lost = threading.Event()
        self.batches: list[list[str]] = []  # execute_many calls, as the names of their operations

    def _call(self, name: str) -> None:
        self.calls.append(name)
        pending = self.faults.get(name)
        if pending:
            raise pending.pop(0)

    def claim(self, worker: str, queues: Iterable[str], **kwargs: Any) -> list[ClaimedJob]:
        self._call("claim")
        return super().claim(worker, queues, **kwargs)

    def heartbeat(self, job_id: str, lease: str, *, lease_seconds: float | None = None) -> datetime:
        self._call("heartbeat")
        try:
            return super().heartbeat(job_id, lease, lease_seconds=lease_seconds)
        except LeaseLost:
            self.lease_lost.set()
            raise

    def complete(self, job_id: str, lease: str) -> None:
        self._call("complete")
        super().complete(job_id, lease)

    def execute_many(self, ops: Sequence[Operation], **kwargs: Any) -> list[Any]:
        """Each operation recorded (and failed) as its single call would be;
        the rest are committed together."""
        self.batches.append([NAMES[type(op)] for op in ops])
        outcomes: list[Any] = []
        todo: list[int] = []
        for index, op in enumerate(ops):
            try:
                self._call(NAMES[type(op)])
                outcomes.append(None)
                todo.append(index)
            except Exception as exc:
                outcomes.append(exc)
        for index, outcome in zip(todo, super().execute_many([ops[i] for i in todo], **kwargs), strict=True):
            outcomes[index] = outcome
            if isinstance(outcome, LeaseLost) and isinstance(ops[index], Heartbeat):
                self.lease_lost.set()
        return outcomes


class LongPollCommitter(SpyCommitter):
    """Records the ``wait_seconds`` of every claim (a GroupCommitter ignores it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.waits: list[float] = []

    def claim(self, worker: str, queues: Iterable[str], *, wait_seconds: float = 0, **kwargs: Any) -> list[ClaimedJob]:
        self.waits.append(wait_seconds)
        return super().claim(worker, queues, **kwargs)


@pytest.fixture
def client() -> Iterator[SpyCommitter]:
    committer = SpyCommitter(MemoryStore(), policy=Policy(max_attempts=2, backoff_base_seconds=0)).start()
    yield committer
    committer.stop()



def test_burst_completes_every_job_then_exits(client: SpyCommitter) -> None:
    ids = client.push("q", [{"n": n} for n in range(5)])
    seen: list[Any] = []
    stats = Worker(client, queues=["q"], handler=seen.append, options=fast(burst=True, concurrency=2)).run()
    assert sorted(p["n"] for p in seen) == list(range(5))
    assert (stats.claimed, stats.completed, stats.failed, stats.lost) == (5, 5, 0, 0)
    doc = client.document()
    assert doc["jobs"] == [] and doc["queues"]["q"]["completed"] == 5
    assert len(ids) == 5


def test_a_worker_in_order_runs_its_first_queues_jobs_first_whatever_the_protocol(client: SpyCommitter) -> None:
    low = client.push("low", [{"n": n} for n in range(3)])
    high = client.push("high", [{"n": n} for n in range(3, 5)])
    order: list[str] = []
    options = fast(burst=True, in_order=True)  # one slot: one job per claim, carried or not
    Worker(client, queues=["high", "low"], handler=lambda job: order.append(job.id), pass_job=True,
           options=options).run()
    assert order == high + low


def test_a_client_whose_claim_predates_in_order_still_serves_a_plain_worker() -> None:
    """A client subclass that overrides ``claim`` with the arguments it had
    before ``in_order`` existed (the benchmark's had): a worker that does not
    ask for order does not pass it."""

    class Older(GroupCommitter):
        def claim(self, worker: str, queues: Iterable[str], *, max_jobs: int = 1, lease_seconds: float | None = None,
                  wait_seconds: float = 0) -> list[ClaimedJob]:
            return super().claim(worker, queues, max_jobs=max_jobs, lease_seconds=lease_seconds,
                                 wait_seconds=wait_seconds)

    with Older(MemoryStore()) as older:
        older.push("q", [1, 2])
        stats = Worker(older, queues=["q"], handler=lambda _: None, options=fast(burst=True)).run()
    assert (stats.claimed, stats.completed) == (2, 2)


def test_burst_on_empty_queues_exits_at_once(client: SpyCommitter) -> None:
    stats = Worker(client, queues=["q", "other"], handler=print, options=fast(burst=True)).run()
    assert stats == WorkerStats()
    assert client.calls == ["claim"]


def test_handler_exception_fails_with_traceback_until_dead(client: SpyCommitter) -> None:
    [job_id] = client.push("q", [{"fail": True}])

    def handler(payload: Any) -> None:
        raise ValueError(f"boom {payload}")

    stats = Worker(client, queues=["q"], handler=handler, options=fast(burst=True)).run()
    assert (stats.claimed, stats.failed, stats.dead, stats.completed) == (2, 2, 1, 0)
    [dead] = client.document()["dead"]
    assert dead["id"] == job_id and dead["attempts"] == 2
    assert dead["error"].startswith("Traceback (most recent call last)")
    assert "ValueError: boom {'fail': True}" in dead["error"]


def test_concurrency_runs_that_many_jobs_at_once(client: SpyCommitter) -> None:
    client.push("q", [1, 2, 3])
    together = threading.Barrier(3, timeout=TIMEOUT)  # breaks unless three handlers run at once
    options = fast(burst=True, concurrency=3)
    stats = Worker(client, queues=["q"], handler=lambda _: together.wait(), options=options).run()
    assert stats.completed == 3


def test_more_slots_than_one_claim_may_hold_are_filled_over_several_claims(client: SpyCommitter) -> None:
    # A claim holds at most MAX_CLAIM_JOBS; a worker with more slots used to
    # ask for all of them and stop on the ValidationError.
    slots = MAX_CLAIM_JOBS + 2
    client.push("q", list(range(slots)))
    together = threading.Barrier(slots, timeout=TIMEOUT)  # breaks unless every slot runs at once
    options = fast(burst=True, concurrency=slots)
    worker = Worker(client, queues=["q"], handler=lambda _: together.wait(), options=options)
    stats = worker.run()
    assert worker.fatal is None
    assert (stats.claimed, stats.completed, stats.errors) == (slots, slots, 0)


@pytest.mark.parametrize(("max_jobs", "concurrency"), [(7, 3), (2, 8), (1, 1)])
def test_max_jobs_claims_that_many_lets_them_end_and_returns(client: SpyCommitter, max_jobs: int,
                                                              concurrency: int) -> None:
    """Not in burst mode: the worker returns by itself once its jobs ended,
    with the rest of the queue left pending, and never claims one more (a
    claim riding an acknowledgement included)."""
    client.push("q", [{"n": n} for n in range(20)])
    seen: list[int] = []
    stats = Worker(client, queues=["q"], handler=lambda p: seen.append(p["n"]),
                   options=fast(concurrency=concurrency, max_jobs=max_jobs)).run()
    assert (stats.claimed, stats.completed, stats.lost) == (max_jobs, max_jobs, 0)
    assert sorted(seen) == list(range(max_jobs))
    doc = client.document()
    assert len(doc["jobs"]) == 20 - max_jobs and all(j["status"] == "pending" for j in doc["jobs"])


def test_max_jobs_counts_every_attempt(client: SpyCommitter) -> None:
    client.push("q", [{"fail": True}])
    client.push("q", [{"n": 1}])

    def handler(payload: Any) -> None:
        if payload.get("fail"):
            raise ValueError("again")

    stats = Worker(client, queues=["q"], handler=handler, options=fast(max_jobs=2)).run()
    assert stats.claimed == 2 and stats.failed + stats.completed == 2
    assert client.document()["jobs"]  # one attempt or job left for the next process


@pytest.mark.slow
def test_heartbeats_keep_a_long_job_past_its_lease(client: SpyCommitter) -> None:
    [job_id] = client.push("q", ["slow"])
    running, release = threading.Event(), threading.Event()

    def handler(_: Any) -> None:
        running.set()
        release.wait(TIMEOUT)

    worker = Worker(client, queues=["q"], handler=handler, options=fast(lease_seconds=0.5, heartbeat_interval=0.05))
    thread, result = start(worker)
    assert running.wait(TIMEOUT)
    # Run for at least two full leases; each commit also expires due leases.
    wait_for(lambda: worker.stats.heartbeats >= 22)
    assert client.claim("other", ["q"]) == []
    assert client.get_job(job_id)["status"] == "running"
    release.set()
    wait_for(lambda: worker.stats.completed == 1)
    worker.stop()
    thread.join(TIMEOUT)
    assert result == [worker.stats] and worker.stats.lost == 0
    assert client.document()["queues"]["q"] == {
        "pushed": 1, "completed": 1, "failed": 0, "dead": 0, "purged": 0, "dead_dropped": 0, "paused": False}


def test_lost_lease_means_the_result_is_not_sent(client: SpyCommitter) -> None:
    [job_id] = client.push("q", ["x"])
    running, release = threading.Event(), threading.Event()

    def handler(_: Any) -> None:
        running.set()
        release.wait(TIMEOUT)

    worker = Worker(client, queues=["q"], handler=handler, options=fast(lease_seconds=5, heartbeat_interval=0.02))
    thread, _ = start(worker)
    assert running.wait(TIMEOUT)
    client.requeue([job_id])  # an operator takes the job back: the lease is revoked
    assert client.lease_lost.wait(TIMEOUT)
    worker.stop()  # claim nothing more: the requeued job must not come back to this worker
    release.set()
    thread.join(TIMEOUT)
    assert (worker.stats.lost, worker.stats.completed, worker.stats.abandoned) == (1, 0, 0)
    assert "complete" not in client.calls
    assert client.get_job(job_id)["status"] == "pending"


def test_stop_lets_a_running_job_finish_and_claims_nothing_more(client: SpyCommitter) -> None:
    first, second = client.push("q", ["a", "b"])
    running, release = threading.Event(), threading.Event()

    def handler(_: Any) -> None:
        running.set()
        release.wait(TIMEOUT)

    worker = Worker(client, queues=["q"], handler=handler, options=fast(grace_seconds=TIMEOUT))
    thread, result = start(worker)
    assert running.wait(TIMEOUT)
    worker.stop()
    worker.stop()  # idempotent
    assert thread.is_alive()
    release.set()
    thread.join(TIMEOUT)
    assert not thread.is_alive() and result == [worker.stats]
    assert (worker.stats.claimed, worker.stats.completed, worker.stats.abandoned) == (1, 1, 0)
    assert client.get_job(second)["status"] == "pending"
    with pytest.raises(JobNotFound):
        client.get_job(first)  # completed: it left the document
    with pytest.raises(RuntimeError):
        worker.run()


def test_a_job_still_running_after_the_grace_period_is_left_to_expire(client: SpyCommitter) -> None:
    [job_id] = client.push("q", ["stuck"])
    running, release = threading.Event(), threading.Event()

    def handler(_: Any) -> None:
        running.set()
        release.wait(TIMEOUT)

    worker = Worker(client, queues=["q"], handler=handler, options=fast(grace_seconds=TIMEOUT))
    thread, result = start(worker)
    assert running.wait(TIMEOUT)
    worker.stop()
    worker.stop(grace_seconds=0)  # a second signal: leave now
    thread.join(TIMEOUT)
    assert result == [worker.stats] and (worker.stats.abandoned, worker.stats.lost) == (1, 1)
    release.set()
    wait_for(lambda: worker.running == 0)  # the handler returned ...
    assert "complete" not in client.calls  # ... and its result was not sent
    assert client.get_job(job_id)["status"] == "running"


def test_transient_errors_are_retried_not_fatal(client: SpyCommitter) -> None:
    client.push("q", [1, 2])
    client.faults = {
        "claim": [StoreUnavailable("store timed out"), NotLeader("http://elsewhere")],
        "complete": [NotLeader(None)],
    }
    stats = Worker(client, queues=["q"], handler=lambda _: None, options=fast(burst=True)).run()
    assert (stats.completed, stats.errors, stats.lost) == (2, 3, 0)


def test_claims_refused_for_good_end_the_worker(client: SpyCommitter) -> None:
    client.faults = {"claim": [Unauthorized("wrong token")]}
    with pytest.raises(Unauthorized):
        Worker(client, queues=["q"], handler=print, options=FAST_WORKER).run()


def test_every_claim_asks_for_the_long_poll_wait(protocol: bool) -> None:
    committer = LongPollCommitter(MemoryStore()).start()
    try:
        committer.push("q", [1])
        Worker(committer, queues=["q"], handler=print, options=fast(burst=True)).run()
        # Burst never waits. A batching worker may claim once more: its
        # handler is free again before the job's acknowledgement has landed.
        assert set(committer.waits) == {0} and len(committer.waits) in ((2, 3) if protocol else (2,))
        burst_claims = len(committer.waits)
        worker = Worker(committer, queues=["q"], handler=print, options=fast(wait_seconds=7))
        thread, _ = start(worker)
        wait_for(lambda: len(committer.waits) >= burst_claims + 1)
        worker.stop()
        thread.join(TIMEOUT)
        assert set(committer.waits[burst_claims:]) == {7}
    finally:
        committer.stop()


def test_stop_does_not_wait_the_grace_period_for_a_hung_claim(caplog: pytest.LogCaptureFixture) -> None:
    hold, claiming = threading.Event(), threading.Event()

    class HungClaims(LongPollCommitter):
        def claim(self, worker: str, queues: Iterable[str], **kwargs: Any) -> list[ClaimedJob]:
            claiming.set()
            hold.wait(TIMEOUT)  # a broker that does not answer (or a client retrying)
            return super().claim(worker, queues, **kwargs)

    committer = HungClaims(MemoryStore()).start()
    try:
        options = fast(wait_seconds=0.1, grace_seconds=TIMEOUT)
        worker = Worker(committer, queues=["q"], handler=print, options=options)
        thread, result = start(worker)
        assert claiming.wait(TIMEOUT)
        worker.stop()
        thread.join(TIMEOUT / 2)
        assert result == [WorkerStats()]  # returned well before the grace period ended
        committer.push("q", [1])
        hold.set()  # the claim is answered after all: its job is not run
        wait_for(lambda: "claimed after the worker stopped" in caplog.text)
        assert committer.document()["jobs"][0]["status"] == "running"  # left for its lease to expire
    finally:
        hold.set()
        committer.stop()


def test_an_idle_worker_stops_at_once_without_waiting_out_its_long_poll() -> None:
    answered, claiming = threading.Event(), threading.Event()

    class LongPolls(LongPollCommitter):
        def claim(self, worker: str, queues: Iterable[str], **kwargs: Any) -> list[ClaimedJob]:
            claiming.set()
            answered.wait(kwargs.get("wait_seconds", 0))  # a broker holding the claim: nothing to hand out
            return []

    committer = LongPolls(MemoryStore()).start()
    try:
        worker = Worker(committer, queues=["q"], handler=print, options=fast(wait_seconds=30, grace_seconds=30))
        thread, result = start(worker)
        assert claiming.wait(TIMEOUT)
        stopped = time.monotonic()
        worker.stop()
        thread.join(TIMEOUT)
        assert result == [WorkerStats()] and time.monotonic() - stopped < 1.0
    finally:
        answered.set()
        committer.stop()


@pytest.mark.parametrize(
    ("queues", "options", "error"),
    [
        (["bad queue"], {}, ValidationError),
        ([], {}, ValidationError),
        (["q"], {"concurrency": 0}, ValueError),
        (["q"], {"lease_seconds": 1, "heartbeat_interval": 1}, ValueError),
        (["q"], {"wait_seconds": 31}, ValueError),
        (["q"], {"max_jobs": 0}, ValueError),
        (["q"], {"max_jobs": True}, ValueError),
    ],
)
def test_bad_configuration_is_refused(
    client: SpyCommitter, queues: list[str], options: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        Worker(client, queues=queues, handler=print, options=WorkerOptions(**options))
