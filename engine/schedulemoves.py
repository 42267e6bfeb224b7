"""The schedules' transition: fire the ticks the leader found due.

Applied by :mod:`engine.transitions`; the rules are in :mod:`engine.schedules`.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from engine.document import QueueState
from engine.lifecycle import push
from engine.optypes import FireSchedules, Push
from engine.schedules import ScheduleMark, ScheduleOutcome

__all__ = ["fire_schedules"]


def fire_schedules(state: QueueState, op: FireSchedules, now: datetime) -> list[ScheduleOutcome | None]:
    """For each fire, in order: push its job and mark its tick ``fired``;
    mark it ``missed`` if the tick is more than its ``catch_up_seconds``
    before ``now``; mark it ``registered`` if the schedule has no mark and
    the tick is before ``op.since``. None: the mark is already at or after
    the tick (another commit handled it), and nothing changes. Never raises
    for a single fire, so one schedule cannot stop another."""
    outcomes: list[ScheduleOutcome | None] = []
    for fire in op.fires:
        mark = state.schedules.get(fire.name)
        if mark is not None and mark.tick >= fire.tick:
            outcomes.append(None)
            continue
        outcome: ScheduleOutcome
        if mark is None and fire.tick < op.since:
            outcome, job = "registered", None
        elif now - fire.tick > timedelta(seconds=fire.catch_up_seconds):
            outcome, job = "missed", None
        else:
            # The id names the tick: were the mark ever lost (a node that
            # does not know schedules rewrote the document), the dedup window
            # still refuses a second job for a tick that fired recently.
            push(state, Push(queue=fire.queue, jobs=(fire.job,)), now)
            outcome, job = "fired", fire.job.id
        state.schedules[fire.name] = ScheduleMark(fire.tick, outcome, job, now)
        state.dirty = True
        outcomes.append(outcome)
    return outcomes
