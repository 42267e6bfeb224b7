"""Id indexes of segment objects: which job ids a segment may hold (format 2).

A lookup of one job by id (``GET /api/v1/jobs/<id>``, the Django Tasks
backend's ``get_result``) must find a job that waits in a segment however
long ago it was sealed. Reading every segment to look is out of the question
at millions of jobs (gigabytes), and the document cannot carry a filter per
reference (it must stay small). So the keeper writes, next to every
segment (each seal, each merged one), a small immutable **index** object: the sorted
32-bit CRC-32 of each job id in it, 4 bytes a job. A lookup reads the
indexes (cached: they never change), and reads only the segments whose
index may hold the id.

Since version 2 an index also says where each job sits in its segment:
after the hashes (one per job, sorted, duplicates kept), a table of
``(offset, length, CRC-32 of the job's bytes)``, 12 bytes a job, in the
hashes' order. A lookup then reads one job with two ranged gets (its
entries in the index, its bytes in the segment) instead of the whole
segment (up to 16,384 jobs, ~7 MB), and checks the bytes against the CRC
and the id before it answers; anything that does not match sends it to the
whole segment, verified as before. Only the header and the hashes are read
and kept when an index is read (:func:`read_length`), so a new leader's
warm-up reads what it read with version 1. Version 1 indexes (hashes only,
each once) are still read: their segments are read whole.

An index is an accelerator, never data:

* it is written after its segment: before the Merge that references the
  segment is committed, or just after the Seal is queued (never delaying a
  seal); a lookup before it exists reads the segment, and a cache remembers
  an absent index only for :data:`ABSENT_RECHECK_SECONDS`. If writing it
  fails, the commit goes on without it (logged);
* it names the SHA-256 of its segment and the SHA-256 of its own body: an
  index that is damaged, truncated or meant for another object is ignored
  (logged), and the lookup reads the segment instead. It can cause an extra
  read (a CRC-32 shared by two ids: about one in 2^32 per job), never a
  missed job;
* it lives under its own prefix (``<document key>.idx/``), named after its
  segment, and goes when its segment goes (the keeper deletes both; the
  collector deletes an index whose segment is gone, by the segments' rule).

Small seals (merged soon) get one too: without it, a lookup on a leader
that did not seal them (after a takeover) read them blindly, within a bound
(``JOB_LOOKUP_READS``), and a job in an older one was not found. A segment
without an index (its write failed, or it predates indexes) is read whole,
within that bound, after the segments whose index names the id.
"""

from __future__ import annotations

import hashlib
import logging
import operator
import struct
import sys
import threading
import time
import weakref
import zlib
from array import array
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import islice

from engine.errors import StoreError
from engine.segments import SegmentRef, job_offsets, segment_prefix
from engine.stores.base import ObjectStore

log = logging.getLogger(__name__)

_MAGIC_V1 = b"queueadmin-idindex-1\n"
_MAGIC = b"queueadmin-idindex-2\n"
# The magic, then two SHA-256 hex digests, each ending in a newline: the
# segment's, and the hashes' (in version 2 the entries after them are not
# covered: a lookup checks each job it reads against its entry's CRC).
_HEAD = len(_MAGIC) + 2 * 65
_ENTRY = struct.Struct("<III")  # a version 2 entry: offset, length, CRC-32 of the job's bytes

#: What the keeper keeps of the indexes it read or wrote: 4 bytes a job, so
#: 32 MB covers 8 million jobs in merged segments.
INDEX_CACHE_BYTES = 32 * 1024 * 1024
#: A lookup reads the indexes it lacks this many first, then twice as many,
#: and so on (see IndexCache.candidates): one round of prefetch's 8 threads.
FIRST_CANDIDATE_BATCH = 8
#: A segment found without an index is asked about again after this long: a
#: seal's index is written just after its Seal is queued, so a lookup may
#: come between the two.
ABSENT_RECHECK_SECONDS = 60.0
#: And at most this many segments are remembered (most are absences of an
#: index, which weigh nothing in :data:`INDEX_CACHE_BYTES`: segments come and
#: go, and a cache of a long-lived node must not keep every key it saw).
INDEX_CACHE_ENTRIES = 65_536


def index_prefix(document_key: str) -> str:
    """Where the indexes of ``document_key``'s segments live."""
    return f"{document_key}.idx/"


def index_key(document_key: str, segment: str) -> str:
    """The key of the index of segment ``segment`` (a key under the segment prefix)."""
    prefix = segment_prefix(document_key)
    if not segment.startswith(prefix):
        raise ValueError(f"{segment!r} is not a segment of {document_key!r}")
    return f"{index_prefix(document_key)}{segment[len(prefix):].removesuffix('.json')}.ids"


