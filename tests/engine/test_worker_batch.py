"""What only a batching Worker does (``WorkerOptions(batch=True)``): finished
jobs are acknowledged together through ``execute_many``, each settled from
its own outcome; heartbeats go out in one call per beat; stop() flushes what
is waiting; and an acknowledgement the broker did not confirm never counts
as completed. test_worker.py runs the common behaviour both ways."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

from engine import ClaimedJob, GroupCommitter, JobNotFound, LeaseLost, MemoryStore, Policy, StoreUnavailable
from engine.ops import Claim, Complete, Fail, Heartbeat, Operation
from engine.worker import PermanentFailure, Worker, WorkerOptions
from tests.helpers import FAST_WORKER, start, wait_for

TIMEOUT = 10.0
NAMES = {Complete: "complete", Fail: "fail", Heartbeat: "heartbeat", Claim: "claim"}


def options(**changes: Any) -> WorkerOptions:
    return replace(FAST_WORKER, **{"batch": True, **changes})


class Spy(GroupCommitter):
    """A GroupCommitter that records single calls and ``execute_many``
    calls apart (a claim riding an ``execute_many`` call in ``carried``, the
    claim itself, not in ``batches``). ``item_faults`` replace one job's
    outcome in a batch; ``hold`` (when set) holds every execute_many call
    until it is released."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.singles: list[str] = []
        self.batches: list[list[tuple[str, str]]] = []
        self.carried: list[Claim] = []
        self.own_claims = 0
        self.item_faults: dict[str, list[Exception]] = {}
        self.call_faults: list[Exception] = []
        self.hold: threading.Event | None = None
        self.entered = threading.Event()

    def claim(self, *args: Any, **kwargs: Any) -> list[ClaimedJob]:
        self.own_claims += 1
        return super().claim(*args, **kwargs)

    def heartbeat(self, job_id: str, lease: str, *, lease_seconds: float | None = None) -> datetime:
        self.singles.append("heartbeat")
        return super().heartbeat(job_id, lease, lease_seconds=lease_seconds)

    def complete(self, job_id: str, lease: str) -> None:
        self.singles.append("complete")
        super().complete(job_id, lease)

    def fail(self, job_id: str, lease: str, **kwargs: Any) -> Any:
        self.singles.append("fail")
        return super().fail(job_id, lease, **kwargs)

    def execute_many(self, ops: Sequence[Operation], **kwargs: Any) -> list[Any]:
        self.batches.append([(NAMES[type(op)], getattr(op, "job_id", "")) for op in ops
                             if not isinstance(op, Claim)])
        self.carried.extend(op for op in ops if isinstance(op, Claim))
        self.entered.set()
        if self.hold is not None:
            self.hold.wait(TIMEOUT)
        if self.call_faults:
            raise self.call_faults.pop(0)
        outcomes = super().execute_many(ops, **kwargs)
        for index, op in enumerate(ops):
            faults = self.item_faults.get(getattr(op, "job_id", ""))
            if faults and NAMES[type(op)] != "heartbeat":
                outcomes[index] = faults.pop(0)
        return outcomes

    def acks(self) -> list[list[tuple[str, str]]]:
        return [b for b in self.batches if b[0][0] != "heartbeat"]


@pytest.fixture
def client() -> Iterator[Spy]:
    spy = Spy(MemoryStore(), policy=Policy(max_attempts=2, backoff_base_seconds=0)).start()
    yield spy
    spy.stop()



def test_jobs_that_finish_together_are_acknowledged_in_one_call(client: Spy) -> None:
    ids = client.push("q", [1, 2, 3, 4])
    together = threading.Barrier(4, timeout=TIMEOUT)  # the four finish at the same moment
    # A long linger: the batch is sent as soon as no handler is busy any more.
    worker = Worker(client, queues=["q"], handler=lambda _: together.wait(),
                    options=options(burst=True, concurrency=4, ack_linger_seconds=1.0))
    stats = worker.run()
    assert (stats.claimed, stats.completed, stats.lost) == (4, 4, 0)
    assert client.singles == []
    [batch] = client.acks()
    assert sorted(batch) == sorted(("complete", i) for i in ids)
    assert client.document()["queues"]["q"]["completed"] == 4


