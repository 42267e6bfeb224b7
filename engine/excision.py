"""Format 2: a purge by ids that also removes jobs pending inside segments.

A segment object never changes, so a job in one is removed by writing the
segment again without it and swapping the references in the purge's own
commit (an :class:`~engine.ops.Excision`). The leader's broker runs
:func:`purge_by_ids` for every purge by ids a client or an operator sends;
the lane keeper does the reads and writes (:meth:`LaneKeeper.excise`).

Both halves are here: :func:`purge_by_ids`, and :class:`LaneExcision`, a
base class of :class:`~engine.lanes.LaneKeeper` holding its ``excise``
(finding the jobs and writing each segment again without them, through
the keeper's segment writing in :mod:`engine.lanes`) and ``discard``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import orjson

from engine.errors import JobNotFound, JobSealed, QueueError, StoreError, ValidationError
from engine.lanecache import HeldSegments
from engine.lanetasks import MergeTask, id_prefix
from engine.lookup import SegmentLookup, one_job
from engine.model import Job
from engine.optypes import Excision, Operation, Purge
from engine.reaper import SegmentReaper
from engine.segments import SegmentRef, is_delayed_key

if TYPE_CHECKING:
    from engine.lanes import LaneKeeper

log = logging.getLogger(__name__)

# A purge whose segments keep moving (refilled under a fast drain, merged)
# is looked for again this many times before it is refused.
EXCISE_ATTEMPTS = 3


def purge_by_ids(op: Purge, *, execute: Callable[[Operation], Any], keeper: Callable[[], LaneKeeper]) -> Any:
    """Run the purge by ids ``op`` through ``execute`` (the leader's
    committer), jobs pending in segments included, all in one commit.

    It is first tried with ``seek``: it is refused, changing nothing, with
    JobSealed if some ids may be pending in a segment. ``keeper()`` (the
    leader's lane keeper; it raises NotLeader if there is none) then looks
    for them, as a lookup by id does, and writes each segment holding some
    again without them; the purge is sent again with those excisions, and
    the new references replace the old ones in the commit that removes the
    other jobs. A segment that moved on meanwhile (a refill, a merge, a
    seal after it) refuses it, changing nothing: the new objects are deleted
    and it starts again, at most ``EXCISE_ATTEMPTS`` times. An all-or-nothing
    purge with an id found nowhere is refused with JobNotFound; a
    conditional one (``expect``) skips it. Returns the purge's outcome (the
    removed ids). Raises what ``execute`` raises, and SegmentUnreadable or
    StoreError from a segment read or write (nothing changed). Blocks on
    I/O: never on an event loop."""
    for _ in range(EXCISE_ATTEMPTS):
        try:
            return execute(replace(op, seek=True))
        except JobSealed as sealed:
            lanes = keeper()
            excisions, missing = lanes.excise(sealed.job_ids, sealed.refs, all_or_nothing=not op.expect)
        if missing and not op.expect:
            raise JobNotFound(missing[0])  # nothing was written
        try:
            outcome = execute(replace(op, excisions=tuple(excisions)))
        except ValidationError:
            lanes.discard(excisions)  # a segment moved on: nothing changed, look again
        except QueueError:
            lanes.discard(excisions)  # refused (a listed job left the document): nothing changed
            raise
        else:
            # Rare, and the one purge that writes segment objects: worth a line for the operator.
            log.info("a purge by ids removed %d job(s) pending in %d segment(s) by writing them again: %s",
                     sum(len(e.jobs) for e in excisions), len(excisions), ", ".join(e.key for e in excisions))
            return outcome
    raise ValidationError("the segments holding these jobs kept changing while the purge looked in them: "
                          "nothing was purged, try again")


class LaneExcision:
    """The lane keeper's half of a purge by ids (see the module)."""

    # The keeper's fields this half reads (see LaneKeeper.__init__).
    key: str
    lookup: SegmentLookup
    reaper: SegmentReaper
    _held: HeldSegments
    # The keeper's methods this half calls (engine.lanes).
    _write_index: Callable[[SegmentRef, Sequence[bytes]], None]
    _write_segment: Callable[..., SegmentRef | None]
    _rewrite_delayed_without: Callable[[str, SegmentRef, list[Job]], Excision]

    def excise(
        self, job_ids: Sequence[str], refs: Sequence[tuple[str, SegmentRef]], *, all_or_nothing: bool = False,
    ) -> tuple[list[Excision], list[str]]:
        """For a purge by ids (the broker's, see ``Broker.execute``): find
        each of ``job_ids`` pending in ``refs`` (as :meth:`SegmentLookup.find_pending`
        does, within its bound), and write each segment holding some of
        them again, from its first job not moved back on, without them: a
        new object with its id index, this leader's epoch and a new key
        (segments never change). Returns an :class:`~engine.ops.Excision`
        per segment, for the purge to commit, and the ids found in none
        (with ``all_or_nothing``, when there is one, nothing is written: the
        purge will be refused).

        Nothing references the new objects until that purge lands: if it is
        refused or never submitted, hand them to :meth:`discard`. The old
        objects go once a landed version stops referencing them, like a
        merge's. Raises SegmentUnreadable, or StoreError (a write failed, or
        this keeper is stopping); nothing written is left behind then. Any
        thread but the writer's."""
        found, missing = self._find(job_ids, refs)
        if missing and all_or_nothing:
            return [], missing
        return self._rewrite_all(found, refs), missing

    def excise_delayed(
        self, job_ids: Sequence[str], refs: Sequence[tuple[str, SegmentRef]], *, all_or_nothing: bool = False,
    ) -> tuple[list[Excision], list[str], list[str]]:
        """For a :class:`~engine.optypes.MakeDue` (see :func:`engine.duenow.make_due_by_ids`):
        as :meth:`excise`, but only jobs in the delayed segments among
        ``refs`` are written out of theirs; each excision names its jobs'
        ``pos``. Returns the excisions, the ids found pending in a FIFO
        lane's segment instead (due already: nothing to do), and the ids
        found in neither (with ``all_or_nothing``, when there is one,
        nothing is written). Raises as :meth:`excise`."""
        delayed = [(queue, ref) for queue, ref in refs if is_delayed_key(self.key, ref.key)]
        lane = [(queue, ref) for queue, ref in refs if not is_delayed_key(self.key, ref.key)]
        found, elsewhere = self._find(job_ids, delayed)
        due = [job_id for job_id in elsewhere if lane and self.lookup.find_pending(job_id, lane) is not None]
        missing = [job_id for job_id in elsewhere if job_id not in due]
        if missing and all_or_nothing:
            return [], due, missing
        return self._rewrite_all(found, delayed), due, missing

    def _find(
        self, job_ids: Sequence[str], refs: Sequence[tuple[str, SegmentRef]],
    ) -> tuple[dict[str, tuple[SegmentRef, list[tuple[Job, int]]]], list[str]]:
        """Each of ``job_ids`` found pending in ``refs``, with its ``pos``,
        by segment key; and the ids found in none."""
        found: dict[str, tuple[SegmentRef, list[tuple[Job, int]]]] = {}
        missing: list[str] = []
        for job_id in dict.fromkeys(job_ids):
            # Whole: the segment is read next anyway, to write it again
            # without the job; two ranged reads first would be wasted.
            hit = self.lookup.find_pending(job_id, refs, whole=True) if refs else None
            if hit is None:
                missing.append(job_id)
            else:
                found.setdefault(hit[2].key, (hit[2], []))[1].append((hit[0], hit[1]))
        return found, missing

    def _rewrite_all(
        self, found: dict[str, tuple[SegmentRef, list[tuple[Job, int]]]], refs: Sequence[tuple[str, SegmentRef]],
    ) -> list[Excision]:
        """Each segment of ``found`` written again without its jobs (see
        :meth:`excise`); nothing is left behind if one write fails."""
        queue_of = {ref.key: queue for queue, ref in refs}
        excisions: list[Excision] = []
        try:
            for key, (ref, hits) in found.items():
                excision = self._rewrite_without(queue_of[key], ref, [job for job, _ in hits])
                excisions.append(excision._replace(positions=tuple(pos for _, pos in hits)))
        except BaseException:
            self.discard(excisions)
            raise
        return excisions

    def _rewrite_without(self, queue: str, ref: SegmentRef, jobs: list[Job]) -> Excision:
        """Segment ``ref`` of ``queue`` written again without ``jobs`` (see :meth:`excise`)."""
        if is_delayed_key(self.key, ref.key):
            return self._rewrite_delayed_without(queue, ref, jobs)
        needles = tuple(id_prefix(job.id) for job in jobs)
        parts = self._held.parts(ref)
        kept = [(index, part) for index, part in enumerate(parts[ref.consumed:], ref.consumed)
                if not part.startswith(needles)]
        if not kept:
            return Excision(queue=queue, key=ref.key, consumed=ref.consumed, ref=None, jobs=tuple(jobs))
        first_job, first_pos, _ = one_job(ref, orjson.loads(kept[0][1]), kept[0][0])
        _, last_pos, _ = one_job(ref, orjson.loads(kept[-1][1]), kept[-1][0])
        rest = [part for _, part in kept]
        new = self._write_segment(MergeTask(queue, (ref,)), rest, first_pos=first_pos, last_pos=last_pos,
                                  oldest=first_job.enqueued_at)
        if new is None:  # the write failed (logged), or this keeper is stopping
            raise StoreError(f"writing segment {ref.key} again without the purged jobs failed")
        self._write_index(new, rest)
        self._held.keep(new.key, tuple(rest))
        return Excision(queue=queue, key=ref.key, consumed=ref.consumed, ref=new, jobs=tuple(jobs))

    def discard(self, excisions: Sequence[Excision]) -> None:
        """Delete the new objects of ``excisions`` whose purge did not land
        (refused, or never submitted): nothing references them."""
        for excision in excisions:
            if excision.ref is not None:
                self.reaper.delete_segment(excision.ref.key)
