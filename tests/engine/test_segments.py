"""Format 2: pending jobs beyond a queue's front move to segment objects and
back (sealing, refilling, deleting, collecting), through a real broker."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import orjson
import pytest

from engine import Broker, DocumentError, Policy
from engine.ops import Purge, Tick, claim_op, complete_op, push_op
from engine.parsing import parse_document
from engine.segments import keeper_of_key, segment_key, segment_prefix
from engine.stores import ObjectStore, open_store
from engine.stores.wrappers import FaultyStore
from tests.helpers import wait_for

SMALL = Policy(segment_jobs=10, head_jobs=20, refill_below=10)
# Seals of exactly 10 jobs (a seal takes the whole tail up to merge_jobs): one
# push makes several segments, for the tests that need more than one.
TENS = Policy(segment_jobs=10, head_jobs=20, refill_below=10, merge_jobs=10)


def document(store: ObjectStore) -> dict[str, Any]:
    blob = store.get("queue.json")
    assert blob is not None
    return orjson.loads(blob.data)  # type: ignore[no-any-return]


def segments(store: ObjectStore) -> list[str]:
    return store.list(segment_prefix("queue.json"))


def leader(make_broker: Callable[..., Broker], store: ObjectStore, policy: Policy = SMALL) -> Broker:
    broker = make_broker(store, "http://a", policy=policy)
    wait_for(lambda: broker.role == "leader", what="leading")
    return broker


def push(broker: Broker, queue: str, n: int, start: int = 0) -> list[str]:
    ids = [f"{queue}-{i:05d}" for i in range(start, start + n)]
    broker.execute(push_op(queue, [{"i": i} for i in range(start, start + n)], ids=ids, policy=broker.policy))
    return ids


def drain(broker: Broker, queue: str, *, expect: int, batch: int = 7) -> list[str]:
    """Claim and complete until ``expect`` jobs came back, in claim order."""
    seen: list[str] = []

    def step() -> bool:
        for job in broker.execute(claim_op("w", [queue], policy=broker.policy, max_jobs=batch)):
            seen.append(job.id)
            broker.execute(complete_op(job.id, job.lease))
        return len(seen) >= expect

    wait_for(step, timeout=30, what=f"{expect} jobs drained")
    return seen


def test_a_backlog_is_sealed_into_segments_and_comes_back_in_fifo_order(make_broker: Callable[..., Broker]) -> None:
    store = open_store("memory://")
    broker = leader(make_broker, store)
    ids = push(broker, "q", 200)

    # The leader seals everything past the front, ten jobs a segment.
    wait_for(lambda: document(store)["format"] == 2 and len(document(store)["jobs"]) <= 20 + 10, what="sealed")
    doc = document(store)
    refs = doc["lanes"]["q"]["segments"]
    assert sum(ref["total"] - ref["consumed"] for ref in refs) + len(doc["jobs"]) == 200
    assert sorted(segments(store)) == sorted(ref["key"] for ref in refs)

    assert drain(broker, "q", expect=200) == ids  # I7, across the segments
    wait_for(lambda: not segments(store), what="used segments deleted")
    doc = document(store)
    assert doc["lanes"] == {} and doc["jobs"] == []
    assert doc["queues"]["q"]["completed"] == 200


def test_adjacent_small_segments_are_merged_and_still_drain_in_order(make_broker: Callable[..., Broker]) -> None:
    store = open_store("memory://")
    broker = leader(make_broker, store, Policy(segment_jobs=10, head_jobs=20, refill_below=10, merge_jobs=50))
    ids = push(broker, "q", 600)

    def merged() -> bool:
        refs = document(store).get("lanes", {}).get("q", {}).get("segments", [])
        return sum(ref["total"] for ref in refs) >= 500 and len(refs) <= 14

    wait_for(merged, timeout=30, what="merged segments")
    refs = document(store)["lanes"]["q"]["segments"]
    assert any(ref["total"] == 50 for ref in refs)
    wait_for(lambda: sorted(segments(store)) == sorted(r["key"] for r in document(store)["lanes"]["q"]["segments"]),
             what="merged-away segments deleted")
    assert drain(broker, "q", expect=600) == ids
    wait_for(lambda: not segments(store), what="all deleted")


def test_pushes_keep_landing_in_the_tail_while_the_front_drains(make_broker: Callable[..., Broker]) -> None:
    store = open_store("memory://")
    broker = leader(make_broker, store)
    first = push(broker, "q", 100)
    wait_for(lambda: "q" in document(store).get("lanes", {}), what="a segment")
    second = push(broker, "q", 100, start=100)
    assert drain(broker, "q", expect=200) == first + second


def test_a_retried_push_of_a_sealed_job_adds_nothing(make_broker: Callable[..., Broker]) -> None:
    store = open_store("memory://")
    broker = leader(make_broker, store)
    ids = push(broker, "q", 100)
    wait_for(lambda: len(document(store)["jobs"]) < 100, what="sealed")
    sealed = set(ids) - {job["id"] for job in document(store)["jobs"]}
    assert sealed
    again = sorted(sealed)[:5]
    assert broker.execute(push_op("q", [{}] * 5, ids=again, policy=broker.policy)) == again
    assert document(store)["queues"]["q"]["pushed"] == 100
    assert drain(broker, "q", expect=100) == ids


def test_purging_a_queue_drops_its_segments_in_one_commit(make_broker: Callable[..., Broker]) -> None:
    store = open_store("memory://")
    broker = leader(make_broker, store)
    push(broker, "q", 300)
    wait_for(lambda: len(document(store)["jobs"]) <= 30, what="sealed")
    seq = document(store)["seq"]
    broker.execute(Purge(queue="q", status="pending"))
    doc = document(store)
    assert doc["seq"] == seq + 1 or doc["lanes"] == {}
    assert doc["lanes"] == {} and doc["jobs"] == []
    assert doc["queues"]["q"]["purged"] == 300
    wait_for(lambda: not segments(store), what="purged segments deleted")


def test_a_missing_segment_stops_that_queue_and_is_reported(make_broker: Callable[..., Broker]) -> None:
    store = open_store("memory://")
    broker = leader(make_broker, store, TENS)
    ids = push(broker, "q", 100)
    other = push(broker, "other", 5)
    wait_for(lambda: len(document(store)["lanes"].get("q", {}).get("segments", [])) >= 3, what="sealed")
    first = document(store)["lanes"]["q"]["segments"][0]["key"]
    blob = store.get(first)
    assert blob is not None
    store.delete(first)

    drained = drain(broker, "q", expect=20)  # the front is still in the document
    assert drained == ids[:20]
    wait_for(lambda: "q" in broker.segment_problems, what="the problem reported")
    assert first in broker.segment_problems["q"] and "missing" in broker.segment_problems["q"]
    assert broker.execute(claim_op("w", ["q"], policy=broker.policy)) == []
    assert drain(broker, "other", expect=5) == other  # other queues go on
    assert first in [ref["key"] for ref in document(store)["lanes"]["q"]["segments"]]  # never dropped

    store.put(first, blob.data)  # restored: the queue resumes by itself
    assert drain(broker, "q", expect=80) == ids[20:]
    assert broker.segment_problems == {}


def test_an_altered_segment_is_refused_not_decoded(make_broker: Callable[..., Broker]) -> None:
    store = open_store("memory://")
    broker = leader(make_broker, store, TENS)
    push(broker, "q", 100)
    wait_for(lambda: len(document(store)["lanes"].get("q", {}).get("segments", [])) >= 2, what="sealed")
    first = document(store)["lanes"]["q"]["segments"][0]["key"]
    blob = store.get(first)
    assert blob is not None
    store.put(first, blob.data.replace(b'"i":2', b'"i":9'))
    drain(broker, "q", expect=20)
    wait_for(lambda: "q" in broker.segment_problems, what="the problem reported")
    assert "SHA-256" in broker.segment_problems["q"]


def test_format_1_is_upgraded_at_the_first_commit_and_keeps_its_order(make_broker: Callable[..., Broker]) -> None:
    store = open_store("memory://")
    old = leader(make_broker, store, Policy())
    ids = push(old, "q", 120)
    assert document(store)["format"] == 1
    old.stop(timeout=10)

    new = leader(make_broker, store)
    wait_for(lambda: document(store)["format"] == 2, what="upgraded")
    assert drain(new, "q", expect=120) == ids


def test_a_format_1_node_refuses_format_2_without_writing(
    make_broker: Callable[..., Broker], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store("memory://")
    new = leader(make_broker, store)
    push(new, "q", 5)
    new.stop(timeout=10)
    blob = store.get("queue.json")
    assert blob is not None

    # A node of the last release reads format 1 only: the version check is
    # the first thing its parser does, as here.
    monkeypatch.setattr("engine.parsing.READABLE_FORMATS", (1,))
    with pytest.raises(DocumentError, match="unsupported format version 2"):
        parse_document("queue.json", blob.data, policy=Policy())
    old = make_broker(store, "http://old", policy=Policy())
    wait_for(lambda: old.document_problem is not None, what="the old node reports it")
    assert old.role == "standby"
    after = store.get("queue.json")
    assert after is not None and after.data == blob.data  # I6: nothing written


def test_a_new_leader_collects_older_orphans_and_nothing_else(make_broker: Callable[..., Broker]) -> None:
    store = open_store("memory://")
    first = leader(make_broker, store, TENS)
    ids = push(first, "q", 100)
    wait_for(lambda: len(document(store).get("lanes", {}).get("q", {}).get("segments", [])) >= 3, what="sealed")
    epoch = document(store)["broker"]["epoch"]
    first.stop(timeout=10)
    # What a leader that lost its seal commit, or died before deleting, leaves behind:
    orphan = segment_key("queue.json", queue="q", epoch=epoch, first_pos=10**9)
    store.put(orphan, b"{}")
    foreign = segment_prefix("queue.json") + "q/notes.txt"  # not a key the engine makes
    store.put(foreign, b"keep me")

    second = leader(make_broker, store, TENS)
    assert document(store)["broker"]["epoch"] == epoch + 1
    wait_for(lambda: orphan not in segments(store), timeout=20, what="the orphan collected")
    referenced = [ref["key"] for ref in document(store)["lanes"]["q"]["segments"]]
    assert set(referenced) <= set(segments(store))  # still referenced: never collected
    assert foreign in segments(store)
    assert drain(second, "q", expect=100) == ids


class Recording(FaultyStore):
    """Passes everything through and keeps the last document written."""

    last = b""

    def put_parts(
        self, key: str, parts: Sequence[bytes], *, if_match: str | None = None, if_none_match: bool = False
    ) -> str:
        etag = super().put_parts(key, parts, if_match=if_match, if_none_match=if_none_match)
        if key == "queue.json":
            self.last = b"".join(parts)
        return etag


def test_a_leader_that_leads_again_in_its_epoch_collects_what_its_earlier_tenure_left(
    make_broker: Callable[..., Broker],
) -> None:
    """A leader whose document vanished steps down (I10); restored, the
    document still names it, so it leads again in the same epoch, with a new
    lane keeper. What the earlier keeper left unreferenced (a deletion it
    still owed, a segment whose swap went with it) is collected; the new
    keeper's own objects, and own-epoch objects without a keeper tag, are
    not (docs/format.md, "Orphans")."""
    store = Recording(open_store("memory://"))
    first = leader(make_broker, store, TENS)
    ids = push(first, "q", 100)
    wait_for(lambda: len(document(store).get("lanes", {}).get("q", {}).get("segments", [])) >= 3, what="sealed")
    epoch = document(store)["broker"]["epoch"]
    earlier = keeper_of_key(document(store)["lanes"]["q"]["segments"][0]["key"])
    assert earlier is not None

    store.inner.delete("queue.json")  # an operator's mistake; the node stops writing (I10)
    wait_for(lambda: first.role != "leader", what="the leader stepped down")
    left = segment_key("queue.json", queue="q", epoch=epoch, first_pos=10**9, keeper=earlier)
    untagged = segment_key("queue.json", queue="q", epoch=epoch, first_pos=10**9 + 1)
    store.put(left, b"{}")
    store.put(untagged, b"{}")
    store.inner.put("queue.json", store.last)  # restored, as it was last written
    wait_for(lambda: first.role == "leader", what="leading again")
    assert document(store)["broker"]["epoch"] == epoch  # the same epoch: no takeover write

    wait_for(lambda: left not in segments(store), timeout=20, what="the earlier tenure's object collected")
    referenced = [ref["key"] for ref in document(store)["lanes"]["q"]["segments"]]
    assert set(referenced) <= set(segments(store))
    assert untagged in segments(store)
    assert drain(first, "q", expect=100) == ids


def test_sealing_leaves_no_index_entries_behind() -> None:
    """A backlog sealed over time must not keep an index entry per sealed job
    in the leader's memory (millions of them at 5M pending)."""
    from datetime import UTC, datetime

    from engine import empty_state
    from engine.ops import Seal
    from engine.segments import SegmentRef
    from engine.transitions import apply, apply_batch

    now = datetime(2026, 12, 1, tzinfo=UTC)
    state = empty_state(policy=SMALL)
    apply_batch(state, [push_op("q", [{}] * 5000, policy=SMALL)], now)
    for n in range(4):
        ready = state.ready_in_order("q")
        chosen = ready[20:1020]
        ref = SegmentRef(key=f"k{n}", total=1000, consumed=0, front=chosen[0][0], last_pos=chosen[-1][0], size=1,
                         sha256="x", oldest_enqueued_at=now, epoch=1, sealed_at=now)
        after = state.lanes["q"][-1].key if "q" in state.lanes else None
        if after is not None:
            chosen = [entry for entry in ready if entry[0] > state.lanes["q"][-1].last_pos][:1000]
            ref = ref._replace(front=chosen[0][0], last_pos=chosen[-1][0])
        apply(state, Seal(queue="q", ref=ref, jobs=tuple((i, p) for p, i in chosen), after=after), now)
    assert state.pending_here["q"] == 1000 and state.pending("q") == 5000
    assert len(state._ready["q"]) == 1000


