"""The id indexes a lane keeper owes: segments it knows to have none.

Without its id index (:mod:`engine.idindex`) a segment is found by a lookup
by id only by reading it whole, and a lookup reads at most
:data:`~engine.segments.JOB_LOOKUP_READS` such segments: a pending job in one
beyond them is answered 404 (``GET /api/v1/jobs/<id>``), though it is there
and will run. An index goes missing when its write fails (a store error, a
lost answer on a write that did not land: chaos seed 107 left a tenure's
seals unindexed that way), and a new leader finds segments an older one
never indexed. So the keeper owes an index for:

* every segment whose index write failed (``LaneKeeper._write_index``);
* every segment its tenure's warm-up found without a usable one
  (``LaneKeeper.warm``);
* every segment a lookup by id had to read whole for want of one
  (``SegmentLookup.find_pending``).

:class:`IndexRepairs` schedules those: one repair at a time for the whole
keeper (a repair reads a segment whole, up to ``merge_jobs`` jobs), each
retried after a delay that doubles up to :data:`REPAIR_DELAY_CAP_SECONDS`,
at most :data:`REPAIR_TRIES` times a tenure (the next tenure's warm-up
finds what is still missing). The repair itself is
``LaneKeeper._repair_due``: it rebuilds the index from the segment's bytes
as stored, so it is byte for byte the index the segment's writer built, and
a late write of that one (an older leader's, fenced) and the repair agree.

Thread-safety: guarded by the keeper's condition, as the reaper
(:mod:`engine.reaper`); the methods that say so must be called holding it,
the others take it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from engine.segments import SegmentRef

__all__ = ["REPAIR_DELAY_CAP_SECONDS", "REPAIR_TRIES", "IndexRepairs"]

# A repair that failed is tried again after the keeper's retry delay (a
# heartbeat), then twice as long each time up to this cap: a store that is
# down for a minute is not asked every second, and one that is back gets
# the index within a minute.
REPAIR_DELAY_CAP_SECONDS = 60.0
# Tries a tenure per segment. A segment whose index cannot be written (a
# damaged index object in the way, which is never overwritten) is left to
# lookups reading it whole, as before, and to the next tenure.
REPAIR_TRIES = 6


class IndexRepairs:
    """The segments a keeper owes an id index, with when each is due (see
    the module). ``cond`` is the keeper's condition, ``delay_seconds`` the
    first retry's delay."""

    def __init__(self, cond: threading.Condition, *, monotonic: Callable[[], float], delay_seconds: float) -> None:
        self._cond = cond
        self.monotonic = monotonic
        self.delay_seconds = delay_seconds
        # Segment key -> (its reference, tries so far, monotonic time due).
        self._owed: dict[str, tuple[SegmentRef, int, float]] = {}
        self._repairing = False  # one repair at a time, for the whole keeper
        self.repaired = 0  # indexes written by a repair (tests and health pages)
        self.given_up = 0  # segments left without one after REPAIR_TRIES

    # -- under the keeper's condition ---------------------------------------------------

    def due_now(self) -> bool:
        """Whether a repair is due and no thread is repairing (under the condition)."""
        deadline = self.deadline()
        return deadline is not None and deadline <= self.monotonic()

    def deadline(self) -> float | None:
        """When the next repair is due, or None if none is owed or one is
        under way (its thread notifies when it is done; under the condition)."""
        if self._repairing or not self._owed:
            return None
        return min(due for _, _, due in self._owed.values())

    # -- from any thread ---------------------------------------------------------------

    def owe(self, ref: SegmentRef) -> None:
        """``ref``'s segment has no usable id index: repair it now (unless
        it is owed already, with its tries and delay kept)."""
        with self._cond:
            if ref.key not in self._owed:
                self._owed[ref.key] = (ref, 0, self.monotonic())
                self._cond.notify()

    def owing(self, key: str) -> bool:
        """Whether an index is owed for segment ``key`` (tests)."""
        with self._cond:
            return key in self._owed

    def take(self) -> tuple[SegmentRef, int] | None:
        """The owed segment due first, if one is due and no thread is
        repairing: its reference and the tries made so far. The caller
        repairs it and then calls :meth:`done`."""
        now = self.monotonic()
        with self._cond:
            if self._repairing or not self._owed:
                return None
            ref, tries, due = min(self._owed.values(), key=lambda owed: owed[2])
            if due > now:
                return None
            self._repairing = True
            return ref, tries

    def done(self, ref: SegmentRef, tries: int, *, again: bool = False, wrote: bool = False) -> bool:
        """The repair of ``ref`` that :meth:`take` handed out is over: it
        ``wrote`` the index, or found none needed; or, with ``again``, it
        failed and is tried later, unless that was its last try. Returns
        whether it was given up."""
        with self._cond:
            self._repairing = False
            tries += 1
            given_up = again and tries >= REPAIR_TRIES
            if again and not given_up:
                delay = min(self.delay_seconds * 2 ** (tries - 1), REPAIR_DELAY_CAP_SECONDS)
                self._owed[ref.key] = (ref, tries, self.monotonic() + delay)
            else:
                del self._owed[ref.key]
            self.repaired += wrote
            self.given_up += given_up
            self._cond.notify()  # another may be due
            return given_up
