"""A segment without its id index is owed one (``engine.indexrepair``).

Without its index, a lookup by id reads a segment whole, and at most
``JOB_LOOKUP_READS`` such segments: a pending job in one beyond them was
answered 404. Before, a failed index write was only logged, and a segment a
new leader found without an index stayed so for the tenure.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from engine import Broker, FaultyStore, StoreUnavailable
from engine.indexrepair import REPAIR_DELAY_CAP_SECONDS, REPAIR_TRIES, IndexRepairs
from engine.lanes import LaneKeeper
from engine.segments import SegmentRef, read_segment_parts
from engine.stores.base import ObjectStore
from tests.engine.test_id_index import (
    POLICY,
    CountingStore,
    as_after_a_takeover,
    index_key,
    merged_backlog,
    merged_refs,
)
from tests.helpers import wait_for


def unindexed(make_broker: Callable[..., Broker]) -> tuple[Broker, LaneKeeper, SegmentRef, bytes]:
    """A leader with a merged backlog, one of whose segments lost its id
    index (deleted, and forgotten by the process): the segment's reference
    and the index it had."""
    broker = merged_backlog(make_broker)
    keeper = broker._keeper
    assert keeper is not None
    ref = merged_refs(broker)[0]
    key = index_key("queue.json", ref.key)
    blob = broker.store.get(key)
    assert blob is not None
    broker.store.delete(key)
    as_after_a_takeover(broker)
    return broker, keeper, ref, blob.data


def index_of(store: ObjectStore, ref: SegmentRef) -> bytes | None:
    blob = store.get(index_key("queue.json", ref.key))
    return None if blob is None else blob.data


def job_in(store: ObjectStore, ref: SegmentRef) -> str:
    parts = read_segment_parts(store, ref)
    assert parts is not None
    return parts[len(parts) // 2].split(b'"')[3].decode()


def test_an_index_write_that_failed_is_written_again_once_the_store_answers(
    make_broker: Callable[..., Broker], monkeypatch: pytest.MonkeyPatch,
) -> None:
    broker, keeper, ref, index = unindexed(make_broker)
    parts = read_segment_parts(broker.store, ref)
    assert parts is not None
    put = broker.store.put
    refused: list[str] = []

    def put_refused_twice(key: str, data: bytes, **kwargs: Any) -> Any:
        if key == index_key("queue.json", ref.key) and len(refused) < 2:
            refused.append(key)
            raise StoreUnavailable("the store answered 503")
        return put(key, data, **kwargs)

    monkeypatch.setattr(broker.store, "put", put_refused_twice)
    keeper._write_index(ref, parts)
    assert refused and index_of(broker.store, ref) is None
    wait_for(lambda: index_of(broker.store, ref) is not None, what="the index written again")
    assert len(refused) == 2  # the write, then the first repair; the second landed
    assert index_of(broker.store, ref) == index  # the very index the writer would have written
    wait_for(lambda: not keeper.repairs.owing(ref.key), what="nothing owed")
    assert keeper.repairs.repaired == 1 and keeper._indexes.get(ref) is not None


def test_a_new_tenure_rebuilds_the_index_of_a_segment_it_finds_without_one(make_broker: Callable[..., Broker]) -> None:
    broker, keeper, ref, index = unindexed(make_broker)
    refs = merged_refs(broker)
    keeper.warm(refs)
    wait_for(lambda: index_of(broker.store, ref) is not None, what="the index rebuilt")
    assert index_of(broker.store, ref) == index
    # The others had theirs: nothing rewritten, nothing owed.
    wait_for(lambda: not keeper.repairs.owing(ref.key), what="nothing owed")
    assert keeper.repairs.repaired == 1


def test_after_a_takeover_the_new_leader_writes_the_index_the_old_one_could_not(
    make_broker: Callable[..., Broker],
) -> None:
    """Through a real takeover: the first leader's index write of a segment
    failed (deleted here, as the store refused it); the second, with a
    connection and a cache of its own, finds the segment without one as its
    tenure starts, and writes it."""
    inner = CountingStore()
    first = merged_backlog(make_broker, inner)
    ref = merged_refs(first)[-1]
    index = index_of(inner, ref)
    assert index is not None
    inner.delete(index_key("queue.json", ref.key))
    first.stop(timeout=10)

    second = make_broker(FaultyStore(inner), "http://b", policy=POLICY)
    wait_for(lambda: second.role == "leader", what="the second node leading")
    wait_for(lambda: index_of(inner, ref) is not None, what="the new leader writing the index")
    assert index_of(inner, ref) == index
    keeper = second._keeper
    assert keeper is not None and keeper.repairs.repaired == 1


def test_a_segment_a_lookup_read_whole_for_want_of_an_index_gets_it_back(
    make_broker: Callable[..., Broker],
) -> None:
    """The lookup still finds its job by reading the segment whole; the next
    one after the repair reads the index and the job's bytes only."""
    broker, _, ref, index = unindexed(make_broker)
    store = broker.store
    assert isinstance(store, CountingStore)
    job = job_in(store, ref)
    before = store.gets.get(ref.key, 0)
    assert broker.get_job(job)["segment"] == ref.key
    assert store.gets.get(ref.key, 0) > before  # read whole
    wait_for(lambda: index_of(store, ref) is not None, what="the index rebuilt")
    assert index_of(store, ref) == index
    as_after_a_takeover(broker)
    before = store.gets.get(ref.key, 0)
    assert broker.get_job(job)["segment"] == ref.key
    assert store.gets.get(ref.key, 0) == before  # by range, through the index