def segment_of_index(document_key: str, key: str) -> str | None:
    """The segment key an index key names, or None for a key this module did
    not make (the collector leaves such objects alone)."""
    prefix = index_prefix(document_key)
    if not key.startswith(prefix) or not key.endswith(".ids"):
        return None
    return f"{segment_prefix(document_key)}{key[len(prefix):-len('.ids')]}.json"


def id_hash(job_id: bytes) -> int:
    """The 32-bit hash an index keeps of a job id (its UTF-8 bytes)."""
    return zlib.crc32(job_id)


def job_id_of(encoded_job: bytes) -> bytes:
    """The id of an encoded job (``{"id":"…",…}``, as ``encode_job`` writes
    it: the id first). Ids are letters, digits and ``_ . : -`` (``ID_PATTERN``),
    so the string holds no escape."""
    end = encoded_job.index(b'"', 7)
    return encoded_job[7:end]


def build_index(segment_sha256: str, encoded_jobs: Sequence[bytes], segment_size: int) -> tuple[bytes, IdIndex]:
    """The index (version 2) of a segment ``segment_size`` bytes long whose
    bytes hash to ``segment_sha256`` and whose jobs, encoded, are
    ``encoded_jobs``, in order: the object to store, and the same index
    decoded (the writer keeps it without decoding and checking what it just
    built: a seal writes one every time)."""
    offsets = job_offsets(segment_size, encoded_jobs)
    # Column by column, in C where it can be (a seal builds one for every
    # 2,000 jobs or so on a keeper thread: rows as tuples, sorted and packed
    # one by one, took three times as long as version 1's hashes alone).
    ids = list(map(zlib.crc32, map(job_id_of, encoded_jobs)))
    places = sorted(range(len(ids)), key=ids.__getitem__)
    hashes = array("I", map(ids.__getitem__, places))
    table = array("I", [0]) * (3 * len(places))
    table[0::3] = array("I", map(offsets.__getitem__, places))
    table[1::3] = array("I", map(len, map(encoded_jobs.__getitem__, places)))
    table[2::3] = array("I", map(zlib.crc32, map(encoded_jobs.__getitem__, places)))
    stored = hashes
    if sys.byteorder == "big":  # the format is little-endian
        stored = array("I", hashes)
        stored.byteswap()
        table.byteswap()
    body = stored.tobytes()
    entries = table.tobytes()
    data = b"".join((_MAGIC, segment_sha256.encode(), b"\n", hashlib.sha256(body).hexdigest().encode(), b"\n",
                     body, entries))
    return data, IdIndex(hashes, entries_at=_HEAD + len(body))


def encode_index(segment_sha256: str, encoded_jobs: Sequence[bytes], segment_size: int) -> bytes:
    """The stored bytes of :func:`build_index`."""
    return build_index(segment_sha256, encoded_jobs, segment_size)[0]


def decode_entries(data: bytes) -> list[tuple[int, int, int]]:
    """Version 2 entries, as read from an index: ``(offset, length, crc)``
    each. Raises ValueError if ``data`` is not whole entries."""
    if len(data) % _ENTRY.size:
        raise ValueError(f"{len(data)} bytes are not whole entries of {_ENTRY.size}")
    return list(_ENTRY.iter_unpack(data))


class IdIndex:
    """The decoded index of one segment: :meth:`may_hold` is exact for ids
    the segment holds (never False for one of them)."""

    __slots__ = ("_hashes", "entries_at")

    def __init__(self, hashes: array[int], *, entries_at: int | None = None) -> None:
        self._hashes = hashes
        #: Where the entries start in the index object (version 2), or None
        #: (version 1: the segment is read whole).
        self.entries_at = entries_at

    @property
    def nbytes(self) -> int:
        return len(self._hashes) * self._hashes.itemsize

    def may_hold(self, job_id: str) -> bool:
        """False only if the segment does not hold ``job_id``."""
        return self.span(job_id) is not None

    def span(self, job_id: str) -> tuple[int, int] | None:
        """``(first, count)``: the places in the index whose hash is
        ``job_id``'s (its entries, in version 2), or None if there are none."""
        wanted = id_hash(job_id.encode())
        at = bisect_left(self._hashes, wanted)
        end = at
        while end < len(self._hashes) and self._hashes[end] == wanted:
            end += 1
        return (at, end - at) if end > at else None


def read_length(ref: SegmentRef) -> int:
    """How much of the index of ``ref``'s segment to read: its header and
    hashes (version 2, one hash per job), which is all of a version 1 index."""
    return _HEAD + 4 * ref.total


