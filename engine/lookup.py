"""Format 2: finding a pending job by id in the segments, for the leader.

A :class:`SegmentLookup` belongs to a :class:`~engine.lanes.LaneKeeper`
and looks first in the segment jobs the keeper holds
(:class:`~engine.lanecache.HeldSegments`), then in the segments whose id
index (:mod:`engine.idindex`) may hold the id, reading at most a bound of
them. ``Broker.get_job`` and a purge by ids (:mod:`engine.excision`,
through ``LaneKeeper.excise``) use it. Thread-safe: any thread but the
committer's writer (it may read).

With a version 2 index it reads only the job (:func:`ranged_job`): two
ranged gets of a few hundred bytes instead of the whole segment (up to
~7 MB: 0.25-1.0 s on a store with 50 ms requests and 100 MB/s, docs/benchmark.md),
and keeps what it found for the next lookup of the same id (a client
polling a job). A second job looked up in the same segment reads that
segment whole and keeps it, as before: a segment asked about twice is
likely asked about again, and then costs nothing.
"""

from __future__ import annotations

import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from engine.errors import DocumentError, SegmentUnreadable
from engine.idindex import IndexCache
from engine.lanecache import HeldSegments
from engine.lanetasks import id_prefix
from engine.model import Job
from engine.parsing import parse_segment_jobs
from engine.segments import JOB_LOOKUP_READS, SegmentRef

__all__ = ["FOUND_KEPT", "RangedFinds", "SegmentLookup", "one_job", "ranged_job"]

#: Jobs found with ranged reads, kept by id for the next lookup (a client
#: polling its job): a few hundred bytes each. And as many segments are
#: remembered as looked into that way (a second lookup reads one whole).
FOUND_KEPT = 4_096


def one_job(ref: SegmentRef, item: Any, index: int) -> tuple[Job, int, SegmentRef]:
    """The job decoded from ``item``, the ``index``-th of segment ``ref``,
    with its ``pos`` and ``ref``. Raises SegmentUnreadable naming the object
    if it is not a job."""
    try:
        ((job, pos),) = parse_segment_jobs(ref.key, [item], first=index)
    except DocumentError as exc:
        raise SegmentUnreadable(ref.key, exc.problem) from exc
    return job, pos, ref


def ranged_job(indexes: IndexCache, ref: SegmentRef, job_id: str) -> tuple[bytes | None, bool]:
    """Look for ``job_id`` in the segment ``ref`` with ranged reads, through
    its version 2 index in ``indexes``: ``(job, True)``, the job's encoded
    bytes, checked against its entry's length and CRC-32 and its id;
    ``(None, True)`` if the entries whose hash is the id's all check and
    name other ids (two ids share a hash); ``(None, False)`` if this cannot
    tell (a version 1 index, none cached, an entry or a job that does not
    check, a segment gone): read the segment whole, which verifies it (I6).
    Whether the job was moved back already is the caller's to check (its
    ``pos`` against ``ref.front``). Raises StoreError."""
    index = indexes.get(ref)
    if index is None:
        return None, False
    entries = indexes.entries(ref, index, job_id)
    if not entries:
        return None, False
    needle = id_prefix(job_id)
    for offset, length, crc in entries:
        data = indexes.store.get_range(ref.key, offset, length)
        if data is None or len(data) != length or zlib.crc32(data) != crc:
            return None, False
        if data.startswith(needle):
            return data, True
    return None, True


class RangedFinds:
    """Jobs found with ranged reads (:func:`ranged_job`), kept by id for the
    next lookup of the same id, and the segments they were found in: at most
    ``kept`` of each, the least recently found out first. A segment already
    in :meth:`touched` is read whole by the next lookup instead (see the
    module). Kept bytes never go stale (segments are immutable); whether the
    job was moved back since is the caller's to check, against the
    reference it holds now. Thread-safe."""

    def __init__(self, kept: int = FOUND_KEPT) -> None:
        self.kept = kept
        self._found: OrderedDict[str, tuple[str, bytes]] = OrderedDict()
        self._touched: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, job_id: str) -> tuple[str, bytes] | None:
        """The key of the segment ``job_id`` was found in and its encoded bytes, if kept."""
        with self._lock:
            return self._found.get(job_id)

    def touched(self, key: str) -> bool:
        """Whether a job was found in segment ``key`` by range already."""
        with self._lock:
            return key in self._touched

    def add(self, job_id: str, key: str, data: bytes) -> None:
        """Keep ``data``, job ``job_id`` found by range in segment ``key``."""
        with self._lock:
            self._found[job_id] = (key, data)
            self._touched[key] = None
            while len(self._found) > self.kept:
                self._found.popitem(last=False)
            while len(self._touched) > self.kept:
                self._touched.popitem(last=False)

    def clear(self) -> None:
        """Forget everything kept."""
        with self._lock:
            self._found.clear()
            self._touched.clear()


