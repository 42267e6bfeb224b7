"""GroupCommitter (layer 2): batching, durable acknowledgement, lost races,
ambiguous writes, unreadable documents and lifecycle."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import orjson
import pytest

from engine import (
    CommitterStopped,
    DocumentError,
    FaultyStore,
    GroupCommitter,
    LatencyStore,
    LeaseLost,
    MemoryStore,
    ObjectStore,
    PreconditionFailed,
    StoreUnavailable,
)
from engine.document import QueueState
from engine.ops import Tick
from engine.stores.base import Blob
from tests.helpers import KEY, wait_for


def stored_ids(store: ObjectStore) -> list[str]:
    """Job ids in the document as it is in the store now (a fresh read)."""
    blob = store.get(KEY)
    assert blob is not None
    return [job["id"] for job in orjson.loads(blob.data)["jobs"]]


class GatedStore(ObjectStore):
    """Holds every put until the test opens the gate, to observe what callers
    see while a write is in flight."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.entered = threading.Semaphore(0)
        self.gate = threading.Semaphore(0)

    def get(self, key: str) -> Blob | None:
        return self.inner.get(key)

    def put(self, key: str, data: bytes, *, if_match: str | None = None, if_none_match: bool = False) -> str:
        if key != KEY:  # the creation marker (I10) is not gated
            return self.inner.put(key, data, if_match=if_match, if_none_match=if_none_match)
        self.entered.release()
        assert self.gate.acquire(timeout=10), "test never opened the gate"
        return self.inner.put(key, data, if_match=if_match, if_none_match=if_none_match)

    def put_parts(
        self, key: str, parts: Sequence[bytes], *, if_match: str | None = None, if_none_match: bool = False
    ) -> str:
        return self.put(key, b"".join(parts), if_match=if_match, if_none_match=if_none_match)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def list(self, prefix: str = "") -> list[str]:
        return self.inner.list(prefix)


@pytest.fixture
def memory() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def committer(memory: MemoryStore) -> Iterator[GroupCommitter]:
    with GroupCommitter(memory) as c:
        yield c


def test_push_claim_complete_round_trip(committer: GroupCommitter, memory: MemoryStore) -> None:
    [job_id] = committer.push("q", [{"n": 1}])
    [claimed] = committer.claim("w1", ["q"])
    assert (claimed.id, claimed.payload, claimed.attempt) == (job_id, {"n": 1}, 1)
    committer.complete(claimed.id, claimed.lease)
    assert stored_ids(memory) == []
    assert committer.document()["queues"]["q"]["completed"] == 1


def test_five_hundred_concurrent_submitters_batch_and_every_ack_is_stored() -> None:
    memory = MemoryStore()
    # A little latency makes submitters pile up behind each write, as on S3.
    committer = GroupCommitter(LatencyStore(memory, latency=0.01)).start()
    acked: list[str] = []
    lock = threading.Lock()

    def thread_submitter(n: int) -> None:
        for i in range(4):
            ids = committer.push("q", [{"thread": n, "i": i}])
            with lock:
                acked.extend(ids)

    async def async_submitters() -> None:
        async def one(n: int) -> None:
            for i in range(4):
                acked.extend(await committer.apush("q", [{"task": n, "i": i}]))

        await asyncio.gather(*(one(n) for n in range(400)))

    threads = [threading.Thread(target=thread_submitter, args=(n,)) for n in range(100)]
    for t in threads:
        t.start()
    asyncio.run(async_submitters())
    for t in threads:
        t.join()
    committer.stop()

    assert len(acked) == 2000 == len(set(acked))
    assert sorted(stored_ids(memory)) == sorted(acked)
    # Far fewer writes than operations: that is the point of group commit.
    assert memory.writes <= len(acked) / 10
    assert committer.stats.mean_batch >= 10