def decode_index(ref: SegmentRef, data: bytes) -> IdIndex:
    """The index ``data`` of segment ``ref``: a version 1 index whole, or at
    least the header and hashes of a version 2 one (:func:`read_length`).
    Raises ValueError if it is damaged or is the index of another object
    (another SHA-256)."""
    version2 = data.startswith(_MAGIC)
    if not (version2 or data.startswith(_MAGIC_V1)) or len(data) < _HEAD:
        raise ValueError("not an id index (bad header)")
    if version2:
        body = data[_HEAD:_HEAD + 4 * ref.total]
        if len(body) != 4 * ref.total:
            raise ValueError(f"it holds fewer than the segment's {ref.total} hashes")
    else:
        body = data[_HEAD:]
        if len(body) % 4:
            raise ValueError("not an id index (bad length)")
    segment_sha, body_sha = data[len(_MAGIC):_HEAD].split(b"\n")[:2]
    if segment_sha.decode("ascii", "replace") != ref.sha256:
        raise ValueError("it indexes another object (SHA-256 differs from the reference's)")
    if hashlib.sha256(body).hexdigest().encode() != body_sha:
        raise ValueError("its body does not match its SHA-256")
    hashes = array("I")
    hashes.frombytes(body)
    if sys.byteorder == "big":
        hashes.byteswap()
    # In C, not a Python loop: a new leader checks every index it reads (5
    # million hashes at 5 million jobs) while it takes over. Version 1 has
    # each hash once; version 2 one per job, so two ids may share one.
    if any(map(operator.gt if version2 else operator.ge, hashes, islice(hashes, 1, None))):
        raise ValueError("its hashes are not sorted")
    return IdIndex(hashes, entries_at=_HEAD + len(body) if version2 else None)