def test_the_upgrade_rides_a_real_commit_never_a_refused_operation() -> None:
    from engine import GroupCommitter, JobNotFound
    from engine.ops import Tick

    store = open_store("memory://")
    with GroupCommitter(store, policy=Policy()) as old:
        old.execute(push_op("q", [{}], policy=old.policy))
    before = store.get("queue.json")
    assert before is not None and b'"format":1' in before.data
    with GroupCommitter(store, policy=SMALL) as new:
        with pytest.raises(JobNotFound):
            new.execute(complete_op("nope", "token"))
        after = store.get("queue.json")
        assert after is not None and after.data == before.data
        new.execute(Tick())
    assert document(store)["format"] == 2


def test_queues_filling_up_together_share_the_budget_before_any_has_segments(
    make_broker: Callable[..., Broker],
) -> None:
    store = open_store("memory://")
    broker = leader(make_broker, store, Policy(segment_jobs=100, head_jobs=100, refill_below=50))
    queues = [f"q{i}" for i in range(10)]
    committer = broker.committer
    assert committer is not None
    # One commit: each queue below head + segment (200), together three times the budget.
    committer.execute_many([push_op(q, [{"i": i} for i in range(60)], ids=[f"{q}-{i:05d}" for i in range(60)],
                                    policy=broker.policy) for q in queues])
    # Each queue's share is a tenth: 10 in its head, sealed 10 at a time. Wait
    # for every queue, not the total: the keeper seals them in any order, and
    # nine queues at their shares with one not yet sealed fit a total of 200.
    def sealed_down() -> bool:
        held = Counter(job["queue"] for job in document(store)["jobs"])
        return all(held[queue] <= 10 + 10 for queue in queues)

    wait_for(sealed_down, what="every queue sealed down to its share")
    assert {key.split("/")[-2] for key in segments(store)} == set(queues)
    for queue in queues:
        assert drain(broker, queue, expect=60) == [f"{queue}-{i:05d}" for i in range(60)]


