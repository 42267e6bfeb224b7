"""Format 2's segments, as the dashboard reads them.

In format 2 (``docs/format.md``) a queue's pending jobs beyond a window live
in immutable *segment* objects that the document references. The dashboard
counts them from the references alone (no I/O: a reference says how many
jobs it still holds), and reads an object only to *show* its jobs: a page of
a queue's pending jobs deep in its backlog, or a job page for a job that
sits in one.

Reads go through :data:`cache`, a least-recently-used cache of decoded
segments keyed by object key. A segment is written once and never changed,
so an entry can never go stale: a key the document stops referencing simply
stops being asked for and ages out. The cache holds at most
:data:`CACHE_BYTES` of segment objects (their stored size; decoded, they take
a few times that in memory), and always the most recent one, however large.

A segment that is missing, altered or malformed raises
:class:`~engine.SegmentUnreadable` (naming the object), and store trouble
raises :class:`~engine.StoreError`; the pages show either as an error naming
the object, never a 500. Nothing here writes anything.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from engine import (
    DOCUMENT_KEY,
    JOB_LOOKUP_READS,
    SEGMENT_KINDS,
    DelayedRef,
    DocumentError,
    EngineError,
    IndexCache,
    ObjectStore,
    RangedFinds,
    SegmentRef,
    SegmentUnreadable,
    newest_first,
    one_job,
    ranged_job,
    read_segment,
    shared_index_cache,
)
from queueadmin import runtime

Doc = dict[str, Any]
log = logging.getLogger(__name__)

#: The cache's bound: the stored bytes of the segments it keeps decoded.
#: 64 MB is 64 segments of 1,000 jobs of ~1 KB, or ~160,000 jobs of the
#: engine's ~400 bytes: enough to page back and forth through a deep backlog
#: without re-reading, small beside a node's memory.
CACHE_BYTES = 64 * 1024 * 1024

#: A dashboard read of the document starts at most one index warm-up
#: (:func:`warm_soon`) this often, and never two at once.
WARM_EVERY_SECONDS = 30.0
#: Index reads a warm-up makes at once: a few, beside the pages being served.
WARM_THREADS = 4


def _moment(value: str | None) -> datetime:
    return datetime.fromisoformat(value) if value else datetime.fromtimestamp(0, UTC)


def lanes_of(header: Doc, *, key: str = DOCUMENT_KEY) -> dict[str, list[SegmentRef]]:
    """Per queue, its segment references from a format-2 document's header
    (``lanes``), oldest first; queues without any are left out. Raises
    DocumentError naming the field for a reference that is not one (the
    engine refuses such a document too, I6); no I/O."""
    lanes: dict[str, list[SegmentRef]] = {}
    raw = header.get("lanes") or {}
    if not isinstance(raw, dict):
        raise DocumentError(key, "lanes: expected an object")
    for queue, lane in raw.items():
        items = lane.get("segments") if isinstance(lane, dict) else None
        if not isinstance(items, list):
            raise DocumentError(key, f"lanes.{queue}: expected an object with a list of segments")
        for i, item in enumerate(items):
            try:
                lanes.setdefault(queue, []).append(ref_of(item))
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise DocumentError(key, f"lanes.{queue}.segments[{i}]: not a segment reference ({exc!r})") from exc
    return lanes


def delays_of(header: Doc, *, key: str = DOCUMENT_KEY) -> dict[str, list[DelayedRef]]:
    """Per queue, its delayed segment references from a format-3
    document's header (``lanes.<queue>.delayed``), in due order; queues
    without any are left out. Raises DocumentError naming the field for a
    reference that is not one; no I/O."""
    delays: dict[str, list[DelayedRef]] = {}
    raw = header.get("lanes") or {}
    if not isinstance(raw, dict):
        raise DocumentError(key, "lanes: expected an object")
    for queue, lane in raw.items():
        items = lane.get("delayed", []) if isinstance(lane, dict) else None
        if not isinstance(items, list):
            raise DocumentError(key, f"lanes.{queue}.delayed: expected a list of delayed segments")
        for i, item in enumerate(items):
            try:
                if not isinstance(item["key"], str) or not isinstance(item["sha256"], str):
                    raise TypeError("key and sha256 must be strings")
                ref = DelayedRef(
                    key=item["key"], total=int(item["total"]), size=int(item["size"]), sha256=item["sha256"],
                    epoch=int(item.get("epoch") or 0), sealed_at=_moment(item.get("sealed_at")),
                    first_due=_moment(item["first_due"]), last_due=_moment(item["last_due"]),
                    min_pos=int(item["min_pos"]), max_pos=int(item["max_pos"]),
                )
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise DocumentError(key, f"lanes.{queue}.delayed[{i}]: not a delayed segment ({exc!r})") from exc
            delays.setdefault(queue, []).append(ref)
    return delays


def ref_of(item: Doc) -> SegmentRef:
    """A segment reference from the document's JSON (``lanes.<queue>.segments[i]``).
    Raises KeyError, TypeError or ValueError for anything else."""
    if not isinstance(item["key"], str) or not isinstance(item["sha256"], str):
        raise TypeError("key and sha256 must be strings")
    return SegmentRef(
        key=item["key"], total=int(item["total"]), consumed=int(item["consumed"]), front=int(item["front"]),
        last_pos=int(item["last_pos"]), size=int(item["size"]), sha256=item["sha256"],
        oldest_enqueued_at=_moment(item.get("oldest_enqueued_at")), epoch=int(item.get("epoch") or 0),
        sealed_at=_moment(item.get("sealed_at")),
    )


class SegmentCache:
    """Decoded segments by object key, least recently used first out, at
    most ``max_bytes`` of stored size (the latest entry is kept even when
    it alone is larger). Thread-safe; the read itself happens outside the
    lock, so two pages missing the same key may both read it (harmless: the
    object is immutable)."""

    def __init__(self, *, max_bytes: int = CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[int, list[Doc]]] = OrderedDict()
        self._bytes = 0
        #: Counters, for tests and measurements.
        self.hits = 0
        self.reads = 0

    def cached(self, key: str) -> list[Doc] | None:
        """The jobs of ``key`` if cached (marking it recently used), else None. No I/O."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[1]

    def keys(self) -> list[str]:
        """The cached keys, most recently used last."""
        with self._lock:
            return list(self._entries)

    def jobs(self, ref: SegmentRef, *, store: ObjectStore | None = None) -> list[Doc]:
        """Every job of the segment ``ref`` names, oldest first (the first
        ``ref.consumed`` of them are back in the document by now), as the
        plain dicts the document's jobs decode to. Reads the object (from
        ``store``, default this node's broker's) unless cached. Raises
        SegmentUnreadable for an object that is missing or does not verify
        against ``ref``, StoreError for store trouble."""
        found = self.cached(ref.key)
        if found is not None:
            return found
        store = store if store is not None else runtime.get_broker().store
        # Verified: size, SHA-256, shape. Of either kind: a queue's list pages
        # into its delayed segments too, and a job page finds a job in one.
        items: list[Doc] = read_segment(store, ref, kind=SEGMENT_KINDS)
        with self._lock:
            self.reads += 1
            if ref.key not in self._entries:
                self._entries[ref.key] = (ref.size, items)
                self._bytes += ref.size
            while self._bytes > self.max_bytes and len(self._entries) > 1:
                _, (size, _) = self._entries.popitem(last=False)
                self._bytes -= size
        return items

    def clear(self) -> None:
        """Forget every entry (tests; a change of store)."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0
            self.hits = self.reads = 0


#: The process-wide cache every page reads segments through.
cache = SegmentCache()

def indexes() -> IndexCache:
    """The process's cache of the merged segments' id indexes
    (``engine.idindex``) of this node's broker's store: the one its lanes
    keeper fills while it leads (``engine.shared_index_cache``), so that
    each index is read and held once per process."""
    broker = runtime.get_broker()
    return shared_index_cache(broker.store, broker.key)


class _Warming:
    """When the last warm-up started, and whether one is running."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = False
        self.started = float("-inf")


