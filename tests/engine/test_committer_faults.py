"""I8: the committer answers every operation exactly once, whatever escapes.

One operation whose transition or encoding raises something unexpected (here:
a lone UTF-16 surrogate that got past validation, or an injected fault) is
refused alone with OperationFailed; the rest of its batch commits, and the
committer and the broker's heartbeat keep working.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import orjson
import pytest

from engine import Broker, CommitterStopped, GroupCommitter, MemoryStore, ObjectStore, QueueState
from engine.errors import OperationFailed
from engine.ops import Operation, Tick, claim_op, complete_op, fail_op, push_op
from engine.policy import Policy
from engine.stores.base import Blob
from tests.helpers import KEY, document, wait_for

POLICY = Policy()
SURROGATE = "\ud800"



def smuggled(op: Operation, **fields: Any) -> Operation:
    """``op`` with fields changed behind its builder's back: the committer must
    cope with an operation that got past validation."""
    for name, value in fields.items():
        object.__setattr__(op, name, value)
    return op


def run_together(committer: GroupCommitter, ops: Sequence[Operation]) -> list[Any]:
    """Submit ``ops`` from one event loop turn (so they share a batch) and
    return each one's outcome or exception."""

    async def main() -> list[Any]:
        return await asyncio.wait_for(
            asyncio.gather(*(committer.aexecute(op) for op in ops), return_exceptions=True), timeout=30
        )

    return asyncio.run(main())


def test_a_surrogate_worker_fails_its_claim_alone_and_the_batch_commits() -> None:
    store = MemoryStore()
    with GroupCommitter(store) as committer:
        [first] = committer.push("q", ["a"])
        bad = smuggled(claim_op("w", ["q"], policy=POLICY), worker=SURROGATE)
        pushes = [push_op("q", [n], policy=POLICY) for n in range(3)]
        outcomes = run_together(committer, [pushes[0], bad, pushes[1], Tick(), pushes[2]])
        assert isinstance(outcomes[1], OperationFailed)
        assert "Claim" in str(outcomes[1])
        for op, outcome in zip(pushes, [outcomes[0], outcomes[2], outcomes[4]], strict=True):
            assert outcome == [job.id for job in op.jobs]
        assert isinstance(outcomes[3], int)
        orjson.dumps(str(outcomes[1]))  # the error's message itself is encodable
        # Nothing of the bad claim was written; the innocent pushes were.
        jobs = {job["id"]: job for job in document(store)["jobs"]}
        assert jobs[first]["status"] == "pending" and jobs[first]["lease"] is None
        assert {job.id for op in pushes for job in op.jobs} <= set(jobs)
        # ...and the committer carries on.
        [claimed] = committer.claim("w", ["q"])
        assert claimed.id == first


def test_a_surrogate_error_fails_its_fail_alone_and_the_lease_still_holds() -> None:
    store = MemoryStore()
    with GroupCommitter(store) as committer:
        committer.push("q", ["a"])
        [job] = committer.claim("w", ["q"])
        op = fail_op(job.id, job.lease, error="boom", retry_in_seconds=None, policy=POLICY)
        bad = smuggled(op, error=f"bad {SURROGATE} error")
        [refused, pushed] = run_together(committer, [bad, push_op("q", ["b"], policy=POLICY)])
        assert isinstance(refused, OperationFailed)
        assert isinstance(pushed, list)
        stored = next(j for j in document(store)["jobs"] if j["id"] == job.id)
        assert stored["status"] == "running" and stored["history"] == []
        committer.execute(complete_op(job.id, job.lease))  # the lease is still the job's
        assert job.id not in {j["id"] for j in document(store)["jobs"]}


def test_a_document_that_stops_encoding_refuses_only_the_operation_that_broke_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = QueueState.encode

    def encode(self: QueueState, **kwargs: Any) -> list[bytes]:
        if "poison" in self.queues:  # a fault the transitions do not see: only encoding fails
            raise ValueError("cannot encode the poison queue")
        return original(self, **kwargs)

    monkeypatch.setattr(QueueState, "encode", encode)
    store = MemoryStore()
    with GroupCommitter(store) as committer:
        committer.push("q", ["before"])
        ops = [push_op("q", ["x"], policy=POLICY), push_op("poison", ["p"], policy=POLICY),
               push_op("q", ["y"], policy=POLICY)]
        outcomes = run_together(committer, ops)
        assert isinstance(outcomes[1], OperationFailed)
        assert "cannot encode the poison queue" in str(outcomes[1])
        assert isinstance(outcomes[0], list) and isinstance(outcomes[2], list)
        assert [j["payload"] for j in document(store)["jobs"]] == ["before", "x", "y"]
        assert "poison" not in document(store)["queues"]
        committer.push("q", ["after"])
        assert [j["payload"] for j in document(store)["jobs"]][-1] == "after"


def test_a_transition_that_raises_something_unexpected_fails_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.transitions as transitions

    original = transitions._TRANSITIONS[type(claim_op("w", ["q"], policy=POLICY))]

    def broken_claim(state: QueueState, op: Any, now: Any) -> Any:
        if op.worker == "crash":
            state.jobs.clear()  # half a change, then a bug: the state must be thrown away
            raise RuntimeError("a bug in claim")
        return original(state, op, now)

    monkeypatch.setitem(transitions._TRANSITIONS, type(claim_op("w", ["q"], policy=POLICY)), broken_claim)
    store = MemoryStore()
    with GroupCommitter(store) as committer:
        ids = committer.push("q", ["a", "b"])
        outcomes = run_together(committer, [claim_op("crash", ["q"], policy=POLICY),
                                            push_op("q", ["c"], policy=POLICY)])
        assert isinstance(outcomes[0], OperationFailed) and "a bug in claim" in str(outcomes[0])
        assert isinstance(outcomes[1], list)
        assert [j["id"] for j in document(store)["jobs"]] == ids + outcomes[1]
        assert [job.id for job in committer.claim("w", ["q"], max_jobs=5)] == [*ids, *outcomes[1]]