def test_the_front_is_refilled_even_when_pushes_to_the_tail_outnumber_the_claims(
    make_broker: Callable[..., Broker],
) -> None:
    # Pushes raise the queue's pending count without adding to its front: a
    # front count that were only lowered by what left pending_here would see
    # a full front while claims found it empty, and never refill.
    store = open_store("memory://")
    broker = leader(make_broker, store, Policy(segment_jobs=50, head_jobs=20, refill_below=5))
    ids = push(broker, "q", 200)
    wait_for(lambda: len(document(store)["jobs"]) < 70, what="sealed")
    broker.execute(Tick())  # the keeper plans (and counts the front) once more before the push
    ids += push(broker, "q", 15, start=200)  # stays in the tail: less than a segment
    assert drain(broker, "q", expect=215) == ids


def test_with_many_queues_a_long_tail_is_sealed_in_whole_shares_up_to_merge_jobs(
    make_broker: Callable[..., Broker],
) -> None:
    store = open_store("memory://")
    broker = leader(make_broker, store, Policy(segment_jobs=100, head_jobs=100, refill_below=50, merge_jobs=100))
    committer = broker.committer
    assert committer is not None
    queues = [f"q{i}" for i in range(10)]
    committer.execute_many([push_op(q, [{"i": i} for i in range(160)], ids=[f"{q}-{i:05d}" for i in range(160)],
                                    policy=broker.policy) for q in queues])
    # Shares of a tenth: 10 in the head; a tail of 150 goes as 100 (merge_jobs), then 50.
    wait_for(lambda: len(document(store)["jobs"]) <= 10 * 10, what="sealed down to the heads")
    lanes = document(store)["lanes"]
    assert {q: [ref["total"] for ref in lanes[q]["segments"]] for q in queues} == {q: [100, 50] for q in queues}
    for queue in queues:
        assert drain(broker, queue, expect=160) == [f"{queue}-{i:05d}" for i in range(160)]


