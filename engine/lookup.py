"""Format 2: finding a pending job by id in the segments, for the leader.

A :class:`SegmentLookup` belongs to a :class:`~engine.lanes.LaneKeeper`
and looks first in the segment jobs the keeper holds
(:class:`~engine.lanecache.HeldSegments`), then in the segments whose id
index (:mod:`engine.idindex`) may hold the id, reading at most a bound of
them. ``Broker.get_job`` and a purge by ids (:mod:`engine.excision`,
through ``LaneKeeper.excise``) use it. Thread-safe: any thread but the
committer's writer (it may read).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from engine.errors import DocumentError, SegmentUnreadable
from engine.idindex import IndexCache
from engine.lanecache import HeldSegments
from engine.lanetasks import id_prefix
from engine.model import Job
from engine.parsing import parse_segment_jobs
from engine.segments import JOB_LOOKUP_READS, SegmentRef

__all__ = ["SegmentLookup", "one_job"]


def one_job(ref: SegmentRef, item: Any, index: int) -> tuple[Job, int, SegmentRef]:
    """The job decoded from ``item``, the ``index``-th of segment ``ref``,
    with its ``pos`` and ``ref``. Raises SegmentUnreadable naming the object
    if it is not a job."""
    try:
        ((job, pos),) = parse_segment_jobs(ref.key, [item], first=index)
    except DocumentError as exc:
        raise SegmentUnreadable(ref.key, exc.problem) from exc
    return job, pos, ref


class SegmentLookup:
    """Finds pending jobs by id in a keeper's segments (see the module)."""

    def __init__(self, held: HeldSegments, indexes: IndexCache) -> None:
        self._held = held
        self._indexes = indexes

    def find_pending(
        self, job_id: str, refs: Sequence[tuple[str, SegmentRef]], *, reads: int = JOB_LOOKUP_READS,
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
        segment once the indexes are held. Raises SegmentUnreadable or
        StoreError. Any thread: never the writer's (it may read)."""
        needle = id_prefix(job_id)
        unread: list[SegmentRef] = []
        for _, ref in refs:  # first what the keeper holds: no I/O
            parts = self._held.held(ref.key)
            if parts is None:
                unread.append(ref)
                continue
            found = self._search(needle, ref, parts)
            if found is not None:
                return found
        # Then the segments whose index may hold the id, before any without one.
        named, unindexed = self._indexes.candidates(job_id, unread)
        for ref in named + unindexed:
            if reads <= 0:
                break
            reads -= 1
            parts = self._held.parts(ref)
            self._held.keep(ref.key, parts)
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

    def _search(self, needle: bytes, ref: SegmentRef, parts: Sequence[bytes]) -> tuple[Job, int, SegmentRef] | None:
        for index in range(ref.consumed, len(parts)):
            if parts[index].startswith(needle):
                return one_job(ref, orjson.loads(parts[index]), index)
        return None
