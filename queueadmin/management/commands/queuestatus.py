"""``manage.py queuestatus``: what the queue document at QUEUE_STORE_URL says right now.

It reads the store directly (one GET, never a write), so it works with no
broker running, and parses the document as strictly as the engine does: a
document the engine would refuse is reported with the engine's message, and
the command exits non-zero.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson
from django.core.management.base import BaseCommand, CommandError, CommandParser

from engine import (
    DOCUMENT_KEY,
    FORMAT_SEGMENTS,
    EngineError,
    Policy,
    QueueCounters,
    QueueState,
    ScheduleMark,
    counters_dict,
    marker_key,
    parse_document,
    read_marker,
    utc_now,
)
from queueadmin.management import open_document_store

COUNTERS = ("pushed", "completed", "failed", "dead", "purged", "dead_dropped")
# Short labels for the text table, where "dead" already counts the dead letters present.
COUNTER_LABELS = ("pushed", "completed", "failed", "died", "purged", "dropped")
NOW_LABELS = {"in_segments": "segments"}


def summarize(state: QueueState, *, now: datetime) -> dict[str, Any]:
    """The status as plain data: leader, seq, per-queue counts and the running leases.

    Ages and time left are measured against ``now`` (this machine's clock),
    while the document's times come from the leader's clock. In format 2,
    ``in_segments`` counts a queue's pending jobs in segment objects (from
    the document's references: the objects are not read) and ``segments``
    the objects; they are pending and were ready when sealed (format 3:
    or not due yet, in delayed segments), but not in ``ready`` nor
    ``delayed``, which count the document's jobs. ``next_due`` is when the
    queue's next job not due yet comes due (its ``next_due_seconds`` from
    ``now``): the earliest of the document's delayed jobs and of the first
    delayed segment not due yet (a segment already partly due is not read
    for it); None when every pending job is due.
    """
    names = (set(state.queues) | {j.queue for j in state.jobs.values()} | {d.queue for d in state.dead.values()}
             | set(state.lanes) | set(state.delays))
    queues: dict[str, dict[str, Any]] = {
        name: {"ready": 0, "delayed": 0, "running": 0, "dead": 0,
               "in_segments": sum(ref.remaining for ref in state.lanes.get(name, ())) + state.delayed_away(name),
               "segments": len(state.lanes.get(name, ())) + len(state.delays.get(name, ())),
               # In due order: the first delayed segment not due yet is the soonest of them.
               "next_due": next((ref.first_due for ref in state.delays.get(name, ()) if ref.first_due > now), None),
               "counters": counters_dict(state.queues.get(name) or QueueCounters())}
        for name in sorted(names)
    }
    leases: list[dict[str, Any]] = []
    for job in state.jobs.values():
        row = queues[job.queue]
        if job.lease is None:
            if job.not_before is not None and job.not_before > now:
                row["delayed"] += 1
                if row["next_due"] is None or job.not_before < row["next_due"]:
                    row["next_due"] = job.not_before
            else:
                row["ready"] += 1
            continue
        row["running"] += 1
        lease = job.lease
        leases.append({
            "id": job.id, "queue": job.queue, "worker": lease.worker,
            "attempt": job.attempts, "max_attempts": job.max_attempts,
            "claimed_at": lease.claimed_at, "heartbeat_at": lease.heartbeat_at, "expires_at": lease.expires_at,
            "age_seconds": (now - lease.claimed_at).total_seconds(),
            "since_heartbeat_seconds": (now - lease.heartbeat_at).total_seconds(),
            "left_seconds": (lease.expires_at - now).total_seconds(),
        })
    for dead in state.dead.values():
        queues[dead.queue]["dead"] += 1
    for row in queues.values():
        row["next_due_seconds"] = None if row["next_due"] is None else (row["next_due"] - now).total_seconds()
    return {
        "format": state.format,
        "seq": state.seq,
        "writer": state.writer,
        "leader": {"id": state.broker.id, "url": state.broker.url, "epoch": state.broker.epoch},
        "queues": queues,
        "leases": leases,
        # Recurring jobs: the latest tick each schedule's leader handled
        # (engine.schedules), and when its pause began if it is paused; a
        # schedule paused before any tick has no mark yet (tick None).
        "schedules": {name: _schedule(state.schedules.get(name), state.schedule_pauses.get(name), now)
                      for name in sorted({*state.schedules, *state.schedule_pauses})},
    }


def _rate(rate: dict[str, Any] | None) -> str:
    """A queue's rate limit as ``N/Ss`` ("-" for none)."""
    return "-" if rate is None else f"{rate['jobs']}/{rate['seconds']:g}s"


def _next_due(seconds: float | None) -> str:
    return "-" if seconds is None else f"in {_duration(seconds)}"


def _schedule(mark: ScheduleMark | None, paused_since: datetime | None, now: datetime) -> dict[str, Any]:
    """One schedule's line of the status: its mark (or Nones) and its pause."""
    return {"tick": mark.tick if mark else None, "outcome": mark.outcome if mark else None,
            "job": mark.job if mark else None, "at": mark.at if mark else None,
            "age_seconds": (now - mark.tick).total_seconds() if mark else None, "paused_since": paused_since}