def test_a_backlog_pushed_at_once_is_sealed_commit_after_commit_not_once_per_heartbeat() -> None:
    """Only the keeper's own commits happen here (the heartbeat is 30 s): each
    one must plan the next seal, or 30 segments would take 15 minutes."""
    store = open_store("memory://")
    broker = Broker(store, url="http://a", policy=SMALL, heartbeat_seconds=30, takeover_seconds=120).start()
    try:
        wait_for(lambda: broker.role == "leader", what="leading")
        push(broker, "q", 320)
        wait_for(lambda: len(document(store)["jobs"]) <= 30, timeout=20, what="sealed without heartbeats")
        assert sum(r["total"] for r in document(store)["lanes"]["q"]["segments"]) >= 290
    finally:
        broker.stop(timeout=10)


def test_a_long_tail_is_sealed_at_once_up_to_merge_jobs_and_drains_in_order(
    make_broker: Callable[..., Broker],
) -> None:
    store = open_store("memory://")
    broker = leader(make_broker, store, Policy(segment_jobs=10, head_jobs=20, refill_below=10, merge_jobs=40))
    ids = push(broker, "q", 120)  # a tail of 100: 40 and 40 (merge_jobs), then 20
    wait_for(lambda: len(document(store)["jobs"]) == 20, what="sealed down to the head")
    assert [ref["total"] for ref in document(store)["lanes"]["q"]["segments"]] == [40, 40, 20]
    assert drain(broker, "q", expect=120) == ids


def test_an_idle_keeper_sleeps_instead_of_polling() -> None:
    """I11: a leader's keeper with nothing to do (a format-1 document, so no
    collector pass either) must not wake its threads on a short timer."""
    import threading
    import time

    from engine.lanes import LaneKeeper

    waits: list[float | None] = []

    class Counting(threading.Condition):
        def wait(self, timeout: float | None = None) -> bool:
            waits.append(timeout)
            return super().wait(timeout)

    keeper = LaneKeeper(open_store("memory://"), key="queue.json", policy=SMALL, execute=lambda op: None, epoch=1,
                        clock=lambda: None, grace_seconds=0.1, collect_seconds=1.0, retry_seconds=0.1)  # type: ignore[arg-type,return-value]
    keeper._cond = Counting()
    keeper.start()
    try:
        time.sleep(0.5)
    finally:
        keeper.stop(timeout=5)
    assert len(waits) <= 2 * keeper.threads, waits[:20]  # one wait per thread, not one every 10 ms
    assert all(timeout is None for timeout in waits)