def test_each_job_is_settled_from_its_own_outcome(client: Spy) -> None:
    ok, stolen, gone, failing = client.push("q", ["ok", "stolen", "gone", "fail"])
    together = threading.Barrier(4, timeout=TIMEOUT)

    def handler(payload: str) -> None:
        together.wait()
        if payload == "fail":
            raise PermanentFailure("no such handler")

    client.item_faults = {stolen: [LeaseLost(stolen)], gone: [JobNotFound(gone)]}
    stats = Worker(client, queues=["q"], handler=handler,
                   options=options(burst=True, concurrency=4, ack_linger_seconds=1.0)).run()
    [batch] = client.acks()
    assert sorted(batch) == sorted([("complete", ok), ("complete", stolen), ("complete", gone), ("fail", failing)])
    # The two refused items are lost, never completed; the others count as usual.
    assert (stats.completed, stats.lost, stats.failed, stats.dead) == (1, 2, 1, 1)
    assert client.document()["dead"][0]["id"] == failing


def test_a_transient_item_error_is_retried_alone(client: Spy) -> None:
    first, second = client.push("q", ["a", "b"])
    together = threading.Barrier(2, timeout=TIMEOUT)
    # The first time, the second job's complete is not committed and comes
    # back as a StoreUnavailable (the first job's lands); the retry commits it.
    original = client.execute_many
    failed_once: list[str] = []

    def flaky(ops: Sequence[Operation], **kwargs: Any) -> list[Any]:
        keep = [op for op in ops if not (getattr(op, "job_id", "") == second and not failed_once)]
        outcomes = dict(zip(map(id, keep), original(keep, **kwargs), strict=True)) if keep else {}
        result = []
        for op in ops:
            if id(op) in outcomes:
                result.append(outcomes[id(op)])
            else:
                failed_once.append(op.job_id)  # type: ignore[attr-defined]
                result.append(StoreUnavailable("the store timed out"))
        return result

    client.execute_many = flaky  # type: ignore[method-assign]
    stats = Worker(client, queues=["q"], handler=lambda _: together.wait(),
                   options=options(burst=True, concurrency=2, ack_linger_seconds=1.0)).run()
    assert failed_once == [second]
    assert (stats.completed, stats.lost, stats.errors) == (2, 0, 1)
    assert client.document()["jobs"] == []
    assert first != second


def test_a_whole_call_that_fails_is_retried(client: Spy) -> None:
    client.push("q", ["a"])
    client.call_faults = [StoreUnavailable("broker unreachable")]
    stats = Worker(client, queues=["q"], handler=lambda _: None, options=options(burst=True)).run()
    assert (stats.completed, stats.lost, stats.errors) == (1, 0, 1)
    assert len(client.acks()) == 2


def test_stop_flushes_waiting_acknowledgements_without_the_linger(client: Spy) -> None:
    quick, slow = client.push("q", ["quick", "slow"])
    release = threading.Event()

    def handler(payload: str) -> None:
        if payload == "slow":
            release.wait(TIMEOUT)

    # The worker's clock stands still, so the quick job's linger never ends
    # while the slow job runs: only stop() can send its acknowledgement.
    worker = Worker(client, queues=["q"], handler=handler, monotonic=lambda: 1000.0,
                    options=options(concurrency=2, ack_linger_seconds=1.0, grace_seconds=TIMEOUT))
    thread, result = start(worker)
    wait_for(lambda: worker.stats.claimed == 2 and worker.running == 2 and worker._busy == 1)
    assert client.acks() == []
    worker.stop()
    wait_for(lambda: worker.stats.completed == 1, what="the quick job's ack, sent at stop() without lingering")
    assert client.acks() == [[("complete", quick)]]
    release.set()
    thread.join(TIMEOUT)
    assert result == [worker.stats] and (worker.stats.completed, worker.stats.lost) == (2, 0)
    assert client.document()["jobs"] == [] and slow