def test_answer_comes_only_after_the_write_lands() -> None:
    memory = MemoryStore()
    gated = GatedStore(memory)
    committer = GroupCommitter(gated).start()
    answered = threading.Event()
    result: list[str] = []

    def push() -> None:
        result.extend(committer.push("q", ["x"]))
        answered.set()

    threading.Thread(target=push).start()
    assert gated.entered.acquire(timeout=5)
    assert not answered.wait(0.2), "answered before the write landed (I1)"
    assert memory.get(KEY) is None
    gated.gate.release()
    assert answered.wait(5)
    assert stored_ids(memory) == result
    committer.stop()


def test_on_write_sees_the_state_being_written_before_it_lands_and_a_failing_listener_breaks_nothing() -> None:
    """``on_write`` runs once the write has started, with the state it
    writes, before the write lands; a listener that raises is logged and
    the write goes on (LaneKeeper.writing plans seals there)."""
    memory = MemoryStore()
    gated = GatedStore(memory)
    seen: list[tuple[int, bool]] = []

    def on_write(state: QueueState) -> None:
        seen.append((len(state.jobs), memory.get(KEY) is not None))
        raise RuntimeError("a listener's bug")

    committer = GroupCommitter(gated, on_write=on_write).start()
    answered = threading.Event()
    ids: list[str] = []

    def push() -> None:
        ids.extend(committer.push("q", ["x"]))
        answered.set()

    threading.Thread(target=push).start()
    assert gated.entered.acquire(timeout=5)
    wait_for(lambda: bool(seen), what="on_write called while the write is held")
    assert seen == [(1, False)]  # the pushed job, in a version not stored yet
    assert not answered.is_set()
    gated.gate.release()
    assert answered.wait(5) and stored_ids(memory) == ids
    committer.stop()


def test_operations_arriving_during_a_write_go_in_the_next_write_and_wait_for_it() -> None:
    memory = MemoryStore()
    gated = GatedStore(memory)
    committer = GroupCommitter(gated).start()
    first_done, second_done = threading.Event(), threading.Event()
    threading.Thread(target=lambda: (committer.push("q", ["a"]), first_done.set())).start()
    assert gated.entered.acquire(timeout=5)  # write 1 in flight
    threading.Thread(target=lambda: (committer.push("q", ["b"]), second_done.set())).start()
    assert not second_done.wait(0.2)
    gated.gate.release()  # write 1 lands
    assert first_done.wait(5)
    assert gated.entered.acquire(timeout=5)  # write 2 carries "b"
    assert not second_done.wait(0.2), "answered before its own write landed (I1)"
    gated.gate.release()
    assert second_done.wait(5)
    payloads = [job["payload"] for job in orjson.loads(memory.get(KEY).data)["jobs"]]  # type: ignore[union-attr]
    assert payloads == ["a", "b"]
    committer.stop()


def test_a_refused_operation_does_not_spoil_its_batch(committer: GroupCommitter, memory: MemoryStore) -> None:
    [job_id] = committer.push("q", ["x"])
    [claimed] = committer.claim("w", ["q"])

    async def mixed() -> list[object]:
        return await asyncio.gather(
            committer.apush("q", ["y"]),
            committer.acomplete(job_id, "not-the-lease"),
            committer.aheartbeat(job_id, claimed.lease),
            return_exceptions=True,
        )

    pushed, refused, extended = asyncio.run(mixed())
    assert isinstance(refused, LeaseLost)
    assert isinstance(pushed, list) and len(stored_ids(memory)) == 2
    assert not isinstance(extended, BaseException)


def test_an_empty_claim_writes_nothing(committer: GroupCommitter, memory: MemoryStore) -> None:
    committer.push("q", ["x"])
    writes = memory.writes
    assert committer.claim("w", ["other"]) == []
    assert memory.writes == writes


def test_lost_race_rereads_and_reapplies_without_losing_either_writer(memory: MemoryStore) -> None:
    a = GroupCommitter(memory).start()
    b = GroupCommitter(memory).start()
    ids: list[str] = []
    for i in range(20):
        ids += a.push("q", [f"a{i}"])
        ids += b.push("q", [f"b{i}"])  # b's cached ETag is always stale here
    a.stop()
    b.stop()
    assert sorted(stored_ids(memory)) == sorted(ids)
    assert a.stats.lost_races + b.stats.lost_races >= 20
    # Every landed write of the document raised seq by one (and one more wrote its creation marker).
    assert orjson.loads(memory.get(KEY).data)["seq"] == memory.writes - 1  # type: ignore[union-attr]