def test_a_damaged_index_is_replaced_and_a_deleted_segment_owed_nothing(make_broker: Callable[..., Broker]) -> None:
    broker, keeper, ref, index = unindexed(make_broker)
    key = index_key("queue.json", ref.key)
    broker.store.put(key, b"QAIDX2 not an index at all")
    keeper.warm(merged_refs(broker))
    wait_for(lambda: index_of(broker.store, ref) == index, what="the damaged index replaced")

    gone = merged_refs(broker)[1]
    broker.store.delete(index_key("queue.json", gone.key))
    assert keeper.reaper.delete_segment(gone.key)
    keeper.repairs.owe(gone)
    wait_for(lambda: not keeper.repairs.owing(gone.key), what="the repair dropped")
    assert index_of(broker.store, gone) is None  # no index outlives its segment


def test_repairs_are_retried_ever_later_and_given_up_after_their_tries() -> None:
    now = [100.0]
    repairs = IndexRepairs(threading.Condition(), monotonic=lambda: now[0], delay_seconds=1.0)
    ref = SegmentRef(key="queue.json.seg/q/e00000001-p00000000000001-0a0b0c0d.json", total=3, consumed=0, front=1,
                     last_pos=3, size=1, sha256="c" * 64, oldest_enqueued_at=None,  # type: ignore[arg-type]
                     epoch=1, sealed_at=None)  # type: ignore[arg-type]
    repairs.owe(ref)
    delays = []
    for tries in range(REPAIR_TRIES):
        with repairs._cond:
            assert repairs.due_now()
        taken = repairs.take()
        assert taken == (ref, tries)
        assert repairs.take() is None  # one repair at a time
        with repairs._cond:
            assert repairs.deadline() is None
        given_up = repairs.done(ref, tries, again=True)
        assert given_up == (tries == REPAIR_TRIES - 1)
        with repairs._cond:
            deadline = repairs.deadline()
        if given_up:
            assert deadline is None and not repairs.owing(ref.key)
            break
        assert deadline is not None
        delays.append(deadline - now[0])
        assert repairs.take() is None  # not due yet
        now[0] = deadline
    assert delays == [min(2.0 ** n, REPAIR_DELAY_CAP_SECONDS) for n in range(REPAIR_TRIES - 1)]
    assert repairs.given_up == 1 and repairs.repaired == 0
    repairs.owe(ref)
    taken = repairs.take()
    assert taken is not None and repairs.done(ref, taken[1], wrote=True) is False
    assert repairs.repaired == 1 and not repairs.owing(ref.key)
