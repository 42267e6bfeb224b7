"""A property of ``IndexCache.candidates`` (run by tests/fuzz/test_fuzz_candidates.py
under the fuzz suite's profile; it lives here because it reads engine
internals, which only the engine's own tests may): against the plain rule it replaces: read every
index, then name the segments whose index may hold the id, in order, and
after them the segments without an index. The lazy version reads the
indexes in doubling batches and may be stopped early (engine.lookup and the
dashboard's job page stop at their job); whatever the segments, the missing
or damaged indexes and the id, it must name the same segments in the same
order, and a caller that stops at the k-th batch must have read no index
beyond it."""

from __future__ import annotations

import hashlib

import orjson
from hypothesis import example, given
from hypothesis import strategies as st

from engine.idindex import (
    FIRST_CANDIDATE_BATCH,
    IndexCache,
    decode_index,
    encode_index,
    index_key,
    read_length,
)
from engine.segments import SegmentRef, encode_segment
from engine.stores import MemoryStore
from engine.stores.base import Blob

KEY = "queue.json"


class CountingStore(MemoryStore):
    """Records which index objects were read."""

    def __init__(self) -> None:
        super().__init__()
        self.indexes_read: list[str] = []

    def get(self, key: str) -> Blob | None:
        if ".idx/" in key:
            self.indexes_read.append(key)
        return super().get(key)

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        if ".idx/" in key:
            self.indexes_read.append(key)
        blob = MemoryStore.get(self, key)
        return None if blob is None else blob.data[start:start + length]


# Per segment: its job count, and its index: present, absent or damaged.
SEGMENTS = st.lists(st.tuples(st.integers(1, 4), st.sampled_from(["index", "index", "index", "none", "damaged"])),
                    max_size=40)


def build(store: MemoryStore, segments: list[tuple[int, str]]) -> tuple[list[SegmentRef], list[list[str]]]:
    """Write the segments (newest first, as a lookup asks) and their indexes; their refs and job ids."""
    refs, ids = [], []
    for n, (count, index) in enumerate(segments):
        jobs = [f"s{n}-j{i}" for i in range(count)]
        parts = [orjson.dumps({"id": job, "pos": 10 * n + i}) for i, job in enumerate(jobs)]
        data = encode_segment("q", 10 * n, parts)
        ref = SegmentRef(key=f"{KEY}.seg/q/e00000001-p{10 * n:014d}-0a0b{n:04x}.json", total=count, consumed=0,
                         front=10 * n, last_pos=10 * n + count - 1, size=len(data),
                         sha256=hashlib.sha256(data).hexdigest(), oldest_enqueued_at=None,  # type: ignore[arg-type]
                         epoch=1, sealed_at=None)  # type: ignore[arg-type]
        store.put(ref.key, data)
        if index != "none":
            encoded = encode_index(ref.sha256, parts, len(data))
            if index == "damaged":  # a hash flipped: it no longer verifies, and counts as no index
                at = read_length(ref) - 1
                encoded = encoded[:at] + bytes([encoded[at] ^ 1]) + encoded[at + 1:]
            store.put(index_key(KEY, ref.key), encoded)
        refs.append(ref)
        ids.append(jobs)
    return refs, ids


def eager(store: MemoryStore, refs: list[SegmentRef], job_id: str) -> list[tuple[str, bool]]:
    """The rule, the plain way: every index read first."""
    named, unindexed = [], []
    for ref in refs:
        blob = store.get(index_key(KEY, ref.key))
        try:
            index = decode_index(ref, blob.data) if blob is not None else None
        except ValueError:
            index = None
        if index is None:
            unindexed.append(ref.key)
        elif index.may_hold(job_id):
            named.append(ref.key)
    return [(key, True) for key in named] + [(key, False) for key in unindexed]


@given(segments=SEGMENTS, pick=st.integers(0, 10_000), known=st.booleans(), stop_after=st.integers(0, 3))
# A job in the first batch of many segments: stopped there, nothing beyond it is read.
@example(segments=[(1, "index")] * 20, pick=3, known=True, stop_after=1)
def lazy_candidates_name_what_reading_every_index_names_and_read_no_further_than_asked(
        segments: list[tuple[int, str]], pick: int, known: bool, stop_after: int) -> None:
    store = CountingStore()
    refs, ids = build(store, segments)
    everyone = [job for jobs in ids for job in jobs]
    job_id = everyone[pick % len(everyone)] if known and everyone else f"unknown-{pick}"

    lazy = IndexCache(store, KEY)
    assert [(ref.key, indexed) for ref, indexed in lazy.candidates(job_id, refs)] == eager(store, refs, job_id)
    if known and everyone:  # the segment holding the job is named, if its index is whole
        owner = next(n for n, jobs in enumerate(ids) if job_id in jobs)
        named = [(ref, indexed) for ref, indexed in lazy.candidates(job_id, refs)]
        assert (refs[owner], segments[owner][1] == "index") in named

    # Stopped after ``stop_after`` answers, a fresh cache has read only the batches up to the last answer's.
    fresh = IndexCache(store, KEY)
    store.indexes_read.clear()
    answers = fresh.candidates(job_id, refs)
    taken = [ref for _, (ref, indexed) in zip(range(stop_after), answers, strict=False) if indexed]
    if taken and len(taken) == stop_after:
        last = refs.index(taken[-1])
        end, size = 0, FIRST_CANDIDATE_BATCH
        while end <= last:
            end, size = end + size, size * 2
        # (An absent index is asked for too: that is a read.)
        assert set(store.indexes_read) <= {index_key(KEY, ref.key) for ref in refs[:end]}