_warming = _Warming()


def warm_soon(lanes: dict[str, list[SegmentRef]], *, index: IndexCache | None = None) -> threading.Thread | None:
    """Start reading, on a background thread, the id index of every segment
    in ``lanes`` that ``index`` (default :func:`indexes`) does not hold yet,
    so that the first job page for a job deep in a backlog reads one index
    at most, not hundreds (~300 at 5 million jobs: seconds on a store with
    50 ms requests). The leader's lanes keeper warms the same cache as it
    takes over; this covers a standby, whose keeper does not run, and
    indexes that a failed read left out. Called as the dashboard reads the
    document for a page, so that a node nobody looks at reads nothing. At
    most one at a time and one per :data:`WARM_EVERY_SECONDS`; a store error
    leaves an index for the job page to read. Returns the thread started,
    or None."""
    if not lanes:
        return None
    cache_ = index or indexes()
    now = time.monotonic()
    with _warming.lock:
        # Before the references are gathered: every dashboard page calls this.
        if _warming.running or now - _warming.started < WARM_EVERY_SECONDS:
            return None
        _warming.running, _warming.started = True, now
    refs = [ref for refs in lanes.values() for ref in refs]

    def warm() -> None:
        try:
            cache_.prefetch(refs, threads=WARM_THREADS)
        except Exception:  # a bug: say so, and let the job page read what it needs
            log.exception("reading the segments' id indexes in the background")
        finally:
            with _warming.lock:
                _warming.running = False

    thread = threading.Thread(target=warm, name="dashboard-index-warm-up", daemon=True)
    thread.start()
    return thread