def test_an_acknowledgement_not_confirmed_is_never_counted_completed(client: Spy) -> None:
    [job_id] = client.push("q", ["x"])
    client.hold = threading.Event()  # the broker never answers in time
    worker = Worker(client, queues=["q"], handler=lambda _: None, options=options(grace_seconds=TIMEOUT))
    thread, result = start(worker)
    assert client.entered.wait(TIMEOUT)
    worker.stop(grace_seconds=0.05)
    thread.join(TIMEOUT)
    assert result == [worker.stats]
    assert (worker.stats.completed, worker.stats.abandoned, worker.stats.lost) == (0, 1, 1)
    client.hold.set()  # the commit lands after all: the stats keep what was confirmed in time
    wait_for(lambda: client.document()["jobs"] == [])
    assert worker.stats.completed == 0 and job_id


def test_heartbeats_for_every_lease_go_in_one_call(client: Spy) -> None:
    client.push("q", [1, 2, 3])
    running = threading.Barrier(4, timeout=TIMEOUT)
    release = threading.Event()

    def handler(_: Any) -> None:
        running.wait()
        release.wait(TIMEOUT)

    worker = Worker(client, queues=["q"], handler=handler,
                    options=options(concurrency=3, lease_seconds=5, heartbeat_interval=0.05))
    thread, _ = start(worker)
    running.wait()
    wait_for(lambda: worker.stats.heartbeats >= 6)
    release.set()
    worker.stop()
    thread.join(TIMEOUT)
    beats = [b for b in client.batches if b[0][0] == "heartbeat"]
    assert "heartbeat" not in client.singles
    assert any(len(b) == 3 for b in beats), beats
    assert worker.stats.completed == 3


def test_a_lease_lost_in_a_heartbeat_batch_loses_only_that_job(client: Spy) -> None:
    kept, revoked = client.push("q", ["kept", "revoked"])
    running = threading.Barrier(3, timeout=TIMEOUT)
    release = threading.Event()

    def handler(_: Any) -> None:
        running.wait()
        release.wait(TIMEOUT)

    worker = Worker(client, queues=["q"], handler=handler,
                    options=options(concurrency=2, lease_seconds=5, heartbeat_interval=0.05))
    thread, _ = start(worker)
    running.wait()
    worker.stop()  # claim nothing more: the requeued job must not come back here
    client.requeue([revoked])  # an operator takes one job back: its lease is revoked
    sent = len(client.batches)
    wait_for(lambda: len(client.batches) >= sent + 2)  # one beat at least went out wholly after it
    release.set()
    thread.join(TIMEOUT)
    assert (worker.stats.completed, worker.stats.lost) == (1, 1)
    assert ("complete", revoked) not in [item for b in client.acks() for item in b]
    assert client.get_job(revoked)["status"] == "pending" and kept


def test_without_batch_every_call_is_single(client: Spy) -> None:
    client.push("q", [1, 2, 3])
    together = threading.Barrier(3, timeout=TIMEOUT)
    stats = Worker(client, queues=["q"], handler=lambda _: together.wait(),
                   options=options(batch=False, burst=True, concurrency=3)).run()
    assert stats.completed == 3
    assert client.batches == [] and client.singles == ["complete"] * 3


@pytest.mark.parametrize("changes", [{"ack_linger_seconds": -1}, {"ack_linger_seconds": 2}, {"batch": "yes"}])
def test_bad_batch_options_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        WorkerOptions(**changes)


