"""Format 2: the segment jobs a leader's lane keeper holds in memory.

:class:`HeldSegments` keeps two things, both safe to keep for as long as
memory allows because a segment object never changes once written:

* **decoded windows** of the segments refills read (``jobs``): a queue
  refills from its first segment many times before it is used up;
* **encoded jobs** (``parts``) of the segments this leader sealed, for
  merging them without reading them back, and of the segments a lookup by
  id or a purge read, so that a client polling a job does not read its
  segment again.

Internal to :mod:`engine.lanes`; every method is thread-safe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from engine.encoding import encode_job
from engine.errors import DocumentError, SegmentUnreadable
from engine.model import Job
from engine.parsing import parse_segment_jobs
from engine.segments import SegmentRef, read_segment_window
from engine.stores.base import ObjectStore

# Decoded jobs kept from the segments refills read, most recently used
# first, at most this many in all: a queue refills from its first segment
# many times before it is used up, and with many queues draining at once
# each first segment must stay cached, or every refill reads and decodes a
# whole segment (up to merge_jobs jobs) to take a few dozen (10 queues,
# 16,384-job segments: about 0.3 s of CPU per refill).
CACHED_JOBS = 65_536
# A refill decodes this many jobs from where it starts (at least what it
# takes), not the whole segment: the next refills of the queue find them
# cached, and the cache holds windows of every draining queue.
REFILL_WINDOW = 4_096
# Encoded jobs of segments this leader sealed, kept for merging them, and of
# segments a lookup by id read (SegmentLookup.find_pending), so that polling does not re-read.
SEALED_CACHE_BYTES = 64 * 1024 * 1024


class HeldSegments:
    """Segment jobs read from ``store`` or handed over by a seal (see the module)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        # Per segment key, (index of its first job kept, decoded jobs from there).
        self._windows: OrderedDict[str, tuple[int, list[tuple[Job, int]]]] = OrderedDict()
        self._window_jobs = 0
        # Per segment key, its encoded jobs; bounded by SEALED_CACHE_BYTES.
        self._parts: OrderedDict[str, tuple[bytes, ...]] = OrderedDict()
        self._parts_bytes = 0

    def held(self, key: str) -> tuple[bytes, ...] | None:
        """The encoded jobs of segment ``key`` if held, without I/O."""
        with self._lock:
            return self._parts.get(key)

    def parts(self, ref: SegmentRef) -> tuple[bytes, ...]:
        """The encoded jobs of segment ``ref``: held, or read (not kept:
        see :meth:`keep`). Raises SegmentUnreadable or StoreError."""
        parts = self.held(ref.key)
        if parts is not None:
            return parts
        return tuple(encode_job(job, pos) for job, pos in self.jobs(ref, 0, ref.total))

    def keep(self, key: str, parts: tuple[bytes, ...]) -> None:
        """Hold ``parts`` as segment ``key``'s encoded jobs, the least
        recently kept going first past SEALED_CACHE_BYTES."""
        size = sum(map(len, parts))
        with self._lock:
            old = self._parts.pop(key, None)
            self._parts_bytes += size - (sum(map(len, old)) if old is not None else 0)
            self._parts[key] = parts
            while self._parts_bytes > SEALED_CACHE_BYTES and self._parts:
                _, evicted = self._parts.popitem(last=False)
                self._parts_bytes -= sum(map(len, evicted))

    def forget(self, key: str) -> None:
        """Drop all that is held of segment ``key`` (it is being deleted)."""
        with self._lock:
            window = self._windows.pop(key, None)
            if window is not None:
                self._window_jobs -= len(window[1])
            parts = self._parts.pop(key, None)
            if parts is not None:
                self._parts_bytes -= sum(map(len, parts))

    def drop_parts(self) -> None:
        """Drop every segment's encoded jobs (tests and the benchmark: a cold lookup)."""
        with self._lock:
            self._parts.clear()
            self._parts_bytes = 0

    def jobs(self, ref: SegmentRef, start: int, count: int, *, keep: bool = False) -> list[tuple[Job, int]]:
        """Jobs ``start`` to ``start + count`` of the segment (fewer at its
        end), from a held window or read and verified, decoding only those
        (with ``keep``, at least REFILL_WINDOW of them, held for the next
        calls). Raises SegmentUnreadable or StoreError."""
        with self._lock:
            window = self._windows.get(ref.key)
            if window is not None:
                first, jobs = window
                end = min(start + count, ref.total)
                if first <= start and end <= first + len(jobs):
                    self._windows.move_to_end(ref.key)
                    return jobs[start - first:end - first]
        raw = read_segment_window(self.store, ref, start, max(count, REFILL_WINDOW) if keep else count)
        try:
            jobs = parse_segment_jobs(ref.key, raw, first=start)
        except DocumentError as exc:
            raise SegmentUnreadable(ref.key, exc.problem) from exc
        del raw
        if keep:
            with self._lock:
                old = self._windows.pop(ref.key, None)
                self._window_jobs += len(jobs) - (len(old[1]) if old is not None else 0)
                self._windows[ref.key] = (start, jobs)
                while self._window_jobs > CACHED_JOBS and len(self._windows) > 1:
                    _, (_, evicted) = self._windows.popitem(last=False)
                    self._window_jobs -= len(evicted)
        return jobs[:count]
