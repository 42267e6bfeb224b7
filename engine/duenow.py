"""Making delayed jobs due now: an operator's "Run now" for a job waiting
out a retry's backoff or a delayed push.

A delayed job keeps its place (``pos``) while it waits, and a delay that
runs out only makes it claimable in that FIFO turn. Making it due now does
exactly that, earlier: its ``not_before`` is cleared and it stays where it
is (I7), so a retry runs after the jobs that were already waiting when it
failed, and a job pushed with a delay runs in its turn among those pushed
around it. A job already due is left as it is, so running it twice changes
nothing more.

Format 3 keeps delayed jobs due beyond a horizon in delayed segments, outside
the document. As a purge by ids does (:mod:`engine.excision`), the leader's
broker finds them there through the id indexes, writes each delayed segment
again without them, and commits the swap together with the jobs put back
into the document at their ``pos``, due: one commit, all or nothing.

Both halves are here: :func:`make_due`, the transition, and
:func:`make_due_by_ids`, the leader's run of it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from engine.document import QueueState
from engine.errors import JobNotFound, JobSealed, QueueError, ValidationError
from engine.excision import EXCISE_ATTEMPTS
from engine.lanemoves import restore_from_segment
from engine.optypes import MakeDue, Operation
from engine.purging import status_of, swap_excisions
from engine.segments import newest_first

if TYPE_CHECKING:
    from engine.lanes import LaneKeeper

__all__ = ["make_due", "make_due_by_ids"]

log = logging.getLogger(__name__)


def make_due(state: QueueState, op: MakeDue, now: datetime) -> list[str]:
    """Clear the delay of each listed pending job not yet due (see
    :class:`~engine.ops.MakeDue`), in place; returns the ids made due, in
    the order listed (a job already due is not among them).

    All or nothing: an id found nowhere raises JobNotFound, a running or
    dead job ValidationError, changing nothing. With ``op.expect`` a job no
    longer pending is skipped instead. With ``op.seek``, ids found nowhere
    in the document while it references segments raise JobSealed naming
    them all. ``op.excisions`` put their jobs back at their ``pos``, due, in
    the same commit; ValidationError, changing nothing, unless each names
    a delayed segment still referenced as it was read."""
    excised = {job.id for excision in op.excisions for job in excision.jobs}
    listed = [job_id for job_id in op.job_ids if job_id not in excised]
    if not op.expect:
        # A job here that is not pending refuses it before any segment is looked in.
        for job_id in listed:
            status = status_of(state, job_id)
            if status not in (None, "pending"):
                raise ValidationError(f"job {job_id!r} is {status}: only a pending job can be made due")
    if op.seek and (state.lanes or state.delays):
        missing = tuple(job_id for job_id in listed
                        if job_id not in state.jobs and job_id not in state.dead and job_id not in state.finished)
        if missing:
            raise JobSealed(missing[0], tuple(newest_first(state.lanes, state.delays)), job_ids=missing)
    if op.expect:
        listed = [job_id for job_id in listed if status_of(state, job_id) == "pending"]
    elif (unknown := next((job_id for job_id in listed if job_id not in state.jobs), None)) is not None:
        raise JobNotFound(unknown)
    for excision in op.excisions:
        if (len(excision.positions) != len(excision.jobs)
                or not any(ref.key == excision.key for ref in state.delays.get(excision.queue, ()))):
            raise ValidationError(f"the delayed segment {excision.key} of queue {excision.queue!r} changed "
                                  "since the run now looked in it")
    if op.excisions:
        swap_excisions(state, op.excisions, op.job_ids, what="run now")  # from here on nothing refuses
    made: set[str] = set()
    for job_id in listed:
        job = state.jobs[job_id]
        if job.not_before is not None and job.not_before > now:
            state.replace_job(job._replace(not_before=None))
            made.add(job_id)
    for excision in op.excisions:
        for job, pos in zip(excision.jobs, excision.positions, strict=True):
            # A job whose id came back meanwhile (pushed again after it left
            # the sealed window) stays out, as a refill leaves it out. One
            # due already but not yet refilled comes back too (it is out of
            # its segment now), not counted as made due.
            back = restore_from_segment(state, excision.queue, [(job._replace(not_before=None), pos)], now)
            if back and job.not_before is not None and job.not_before > now:
                made.add(job.id)
    return [job_id for job_id in op.job_ids if job_id in made]


def make_due_by_ids(op: MakeDue, *, execute: Callable[[Operation], Any], keeper: Callable[[], LaneKeeper]) -> Any:
    """Run ``op`` through ``execute`` (the leader's committer), jobs waiting
    in delayed segments included, all in one commit; returns the ids made
    due.

    It is first tried with ``seek``. If some ids may be in segments,
    ``keeper()`` (the leader's lane keeper; it raises NotLeader if there is
    none) looks for them as a lookup by id does: each one in a delayed
    segment is written out of it (:meth:`~engine.excision.LaneExcision.excise_delayed`);
    one in a FIFO lane's segment is due already and left out. The run is
    sent again with those excisions. A segment that moved on meanwhile (a
    refill, a merge) refuses it, changing nothing: the new objects are
    deleted and it starts again, at most ``EXCISE_ATTEMPTS`` times. An
    all-or-nothing run with an id found nowhere raises JobNotFound before
    anything is written; a conditional one skips it. Raises what
    ``execute`` raises, and SegmentUnreadable or StoreError from a segment
    read or write (nothing changed). Blocks on I/O: never on an event loop."""
    for _ in range(EXCISE_ATTEMPTS):
        try:
            return execute(replace(op, seek=True))
        except JobSealed as sealed:
            lanes = keeper()
            excisions, due, missing = lanes.excise_delayed(sealed.job_ids, sealed.refs, all_or_nothing=not op.expect)
        if missing and not op.expect:
            raise JobNotFound(missing[0])  # nothing was written
        # Ids due already (in a FIFO lane's segment) or, conditionally, found nowhere: nothing to do.
        gone = {*due, *missing}
        ids = tuple(job_id for job_id in op.job_ids if job_id not in gone)
        if not ids:
            return []
        expect = tuple(status for job_id, status in zip(op.job_ids, op.expect, strict=True)
                       if job_id not in gone) if op.expect else ()
        again = replace(op, job_ids=ids, expect=expect, excisions=tuple(excisions))
        try:
            made = execute(again)
        except ValidationError:
            lanes.discard(excisions)  # a segment moved on: nothing changed, look again
        except QueueError:
            lanes.discard(excisions)  # refused (a listed job changed): nothing changed
            raise
        else:
            if excisions:
                log.info("run now: %d delayed job(s) brought back from %d delayed segment(s) written again: %s",
                         sum(len(e.jobs) for e in excisions), len(excisions), ", ".join(e.key for e in excisions))
            return made
    raise ValidationError("the delayed segments holding these jobs kept changing while the run now looked in "
                          "them: nothing changed, try again")