class SegmentLookup:
    """Finds pending jobs by id in a keeper's segments (see the module)."""

    def __init__(
        self, held: HeldSegments, indexes: IndexCache, *, unindexed: Callable[[SegmentRef], None] | None = None,
    ) -> None:
        self._held = held
        self._indexes = indexes
        self._ranged = RangedFinds()
        # Told of each segment a lookup read whole for want of an id index:
        # the keeper then owes it one (engine.indexrepair), so the next
        # lookup reads its index instead and no bound hides its jobs.
        self._unindexed = unindexed

    def find_pending(
        self, job_id: str, refs: Sequence[tuple[str, SegmentRef]], *, reads: int = JOB_LOOKUP_READS,
        whole: bool = False,
    ) -> tuple[Job, int, SegmentRef] | None:
        """The pending job ``job_id``, its ``pos`` and its segment, if it sits
        in one of ``refs`` (tried in order, newest first is best) and has not
        been moved back yet. None if it is in none of them, as far as the
        bound below lets it look.

        First every segment whose encoded jobs the keeper holds (it sealed
        the segment, or an earlier lookup read it: no I/O). Then, among the
        others, the segments whose id index (:mod:`engine.idindex`: every
        segment has one; read once, in parallel, and kept) may hold the id,
        and last those without one (its write failed or has not happened
        yet, or written before indexes existed); each one read is verified and kept,
        at most ``reads`` of them, so a client polling a job by id does not
        read its segment again. So a job in an indexed segment is always
        found, and a lookup of an id that no segment holds reads no indexed
        segment once the indexes are held. With ``whole``, a segment is read
        whole even through a version 2 index (:func:`ranged_job`), and kept:
        for a caller that reads the segment next anyway (a purge by ids
        writes it again without the job). Raises SegmentUnreadable or
        StoreError. Any thread: never the writer's (it may read)."""
        needle = id_prefix(job_id)
        kept = self._ranged.get(job_id)
        unread: list[SegmentRef] = []
        for _, ref in refs:  # first what the keeper holds, or found by range before: no I/O
            if kept is not None and ref.key == kept[0]:
                found = self._unconsumed(ref, kept[1])
                if found is not None:
                    return found
            parts = self._held.held(ref.key)
            if parts is None:
                unread.append(ref)
                continue
            found = self._search(needle, ref, parts)
            if found is not None:
                return found
        # Then the segments whose index may hold the id, before any without one.
        for ref, indexed in self._indexes.candidates(job_id, unread):
            if reads <= 0:
                break
            reads -= 1
            ranged = indexed and not whole and not self._ranged.touched(ref.key)
            data, sure = ranged_job(self._indexes, ref, job_id) if ranged else (None, False)
            if data is not None:
                try:
                    found = self._unconsumed(ref, data)
                except (orjson.JSONDecodeError, SegmentUnreadable):
                    # Bytes that match their entry and still are no job: the
                    # segment read whole says what is wrong with it (I6).
                    found, sure = None, False
                else:
                    self._ranged.add(job_id, ref.key, data)
                if found is not None:
                    return found
            if sure:
                continue  # not in this segment, or moved back already
            parts = self._held.parts(ref)
            self._held.keep(ref.key, parts)
            if not indexed and self._unindexed is not None:
                self._unindexed(ref)
            found = self._search(needle, ref, parts)
            if found is not None:
                return found
        return None

    def forget(self) -> None:
        """Drop every segment's encoded jobs the keeper holds, and every id
        index of the process's cache (the dashboard's too), as on a leader
        that just took over and has not read its indexes yet (tests and the
        benchmark: what a cold lookup by id reads; see LaneKeeper.warm)."""
        self._held.drop_parts()
        self._indexes.clear()
        self._ranged.clear()

    @staticmethod
    def _unconsumed(ref: SegmentRef, data: bytes) -> tuple[Job, int, SegmentRef] | None:
        """The job ``data`` of segment ``ref``, unless it was moved back into
        the document already (its ``pos`` before the reference's ``front``)."""
        job, pos, _ = one_job(ref, orjson.loads(data), ref.consumed)
        return (job, pos, ref) if pos >= ref.front else None

    def _search(self, needle: bytes, ref: SegmentRef, parts: Sequence[bytes]) -> tuple[Job, int, SegmentRef] | None:
        for index in range(ref.consumed, len(parts)):
            if parts[index].startswith(needle):
                return one_job(ref, orjson.loads(parts[index]), index)
        return None
