"""What the schedules page shows: each recurring job (``QUEUE_SCHEDULES``)
beside the mark the document keeps for it (engine.schedules).

The definitions are this node's (its broker's); the marks and pauses are
the document's, written by whichever node led. A mark or pause without a
definition here is listed too: another node's setting, or a schedule since
removed (whose mark the page offers to forget). Pause, resume and forget are
operator actions (:mod:`.schedule_actions`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson

from engine import Schedule, tick_of
from queueadmin import config, runtime
from queueadmin.dashboard import auditlog
from queueadmin.dashboard.snapshot import Snapshot, moment
from queueadmin.models import AuditEntry

# A tick this much later than due, past the heartbeat that should fire it,
# and still not handled, is worth a warning: no leader is firing it.
LATE_GRACE_SECONDS = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleRow:
    """One schedule on the page. ``schedule`` is None for a mark this node
    has no definition of; ``mark_*`` are None before the first commit."""

    name: str
    schedule: Schedule | None
    description: str
    next_tick: datetime | None
    mark_tick: datetime | None
    mark_outcome: str | None
    mark_job: str | None
    mark_at: datetime | None
    overdue: datetime | None  # the first tick no commit has handled, once late
    paused_since: datetime | None = None  # when its pause began (None: not paused)
    paused_by: AuditEntry | None = None  # the audited pause holding it, if any


def schedules(snapshot: Snapshot) -> dict[str, Any]:
    """The page's context: one row per configured schedule, in the setting's
    order, then the document's marks without a definition here."""
    now = snapshot.taken_at
    marks = marks_of(snapshot)
    pauses = pauses_of(snapshot)
    rows = []
    defined = runtime.get_broker().schedules
    if snapshot.sees is not None:  # narrowed to some queues: the schedules pushing to them only
        defined = [item for item in defined if snapshot.sees(item.queue)]
    for item in defined:
        mark = marks.get(item.name) or {}
        # A paused schedule's ticks are handled (skipped) as they come: one
        # left unhandled is as late as any other's.
        rows.append(_row(item.name, item, item.describe(), item.next_due(now), mark,
                         overdue_tick(item, moment(mark.get("tick")), now), pauses.get(item.name)))
    known = {item.name for item in runtime.get_broker().schedules}
    # A mark no definition here explains names no queue: shown to who sees every queue only.
    for name in sorted({*marks, *pauses} - known if snapshot.sees is None else ()):
        rows.append(_row(name, None, "Not configured on this node", None, marks.get(name) or {}, None,
                         pauses.get(name)))
    return {"snapshot": snapshot, "rows": rows, "overdue": sum(1 for r in rows if r.overdue is not None),
            "paused": sum(1 for r in rows if r.paused_since is not None)}


def pushed_by(job_id: str) -> str:
    """" by schedule <name>, its tick of <time>" when ``job_id`` is a tick's
    job (its id names both, engine.schedules); "" otherwise."""
    found = tick_of(job_id)
    if found is None:
        return ""
    name, tick = found
    return f" by schedule {name}, its tick of {tick:%Y-%m-%d %H:%M:%S} UTC"


def run_now_initial(name: str) -> dict[str, Any] | None:
    """What "Run now" fills the submit form with: the job this node's
    schedule ``name`` pushes at each tick (queue, payload, max attempts);
    None when this node has no such schedule. Submitting it is an audited
    submit, of a job with its own id, outside the schedule's ticks."""
    item = next((s for s in runtime.get_broker().schedules if s.name == name), None)
    if item is None:
        return None
    return {"queue": item.queue, "max_attempts": item.max_attempts, "delay_seconds": 0,
            "payload": orjson.dumps(orjson.loads(item.payload), option=orjson.OPT_INDENT_2).decode(),
            "reason": f"schedule {name}, run now"}


def marks_of(snapshot: Snapshot) -> dict[str, dict[str, Any]]:
    """The document's marks by schedule name, as written (engine.schedules).
    A malformed one is left out: the engine refuses such a document (I6),
    and this page still shows the rest."""
    raw = snapshot.header.get("schedules")
    if not isinstance(raw, dict):
        return {}
    marks = {}
    for name, mark in raw.items():
        try:
            if isinstance(mark, dict) and moment(mark.get("tick")) is not None and (
                    mark.get("job") is None or (isinstance(mark["job"], str) and "/" not in mark["job"])):
                moment(mark.get("at"))
                marks[str(name)] = mark
        except (TypeError, ValueError):
            continue
    return marks


def pauses_of(snapshot: Snapshot) -> dict[str, datetime]:
    """The document's schedule pauses, by name: when each began. A malformed
    one is left out (the engine refuses such a document, I6)."""
    raw = snapshot.header.get("schedule_pauses")
    if not isinstance(raw, dict):
        return {}
    pauses = {}
    for name, since in raw.items():
        try:
            when = moment(since)
        except (TypeError, ValueError):
            continue
        if when is not None:
            pauses[str(name)] = when
    return pauses


def late_schedules(snapshot: Snapshot) -> list[str]:
    """The overview's warnings: one per schedule of this node with a tick
    late (:func:`overdue_tick`), saying what to check."""
    now = snapshot.taken_at
    marks = marks_of(snapshot)
    found = []
    for item in runtime.get_broker().schedules:
        if snapshot.sees is not None and not snapshot.sees(item.queue):
            continue
        late = overdue_tick(item, moment((marks.get(item.name) or {}).get("tick")), now)
        if late is not None:
            found.append(f"Schedule {item.name}: its tick of {late:%Y-%m-%d %H:%M:%S} UTC has not been pushed, "
                         f"{(now - late).total_seconds():.0f} s on. Is a leader running, with this schedule in its "
                         "QUEUE_SCHEDULES?")
    return found


def overdue_tick(item: Schedule, marked: datetime | None, now: datetime) -> datetime | None:
    """The first tick of ``item`` the mark (``marked``, None: none yet) does
    not cover, once it is late: more than a heartbeat and
    :data:`LATE_GRACE_SECONDS` past. None when no tick is late."""
    waiting = item.next_due(marked) if marked is not None else item.latest_due(now)
    late_after = timedelta(seconds=config.heartbeat_seconds() + LATE_GRACE_SECONDS)
    return waiting if waiting is not None and now - waiting > late_after else None


def _row(name: str, item: Schedule | None, description: str, next_tick: datetime | None,
         mark: dict[str, Any], overdue: datetime | None, paused_since: datetime | None) -> ScheduleRow:
    return ScheduleRow(name=name, schedule=item, description=description, next_tick=next_tick,
                       mark_tick=moment(mark.get("tick")), mark_outcome=mark.get("outcome"),
                       mark_job=mark.get("job"), mark_at=moment(mark.get("at")), overdue=overdue,
                       paused_since=paused_since, paused_by=None if paused_since is None else paused_by(name))


def paused_by(name: str) -> AuditEntry | None:
    """The audited pause that holds schedule ``name`` paused (:func:`.auditlog.holding_pause`)."""
    return auditlog.holding_pause(AuditEntry.Action.PAUSE_SCHEDULE, AuditEntry.Action.RESUME_SCHEDULE,
                                  target=f"schedule={name}")
