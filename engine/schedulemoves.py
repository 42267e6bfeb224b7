"""The schedules' transition: fire the ticks the leader found due.

Applied by :mod:`engine.transitions`; the rules are in :mod:`engine.schedules`.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from engine.document import QueueState
from engine.lifecycle import push
from engine.optypes import FireSchedules, ForgetSchedule, Push, SetSchedulePaused
from engine.schedules import ScheduleMark, ScheduleOutcome

__all__ = ["fire_schedules", "forget_schedule", "set_schedule_paused"]


def fire_schedules(state: QueueState, op: FireSchedules, now: datetime) -> list[ScheduleOutcome | None]:
    """For each fire, in order: push its job and mark its tick ``fired``;
    mark it ``skipped`` if the schedule is paused; ``registered`` if it has
    no mark and the tick is before ``op.since``; ``missed`` if the tick is
    more than its ``catch_up_seconds`` before ``now``. None: the mark is
    already at or after the tick (another commit handled it), and nothing
    changes. Never raises for a single fire, so one schedule cannot stop
    another."""
    outcomes: list[ScheduleOutcome | None] = []
    for fire in op.fires:
        mark = state.schedules.get(fire.name)
        if mark is not None and mark.tick >= fire.tick:
            outcomes.append(None)
            continue
        outcome: ScheduleOutcome
        if fire.name in state.schedule_pauses:
            # Moving the mark on is what makes a resume not catch up.
            outcome, job = "skipped", None
        elif mark is None and fire.tick < op.since:
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


def set_schedule_paused(state: QueueState, op: SetSchedulePaused, now: datetime) -> bool:
    """Pause or resume the schedule; returns whether it was paused before.
    A pause keeps the moment it began (a second pause keeps the first's)."""
    was = op.name in state.schedule_pauses
    if op.paused and not was:
        state.schedule_pauses[op.name] = now
        state.dirty = True
    elif not op.paused and was:
        del state.schedule_pauses[op.name]
        state.dirty = True
    return was


def forget_schedule(state: QueueState, op: ForgetSchedule, now: datetime) -> bool:
    """Drop the schedule's mark and pause; returns whether there was either."""
    had = state.schedules.pop(op.name, None) is not None
    had = state.schedule_pauses.pop(op.name, None) is not None or had
    if had:
        state.dirty = True
    return had