def forget_warm_up() -> None:
    """Let the next :func:`warm_soon` start at once (tests; a settings change)."""
    with _warming.lock:
        _warming.started = float("-inf")


@dataclass(frozen=True, slots=True)
class Block:
    """A run of a queue's pending jobs in FIFO order: jobs in the document
    (``items``), or the unconsumed jobs of one segment (``ref``)."""

    count: int
    items: list[Doc] | None = None
    ref: SegmentRef | None = None


def fifo_blocks(pending_here: list[Doc], refs: list[SegmentRef],
                delays: Sequence[DelayedRef] = ()) -> list[Block]:
    """A queue's pending jobs as blocks in FIFO order: the front (document
    jobs with ``pos`` below the first segment's ``front``), then each
    segment, each followed by the document's jobs whose ``pos`` lies between
    it and the next one, and the tail last; then (format 3) each delayed
    segment, in due order, whose jobs are not due yet and wait outside the
    FIFO order. ``pending_here`` are the queue's pending jobs in the
    document, in ``pos`` order.

    Delayed jobs stay in the document whatever their ``pos``; one whose
    ``pos`` falls inside a segment's span is listed just after that segment
    (placing it exactly would mean reading the segment to count)."""
    blocks: list[Block] = []
    i = 0
    bounds = [ref.front for ref in refs[1:]] + [None] if refs else []  # (a queue may have delayed segments only)
    first = refs[0].front if refs else None
    start = i
    while i < len(pending_here) and (first is None or pending_here[i]["pos"] < first):
        i += 1
    if i > start:
        blocks.append(Block(i - start, items=pending_here[start:i]))
    for ref, upto in zip(refs, bounds, strict=True):
        blocks.append(Block(ref.remaining, ref=ref))
        start = i
        while i < len(pending_here) and (upto is None or pending_here[i]["pos"] < upto):
            i += 1
        if i > start:
            blocks.append(Block(i - start, items=pending_here[start:i]))
    blocks.extend(Block(ref.total, ref=ref.as_segment()) for ref in delays)
    return blocks


def page(blocks: list[Block], start: int, count: int,
         read: Callable[[SegmentRef], list[Doc]] | None = None) -> list[Doc]:
    """Jobs ``start`` to ``start + count`` of ``blocks`` (see
    :func:`fifo_blocks`), each with its ``status``, and those read from a
    segment with its object's key as ``segment``: only the segments the
    page overlaps are read, through ``read`` (default :data:`cache`).
    Raises what ``read`` raises."""
    read = read or cache.jobs
    shown: list[Doc] = []
    offset = 0
    for block in blocks:
        end = offset + block.count
        if end > start and offset < start + count:
            lo, hi = max(start - offset, 0), min(start + count - offset, block.count)
            if block.items is not None:
                shown.extend(block.items[lo:hi])
            else:
                assert block.ref is not None
                skip = block.ref.consumed  # refilled into the document already
                key = block.ref.key
                shown.extend(dict(j, status="pending", segment=key) for j in read(block.ref)[skip + lo:skip + hi])
        offset = end
        if offset >= start + count:
            break
    return shown


#: The jobs job pages found with ranged reads, by id (see :func:`find_in_segments`).
ranged = RangedFinds()


