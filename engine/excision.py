"""Format 2: a purge by ids that also removes jobs pending inside segments.

A segment object never changes, so a job in one is removed by writing the
segment again without it and swapping the references in the purge's own
commit (an :class:`~engine.ops.Excision`). The leader's broker runs
:func:`purge_by_ids` for every purge by ids a client or an operator sends;
the lane keeper does the reads and writes (:meth:`LaneKeeper.excise`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from engine.errors import JobNotFound, JobSealed, QueueError, ValidationError
from engine.optypes import Operation, Purge

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