def _duration(seconds: float) -> str:
    seconds = abs(seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _table(header: list[str], rows: list[list[str]], *, left: int = 1) -> list[str]:
    """Columns padded to fit; the first ``left`` columns left-aligned, the rest right-aligned."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(w) if i < left else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths,
                                                                                                strict=True)))
        .rstrip()
        for row in [header, *rows]
    ]


def _leader_line(leader: dict[str, Any]) -> str:
    """Who leads; with nobody named, whether nobody ever did (epoch 0) or
    the last leader handed over as it stopped (engine.ops.HandOver)."""
    if leader["id"]:
        return f"leader    {leader['id']}  {leader['url'] or '(no URL advertised)'}  epoch {leader['epoch']}"
    if not leader["epoch"]:
        return f"leader    none (epoch {leader['epoch']}): no broker has taken over yet"
    return (f"leader    none (epoch {leader['epoch']}): the last leader handed over as it stopped; "
            "a standby takes over at its next poll")


def render(status: dict[str, Any]) -> list[str]:
    """The status as the lines the command prints."""
    leader = status["leader"]
    lines = [
        f"document  {status['document']}  ({status['size']} bytes, seq {status['seq']})",
        _leader_line(leader),
        "",
    ]
    queues = status["queues"]
    if queues:
        # Format 2: a column for the pending jobs in segment objects (format 1 has none).
        now = ("ready", "in_segments", "delayed", "running", "dead") if status.get("format", 1) >= FORMAT_SEGMENTS \
            else ("ready", "delayed", "running", "dead")
        due = any(q.get("next_due_seconds") is not None for q in queues.values())
        limited = any("max_running" in q["counters"] for q in queues.values())
        rated = any("rate_limit" in q["counters"] for q in queues.values())
        header = ["queue", *(NOW_LABELS.get(k, k) for k in now), *(["limit"] if limited else []),
                  *(["rate"] if rated else []), *(["next due"] if due else []), *COUNTER_LABELS]
        rows = [[name, *(str(q[k]) for k in now),
                 *([str(q["counters"].get("max_running", "-"))] if limited else []),
                 *([_rate(q["counters"].get("rate_limit"))] if rated else []),
                 *([_next_due(q.get("next_due_seconds"))] if due else []),
                 *(str(q["counters"][k]) for k in COUNTERS)] for name, q in queues.items()]
        lines += _table(header, rows)
        lines.append("(ready to dead: in the document now" + (", segments: pending jobs in segment objects"
                                                           if "in_segments" in now else "")
                     + "; pushed to dropped: counters since the queue began; "
                     "died: moved to the dead letters, dropped: dead letters dropped from a full list"
                     + ("; limit: at most this many of its jobs run at once" if limited else "")
                     + ("; rate: at most N of its jobs start in each window of S seconds" if rated else "")
                     + ("; next due: when the next job not due yet comes due" if due else "") + ")")
    else:
        lines.append("no queues yet")
    leases = status["leases"]
    lines += ["", f"running leases: {len(leases)}"]
    if leases:
        rows = [
            [lease["id"], lease["queue"], lease["worker"], f"{lease['attempt']}/{lease['max_attempts']}",
             _duration(lease["age_seconds"]), f"{_duration(lease['since_heartbeat_seconds'])} ago",
             _duration(lease["left_seconds"]) if lease["left_seconds"] >= 0
             else f"expired {_duration(lease['left_seconds'])} ago"]
            for lease in leases
        ]
        lines += _table(["job", "queue", "worker", "attempt", "claimed", "heartbeat", "left"], rows, left=3)
        lines.append("(times against this machine's clock; the leader's clock stamped the leases)")
    schedules = status.get("schedules") or {}
    if schedules:
        rows = [[name, f"{mark['tick']:%Y-%m-%d %H:%M:%S}Z ({_duration(mark['age_seconds'])} ago)"
                 if mark["tick"] is not None else "-", mark["outcome"] or "-", mark["job"] or "-",
                 f"since {mark['paused_since']:%Y-%m-%d %H:%M:%S}Z" if mark["paused_since"] is not None else "-"]
                for name, mark in schedules.items()]
        lines += ["", f"schedules: {len(schedules)}",
                  *_table(["schedule", "last tick", "outcome", "job", "paused"], rows, left=5)]
    return lines


class Command(BaseCommand):
    help = (
        "Show the queue document at QUEUE_STORE_URL: the leader, seq, counts per queue, the running "
        "leases with their age, and each schedule's last tick. Reads the store directly and never writes."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print the status as one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        store, where = open_document_store()
        try:
            blob = store.get(DOCUMENT_KEY)
            if blob is None and read_marker(store, DOCUMENT_KEY) is not None:
                # I10: it existed (its creation marker says so) and is gone.
                raise CommandError(f"{where}: missing, but it existed (see {marker_key(DOCUMENT_KEY)}); the "
                                   "nodes refuse to re-create it: restore it, or run queueinit --force --reason ...")
            if blob is None:
                if options["json"]:
                    self.stdout.write(orjson.dumps({"document": where, "exists": False}).decode())
                else:
                    self.stdout.write(f"document  {where}: none yet (it is created by the first push)")
                return
            # Parsed exactly as the engine parses it (I6): what it refuses, we report.
            state = parse_document(DOCUMENT_KEY, blob.data, policy=Policy())
        except EngineError as exc:  # DocumentError names the key; say which store
            raise CommandError(f"{store.describe()}: {exc}") from exc
        finally:
            store.close()
        status = {"document": where, "exists": True, "size": len(blob.data), **summarize(state, now=utc_now())}
        if options["json"]:
            self.stdout.write(orjson.dumps(status, option=orjson.OPT_INDENT_2 | orjson.OPT_UTC_Z).decode())
        else:
            self.stdout.write("\n".join(render(status)))