def test_a_commit_that_plans_nothing_wakes_no_keeper_thread() -> None:
    """The keeper plans on every commit, twice (as its write starts and once
    it lands): a plan that adds no task must not wake the keeper's threads,
    which would only find nothing to take (a thundering herd on the GIL of
    the node, every commit)."""
    import threading
    import time
    from datetime import UTC, datetime

    from engine import QueueState
    from engine.lanes import LaneKeeper
    from engine.transitions import apply_batch

    waits: list[float | None] = []

    class Counting(threading.Condition):
        def wait(self, timeout: float | None = None) -> bool:
            waits.append(timeout)
            return super().wait(timeout)

    now = datetime(2026, 1, 1, tzinfo=UTC)
    state = QueueState(policy=SMALL)
    apply_batch(state, [push_op("q", [{"i": i} for i in range(5)], policy=SMALL)], now)  # within the front: no seal
    assert state.segmented
    keeper = LaneKeeper(open_store("memory://"), key="queue.json", policy=SMALL, execute=lambda op: None, epoch=1,
                        clock=lambda: now, grace_seconds=0.1, collect_seconds=3600, retry_seconds=0.1)
    keeper._cond = keeper.reaper._cond = Counting()  # the keeper and its reaper share one condition
    keeper.start()
    try:
        wait_for(lambda: len(waits) >= keeper.threads, 5)
        keeper.committed(state)  # the first landed version: the collector's deadline, every thread told once
        wait_for(lambda: len(waits) >= 2 * keeper.threads, 5)
        before = len(waits)
        for _ in range(100):
            keeper.writing(state)
            keeper.committed(state)
        time.sleep(0.2)  # a woken thread waits again within this (none should wake)
        assert len(waits) == before
    finally:
        keeper.stop(timeout=5)


class _InOrderCommitter:
    """A fake committer for a LaneKeeper: applies operations one at a time in
    the order they were submitted, as the committer does, tells the keeper
    of each landed version, and can hold one operation in flight
    (``execute(op, hold=True)`` lands only once ``release`` is set). The
    first Seal the keeper submits waits until that held operation is in
    flight (``gate`` decides, see the tests), so that it lands one commit
    later."""

    def __init__(self, policy: Policy) -> None:
        import threading
        from datetime import UTC, datetime

        from engine import QueueState
        from engine.lanes import LaneKeeper
        from engine.transitions import apply_batch

        self.apply_batch = apply_batch
        self.policy = policy
        self.now = datetime(2026, 1, 1, tzinfo=UTC)
        self.store = open_store("memory://")
        self.state = QueueState(policy=policy)
        apply_batch(self.state, [], self.now)  # format 2 from the first commit
        self.state.encoded(seq=1, writer="w")
        self.turn = threading.Condition()
        self.next_ticket = self.served = 0
        self.seals: list[Any] = []
        self.in_flight, self.release, self.gate = threading.Event(), threading.Event(), threading.Event()
        self.on_first_seal: Callable[[], None] = lambda: None
        self.keeper = LaneKeeper(self.store, key="queue.json", policy=policy, execute=self.execute, epoch=1,
                                 clock=lambda: self.now, grace_seconds=0, collect_seconds=3600, retry_seconds=0.1)

    def execute(self, op: Any, *, hold: bool = False, queued: Callable[[], None] | None = None) -> Any:
        from engine.ops import Seal

        first_seal = isinstance(op, Seal) and not self.seals
        if first_seal:
            assert self.gate.wait(10)
        with self.turn:
            ticket, self.next_ticket = self.next_ticket, self.next_ticket + 1
            if isinstance(op, Seal):
                self.seals.append(op)
            self.turn.notify_all()
        if queued is not None:
            queued()
        if hold:
            self.in_flight.set()
            assert self.release.wait(10)
        elif first_seal:
            self.on_first_seal()
        with self.turn:
            self.turn.wait_for(lambda: self.served == ticket, timeout=10)
            try:
                result = self.apply_batch(self.state, [op], self.now)[0]
                self.state.encoded(seq=self.state.seq + 1, writer="w")
                self.keeper.committed(self.state)  # the landed version
            finally:
                self.served += 1
                self.turn.notify_all()
        if isinstance(result, Exception):
            raise result
        return result

    def push(self, start: int, n: int, *, hold: bool = False) -> None:
        self.execute(push_op("q", [{"i": i} for i in range(start, start + n)],
                             ids=[f"q-{i:05d}" for i in range(start, start + n)], policy=self.policy), hold=hold)

    def finish(self) -> None:
        self.release.set()
        self.gate.set()
        self.keeper.stop(timeout=5)