class IndexCache:
    """The indexes this node read or wrote, by segment key, bounded by
    :data:`INDEX_CACHE_BYTES` (least recently used first out). A segment
    found to have no usable index is remembered as such (``None``) for
    :data:`ABSENT_RECHECK_SECONDS`, so lookups do not ask the store again
    each time; an index, once read, never changes. Thread-safe."""

    def __init__(self, store: ObjectStore, document_key: str, *, max_bytes: int = INDEX_CACHE_BYTES) -> None:
        self.store = store
        self.document_key = document_key
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, IdIndex | None] = OrderedDict()
        self._bytes = 0
        # Segment key -> monotonic time it was found without an index.
        self._absent: dict[str, float] = {}
        self._lock = threading.Lock()
        self.reads = 0  # index objects read (found or not): for tests and the benchmark

    def known(self, key: str) -> bool:
        """Whether the index of segment ``key`` (or its recent absence) is cached."""
        with self._lock:
            return self._fresh(key)

    def lacks(self, key: str) -> bool:
        """Whether segment ``key`` was found without a usable index (a cached
        absence, fresh or not), without I/O."""
        with self._lock:
            return key in self._entries and self._entries[key] is None

    def _fresh(self, key: str) -> bool:
        if key not in self._entries:
            return False
        found = self._absent.get(key)
        return found is None or time.monotonic() - found < ABSENT_RECHECK_SECONDS

    def get(self, ref: SegmentRef) -> IdIndex | None:
        """The index of ``ref``'s segment, or None if it has none that can be
        used (none written, or damaged: logged). Reads it if not cached.
        Raises StoreError if the store fails (nothing is remembered then)."""
        with self._lock:
            if self._fresh(ref.key):
                self._entries.move_to_end(ref.key)
                return self._entries[ref.key]
        key = index_key(self.document_key, ref.key)
        data = self.store.get_range(key, 0, read_length(ref))  # the hashes, not the entries
        self.reads += 1
        index: IdIndex | None = None
        if data is not None:
            try:
                index = decode_index(ref, data)
            except ValueError as exc:
                log.warning("ignoring the id index %s of segment %s: %s", key, ref.key, exc)
        # Absent: its write failed, or has not happened yet (a lookup right
        # after the seal landed), or the segment predates indexes. Asked
        # about again after a while, not on every lookup.
        self.put(ref.key, index, recheck=index is None)
        return index

    def put(self, segment: str, index: IdIndex | None, *, recheck: bool = False) -> None:
        """Remember ``index`` (or that there is none) for segment ``segment``;
        with ``recheck``, an absence only for :data:`ABSENT_RECHECK_SECONDS`."""
        with self._lock:
            old = self._entries.pop(segment, None)
            self._bytes -= old.nbytes if old is not None else 0
            self._entries[segment] = index
            self._bytes += index.nbytes if index is not None else 0
            if recheck:
                self._absent[segment] = time.monotonic()
            else:
                self._absent.pop(segment, None)
            while (self._bytes > self.max_bytes or len(self._entries) > INDEX_CACHE_ENTRIES) and len(self._entries) > 1:
                gone, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.nbytes if evicted is not None else 0
                self._absent.pop(gone, None)

    def entries(self, ref: SegmentRef, index: IdIndex, job_id: str) -> list[tuple[int, int, int]]:
        """The version 2 entries ``(offset, length, crc)`` of ``index`` (the
        index of ``ref``'s segment) whose hash is ``job_id``'s: one ranged
        read of the index object. Empty if the index is version 1, names no
        such hash, is gone, or ends short (the caller then reads the segment
        whole). Raises StoreError if the store fails."""
        span = index.span(job_id)
        if index.entries_at is None or span is None:
            return []
        first, count = span
        data = self.store.get_range(index_key(self.document_key, ref.key),
                                    index.entries_at + _ENTRY.size * first, _ENTRY.size * count)
        if data is None or len(data) != _ENTRY.size * count:
            return []
        return decode_entries(data)

    def clear(self) -> None:
        """Forget every index and absence (tests and the benchmark: a cold start)."""
        with self._lock:
            self._entries.clear()
            self._absent.clear()
            self._bytes = 0

    def forget(self, segment: str) -> None:
        with self._lock:
            old = self._entries.pop(segment, None)
            self._bytes -= old.nbytes if old is not None else 0
            self._absent.pop(segment, None)

    def prefetch(self, refs: Sequence[SegmentRef], *, threads: int = 8) -> int:
        """Read the indexes of ``refs`` not cached yet, ``threads`` at a time
        (one per segment: ~600 at 5 million jobs). A store error leaves that
        one unread. Returns how many it tried to read."""
        missing = [ref for ref in refs if not self.known(ref.key)]
        if not missing:
            return 0

        def read(ref: SegmentRef) -> None:
            try:
                self.get(ref)
            except StoreError as exc:
                log.warning("reading the id index of segment %s: %s", ref.key, exc)

        if len(missing) == 1:
            read(missing[0])
            return 1
        with ThreadPoolExecutor(max_workers=min(threads, len(missing)), thread_name_prefix="idindex") as pool:
            list(pool.map(read, missing))
        return len(missing)

    def candidates(self, job_id: str, refs: Sequence[SegmentRef]) -> Iterator[tuple[SegmentRef, bool]]:
        """Where a lookup of ``job_id`` must read, among ``refs`` (in their
        order, newest first is best): first each segment whose index may hold
        the id (almost always just the one that does), as ``(ref, True)``;
        then each segment without an index, as ``(ref, False)``.

        Lazy: the indexes not cached are read as it goes, in batches that
        double (:data:`FIRST_CANDIDATE_BATCH`, then twice as many, ...; each
        batch with :meth:`prefetch`), so that a lookup that stops at its job
        reads only the indexes up to it. Most look for a job pushed lately, in
        the newest segments: on a leader that has not read its indexes yet, at
        5 million jobs, that is 8 indexes instead of ~600 (seconds on a store
        with 50 ms requests). An id that no segment holds reads them all, a
        few batches' ends more slowly than in one go. Raises StoreError if an
        index still cannot be read."""
        unindexed: list[SegmentRef] = []
        start, size = 0, FIRST_CANDIDATE_BATCH
        while start < len(refs):
            batch = refs[start:start + size]
            self.prefetch(batch)
            for ref in batch:
                index = self.get(ref)
                if index is None:
                    unindexed.append(ref)
                elif index.may_hold(job_id):
                    yield ref, True
            start, size = start + size, size * 2
        for ref in unindexed:
            yield ref, False


# One IndexCache per store object and document (see shared_index_cache).
_SHARED: weakref.WeakKeyDictionary[ObjectStore, dict[str, IndexCache]] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def shared_index_cache(store: ObjectStore, document_key: str) -> IndexCache:
    """The process's one :class:`IndexCache` for ``document_key`` on ``store``
    (the same object): a leader's lanes keeper, the keeper of its next
    tenure and the dashboard of the same process share it, so each index is
    read and held once (at 5 million jobs ~20 MB, which two caches held
    twice). Sharing is safe because an index never changes once written,
    and a segment's key is never reused. Forgotten with the store."""
    with _SHARED_LOCK:
        caches = _SHARED.setdefault(store, {})
        cache = caches.get(document_key)
        if cache is None:
            cache = caches[document_key] = IndexCache(store, document_key)
        return cache


__all__ = [
    "ABSENT_RECHECK_SECONDS",
    "INDEX_CACHE_BYTES",
    "INDEX_CACHE_ENTRIES",
    "IdIndex",
    "IndexCache",
    "build_index",
    "decode_entries",
    "decode_index",
    "encode_index",
    "id_hash",
    "index_key",
    "index_prefix",
    "job_id_of",
    "read_length",
    "segment_of_index",
    "shared_index_cache",
]
