"""A seal holds a keeper thread only while its segment is written.

The keeper queues a Seal with ``GroupCommitter.submit`` and its outcome comes
back through a callback on the writer thread (``LaneKeeper._seal_done``). A
seal that waited for its commit on the thread that wrote its segment kept
that thread for a write and a half: ten queues sealing every write kept all
16 threads waiting, each planned seal waited ~150 ms for a thread, its Seal
missed the next write, and ten queues' push commits carried that many more
jobs (docs/benchmark.md).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from engine import Policy
from engine.committer import GroupCommitter
from engine.errors import CommitterNotRunning, JobNotFound
from engine.lanes import LaneKeeper
from engine.lanetasks import SealTask, Shares
from engine.model import utc_now
from engine.ops import Tick, complete_op, push_op
from engine.segments import segment_prefix
from engine.stores.memory import MemoryStore
from engine.stores.wrappers import LatencyStore
from tests.helpers import wait_for

KEY = "queue.json"
POLICY = Policy(segment_jobs=10, head_jobs=20, refill_below=10)


def keeper_for(store: MemoryStore, committer: GroupCommitter, *, threads: int = 1) -> LaneKeeper:
    """A keeper writing its segments to ``store`` at once, its Seals through ``committer``."""
    return LaneKeeper(store, key=KEY, policy=POLICY, execute=committer.execute, submit=committer.submit,
                      epoch=1, clock=utc_now, grace_seconds=0, collect_seconds=3600, retry_seconds=0.1,
                      threads=threads)


def test_one_keeper_thread_writes_the_next_segment_while_the_first_seal_is_committed() -> None:
    """With one thread and two queues to seal, the second queue's segment is
    written while the first queue's Seal is still being committed (each
    document write takes 0.5 s). A thread that waited for the commit wrote
    it only after the first Seal landed."""
    memory = MemoryStore()
    committer = GroupCommitter(LatencyStore(memory, latency=0.5), policy=POLICY).start()
    keeper = keeper_for(memory, committer).start()
    try:
        committer.execute_many([push_op(q, list(range(30)), policy=POLICY) for q in ("a", "b")])
        assert committer.state is not None
        keeper.committed(committer.state)  # plans both queues' seals
        wait_for(lambda: len(memory.list(segment_prefix(KEY))) == 2, what="both segments written", timeout=5)
        assert keeper.sealed == 0  # the first Seal has not landed: its commit takes 0.5 s
        wait_for(lambda: keeper.sealed == 2, what="both seals landed", timeout=5)
        assert committer.state is not None and set(committer.state.lanes) == {"a", "b"}
    finally:
        keeper.stop(5)
        committer.stop()


def test_a_seal_refused_at_its_commit_frees_its_queue_and_its_object_is_deleted() -> None:
    """The outcome comes back to the callback: a refused Seal (the queue
    moved on) counts as abandoned, its object goes, and the queue is
    planned again."""
    memory = MemoryStore()
    committer = GroupCommitter(memory, policy=POLICY).start()
    keeper = keeper_for(memory, committer, threads=1).start()
    try:
        committer.push("q", list(range(30)))
        assert committer.state is not None
        shares = Shares.of(POLICY, 1)
        seal = keeper._seal_task(committer.state, "q", shares)
        assert seal is not None
        stale = SealTask(queue=seal.queue, jobs=seal.jobs, parts=seal.parts, after="not/the/last/segment",
                          oldest=seal.oldest)
        with keeper._cond:
            keeper._busy["q"] = stale
        assert keeper._seal(stale)  # handed to the committer
        wait_for(lambda: keeper.abandoned == 1 and not memory.list(segment_prefix(KEY)),
                 what="the refused seal's object deleted", timeout=5)
        assert "q" not in keeper._busy and keeper.sealed == 0
        assert "q" not in committer.state.lanes
    finally:
        keeper.stop(5)
        committer.stop()


def test_submit_answers_each_operation_once_through_its_callback_and_a_failing_callback_stops_no_other() -> None:
    memory = MemoryStore()
    committer = GroupCommitter(memory, policy=POLICY).start()
    outcomes: list[Any] = []
    landed = threading.Event()

    def broken(outcome: Any) -> None:
        raise RuntimeError("a bug in a callback")

    committer.submit(Tick(), broken)
    committer.submit(push_op("q", [1], policy=POLICY), lambda outcome: (outcomes.append(outcome), landed.set()))
    committer.submit(complete_op("no-such-job", "lease"), outcomes.append)
    assert committer.push("q", [3])  # the thread caller in the same write is answered too
    assert landed.wait(5)
    committer.stop()
    assert len(outcomes) == 2
    assert isinstance(outcomes[0], list) and len(outcomes[0]) == 1  # the push's ids
    assert isinstance(outcomes[1], JobNotFound)  # refused alone, answered through its callback
    with pytest.raises(CommitterNotRunning):
        committer.submit(Tick(), outcomes.append)
    assert len(outcomes) == 2