def test_lost_race_hook_can_fail_the_batch(memory: MemoryStore) -> None:
    class Fenced(StoreUnavailable):
        pass

    def refuse(fresh: object) -> None:
        raise Fenced("another broker leads")

    other = GroupCommitter(memory).start()
    committer = GroupCommitter(memory, on_lost_race=refuse).start()
    other.push("q", ["theirs"])
    with pytest.raises(Fenced):
        committer.push("q", ["ours"])
    assert [j["payload"] for j in other.document()["jobs"]] == ["theirs"]
    assert len(stored_ids(memory)) == 1
    other.stop()
    committer.stop()


@pytest.mark.parametrize("fault", ["landed", "lost", "conflict"])
def test_failed_write_is_settled_by_rereading(memory: MemoryStore, fault: str) -> None:
    faulty = FaultyStore(memory)
    committer = GroupCommitter(faulty).start()
    committer.push("q", ["before"])
    faulty.inject(fault)  # type: ignore[arg-type]
    [job_id] = committer.push("q", ["during"])
    committer.push("q", ["after"])
    committer.stop()
    # Exactly once each, whether or not the faulty write had landed.
    payloads = [j["payload"] for j in orjson.loads(memory.get(KEY).data)["jobs"]]  # type: ignore[union-attr]
    assert payloads == ["before", "during", "after"]
    assert job_id in stored_ids(memory)
    if fault == "landed":
        assert committer.stats.ambiguous == 1 and committer.stats.lost_races == 0
    if fault == "conflict":
        assert committer.stats.lost_races == 1


def test_a_write_that_landed_is_recognised_even_after_others_wrote(memory: MemoryStore) -> None:
    """The reply of our write is lost and another writer commits on top before
    we re-read: the recent-commits list still shows our write landed."""
    faulty = FaultyStore(memory)
    committer = GroupCommitter(faulty).start()
    other = GroupCommitter(memory).start()
    committer.push("q", ["first"])
    original_put_parts = memory.put_parts

    def put_then_someone_else_writes(*args: object, **kwargs: object) -> str:
        etag = original_put_parts(*args, **kwargs)  # type: ignore[arg-type]
        memory.put_parts = original_put_parts  # type: ignore[method-assign]
        other.stop()
        other.start()  # re-reads, so its next write is on top of ours
        other.push("q", ["theirs"])
        return etag

    memory.put_parts = put_then_someone_else_writes  # type: ignore[method-assign]
    faulty.inject("landed")
    committer.push("q", ["ours"])
    committer.stop()
    other.stop()
    payloads = [j["payload"] for j in orjson.loads(memory.get(KEY).data)["jobs"]]  # type: ignore[union-attr]
    assert payloads == ["first", "ours", "theirs"]


def test_store_down_fails_the_batch_without_acknowledging(memory: MemoryStore) -> None:
    faulty = FaultyStore(memory)
    committer = GroupCommitter(faulty, max_retries=3, retry_backoff_seconds=0.001).start()
    faulty.inject("lost", "lost", "lost", "lost", "lost")
    with pytest.raises(StoreUnavailable):
        committer.push("q", ["x"])
    assert memory.get(KEY) is None
    # The store is back: the committer re-reads and goes on.
    [job_id] = committer.push("q", ["y"])
    assert stored_ids(memory) == [job_id]
    committer.stop()


CORRUPT = [
    b"{not json",
    b"",
    b'{"hello": "world"}',
    b'["a", "list"]',
    b'{"format": 4, "seq": 1, "jobs": [], "dead": [], "queues": {}}',
]


