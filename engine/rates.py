"""Rate limits per queue: at most ``jobs`` of a queue's jobs start in each
window of ``seconds``, across every worker.

The limit and its current window live in the document (``queues.<name>.
rate_limit``), so every claim, on whichever node leads, counts against the
same window, and a new leader carries on the old leader's window instead of
granting a fresh one. A window opens at the first start after the previous
one closed (a queue idle for a while gets a whole window at once, as
BullMQ's limiter does), and closes ``seconds`` later; within it at most
``jobs`` jobs start. Over any span of ``seconds`` that may be up to twice
``jobs`` (the end of one window and the start of the next), never more.

Windows are judged on the committing leader's clock, as delayed jobs' due
times are: a new leader whose clock runs ahead of the old one's closes the
old window early by the difference (at most one window's extra starts,
once). One whose clock runs behind would keep it open longer by the
difference, unbounded; so a takeover moves a window that starts in the new
leader's future to the new leader's now (:meth:`RateLimit.taken_over`),
which holds the queue at most one window longer, never more starts. Lease
deadlines get the same kind of rule (DESIGN.md, "Clocks").

Pure values; :mod:`engine.document` counts with them and
:func:`engine.lifecycle.claim` moves the window.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

__all__ = ["MAX_RATE_JOBS", "MAX_RATE_SECONDS", "MIN_RATE_SECONDS", "RateLimit"]

#: The most jobs a window may allow (more is no limit worth keeping).
MAX_RATE_JOBS = 1_000_000
#: The shortest and longest window: from a hundredth of a second to a day.
MIN_RATE_SECONDS = 0.01
MAX_RATE_SECONDS = 86_400.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLimit:
    """A queue's rate limit and its current window.

    ``window_start`` is when the current (or last) window opened, None
    before the first start under this limit; ``window_started`` is how many
    jobs started in it.
    """

    jobs: int
    seconds: float
    window_start: datetime | None = None
    window_started: int = 0

    def window_end(self) -> datetime | None:
        """When the current or last window closes (None before any start)."""
        if self.window_start is None:
            return None
        return self.window_start + timedelta(seconds=self.seconds)

    def _open(self, now: datetime) -> bool:
        end = self.window_end()
        return end is not None and now < end

    def left(self, now: datetime) -> int:
        """How many more jobs may start at ``now``: what the open window has
        left, or a whole window's worth when none is open."""
        if self._open(now):
            return max(self.jobs - self.window_started, 0)
        return self.jobs

    def reopens(self, now: datetime) -> datetime | None:
        """When starts are allowed again, if none is at ``now`` (the open
        window is used up); None when one may start now."""
        if self.left(now) > 0:
            return None
        return self.window_end()

    def started(self, now: datetime, count: int) -> RateLimit:
        """This limit after ``count`` jobs started at ``now`` (a window opens
        at ``now`` if none is open)."""
        if count <= 0:
            return self
        if self._open(now):
            return replace(self, window_started=self.window_started + count)
        return replace(self, window_start=now, window_started=count)

    def taken_over(self, now: datetime) -> RateLimit:
        """This limit as a new leader whose clock reads ``now`` takes it over:
        a window that starts after ``now`` (the old leader's clock ran ahead)
        starts at ``now`` instead, keeping its count."""
        if self.window_start is None or self.window_start <= now:
            return self
        return replace(self, window_start=now)

    def describe(self) -> str:
        """``"10 per 1 s"``, ``"1,000 per 60 s"``: the limit in words, for errors and pages."""
        return f"{self.jobs:,} per {self.seconds:g} s"
