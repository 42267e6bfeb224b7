"""The dry runs of the actions on a schedule: pause, resume, and forget.

A pause is kept in the document (``schedule_pauses``, engine.schedules), so
every node, and every later leader, skips the schedule's ticks while it
holds: each tick is marked *skipped* and pushes nothing, and a resume fires
the next tick, never the skipped ones. Forgetting drops the mark (and any
pause) of a schedule no node defines any more; it is refused here for a
schedule this node defines, whose mark is what keeps each tick to one job.

The run is the generic one (:func:`.actions.run`): a conditional operation
through the broker, audited with ``target`` ``schedule=<name>`` and the
schedule's queue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from queueadmin import runtime
from queueadmin.dashboard.schedules import marks_of, pauses_of
from queueadmin.dashboard.snapshot import Snapshot, moment
from queueadmin.models import AuditEntry

if TYPE_CHECKING:
    from queueadmin.dashboard.actions import Plan

Action = AuditEntry.Action


def plan_schedule(p: Plan, snapshot: Snapshot) -> Plan:
    """Fill ``p`` (an action on schedule ``p.schedule``) against ``snapshot``:
    its target, queue (from this node's definition), notes and problems."""
    name = p.schedule
    p.target = f"schedule={name}"
    item = next((s for s in runtime.get_broker().schedules if s.name == name), None)
    mark = marks_of(snapshot).get(name)
    paused = name in pauses_of(snapshot)
    if item is not None:
        p.queue = item.queue
    if p.forgets:
        if item is not None:
            p.problems.append(f"Schedule {name} is in this node's QUEUE_SCHEDULES: its mark is what keeps each of "
                              "its ticks to one job. Remove it from the setting on every node first, then forget "
                              "its mark.")
        elif mark is None and not paused:
            p.problems.append(f"The document has no mark or pause of schedule {name}: there is nothing to forget.")
        else:
            held = f"its last tick ({_when(mark)}, {mark.get('outcome')})" if mark is not None else ""
            held += (" and " if held else "") + ("its pause" if paused else "")
            p.notes.append(f"The document drops {held}. A node that defines {name} again registers its next tick "
                           "afresh and fires the ones after.")
        return p
    if paused == p.spec.pauses:
        p.problems.append(p.spec.needless % p.words)
        p.needless = True
        return p
    upcoming = item.next_due(snapshot.taken_at) if item is not None else None
    nxt = f" (next: {upcoming:%Y-%m-%d %H:%M:%S} UTC)" if upcoming is not None else ""
    if p.spec.pauses:
        if item is None and mark is None:
            p.problems.append(f"Schedule {name} is neither in this node's QUEUE_SCHEDULES nor in the document: "
                              "check its name.")
            return p
        p.notes.append(f"Its ticks are skipped from the next one{nxt}, by whichever node leads, until it is resumed: "
                       "nothing is pushed for them, and resuming does not run them. Jobs it pushed already stay "
                       "where they are.")
    else:
        p.notes.append(f"Its next tick{nxt} pushes its job again. The ticks skipped while it was paused are not run "
                       "(Run now, on the Schedules page, pushes one by hand).")
    return p


def _when(mark: dict[str, Any]) -> str:
    tick = moment(mark.get("tick"))
    return f"{tick:%Y-%m-%d %H:%M:%S} UTC" if tick is not None else "?"
