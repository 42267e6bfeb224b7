"""Format 2 under failure: the leader stops or dies in the middle of the
lane keeper's work, and races between its planned work and later commits.

* Races (the keeper's steps run by hand on a :class:`QueueState`, as its
  thread would run them, with commits landing in between).
* Failover (real brokers on a scripted store): the leader dies after writing
  a segment but before its Seal commit, during a refill, and after a commit
  that dropped a segment but before deleting it. A standby takes over and
  every job comes back exactly once, in FIFO order; an orphan is collected
  by the next leader, never while referenced.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from engine import Broker, Policy, QueueState
from engine.errors import StoreUnavailable
from engine.lanes import LaneKeeper, _RefillTask, _Shares
from engine.ops import Operation, claim_op, complete_op, purge_op, push_op
from engine.segments import segment_prefix
from engine.stores import ObjectStore, open_store
from engine.stores.base import Blob
from engine.transitions import apply_batch
from tests.helpers import wait_for

KEY = "queue.json"
START = datetime(2026, 1, 1, tzinfo=UTC)


# -- races of the lane keeper, step by step ----------------------------------------------------

class Lanes:
    """A QueueState, a memory store and a LaneKeeper whose steps the test runs
    itself; ``execute`` applies an operation as a landed commit would."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.state = QueueState(policy=policy)
        self.store = open_store("memory://")
        self.now = START
        self.keeper = LaneKeeper(self.store, key=KEY, policy=policy, execute=self.execute, epoch=3,
                                 clock=lambda: self.now, grace_seconds=0, collect_seconds=3600, retry_seconds=60)
        self.execute(None)

    def execute(self, op: Operation | None) -> Any:
        result = apply_batch(self.state, [op] if op is not None else [], self.now)
        self.state.encoded(seq=self.state.seq + 1, writer="w")
        for key in self.state.take_dropped_segments():  # landed: delete at once (no grace here)
            self.store.delete(key)
        self.keeper.committed(self.state)
        self.keeper._tasks.clear()  # the test runs the keeper's steps itself
        self.keeper._busy.clear()
        if result and isinstance(result[0], Exception):
            raise result[0]
        return result[0] if result else None

    def shares(self) -> _Shares:
        return _Shares.of(self.policy, len(self.state.lanes))

    def push(self, queue: str, ids: list[str], delay: float = 0) -> None:
        self.execute(push_op(queue, [{}] * len(ids), ids=ids, policy=self.policy, delay_seconds=delay))

    def seal(self, queue: str) -> None:
        task = self.keeper._seal_task(self.state, queue, self.shares())
        assert task is not None
        sealed, abandoned = self.keeper.sealed, self.keeper.abandoned
        self.keeper._seal(task)
        assert (self.keeper.sealed, self.keeper.abandoned) == (sealed + 1, abandoned), "the seal was refused"

    def claim_all(self, queues: list[str]) -> list[str]:
        claimed = self.execute(claim_op("w", queues, policy=self.policy, max_jobs=100))
        return [c.id for c in claimed]


def test_a_refill_planned_before_its_segment_was_purged_reports_no_problem() -> None:
    # Found by tests/fuzz/test_fuzz_segments.py: the refill read the object
    # the purge had dropped (and the grace had deleted), and the keeper
    # reported the queue as stopped at a missing segment, for good.
    lanes = Lanes(Policy(segment_jobs=3, head_jobs=2, refill_below=2))
    lanes.push("q", [f"j{i}" for i in range(5)])
    lanes.seal("q")
    ref = lanes.state.lanes["q"][0]
    stale = _RefillTask("q", ref, want=2)  # planned; the keeper's thread is busy elsewhere

    lanes.execute(purge_op(queue="q", status="pending"))
    assert lanes.store.get(ref.key) is None  # dropped by a landed commit, then deleted
    lanes.keeper._refill(stale)

    assert lanes.keeper.problems == {}
    assert "q" not in lanes.keeper._retry_at  # nor are the queue's next refills delayed
    lanes.push("q", [f"k{i}" for i in range(5)])
    lanes.seal("q")
    assert lanes.state.lanes["q"][0].key != ref.key


def test_a_delayed_job_that_came_due_behind_a_segment_does_not_stop_sealing() -> None:
    # Found by tests/fuzz/test_fuzz_segments.py: once a claim or the keeper's
    # own refill planning had indexed a due delayed job as ready, every seal
    # planned for its queue named it, and the Seal was refused (the job still
    # has a not_before): a segment object written and deleted per commit, and
    # a tail that grows without bound, until the job is claimed.
    lanes = Lanes(Policy(segment_jobs=3, head_jobs=2, refill_below=2))
    lanes.push("q", ["a0", "a1", "a2", "a3", "a4"])
    lanes.seal("q")
    lanes.push("q", ["late"], delay=1)
    lanes.push("q", ["b0", "b1", "b2"])
    lanes.now += timedelta(seconds=2)
    lanes.execute(None)  # a heartbeat: the keeper plans (and its refill check indexes 'late' as due)

    lanes.seal("q")
    assert lanes.keeper._seal_task(lanes.state, "q", lanes.shares()) is None
    order = []
    while len(order) < 9:
        got = lanes.claim_all(["q"])
        order += got
        if not got:
            ref = lanes.state.lanes["q"][0]
            lanes.keeper._refill(_RefillTask("q", ref, want=3))
    # 'late' was pushed before b0..b2: it keeps its place (I7).
    assert order == ["a0", "a1", "a2", "a3", "a4", "late", "b0", "b1", "b2"]


def test_pushes_that_keep_pace_with_claims_do_not_hide_a_front_that_ran_dry() -> None:
    # The keeper's memo took "pending_here went down by n" for "the front
    # lost at most n", but pushes to the tail put as many back: with pushes
    # keeping pace with claims it never counted the front again, planned no
    # refill, and the queue stalled for good behind its segment.
    lanes = Lanes(Policy(segment_jobs=3, head_jobs=2, refill_below=2))
    lanes.push("q", ["a0", "a1", "a2", "a3", "a4"])
    lanes.seal("q")  # front a0 a1, segment a2 a3 a4
    lanes.push("q", ["b0", "b1"])  # the tail
    assert lanes.claim_all(["q"]) == ["a0", "a1"]
    # Each landed version is planned from; the front is empty now, so the
    # keeper must read the segment back.
    task = lanes.keeper._refill_task(lanes.state, "q", 0.0, lanes.shares())
    assert task is not None, "the front ran dry and no refill was planned"