@pytest.mark.parametrize("data", CORRUPT, ids=["garbage", "empty", "foreign", "list", "format-2"])
def test_unreadable_document_is_never_overwritten(memory: MemoryStore, data: bytes) -> None:
    memory.put(KEY, data)
    with pytest.raises(DocumentError) as info:
        GroupCommitter(memory).start()
    assert KEY in str(info.value)
    assert memory.get(KEY).data == data  # type: ignore[union-attr]


def test_document_corrupted_while_running_stops_writes_until_repaired(memory: MemoryStore) -> None:
    committer = GroupCommitter(memory).start()
    committer.push("q", ["x"])
    good = memory.get(KEY)
    assert good is not None
    memory.put(KEY, b"{truncated")
    for _ in range(2):
        with pytest.raises(DocumentError):
            committer.push("q", ["y"])
        assert memory.get(KEY).data == b"{truncated"  # type: ignore[union-attr]
    memory.put(KEY, good.data)  # an operator restores it
    committer.push("q", ["z"])
    assert [j["payload"] for j in committer.document()["jobs"]] == ["x", "z"]
    committer.stop()


def test_stop_drains_by_default_and_refuses_afterwards(memory: MemoryStore) -> None:
    gated = GatedStore(memory)
    committer = GroupCommitter(gated).start()
    results: list[object] = []
    pusher = threading.Thread(target=lambda: results.append(committer.push("q", ["a"])))
    pusher.start()
    assert gated.entered.acquire(timeout=5)
    stopper = threading.Thread(target=committer.stop)
    stopper.start()
    gated.gate.release()
    stopper.join(5)
    # The pusher is answered by the drain; it may append just after stop returns.
    pusher.join(5)
    assert not stopper.is_alive() and len(results) == 1
    with pytest.raises(CommitterStopped):
        committer.push("q", ["b"])
    committer.stop()  # idempotent


def test_stop_without_drain_fails_what_is_not_yet_written(memory: MemoryStore) -> None:
    gated = GatedStore(memory)
    committer = GroupCommitter(gated).start()
    outcomes: dict[str, object] = {}

    def push(payload: str) -> None:
        try:
            outcomes[payload] = committer.push("q", [payload])
        except CommitterStopped as exc:
            outcomes[payload] = exc

    first = threading.Thread(target=push, args=("a",))
    first.start()
    assert gated.entered.acquire(timeout=5)  # "a" is being written
    second = threading.Thread(target=push, args=("b",))
    second.start()
    second.join(0.2)  # "b" waits behind the write in flight
    committer.stop(drain=False, timeout=0.1)
    second.join(5)
    assert isinstance(outcomes["b"], CommitterStopped)
    gated.gate.release()  # the write in flight still finishes and is answered
    first.join(5)
    committer.stop()
    assert isinstance(outcomes["a"], list)
    assert [j["payload"] for j in orjson.loads(memory.get(KEY).data)["jobs"]] == ["a"]  # type: ignore[union-attr]


def test_async_callers_do_not_block_the_event_loop(memory: MemoryStore) -> None:
    gated = GatedStore(memory)
    committer = GroupCommitter(gated).start()

    async def scenario() -> None:
        push = asyncio.ensure_future(committer.apush("q", ["x"]))
        ticks = 0
        assert await asyncio.to_thread(gated.entered.acquire, timeout=5)
        for _ in range(20):  # the loop keeps running while the write is held
            await asyncio.sleep(0.001)
            ticks += 1
        assert not push.done()
        gated.gate.release()
        assert len(await push) == 1
        assert ticks == 20

    asyncio.run(scenario())
    committer.stop()


def test_document_reflects_the_last_commit(committer: GroupCommitter) -> None:
    assert committer.document() == {}
    committer.push("q", [1, 2])
    doc = committer.document()
    assert doc["format"] == 1 and doc["seq"] == 1 and doc["writer"] == committer.writer_id
    assert [j["payload"] for j in doc["jobs"]] == [1, 2]


def test_precondition_failed_is_what_a_second_creator_sees(memory: MemoryStore) -> None:
    memory.put(KEY, b"{}", if_none_match=True)
    with pytest.raises(PreconditionFailed):
        memory.put(KEY, b"{}", if_none_match=True)