def test_the_next_seal_is_written_while_the_one_before_commits() -> None:
    """Pipelined seals: a seal submitted while a commit of pushes is in flight
    lands one commit later; the version that lands meanwhile (the pushes,
    not the seal) already gets the next seal planned behind it (``after``
    its key), and its segment written, so a burst's tail waits one commit,
    not a whole write + commit + plan cycle."""
    import threading
    import time

    fake = _InOrderCommitter(Policy(segment_jobs=10, head_jobs=20, refill_below=10, merge_jobs=100))
    fake.gate = fake.in_flight  # the first seal is submitted behind the pushes' commit
    written_before_first_landed: list[int] = []

    def first_seal_commits() -> None:  # its commit takes a while: long enough for the next segment's write
        deadline = time.monotonic() + 2
        while len(segments(fake.store)) < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        written_before_first_landed.append(len(segments(fake.store)))

    fake.on_first_seal = first_seal_commits
    pusher = threading.Thread(target=fake.push, args=(40, 20), kwargs={"hold": True})
    fake.keeper.start()
    try:
        fake.push(0, 40)  # a front of 20, and a tail of 20 for the first seal
        wait_for(lambda: len(segments(fake.store)) == 1, what="the first segment written")
        pusher.start()  # 20 more pushes: their commit is in flight when the first seal is submitted
        wait_for(lambda: len(fake.seals) == 1, what="the first seal submitted")
        fake.release.set()
        wait_for(lambda: len(fake.state.lanes.get("q", [])) == 2, what="both seals landed, in order")
        assert written_before_first_landed == [2], "the next segment was not written during the first seal's commit"
        seals = fake.seals
        assert seals[1].after == seals[0].ref.key and seals[1].jobs[0][1] == 40
        assert [ref.key for ref in fake.state.lanes["q"]] == [seals[0].ref.key, seals[1].ref.key]
        assert sorted(fake.state.pos.values()) == list(range(20))  # only the front is left in the document
    finally:
        fake.finish()
        pusher.join(10)


def test_no_seal_is_planned_behind_one_that_cannot_land() -> None:
    """A seal refused in flight (a purge took one of its jobs) dooms the one
    planned behind it; pushes that keep landing must not plan a third behind
    that one, and so on for as long as the burst lasts: the tail would never
    be sealed. At most the one behind is wasted, then the keeper seals again."""
    import threading

    from engine.ops import purge_op

    fake = _InOrderCommitter(Policy(segment_jobs=10, head_jobs=20, refill_below=10, merge_jobs=100))
    threads = [threading.Thread(target=fake.push, args=(40, 20), kwargs={"hold": True}),
               threading.Thread(target=lambda: fake.execute(purge_op(["q-00025"])))]
    fake.keeper.start()
    try:
        fake.push(0, 40)  # the first seal takes 20..39
        wait_for(lambda: len(segments(fake.store)) == 1, what="the first segment written")
        threads[0].start()  # in flight
        wait_for(fake.in_flight.is_set, what="the pushes in flight")
        threads[1].start()  # a purge of one of the first seal's jobs, submitted before it
        wait_for(lambda: fake.next_ticket == 3, what="the purge submitted")
        fake.gate.set()  # now the first seal: it will be refused
        wait_for(lambda: fake.next_ticket == 4, what="the first seal submitted")
        fake.release.set()
        for start in range(60, 260, 20):  # the burst goes on
            fake.push(start, 20)

        def sealed_again() -> bool:
            fake.execute(Tick())  # the keeper plans when a version lands
            return len(fake.state.pos) <= 20 + 10

        wait_for(sealed_again, what="the tail sealed again")
        assert fake.keeper.abandoned <= 2, f"{fake.keeper.abandoned} seals refused: a chain behind a refused one"
    finally:
        fake.finish()
        for thread in threads:
            thread.join(10)


def test_many_queues_draining_at_once_read_each_segment_once(make_broker: Callable[..., Broker]) -> None:
    """Ten queues drained round robin refill a few jobs at a time each: every
    queue's first segment must stay decoded between its refills (a cache of
    a few segments read and decoded a whole segment for each refill)."""
    from engine import MemoryStore

    class Counting(MemoryStore):
        def __init__(self) -> None:
            super().__init__()
            self.gets: dict[str, int] = {}

        def get(self, key: str):  # type: ignore[no-untyped-def]
            self.gets[key] = self.gets.get(key, 0) + 1
            return super().get(key)

    store = Counting()
    broker = leader(make_broker, store, Policy(segment_jobs=10, head_jobs=20, refill_below=10, merge_jobs=200))
    queues = [f"q{n}" for n in range(10)]
    for queue in queues:
        push(broker, queue, 220)
    wait_for(lambda: all(len(document(store)["lanes"].get(q, {}).get("segments", [])) >= 1 for q in queues)
             and len(document(store)["jobs"]) <= 10 * 20, what="sealed")
    seen: dict[str, list[str]] = {queue: [] for queue in queues}

    def round_robin() -> bool:
        for queue in queues:
            for job in broker.execute(claim_op("w", [queue], policy=broker.policy, max_jobs=1)):
                seen[queue].append(job.id)
                broker.execute(complete_op(job.id, job.lease))
        return all(len(ids) == 220 for ids in seen.values())

    wait_for(round_robin, timeout=60, what="every queue drained")
    assert all(ids == [f"{queue}-{i:05d}" for i in range(220)] for queue, ids in seen.items())  # I7
    segment_reads = {key: n for key, n in store.gets.items() if key.startswith(segment_prefix("queue.json"))}
    assert segment_reads and max(segment_reads.values()) == 1, sorted(segment_reads.values())