def find_in_segments(job_id: str, lanes: dict[str, list[SegmentRef]], *, sealed_recently: bool,
                     read: Callable[[SegmentRef], list[Doc]] | None = None,
                     budget: int = JOB_LOOKUP_READS, index: IndexCache | None = None) -> tuple[Doc, str, str] | None:
    """The pending job ``job_id``, its queue and its segment's key, if it sits (unconsumed) in
    one of the referenced segments the lookup tries: the one it was found in
    by range before, and every cached one (no I/O); then, newest first across
    queues, each segment whose id index (``index``, default :func:`indexes`;
    read once, kept) may hold the id, and after them, when ``sealed_recently``
    (its id is in the document's ``sealed`` window), segments without an
    index; at most ``budget`` segment reads in all. None when not found
    within that bound. Raises what ``read`` raises, and StoreError from
    reading an index or a range.

    Through a version 2 index a segment is not read whole: the job's entry
    and its bytes are two ranged gets of a few hundred bytes
    (``engine.ranged_job``, checked against the entry's length and CRC-32 and
    the id), where the segment is up to ~7 MB (0.25-1.0 s on a store with
    50 ms requests and 100 MB/s). What it finds is kept in :data:`ranged`
    for the next view of the page. As the leader's lookups do, a second job
    found in the same segment reads it whole into :data:`cache`, where the
    list pages find it too; and so does anything a range cannot tell (a
    version 1 index, an entry or job that does not check), which verifies
    the whole object (I6)."""
    read = read or cache.jobs
    index = index or indexes()
    referenced = {ref.key: (queue, ref) for queue, refs in lanes.items() for ref in refs}
    kept = ranged.get(job_id)
    if kept is not None and kept[0] in referenced:
        found = _ranged_found(*referenced[kept[0]], kept[1])
        if found is not None:
            return found
    tried: set[str] = set()
    for key in reversed(cache.keys()):
        if key in referenced:
            tried.add(key)
            found = _look(job_id, *referenced[key], read)
            if found is not None:
                return found
    queue_of = {ref.key: queue for queue, ref in newest_first(lanes) if ref.key not in tried}
    for ref, indexed in index.candidates(job_id, [referenced[key][1] for key in queue_of]):
        # Segments without an index (they come last) only for a recently sealed id (see above).
        if budget <= 0 or not (indexed or sealed_recently):
            break
        budget -= 1
        queue = queue_of[ref.key]
        if indexed and not ranged.touched(ref.key):
            data, sure = ranged_job(index, ref, job_id)
            if data is not None:
                try:
                    found = _ranged_found(queue, ref, data)
                except (ValueError, SegmentUnreadable):
                    # Bytes that match their entry and still are no job: the
                    # segment read whole says what is wrong with it (I6).
                    found, sure = None, False
                else:
                    ranged.add(job_id, ref.key, data)
                if found is not None:
                    return found
            if sure:
                continue  # not in this segment, or moved back into the document already
        found = _look(job_id, queue, ref, read)
        if found is not None:
            return found
    return None


def _ranged_found(queue: str, ref: SegmentRef, data: bytes) -> tuple[Doc, str, str] | None:
    """The job ``data`` read by range from segment ``ref``, as :func:`_look`
    gives it, unless it was moved back into the document already (its
    ``pos`` before the reference's ``front``). Raises ValueError (orjson's
    error is one) or SegmentUnreadable for bytes that are no job."""
    item = orjson.loads(data)
    _, pos, _ = one_job(ref, item, ref.consumed)  # checks it is a job, as a whole read would
    return (dict(item, status="pending"), queue, ref.key) if pos >= ref.front else None


def _look(job_id: str, queue: str, ref: SegmentRef,
          read: Callable[[SegmentRef], list[Doc]]) -> tuple[Doc, str, str] | None:
    for job in read(ref)[ref.consumed:]:
        if job.get("id") == job_id:
            return dict(job, status="pending"), queue, ref.key
    return None


def describe(exc: EngineError) -> str:
    """An error reading a segment, for a page (it names the object)."""
    return f"{type(exc).__name__}: {exc}"


__all__ = [
    "CACHE_BYTES",
    "JOB_LOOKUP_READS",
    "WARM_EVERY_SECONDS",
    "Block",
    "SegmentCache",
    "cache",
    "delays_of",
    "describe",
    "fifo_blocks",
    "find_in_segments",
    "forget_warm_up",
    "lanes_of",
    "page",
    "ref_of",
    "warm_soon",
]
