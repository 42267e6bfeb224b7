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
import sys
import threading
import time
import weakref
import zlib
from array import array
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import islice

from engine.errors import StoreError
from engine.segments import SegmentRef, segment_prefix
from engine.stores.base import ObjectStore

log = logging.getLogger(__name__)

_MAGIC = b"queueadmin-idindex-1\n"
_HEAD = len(_MAGIC) + 2 * 65  # the magic, then two SHA-256 hex digests, each ending in a newline

#: What the keeper keeps of the indexes it read or wrote: 4 bytes a job, so
#: 32 MB covers 8 million jobs in merged segments.
INDEX_CACHE_BYTES = 32 * 1024 * 1024
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


def build_index(segment_sha256: str, encoded_jobs: Iterable[bytes]) -> tuple[bytes, IdIndex]:
    """The index of a segment whose bytes hash to ``segment_sha256`` and
    whose jobs, encoded, are ``encoded_jobs``: the object to store, and the
    same index decoded (the writer keeps it without decoding and checking
    what it just built: a seal writes one every time)."""
    hashes = array("I", sorted({id_hash(job_id_of(job)) for job in encoded_jobs}))
    stored = hashes
    if sys.byteorder == "big":  # the format is little-endian
        stored = array("I", hashes)
        stored.byteswap()
    body = stored.tobytes()
    data = b"".join((_MAGIC, segment_sha256.encode(), b"\n", hashlib.sha256(body).hexdigest().encode(), b"\n", body))
    return data, IdIndex(hashes)


def encode_index(segment_sha256: str, encoded_jobs: Iterable[bytes]) -> bytes:
    """The stored bytes of :func:`build_index`."""
    return build_index(segment_sha256, encoded_jobs)[0]


class IdIndex:
    """The decoded index of one segment: :meth:`may_hold` is exact for ids
    the segment holds (never False for one of them)."""

    __slots__ = ("_hashes",)

    def __init__(self, hashes: array[int]) -> None:
        self._hashes = hashes

    @property
    def nbytes(self) -> int:
        return len(self._hashes) * self._hashes.itemsize

    def may_hold(self, job_id: str) -> bool:
        """False only if the segment does not hold ``job_id``."""
        wanted = id_hash(job_id.encode())
        at = bisect_left(self._hashes, wanted)
        return at < len(self._hashes) and self._hashes[at] == wanted


def decode_index(ref: SegmentRef, data: bytes) -> IdIndex:
    """The index ``data`` of segment ``ref``. Raises ValueError if it is
    damaged or is the index of another object (another SHA-256)."""
    if not data.startswith(_MAGIC) or len(data) < _HEAD or (len(data) - _HEAD) % 4:
        raise ValueError("not an id index (bad header or length)")
    segment_sha, body_sha = data[len(_MAGIC):_HEAD].split(b"\n")[:2]
    if segment_sha.decode("ascii", "replace") != ref.sha256:
        raise ValueError("it indexes another object (SHA-256 differs from the reference's)")
    body = data[_HEAD:]
    if hashlib.sha256(body).hexdigest().encode() != body_sha:
        raise ValueError("its body does not match its SHA-256")
    hashes = array("I")
    hashes.frombytes(body)
    if sys.byteorder == "big":
        hashes.byteswap()
    # In C, not a Python loop: a new leader checks every index it reads (5
    # million hashes at 5 million jobs) while it takes over.
    if any(map(operator.ge, hashes, islice(hashes, 1, None))):
        raise ValueError("its hashes are not sorted")
    return IdIndex(hashes)


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
        blob = self.store.get(key)
        self.reads += 1
        index: IdIndex | None = None
        if blob is not None:
            try:
                index = decode_index(ref, blob.data)
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

    def candidates(
        self, job_id: str, refs: Sequence[SegmentRef],
    ) -> tuple[list[SegmentRef], list[SegmentRef]]:
        """Where a lookup of ``job_id`` must read, among ``refs`` (in their
        order): the segments whose index may hold the id (almost always just
        the one that does), and the segments without an index. The indexes
        not cached are read first (:meth:`prefetch`). Raises StoreError if
        one still cannot be read."""
        self.prefetch(refs)
        named: list[SegmentRef] = []
        unindexed: list[SegmentRef] = []
        for ref in refs:
            index = self.get(ref)
            if index is None:
                unindexed.append(ref)
            elif index.may_hold(job_id):
                named.append(ref)
        return named, unindexed


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
    "decode_index",
    "encode_index",
    "id_hash",
    "index_key",
    "index_prefix",
    "job_id_of",
    "segment_of_index",
    "shared_index_cache",
]