def test_the_next_claim_rides_the_acknowledgements(client: Spy) -> None:
    ids = client.push("q", list(range(8)))
    together = threading.Barrier(4, timeout=TIMEOUT)
    seqs: list[int] = []
    original = client.execute_many

    def noting(ops: Sequence[Operation], **kwargs: Any) -> list[Any]:
        outcomes = original(ops, **kwargs)
        seqs.append(client.committed_seq)
        return outcomes

    client.execute_many = noting  # type: ignore[method-assign]
    worker = Worker(client, queues=["q"], handler=lambda _: together.wait(),
                    options=options(burst=True, concurrency=4, ack_linger_seconds=1.0))
    stats = worker.run()
    assert (stats.claimed, stats.completed, stats.lost) == (8, 8, 0)
    # Claimed alone: the first four, and the empty claim that ends the burst.
    # Each ack call carried a claim for the four free slots, in its commit:
    # the second found the last four jobs, the third none.
    assert client.own_claims == 2
    assert [c.max_jobs for c in client.carried] == [4, 4]
    assert [len(b) for b in client.acks()] == [4, 4]
    assert len(set(seqs)) == len(seqs) == 2  # one commit per call
    assert client.document()["queues"]["q"]["completed"] == 8 and len(ids) == 8


def test_a_stopping_worker_carries_no_claim(client: Spy) -> None:
    client.push("q", list(range(4)))
    running = threading.Barrier(3, timeout=TIMEOUT)
    release = threading.Event()

    def handler(_: Any) -> None:
        running.wait()
        release.wait(TIMEOUT)

    worker = Worker(client, queues=["q"], handler=handler, options=options(concurrency=2))
    thread = threading.Thread(target=worker.run)
    thread.start()
    running.wait()
    worker.stop()
    release.set()
    thread.join(TIMEOUT)
    assert (worker.stats.claimed, worker.stats.completed) == (2, 2)
    assert client.carried == [] and client.own_claims == 1
    assert [j["status"] for j in client.document()["jobs"]] == ["pending", "pending"]


class CountingCondition(threading.Condition):
    """A condition that counts how often a waiting thread woke (notified or timed out)."""

    def __init__(self, lock: Any) -> None:
        super().__init__(lock)
        self.woken = 0

    def wait(self, timeout: float | None = None) -> bool:
        woke = super().wait(timeout)
        self.woken += 1
        return woke


def counted(worker: Worker) -> tuple[CountingCondition, CountingCondition]:
    """Give ``worker``'s claimer and run() counting conditions on its lock."""
    lock = worker._cond._lock  # type: ignore[attr-defined]  # the conditions share the worker's lock
    worker._claims, worker._ends = CountingCondition(lock), CountingCondition(lock)
    return worker._claims, worker._ends


def test_a_one_slot_worker_does_not_wake_its_claimer_for_every_job(client: Spy) -> None:
    """Each acknowledgement carries the next claim, so while jobs keep coming
    the claimer has nothing to do and is not woken for each job. (One
    condition woke every waiting thread on every change: about two claimer
    wake-ups a job.)"""
    client.push("q", list(range(200)))
    worker = Worker(client, queues=["q"], handler=lambda _: None, options=options(burst=True, concurrency=1))
    claims, _ = counted(worker)
    stats = worker.run()
    assert (stats.completed, stats.lost) == (200, 0)
    assert len(client.carried) >= 190  # the acknowledgements carried the claims
    assert claims.woken < 20, claims.woken  # at the start and the end, and a 0.5 s wait step or two


def test_run_is_woken_by_the_last_job_of_a_stopping_worker_not_by_every_job(client: Spy) -> None:
    """A worker reporting each job itself has no job running between two:
    run() waits for that only once the claimer ended or a stop, and is not
    woken every time."""
    client.push("q", list(range(200)))
    worker = Worker(client, queues=["q"], handler=lambda _: None,
                    options=options(burst=True, concurrency=1, batch=False))
    _, ends = counted(worker)
    stats = worker.run()
    assert (stats.completed, stats.lost) == (200, 0)
    assert ends.woken < 20, ends.woken