class HangingStore(ObjectStore):
    """Passes everything through, except that writes of the document hang
    while ``hang`` is set (a store call that never returns)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.hang = threading.Event()
        self.hung = threading.Event()
        self.release = threading.Event()

    def get(self, key: str) -> Blob | None:
        return self.inner.get(key)

    def etag(self, key: str) -> str | None:
        return self.inner.etag(key)

    def put(self, key: str, data: bytes, *, if_match: str | None = None, if_none_match: bool = False) -> str:
        if key == KEY and self.hang.is_set():
            self.hung.set()
            self.release.wait(30)
        return self.inner.put(key, data, if_match=if_match, if_none_match=if_none_match)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def list(self, prefix: str = "") -> list[str]:
        return self.inner.list(prefix)


def test_a_heartbeat_commit_that_never_answers_does_not_wedge_the_control_loop() -> None:
    store = HangingStore(MemoryStore())
    broker = Broker(store, url="http://a", heartbeat_seconds=0.05, takeover_seconds=0.5).start()
    try:
        wait_for(lambda: broker.role == "leader")
        store.hang.set()
        assert store.hung.wait(10)
        # The heartbeat waits at most takeover_seconds, then the node stops
        # leading instead of waiting forever.
        wait_for(lambda: broker.role == "standby")
        assert "did not answer" in (broker.last_error or "")
        store.hang.clear()
        store.release.set()
        # The control loop is alive: it takes over again and heartbeats.
        wait_for(lambda: broker.role == "leader")
        seq = document(store)["seq"]
        wait_for(lambda: document(store)["seq"] >= seq + 3)
    finally:
        store.release.set()
        broker.stop(timeout=10)


def test_a_bad_operation_does_not_stop_the_brokers_heartbeat() -> None:
    store = MemoryStore()
    broker = Broker(store, url="http://a", heartbeat_seconds=0.05, takeover_seconds=0.5).start()
    try:
        wait_for(lambda: broker.role == "leader")
        broker.execute(push_op("q", ["a"], policy=POLICY))
        bad = smuggled(claim_op("w", ["q"], policy=POLICY), worker=SURROGATE)
        with pytest.raises(OperationFailed):
            broker.execute(bad)
        seq = document(store)["seq"]
        wait_for(lambda: document(store)["seq"] >= seq + 3)  # heartbeats go on
        assert broker.role == "leader"
        [job] = broker.execute(claim_op("w", ["q"], policy=POLICY))
        assert job.payload == "a"
    finally:
        broker.stop(timeout=10)


class GatedStore(HangingStore):
    """Holds each write of the document until the test releases the gate."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.gate = threading.Semaphore(0)
        self.entered = threading.Semaphore(0)

    def put(self, key: str, data: bytes, *, if_match: str | None = None, if_none_match: bool = False) -> str:
        if key == KEY:
            self.entered.release()
            assert self.gate.acquire(timeout=30), "the test never opened the gate"
        return self.inner.put(key, data, if_match=if_match, if_none_match=if_none_match)


def test_isolating_while_a_write_is_in_flight_never_acknowledges_what_did_not_land() -> None:
    memory = MemoryStore()
    with GroupCommitter(memory) as creator:
        creator.push("q", ["a"])
    store = GatedStore(memory)
    committer = GroupCommitter(store).start()
    try:
        first = threading.Thread(target=committer.push, args=("q", ["x"]))
        first.start()
        assert store.entered.acquire(timeout=10)  # the write of "x" is in flight
        # A bad operation now makes the committer re-read the document, which
        # does not have "x" yet; "y" is then applied on that older version.
        bad = smuggled(claim_op("w", ["q"], policy=POLICY), worker=SURROGATE)
        with pytest.raises(OperationFailed):
            committer.execute(bad)
        late = push_op("q", ["y"], policy=POLICY)
        answers: list[Any] = []
        second = threading.Thread(target=lambda: answers.append(committer.execute(late)))
        second.start()
        wait_for(lambda: committer.state is not None and late.jobs[0].id in committer.state.jobs)
        store.gate.release(10)
        first.join(10)
        second.join(10)
        assert answers == [[late.jobs[0].id]]
        # Acknowledged means written (I1): "y" must be in the document.
        assert [j["payload"] for j in document(memory)["jobs"]] == ["a", "x", "y"]
    finally:
        store.gate.release(10)
        committer.stop(timeout=10)


def test_a_committer_whose_io_thread_was_stopped_by_the_exiting_interpreter_fails_its_callers_quietly(
        caplog: pytest.LogCaptureFixture) -> None:
    """At interpreter exit, concurrent.futures stops its executors' threads
    (its own exit hook) before daemon threads such as the writer stop: an
    embedded broker's write then found its I/O executor shut down and logged
    "group commit step _start_write failed unexpectedly" with a traceback
    (seen on `make run` stopped with SIGTERM). The batch now fails as a stopped
    committer's does: CommitterStopped, nothing written, no error logged."""
    store = MemoryStore()
    with GroupCommitter(store) as committer:
        committer.push("q", ["before"])
        before = store.get(KEY)
        assert committer._io is not None
        committer._io.shutdown(wait=True)  # what the interpreter's exit hook leaves behind
        with caplog.at_level("ERROR", logger="engine"), pytest.raises(CommitterStopped, match="exiting"):
            committer.push("q", ["after"])
        assert store.get(KEY) == before
        assert not [r for r in caplog.records if r.levelname == "ERROR"]