def test_answered_callers_rejoin_the_next_write_instead_of_splitting_in_two() -> None:
    """Closed-loop callers answered by one write come back while the next
    waits (linger), so each round of 16 pushes takes about one write, not two."""
    memory = MemoryStore()
    committer = GroupCommitter(LatencyStore(memory, latency=0.02)).start()

    async def submitters() -> None:
        async def one(n: int) -> None:
            for i in range(10):
                await committer.apush("q", [{"n": n, "i": i}])

        await asyncio.gather(*(one(n) for n in range(16)))

    asyncio.run(submitters())
    committer.stop()
    assert len(stored_ids(memory)) == 160
    # Without the linger the callers settle into two alternating halves: ~20 writes.
    assert memory.writes <= 14, memory.writes


def test_a_heartbeat_tick_waits_for_the_answered_caller_instead_of_writing_alone() -> None:
    """A Tick staged right after a write landed does not end the linger when
    arrivals pause: it rides the write of the caller that comes back, which
    would otherwise wait a whole write behind it."""
    memory = MemoryStore()
    # A long write and a long linger, so that 20 ms of caller turnaround is
    # well inside it (and well past the 5 ms idle gap).
    committer = GroupCommitter(LatencyStore(memory, latency=0.2), max_linger_seconds=0.5).start()
    committer.push("q", [0])
    committer.push("q", [1])  # its write just landed: the linger runs
    before = memory.writes
    tick = threading.Thread(target=committer.execute, args=(Tick(),))
    tick.start()
    time.sleep(0.02)  # the caller's turnaround
    committer.push("q", [2])
    tick.join(5)
    committer.stop()
    assert memory.writes - before == 1  # the Tick and the push: one write


def test_the_lane_keepers_seals_and_refills_wait_for_the_answered_caller() -> None:
    """A seal or a refill waits for no caller either: staged right after a
    write landed, it rides the write of the caller that comes back instead
    of writing alone in the middle of its cycle (alone, a Seal made 2,048
    producers wait one whole write more, every other write)."""
    from engine import Policy
    from engine.lanes import LaneKeeper
    from engine.lanetasks import Shares
    from engine.model import utc_now
    from engine.ops import claim_op

    memory = MemoryStore()
    policy = Policy(segment_jobs=10, head_jobs=20, refill_below=10)
    committer = GroupCommitter(LatencyStore(memory, latency=0.2), policy=policy, max_linger_seconds=0.5).start()
    # The keeper's own segment writes go to the store directly, at once.
    keeper = LaneKeeper(memory, key=KEY, policy=policy, execute=committer.execute, submit=committer.submit,
                        epoch=1, clock=utc_now, grace_seconds=0, collect_seconds=3600, retry_seconds=0.1)
    shares = Shares.of(policy, 1)

    def one_write_for(step: Callable[[], None], *, writes: int) -> None:
        committer.push("q", ["x"])  # its write just landed: the linger runs
        before = committer.committed_seq
        background = threading.Thread(target=step)
        background.start()
        time.sleep(0.02)  # the caller's turnaround
        committer.push("q", ["y"])
        background.join(5)
        assert committer.committed_seq - before == writes

    committer.push("q", list(range(40)))  # a front of 20 and a tail of 20 (format 2 from this commit)
    assert committer.state is not None
    seal = keeper._seal_task(committer.state, "q", shares)
    assert seal is not None
    one_write_for(lambda: keeper._seal(seal), writes=1)  # the seal and the push: one write
    assert keeper.sealed == 1
    committer.execute(claim_op("w", ["q"], policy=policy, max_jobs=15))  # the front runs short
    refill = keeper._refill_task(committer.state, "q", time.monotonic(), shares)
    assert refill is not None
    keeper._held.jobs(refill.ref, refill.ref.consumed, refill.want + 1, keep=True)  # no read in the timed part
    one_write_for(lambda: keeper._refill(refill), writes=1)  # the refill and the push: one write
    committer.stop()
    assert keeper.refilled == 1