def test_a_merge_of_a_segment_used_up_meanwhile_gives_up_quietly(caplog: pytest.LogCaptureFixture) -> None:
    """Merges run beside refills: by the time a merge reads its segments, one
    may have become the queue's first, been used up and deleted. That merge
    is stale, not a problem with the store: no warning. A segment still
    referenced and missing is one."""
    from datetime import UTC, datetime

    from engine.lanes import LaneKeeper
    from engine.lanetasks import MergeTask
    from engine.segments import SegmentRef

    now = datetime(2026, 1, 1, tzinfo=UTC)
    refs = tuple(SegmentRef(key=segment_key("queue.json", queue="q", epoch=1, first_pos=pos), total=10, consumed=0,
                            front=pos, last_pos=pos + 9, size=100, sha256="0" * 64, oldest_enqueued_at=now, epoch=1,
                            sealed_at=now) for pos in (10, 20))
    keeper = LaneKeeper(open_store("memory://"), key="queue.json", policy=SMALL, execute=lambda op: None, epoch=1,
                        clock=lambda: now, grace_seconds=0, collect_seconds=3600, retry_seconds=0.1)
    keeper._referenced = frozenset({refs[1].key})  # the first one was dropped by a landed commit
    with caplog.at_level("WARNING", logger="engine.lanes"):
        keeper._merge(MergeTask("q", refs))
    assert not caplog.records and keeper.merged == 0
    keeper._referenced = frozenset(ref.key for ref in refs)  # still referenced, and missing: worth a warning
    with caplog.at_level("WARNING", logger="engine.lanes"):
        keeper._merge(MergeTask("q", refs))
    assert any("missing" in record.getMessage() for record in caplog.records)


def test_the_next_seal_is_planned_while_the_one_before_is_still_being_written() -> None:
    """Pipelining starts at planning, not at submission: a version that lands
    while a seal's segment is still being written plans the next seal behind
    it, which writes its own segment meanwhile and is submitted right after
    the first (its ``after`` is the first's key, known once written)."""
    import threading

    from engine import MemoryStore

    class SlowFirstWrite(MemoryStore):
        """The first segment write waits until a second one has landed."""

        def __init__(self) -> None:
            super().__init__()
            self.segment_puts = 0
            self.second = threading.Event()
            self.overtaken = False

        def put(self, key, data, *, if_match=None, if_none_match=False):  # type: ignore[no-untyped-def]
            if key.startswith(segment_prefix("queue.json")):
                self.segment_puts += 1
                if self.segment_puts == 1:
                    self.overtaken = self.second.wait(3)
                else:
                    etag = super().put(key, data, if_match=if_match, if_none_match=if_none_match)
                    self.second.set()
                    return etag
            return super().put(key, data, if_match=if_match, if_none_match=if_none_match)

    fake = _InOrderCommitter(Policy(segment_jobs=10, head_jobs=20, refill_below=10, merge_jobs=100))
    store = SlowFirstWrite()
    fake.store = fake.keeper.store = store
    fake.gate.set()
    fake.keeper.start()
    try:
        fake.push(0, 40)  # the first seal takes 20..39, and its write hangs
        wait_for(lambda: store.segment_puts == 1, what="the first segment's write started")
        fake.push(40, 20)  # lands while it is written: the next seal is planned behind it
        wait_for(lambda: len(fake.state.lanes.get("q", [])) == 2, what="both seals landed, in order")
        assert store.overtaken, "the next segment was not written while the first one was"
        seals = fake.seals
        assert [seal.jobs[0][1] for seal in seals] == [20, 40] and seals[1].after == seals[0].ref.key
        assert [ref.key for ref in fake.state.lanes["q"]] == [seals[0].ref.key, seals[1].ref.key]
        assert fake.keeper.abandoned == 0
    finally:
        store.second.set()
        fake.finish()


