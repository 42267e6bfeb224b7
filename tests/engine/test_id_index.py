"""Merged segments carry an id index (``engine.idindex``), so that a pending
job in a segment is found by id however long ago it was sealed.

Before, ``Broker.get_job`` (``GET /api/v1/jobs/<id>``, the Django Tasks
backend's ``get_result``) found a job in a segment only while its id was in
the document's ``sealed`` window (10,000 ids): behind a backlog of a million,
almost every pending job answered 404.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from array import array
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from engine import Broker, FaultyStore, JobNotFound, MemoryStore, ObjectStore, Policy, StoreUnavailable
from engine.errors import SegmentUnreadable
from engine.idindex import (
    FIRST_CANDIDATE_BATCH,
    IndexCache,
    build_index,
    decode_index,
    encode_index,
    id_hash,
    index_key,
    index_prefix,
    job_id_of,
    read_length,
    segment_of_index,
    shared_index_cache,
)
from engine.lanes import LaneKeeper
from engine.ops import Tick, purge_op, push_op
from engine.parsing import parse_document
from engine.segments import SegmentRef, encode_segment, segment_prefix
from engine.stores.base import Blob
from tests.helpers import stored, wait_for

# Seals of 10 or so, merged into segments of up to 80 jobs (segments under a
# quarter of that are merged), and a sealed window of 5 ids: every job but the
# last few is out of it.
POLICY = Policy(segment_jobs=10, head_jobs=20, refill_below=10, merge_jobs=80, dedup_window_ids=5)
IDS = [f"j{i:03d}" for i in range(400)]


class CountingStore(MemoryStore):
    """Counts the reads of each key: whole (``gets``) and ranged (``ranges``)."""

    def __init__(self) -> None:
        super().__init__()
        self.gets: dict[str, int] = {}
        self.ranges: dict[str, int] = {}

    def get(self, key: str) -> Blob | None:
        self.gets[key] = self.gets.get(key, 0) + 1
        return super().get(key)

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        self.ranges[key] = self.ranges.get(key, 0) + 1
        blob = MemoryStore.get(self, key)
        return None if blob is None else blob.data[start:start + length]


def merged_backlog(make_broker: Callable[..., Broker], store: ObjectStore | None = None) -> Broker:
    """A leader (on ``store``, by default a new CountingStore) whose queue q
    holds 400 jobs, most of them in merged segments."""
    broker = make_broker(store or CountingStore(), "http://a", policy=POLICY)
    wait_for(lambda: broker.role == "leader", what="leading")
    for start in range(0, len(IDS), 10):
        broker.execute(push_op("q", list(range(start, start + 10)), ids=IDS[start:start + 10], policy=POLICY))
    keeper = broker._keeper
    assert keeper is not None

    def merged() -> bool:
        refs = orjson.loads(stored(broker.store)).get("lanes", {}).get("q", {}).get("segments", [])
        large = {index_key("queue.json", ref["key"]) for ref in refs if ref["total"] >= keeper.small_below}
        # A large seal's index is written just after its Seal was queued: wait for those too.
        indexed = large <= set(broker.store.list(index_prefix("queue.json")))
        if sum(ref["total"] > POLICY.merge_jobs // 4 for ref in refs) >= 2 and not keeper._busy and indexed:
            return True
        broker.execute(Tick())  # the keeper takes its next step as a commit lands
        return False

    wait_for(merged, what="segments merged")
    return broker


def merged_refs(broker: Broker) -> list[SegmentRef]:
    """The references to merged segments (larger than any seal here)."""
    refs = parse_document("queue.json", stored(broker.store), policy=POLICY).lanes["q"]
    return [ref for ref in refs if ref.total > POLICY.merge_jobs // 4]


def as_after_a_takeover(broker: Broker) -> None:
    """Nothing held: the keeper of a leader that just took over."""
    keeper = broker._keeper
    assert keeper is not None
    keeper.lookup.forget()


def reads_so_far(store: CountingStore) -> tuple[dict[str, int], dict[str, int]]:
    return dict(store.gets), dict(store.ranges)


def segment_reads(store: CountingStore, before: tuple[dict[str, int], dict[str, int]]) -> list[str]:
    """The segments read since ``before`` (:func:`reads_so_far`), whole or
    in part (a lookup with a version 2 index reads only the job's bytes)."""
    gets, ranges = before
    return sorted({key for counts, then in ((store.gets, gets), (store.ranges, ranges)) for key, n in counts.items()
                   if key.startswith(segment_prefix("queue.json")) and n > then.get(key, 0)})


def test_an_index_names_every_job_of_its_segment_and_refuses_a_damaged_or_foreign_copy() -> None:
    parts = [orjson.dumps({"id": f"job-{i}", "pos": i}) for i in range(1000)]
    assert [job_id_of(p) for p in parts[:2]] == [b"job-0", b"job-1"]
    ref = SegmentRef(key="queue.json.seg/q/e00000001-p00000000000001-0a0b0c0d.json", total=1000, consumed=0,
                     front=0, last_pos=999, size=1, sha256="a" * 64, oldest_enqueued_at=None,  # type: ignore[arg-type]
                     epoch=1, sealed_at=None)  # type: ignore[arg-type]
    data = encode_index(ref.sha256, parts, len(encode_segment("q", 0, parts)))
    index = decode_index(ref, data)
    assert all(index.may_hold(f"job-{i}") for i in range(1000))
    assert sum(index.may_hold(f"other-{i}") for i in range(10_000)) <= 1  # CRC-32: ~10,000 / 2^32 * 1000
    assert len(data) < 16 * 1000 + 200  # 4 bytes a job, and 12 for where it sits
    # A reader reads the header and the hashes only (read_length): that is enough.
    assert decode_index(ref, data[:read_length(ref)]).may_hold("job-7")
    with pytest.raises(ValueError, match="another object"):
        decode_index(ref._replace(sha256="b" * 64), data)
    hashes_end = read_length(ref)
    with pytest.raises(ValueError, match="SHA-256"):
        decode_index(ref, data[:hashes_end - 4] + b"\x00\x00\x00\x00")
    with pytest.raises(ValueError, match="fewer"):
        decode_index(ref, data[:hashes_end - 1])
    key = index_key("queue.json", ref.key)
    assert key.startswith(index_prefix("queue.json")) and segment_of_index("queue.json", key) == ref.key
    assert segment_of_index("queue.json", "queue.json.idx/q/notes.txt") is None


def test_a_job_sealed_long_ago_is_found_through_the_index_reading_only_its_segment(
    make_broker: Callable[..., Broker],
) -> None:
    broker = merged_backlog(make_broker)
    store = broker.store
    assert isinstance(store, CountingStore)
    merged = merged_refs(broker)
    indexes = set(store.list(index_prefix("queue.json")))
    assert {index_key("queue.json", ref.key) for ref in merged} <= indexes
    # A job in the second merged segment, sealed long before the window.
    target = orjson.loads(store.get(merged[-1].key).data)["jobs"][3]["id"]  # type: ignore[union-attr]
    doc = orjson.loads(stored(store))
    assert target not in " ".join(group[1] for group in doc["sealed"]) and target not in {j["id"] for j in doc["jobs"]}

    as_after_a_takeover(broker)
    before = reads_so_far(store)
    view = broker.get_job(target)
    assert (view["id"], view["status"], view["segment"]) == (target, "pending", merged[-1].key)
    # The indexes were read; of the merged segments, only the one holding it.
    assert [key for key in segment_reads(store, before) if key in {r.key for r in merged}] == [merged[-1].key]

    # An id that no segment holds reads no segment once the indexes are held.
    before = reads_so_far(store)
    with pytest.raises(JobNotFound):
        broker.get_job("no-such-job")
    with pytest.raises(JobNotFound):
        broker.get_job("no-such-job")
    assert not [key for key in segment_reads(store, before) if key in {r.key for r in merged}]


def test_a_new_leader_reads_the_indexes_before_a_lookup_needs_them_into_the_cache_the_dashboard_shares(
    make_broker: Callable[..., Broker],
) -> None:
    """Without the warm-up, the first lookup by id after a takeover read
    every merged segment's index while its client waited (~300 at five
    million jobs: 1.1 s at 1M and 4.5 s at 5M in ``python -m bench
    backlog``), and the dashboard of the same process read them all again
    into a cache of its own."""
    inner = CountingStore()
    first = merged_backlog(make_broker, FaultyStore(inner))
    merged = merged_refs(first)
    target = orjson.loads(inner.get(merged[-1].key).data)["jobs"][3]["id"]  # type: ignore[union-attr]
    first.stop(timeout=10)

    # Another node, with its own connection to the store: nothing cached.
    store = FaultyStore(inner)
    second = make_broker(store, "http://b", policy=POLICY)
    wait_for(lambda: second.role == "leader", what="the second node leading")
    keeper = second._keeper
    assert keeper is not None
    cache = shared_index_cache(store, "queue.json")
    assert keeper._indexes is cache and cache is not shared_index_cache(inner, "queue.json")
    # Read with no lookup asking: the new leader's first landed version planned it.
    # (warmed counts them once the task is over)
    wait_for(lambda: keeper.warmed >= len(merged), what="the new leader reading the indexes")
    assert all(cache.known(ref.key) for ref in merged)
    # Each index's header and hashes only (read_length), not its entries.
    assert not [key for key in inner.gets if key.startswith(index_prefix("queue.json"))]

    before, ranges_before = dict(inner.gets), dict(inner.ranges)
    assert second.get_job(target)["segment"] == merged[-1].key
    read = [key for key, n in inner.gets.items() if n > before.get(key, 0)]
    ranged = [key for key, n in inner.ranges.items() if n > ranges_before.get(key, 0)]
    # No index read again whole, no segment read whole: the job's entry in
    # its segment's index, then the job's own bytes (engine.lookup.ranged_job).
    assert not [key for key in read if key.startswith(index_prefix("queue.json"))], read
    assert not [key for key in read if key in {ref.key for ref in merged}], read
    assert sorted(ranged) == sorted([index_key("queue.json", merged[-1].key), merged[-1].key])


def test_without_its_index_or_with_a_damaged_one_the_segment_itself_is_read(
    make_broker: Callable[..., Broker],
) -> None:
    broker = merged_backlog(make_broker)
    store = broker.store
    merged = merged_refs(broker)
    first, last = merged[0], merged[-1]
    in_first = orjson.loads(store.get(first.key).data)["jobs"][-1]["id"]  # type: ignore[union-attr]
    in_last = orjson.loads(store.get(last.key).data)["jobs"][-1]["id"]  # type: ignore[union-attr]
    store.delete(index_key("queue.json", first.key))  # a leader died between the two writes
    store.put(index_key("queue.json", last.key), b"queueadmin-idindex-1\nnot an index")
    as_after_a_takeover(broker)
    assert broker.get_job(in_first)["segment"] == first.key
    assert broker.get_job(in_last)["segment"] == last.key


def last_merged(make_broker: Callable[..., Broker]) -> tuple[Broker, SegmentRef, Blob]:
    """A :func:`merged_backlog`, its last merged segment and that segment's bytes."""
    broker = merged_backlog(make_broker)
    last = merged_refs(broker)[-1]
    blob = broker.store.get(last.key)
    assert blob is not None
    return broker, last, blob


def test_a_job_whose_bytes_do_not_match_its_entry_sends_the_lookup_to_the_whole_segment(
    make_broker: Callable[..., Broker],
) -> None:
    """A ranged read is checked against the entry (length, CRC-32) and the
    id; a job altered in its segment fails that, and the lookup reads the
    segment whole, whose SHA-256 check reports the object (I6), as a lookup
    without an index did. Never the altered job."""
    broker, last, blob = last_merged(make_broker)
    store = broker.store
    target = orjson.loads(blob.data)["jobs"][5]["id"]
    payload = orjson.dumps(orjson.loads(blob.data)["jobs"][5]["payload"])
    other = payload[:-1] + (b"8" if payload[-1:] != b"8" else b"9")  # same length, another value
    altered = blob.data.replace(b'"payload":' + payload + b"}", b'"payload":' + other + b"}", 1)
    assert altered != blob.data and len(altered) == len(blob.data)
    store.put(last.key, altered)
    as_after_a_takeover(broker)
    with pytest.raises(SegmentUnreadable, match=last.key):
        broker.get_job(target)


def test_an_entry_that_checks_but_names_no_whole_job_sends_the_lookup_to_the_whole_segment(
    make_broker: Callable[..., Broker],
) -> None:
    """An index entry whose bytes match its CRC and start with the id, yet
    are no job (here: cut short, as a wrong index could), is not answered
    from, nor an error: the lookup reads the segment whole and finds the job."""
    broker, last, blob = last_merged(make_broker)
    store = broker.store
    target = orjson.loads(blob.data)["jobs"][5]["id"]
    key = index_key("queue.json", last.key)
    index_blob = store.get(key)
    assert index_blob is not None
    index = decode_index(last, index_blob.data)
    span = index.span(target)
    assert span is not None and index.entries_at is not None
    at = index.entries_at + 12 * span[0]
    offset, length, _ = struct.unpack("<III", index_blob.data[at:at + 12])
    short = blob.data[offset:offset + length - 5]
    entry = struct.pack("<III", offset, len(short), zlib.crc32(short))
    forged = index_blob.data[:at] + entry + index_blob.data[at + 12:]
    store.put(key, forged)
    as_after_a_takeover(broker)
    assert broker.get_job(target)["segment"] == last.key


def test_with_a_version_1_index_the_segment_is_read_whole_and_the_job_found(
    make_broker: Callable[..., Broker],
) -> None:
    """Indexes written before version 2 name no places: their segments are
    read whole, as before, and the job is found."""
    broker = merged_backlog(make_broker)
    store = broker.store
    assert isinstance(store, CountingStore)
    last = merged_refs(broker)[-1]
    blob = store.get(last.key)
    assert blob is not None
    jobs = orjson.loads(blob.data)["jobs"]
    body = array("I", sorted({id_hash(job["id"].encode()) for job in jobs})).tobytes()
    version1 = b"".join((b"queueadmin-idindex-1\n", last.sha256.encode(), b"\n",
                         hashlib.sha256(body).hexdigest().encode(), b"\n", body))
    store.put(index_key("queue.json", last.key), version1)
    as_after_a_takeover(broker)
    before = reads_so_far(store)
    assert broker.get_job(jobs[-1]["id"])["segment"] == last.key
    assert store.gets.get(last.key, 0) > before[0].get(last.key, 0)  # read whole
    assert store.ranges.get(last.key, 0) == before[1].get(last.key, 0)  # not by range


def test_a_purge_by_id_reads_the_segment_it_rewrites_once_and_no_range_of_it(
    make_broker: Callable[..., Broker],
) -> None:
    """A purge by ids writes the segment again without the job: it reads
    the segment whole anyway, so its lookup does not first read the job by
    range (two requests for nothing), and reads the segment once."""
    broker, last, blob = last_merged(make_broker)
    store = broker.store
    assert isinstance(store, CountingStore)
    target = orjson.loads(blob.data)["jobs"][5]["id"]
    as_after_a_takeover(broker)
    gets, ranges = reads_so_far(store)
    assert broker.execute(purge_op([target])) == [target]
    assert store.ranges.get(last.key, 0) == ranges.get(last.key, 0)
    assert store.gets.get(last.key, 0) == gets.get(last.key, 0) + 1
    with pytest.raises(JobNotFound):
        broker.get_job(target)


def test_a_job_moved_back_since_is_not_answered_from_its_segment(make_broker: Callable[..., Broker]) -> None:
    """A reference whose ``front`` passed the job (refilled into the
    document) does not hold it any more: the ranged read finds the job, sees
    its ``pos`` before ``front``, and answers nothing, without reading the
    segment whole."""
    broker = merged_backlog(make_broker)
    store = broker.store
    assert isinstance(store, CountingStore)
    keeper = broker._keeper
    assert keeper is not None
    last = merged_refs(broker)[-1]
    blob = store.get(last.key)
    assert blob is not None
    job = orjson.loads(blob.data)["jobs"][5]
    as_after_a_takeover(broker)
    moved = last._replace(consumed=6, front=orjson.loads(blob.data)["jobs"][6]["pos"])
    before = reads_so_far(store)
    assert keeper.lookup.find_pending(job["id"], [("q", moved)]) is None
    assert store.gets.get(last.key, 0) == before[0].get(last.key, 0)
    found = keeper.lookup.find_pending(job["id"], [("q", last)])
    assert found is not None and found[1] == job["pos"]


def test_an_index_goes_with_its_segment_and_an_orphan_index_is_collected(
    make_broker: Callable[..., Broker],
) -> None:
    broker = merged_backlog(make_broker)
    store = broker.store
    keeper = broker._keeper
    assert keeper is not None and store.list(index_prefix("queue.json"))
    # An index left by a leader of an older epoch whose segment is gone.
    orphan = index_key("queue.json", "queue.json.seg/q/e00000000-p00000000000001-deadbeef.json")
    store.put(orphan, b"left behind")
    keeper.reaper.collect_seconds = 0.05
    keeper.reaper.next_collect = 0
    wait_for(lambda: orphan not in store.list(index_prefix("queue.json")), what="the orphan index collected")
    assert store.list(index_prefix("queue.json")), "the referenced segments' indexes stay"
    # Purging the queue drops every reference; the segments and their indexes go.
    broker.execute(purge_op(queue="q", status="pending"))

    def gone() -> bool:
        broker.execute(Tick())
        return not store.list(segment_prefix("queue.json")) and not store.list(index_prefix("queue.json"))

    wait_for(gone, what="segments and indexes deleted")


def test_a_large_tail_sealed_at_once_gets_its_index_when_sealed(make_broker: Callable[..., Broker]) -> None:
    """A batch of 400 pushed at once is sealed in segments of up to
    ``merge_jobs``: too large to be merged ever, so each gets its index as it
    is sealed, and a job in it is found reading only its segment."""
    broker = make_broker(CountingStore(), "http://a", policy=POLICY)
    wait_for(lambda: broker.role == "leader", what="leading")
    broker.execute(push_op("q", list(range(400)), ids=IDS, policy=POLICY))
    keeper = broker._keeper
    assert keeper is not None

    def sealed() -> bool:
        if len(orjson.loads(stored(broker.store))["jobs"]) < 100 and not keeper._busy:
            return True
        broker.execute(Tick())
        return False

    wait_for(sealed, what="the batch sealed")
    store = broker.store
    assert isinstance(store, CountingStore)
    refs = parse_document("queue.json", stored(store), policy=POLICY).lanes["q"]
    large = [ref for ref in refs if ref.total >= keeper.small_below]
    assert large and keeper.merged == 0
    # Written just after each Seal was queued: wait for the last ones.
    wait_for(lambda: {index_key("queue.json", ref.key) for ref in large} <= set(store.list(index_prefix("queue.json"))),
             what="the large seals' indexes")
    target = orjson.loads(store.get(large[0].key).data)["jobs"][-1]["id"]  # type: ignore[union-attr]
    as_after_a_takeover(broker)
    before = reads_so_far(store)
    assert broker.get_job(target)["segment"] == large[0].key
    assert segment_reads(store, before) == [large[0].key]


def another_segment(
    make_broker: Callable[..., Broker], name: str,
) -> tuple[Broker, LaneKeeper, SegmentRef, list[bytes]]:
    """A leader with a merged backlog, and a stored object standing for a
    refused seal's segment (``name`` in its key) with the jobs of a real one."""
    broker = merged_backlog(make_broker)
    keeper = broker._keeper
    assert keeper is not None
    ref = merged_refs(broker)[0]
    parts = [orjson.dumps(job) for job in orjson.loads(broker.store.get(ref.key).data)["jobs"]]  # type: ignore[union-attr]
    other = ref._replace(key=ref.key.removesuffix(".json") + f"-{name}.json")
    broker.store.put(other.key, b"a segment a refused seal wrote")
    return broker, keeper, other, parts


def test_a_late_index_is_not_written_for_a_segment_already_deleted(make_broker: Callable[..., Broker]) -> None:
    """A seal's index is written after its Seal was queued: if the Seal
    was refused and its segment deleted first, no index may outlive it (the
    collector never takes this leader's own epoch)."""
    broker, keeper, doomed, parts = another_segment(make_broker, "doomed")
    ref = merged_refs(broker)[0]
    assert keeper.reaper.delete_segment(doomed.key)
    keeper._write_index(doomed, parts)
    assert index_key("queue.json", doomed.key) not in broker.store.list(index_prefix("queue.json"))
    # A segment not deleted gets its index as before.
    other = ref._replace(key=ref.key.removesuffix(".json") + "-kept.json")
    keeper._write_index(other, parts)
    assert index_key("queue.json", other.key) in broker.store.list(index_prefix("queue.json"))


def test_an_index_write_whose_answer_was_lost_is_kept_when_it_landed_whole(
    make_broker: Callable[..., Broker], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A lost answer (the write landed) must not cost the segment its index:
    without one, a lookup by id reads the segment whole, within a bound, and
    a pending job could be answered 404 (chaos seed 107). A write that did
    not land leaves no index, as before."""
    broker, keeper, landed, parts = another_segment(make_broker, "landed")
    put = broker.store.put
    lost: list[str] = []

    def put_answer_lost(key: str, data: bytes, **kwargs: Any) -> Any:
        if key.endswith(".ids") and not lost:
            put(key, data, **kwargs)
            lost.append(key)
            raise StoreUnavailable("the write landed but its answer was lost")
        return put(key, data, **kwargs)

    monkeypatch.setattr(broker.store, "put", put_answer_lost)
    keeper._write_index(landed, parts)
    assert lost == [index_key("queue.json", landed.key)]
    assert lost[0] in broker.store.list(index_prefix("queue.json"))
    assert keeper._indexes.get(landed) is not None  # a lookup reads no segment whole for it

    refused = landed._replace(key=landed.key.removesuffix("-landed.json") + "-refused.json")
    put(refused.key, b"a segment a refused seal wrote")

    def put_refused(key: str, data: bytes, **kwargs: Any) -> Any:
        if key.endswith(".ids"):
            raise StoreUnavailable("the store answered 503")
        return put(key, data, **kwargs)

    monkeypatch.setattr(broker.store, "put", put_refused)
    keeper._write_index(refused, parts)
    assert index_key("queue.json", refused.key) not in broker.store.list(index_prefix("queue.json"))


def test_a_segment_found_without_an_index_is_asked_about_again_later(monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryStore()
    ref = SegmentRef(key="queue.json.seg/q/e00000001-p00000000000001-0a0b0c0d.json", total=3, consumed=0, front=1,
                     last_pos=3, size=1, sha256="c" * 64, oldest_enqueued_at=None,  # type: ignore[arg-type]
                     epoch=1, sealed_at=None)  # type: ignore[arg-type]
    cache = IndexCache(store, "queue.json")
    now = [1000.0]
    monkeypatch.setattr("engine.idindex.time.monotonic", lambda: now[0])
    assert cache.get(ref) is None and cache.reads == 1
    parts = [orjson.dumps({"id": f"a{i}"}) for i in range(3)]
    segment = encode_segment("q", 1, parts)
    store.put(index_key("queue.json", ref.key), encode_index(ref.sha256, parts, len(segment)))  # just after the lookup
    assert cache.get(ref) is None and cache.reads == 1  # remembered as absent for a while
    now[0] += 61
    index = cache.get(ref)
    assert index is not None and index.may_hold("a1") and cache.reads == 2


def test_after_a_takeover_a_job_in_the_oldest_of_many_small_seals_is_found_by_id(
    make_broker: Callable[..., Broker],
) -> None:
    """Small seals (merged later) had no index: a lookup on a leader that did
    not seal them read them blindly, newest first, at most 8, and a job
    pending in an older one answered 404 (chaos seed 52, a takeover with 17
    small seals). Every seal now gets its index."""
    policy = Policy(segment_jobs=5, head_jobs=10, refill_below=5, merge_jobs=100_000)  # nothing is merged
    broker = make_broker(CountingStore(), "http://a", policy=policy)
    wait_for(lambda: broker.role == "leader", what="leading")
    ids = [f"s{i:03d}" for i in range(120)]
    for start in range(0, len(ids), 5):
        broker.execute(push_op("q", list(range(start, start + 5)), ids=ids[start:start + 5], policy=policy))
    keeper = broker._keeper
    store = broker.store
    assert keeper is not None and isinstance(store, CountingStore)

    def sealed() -> bool:
        refs = parse_document("queue.json", stored(store), policy=policy).lanes.get("q", [])
        if len(refs) > 12 and not keeper._busy and {index_key("queue.json", ref.key) for ref in refs} <= set(
                store.list(index_prefix("queue.json"))):
            return True
        broker.execute(Tick())
        return False

    wait_for(sealed, what="more than 12 small seals, each with its index")
    refs = parse_document("queue.json", stored(store), policy=policy).lanes["q"]
    assert keeper.merged == 0 and all(ref.total < keeper.small_below for ref in refs)
    oldest = refs[1]  # the first is the one refills read from
    target = orjson.loads(store.get(oldest.key).data)["jobs"][-1]["id"]  # type: ignore[union-attr]
    as_after_a_takeover(broker)
    before = reads_so_far(store)
    assert broker.get_job(target)["segment"] == oldest.key
    assert segment_reads(store, before) == [oldest.key]


def test_an_index_whose_delete_failed_is_deleted_on_a_retry(
    make_broker: Callable[..., Broker], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The segment went but the store refused its index's delete: the
    collector never takes this leader's own epoch, so the keeper retries the
    delete itself (chaos seed 52 ended with such an index left behind)."""
    broker, keeper, doomed, parts = another_segment(make_broker, "flaky")
    keeper._write_index(doomed, parts)
    key = index_key("queue.json", doomed.key)
    assert key in broker.store.list(index_prefix("queue.json"))
    delete = broker.store.delete
    refused: list[str] = []

    def delete_refused_once(name: str) -> None:
        if name == key and not refused:
            refused.append(name)
            raise StoreUnavailable("the store answered 503")
        delete(name)

    monkeypatch.setattr(broker.store, "delete", delete_refused_once)
    assert keeper.reaper.delete_segment(doomed.key) and refused == [key]
    wait_for(lambda: key not in broker.store.list(index_prefix("queue.json")), what="the index deleted on a retry")
    assert doomed.key not in broker.store.list(segment_prefix("queue.json"))


def test_an_index_written_while_its_segment_was_deleted_does_not_outlive_it(
    make_broker: Callable[..., Broker], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The deletion lands between the index write's check and its put: the
    write sees the mark afterwards and deletes what it wrote."""
    broker, keeper, racing, parts = another_segment(make_broker, "racing")
    put = broker.store.put

    def put_while_deleting(key: str, data: bytes, **kwargs: object) -> str:
        if key == index_key("queue.json", racing.key):
            assert keeper.reaper.delete_segment(racing.key)  # another keeper thread, at this very moment
        return put(key, data, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(broker.store, "put", put_while_deleting)
    keeper._write_index(racing, parts)
    assert index_key("queue.json", racing.key) not in broker.store.list(index_prefix("queue.json"))


def test_the_index_a_writer_keeps_is_the_one_a_reader_decodes() -> None:
    """``build_index`` hands the writer the decoded index without decoding
    what it just built: it must be the same as a reader's."""
    parts = [orjson.dumps({"id": f"job-{i}", "pos": i}) for i in range(0, 3000, 3)]
    ref = SegmentRef(key="queue.json.seg/q/e00000001-p00000000000001-0a0b0c0f.json", total=1000, consumed=0,
                     front=0, last_pos=2997, size=1, sha256="e" * 64, oldest_enqueued_at=None,  # type: ignore[arg-type]
                     epoch=1, sealed_at=None)  # type: ignore[arg-type]
    data, built = build_index(ref.sha256, parts, len(encode_segment("q", 0, parts)))
    read = decode_index(ref, data)
    assert built.entries_at == read.entries_at == read_length(ref)
    assert [built.may_hold(f"job-{i}") for i in range(3000)] == [read.may_hold(f"job-{i}") for i in range(3000)]
    assert built.nbytes == read.nbytes == 4 * 1000
    # A body out of order, with its own SHA-256 right, is refused (the check now runs in C).
    body = data[read_length(ref) - 4 * 1000:read_length(ref)]
    swapped = body[:-8] + body[-4:] + body[-8:-4]
    head = b"queueadmin-idindex-2\n" + ref.sha256.encode() + b"\n"
    with pytest.raises(ValueError, match="not sorted"):
        decode_index(ref, head + hashlib.sha256(swapped).hexdigest().encode() + b"\n" + swapped)


def test_a_lookup_reads_the_indexes_it_lacks_in_growing_batches_and_stops_at_its_job() -> None:
    """IndexCache.candidates reads the missing indexes lazily, 8, then 16,
    then 32...: a lookup that finds its job in the newest segments (most
    look for a recent job) reads those first indexes only; an unknown id
    reads every index; segments without one come last."""
    store = CountingStore()
    refs = []
    for n in range(100):  # newest first, as a lookup asks
        parts = [orjson.dumps({"id": f"s{n}-job-{i}", "pos": 10 * n + i}) for i in range(10)]
        data = encode_segment("q", 10 * n, parts)
        ref = SegmentRef(key=f"queue.json.seg/q/e00000001-p{10 * n:014d}-0a0b0c{n:02x}.json", total=10, consumed=0,
                         front=10 * n, last_pos=10 * n + 9, size=len(data), sha256=hashlib.sha256(data).hexdigest(),
                         oldest_enqueued_at=None, epoch=1, sealed_at=None)  # type: ignore[arg-type]
        store.put(ref.key, data)
        if n != 50:  # one segment without an index
            store.put(index_key("queue.json", ref.key), encode_index(ref.sha256, parts, len(data)))
        refs.append(ref)
    indexes = IndexCache(store, "queue.json")

    def read() -> int:
        return sum(n for key, n in {**store.gets, **store.ranges}.items() if ".idx/" in key)

    first = next(indexes.candidates("s3-job-4", refs))
    assert first == (refs[3], True) and read() == FIRST_CANDIDATE_BATCH
    found = next(ref for ref, _ in indexes.candidates("s30-job-1", refs))
    assert found == refs[30] and read() == FIRST_CANDIDATE_BATCH * (1 + 2 + 4)  # 8 + 16 + 32 indexes, no more
    assert list(indexes.candidates("no-such-job", refs)) == [(refs[50], False)]
    assert read() == len(refs)  # each index read once, none again