def test_a_queue_claimed_fast_gets_a_deeper_front_and_an_idle_one_does_not() -> None:
    """The front a refill aims for grows with the pace of claims since the
    last refill: up to MAX_FRONT_BOOST (four) times the queue's share, and
    never beyond MAX_FRONT_HEADS (two) times head_jobs, so a fast batched
    worker does not find it empty while the next refill is read and
    committed, whether its queue has the whole budget or shares it; a queue
    claimed slowly keeps the configured share; and all the fronts together
    stay within MAX_FRONTS_HEADS times head_jobs."""
    from datetime import UTC, datetime

    from engine.laneplans import MAX_FRONT_BOOST, MAX_FRONT_HEADS, MAX_FRONTS_HEADS
    from engine.lanes import LaneKeeper
    from engine.lanetasks import Shares

    assert (MAX_FRONT_BOOST, MAX_FRONT_HEADS) == (4.0, 2.0)
    whole = Shares(head=1000, seal=1000, refill=500)  # one queue holds the budget
    half = Shares(head=500, seal=500, refill=250)  # two queues share it
    keeper = LaneKeeper(open_store("memory://"), key="queue.json",
                        policy=Policy(segment_jobs=1000, head_jobs=1000, refill_below=500), execute=lambda op: None,
                        epoch=1, clock=lambda: datetime(2026, 1, 1, tzinfo=UTC), grace_seconds=0,
                        collect_seconds=3600, retry_seconds=0.1)
    assert keeper._front_target("fast", 10.0, 400, whole) == 1000  # no pace known yet
    # 1,000 jobs claimed in 0.5 s (2,000 a second): a second of them, twice the share.
    assert keeper._front_target("fast", 10.5, 0, whole) == 2000
    assert keeper._boost["fast"] == 2.0  # and its next refill starts earlier
    # 1,000 in 0.25 s (4,000 a second): no deeper than twice head_jobs.
    assert keeper._front_target("fast", 10.75, 1000, whole) == 2000
    # Sharing the budget, the same pace gets four times its share: the same 2,000.
    assert keeper._front_target("shared", 10.0, 0, half) == 500
    assert keeper._front_target("shared", 10.25, 0, half) == 2000
    assert keeper._boost["shared"] == 4.0
    # The pace is the front aimed for at the last refill, less what is left, over the time since.
    assert keeper._front_target("medium", 10.0, 400, whole) == 1000
    assert keeper._front_target("medium", 11.0, 400, whole) == 1000  # 600 a second: the share is enough
    assert keeper._front_target("medium", 11.5, 400, whole) == 1200  # 1,200 a second: 1.2 times
    assert keeper._boost["medium"] == 1.2
    assert keeper._front_target("slow", 10.0, 400, whole) == 1000
    assert keeper._front_target("slow", 20.0, 100, whole) == 1000  # 900 jobs in 10 s
    assert keeper._boost["slow"] == 1.0
    # Beside other fronts, all of them together stay within MAX_FRONTS_HEADS
    # (two and a half) times head_jobs: a fast queue beside a second one's
    # share still gets its 2,000; ten fast queues do not each get four tenths.
    assert keeper._front_target("beside", 10.0, 0, half, others=500) == 500
    assert keeper._front_target("beside", 10.25, 0, half, others=500) == 2000
    tenth = Shares(head=100, seal=100, refill=50)
    aimed: dict[str, int] = {}
    for when in (10.0, 10.1, 10.2):  # 100 jobs claimed per 0.1 s in each queue: 1,000 a second, ten shares
        for i in range(10):
            queue = f"ten{i}"
            others = sum(aimed.get(f"ten{j}", 100) for j in range(10) if j != i)
            aimed[queue] = keeper._front_target(queue, when, 0, tenth, others=others)
    assert MAX_FRONTS_HEADS == 2.5 and sum(aimed.values()) <= 2500 < 10 * 400
    assert min(aimed.values()) >= 100 and max(aimed.values()) == 400


def test_checking_whether_a_front_runs_short_does_not_take_its_pace() -> None:
    """The keeper asks whether a queue's front runs short on every landed
    version while it pipelines seals; only a refill actually planned may
    take the pace, or checks a few ms apart read as thousands of claims a
    second and every front is kept at its deepest."""
    from datetime import UTC, datetime

    from engine import QueueState
    from engine.lanes import LaneKeeper
    from engine.lanetasks import Shares
    from engine.transitions import apply_batch

    now = datetime(2026, 1, 1, tzinfo=UTC)
    state = QueueState(policy=SMALL)
    apply_batch(state, [push_op("q", [{"i": i} for i in range(60)], policy=SMALL)], now)
    keeper = LaneKeeper(open_store("memory://"), key="queue.json", policy=SMALL, execute=lambda op: None, epoch=1,
                        clock=lambda: now, grace_seconds=0, collect_seconds=3600, retry_seconds=0.1)
    task = keeper._seal_task(state, "q", Shares.of(SMALL, 1))
    assert task is not None
    from engine.ops import Seal
    from engine.segments import SegmentRef

    ref = SegmentRef(key="queue.json.seg/q/x.json", total=len(task.jobs), consumed=0, front=task.jobs[0][1],
                     last_pos=task.jobs[-1][1], size=1, sha256="0" * 64, oldest_enqueued_at=now, epoch=1,
                     sealed_at=now)
    apply_batch(state, [Seal(queue="q", ref=ref, jobs=task.jobs, after=None)], now)
    apply_batch(state, [claim_op("w", ["q"], policy=SMALL, max_jobs=15)], now)  # 5 left in front of 20
    shares = Shares.of(SMALL, 1)
    for t in (10.0, 10.01, 10.02):
        assert keeper._front_short(state, "q", t, shares) == 5
    assert keeper._boost == {} and keeper._paced == {}
    planned = keeper._refill_task(state, "q", 10.03, shares)
    assert planned is not None and planned.want == 20 - 5  # no pace known yet: the share
