"""What each dashboard page shows, as plain context built from a snapshot.

Views render these contexts as whole pages; the live consumer renders the
same contexts' partials and pushes them to open pages. Each builder is a pure
function of a :class:`Snapshot`, the page's query parameters and settings, so
a page and its live update cannot disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from django.db import DatabaseError
from django.template.defaultfilters import filesizeformat
from django.utils.translation import ngettext

from engine import EngineError, RateLimit, default_heartbeat_interval
from engine.wire import HIDDEN_TOKEN
from queueadmin import config
from queueadmin.api.forward import insecure_key
from queueadmin.dashboard import redaction, segments
from queueadmin.dashboard.clocks import clock_warning, commit_timing
from queueadmin.dashboard.joblist import find_job, task_call, waits
from queueadmin.dashboard.schedules import late_schedules, pauses_of, pushed_by
from queueadmin.dashboard.snapshot import Doc, QueueSummary, Snapshot, moment
from queueadmin.dashboard.source import Rates, recorded_rates, source
from queueadmin.history.records import FinishedJob, find, pretty_payload
from queueadmin.models import AuditEntry
from queueadmin.tasks import StoredResult, TaskView, describe, read_result
from queueadmin.workers import seen

# No sign of any worker for this long while jobs wait: warn.
WORKERS_QUIET_SECONDS = 60.0
# Jobs must have waited this long before "no worker" is worth a warning.
WAITING_WARN_SECONDS = 10.0
# The raw-document page shows at most this much of the pretty-printed JSON.
RAW_LIMIT_BYTES = 256 * 1024
# Every commit writes the whole document, at a store's ~100 MB/s for one
# stream: past this size each commit pays ~0.1 s for its bytes alone (four
# times format 2's 2 MB a commit). Warn, and say what holds it.
LARGE_DOCUMENT_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Alert:
    level: str  # "warn" or "info"
    text: str


def worker_heartbeat_seconds() -> float:
    """How often a worker is expected to heartbeat with the default lease (the worker's default interval)."""
    return default_heartbeat_interval(config.lease_seconds())


def _age(now: datetime, then: datetime | None) -> float | None:
    return (now - then).total_seconds() if then is not None else None


# -- overview -------------------------------------------------------------------------------


def overview(snapshot: Snapshot) -> dict[str, Any]:
    now = snapshot.taken_at
    rates = minute_rates(snapshot)
    rows = [{"q": q, "oldest_age": _age(now, q.oldest_pending_at), **pace(q, rates.get(name))}
            for name, q in snapshot.queues.items()]
    node = source.node()
    # On a standby, measured on its own clock: the two wall clocks may differ (clocks.py).
    commit_age, skew = commit_timing(snapshot, node)
    clock = clock_warning(skew, node.poll_seconds)
    heartbeat = config.heartbeat_seconds()
    return {
        "snapshot": snapshot,
        "rows": rows,
        # Shown once anything was purged, so that a queue's numbers add up again.
        "purged_column": any(q.purged for q in snapshot.queues.values()),
        "node": node,
        "commit_age": commit_age,
        "commit_late": commit_age is not None and commit_age > 3 * heartbeat,
        "heartbeat_seconds": heartbeat,
        "takeover_seconds": config.takeover_seconds(),
        "alerts": [*alerts(snapshot, commit_age=commit_age, heartbeat=heartbeat), *node_alerts(snapshot, node.role),
                   *([Alert("warn", clock)] if clock else [])],
        "totals": snapshot.status_counts(),
    }


def node_alerts(snapshot: Snapshot, role: str) -> list[Alert]:
    """What is wrong with this node rather than the queue: a standby signing
    with the public development key forwards no operator action to the
    leader (queueadmin.api.forward), so say so before one is tried."""
    if role == "leader" or not insecure_key():
        return []
    leader = snapshot.broker.get("url")
    where = f"the leader's dashboard ({leader})" if leader else "the leader's dashboard"
    return [Alert("warn", "This node runs with the public development secret key, so the actions tried here "
                          f"cannot be forwarded to the leader and fail: act on {where}, or set DJANGO_SECRET_KEY "
                          "(the same on every node).")]


def minute_rates(snapshot: Snapshot) -> dict[str, Rates]:
    """Per queue, its rates over the last minute: the recorded minute where
    the sampler has one (this process's own samples may span a few seconds,
    a burst extrapolated, or an hour when no page was open meanwhile)."""
    return {**source.rates(), **recorded_rates(snapshot)}


def pace(q: QueueSummary, rate: Rates | None) -> dict[str, Any]:
    """How queue ``q`` moves at ``rate``: the rate, how long its ready jobs
    take to drain and whether it keeps up; what ``_drain.html`` shows."""
    # Delayed jobs are not draining, whatever the rates: only the ready ones count.
    drain = drain_seconds(q.ready, rate, limit=q.rate)
    return {"q": q, "rate": rate, "drain": drain, "keeping_up": drain is None and keeping_up(q.ready, rate)}


def drain_seconds(ready: int, rate: Rates | None, *, limit: RateLimit | None = None) -> float | None:
    """How long the ``ready`` jobs (pending and due) take to drain at the
    last minute's rates: 0 when none are ready, None when unknown or when
    they are not draining (arrivals keep up with completions). A queue's
    rate ``limit`` caps the completions counted (the last minute may still
    hold a burst from before it was set): never sooner than it allows."""
    if ready == 0:
        return 0.0
    if rate is None:
        return None
    completions = rate.completions
    if limit is not None:
        completions = min(completions, limit.jobs * 60 / limit.seconds)
    if completions <= rate.arrivals:
        return None
    return ready / (completions - rate.arrivals) * 60


#: How far arrivals may run above completions in a queue that still keeps up:
#: a minute's counts of a queue whose arrivals and completions match differ
#: by a few jobs either way.
KEEPING_UP_MARGIN = 1.25


def keeping_up(ready: int, rate: Rates | None) -> bool:
    """Whether a queue that is not draining (arrivals at least its
    completions) keeps up all the same: fewer jobs wait than it completes in
    a minute, and arrivals are within :data:`KEEPING_UP_MARGIN` of
    completions. Otherwise "not draining" is the overview's alarm."""
    return (rate is not None and 0 < ready <= rate.completions
            and rate.arrivals <= KEEPING_UP_MARGIN * rate.completions)


def queue_worker_activity(snapshot: Snapshot) -> dict[str, datetime]:
    """Per queue, the latest sign of a worker working on it: a lease
    heartbeat or an ended attempt of one of its jobs, or a claim request
    naming it (to any leader: :mod:`queueadmin.workers.seen`)."""
    latest = snapshot.queue_activity()
    for queue, when in seen.by_queue(snapshot.taken_at).items():
        if snapshot.sees is not None and not snapshot.sees(queue):
            continue
        if queue not in latest or when > latest[queue]:
            latest[queue] = when
    return latest


def workerless_for(snapshot: Snapshot, queue: str, activity: dict[str, datetime]) -> str | None:
    """The overview's rule for a queue no worker takes from: None when a
    worker was seen on ``queue`` within :data:`WORKERS_QUIET_SECONDS` (by
    ``activity``, :func:`queue_worker_activity`); else how long none was,
    as words to follow "no worker has been seen on it" ("" for never)."""
    quiet = _age(snapshot.taken_at, activity.get(queue))
    if quiet is not None and quiet <= WORKERS_QUIET_SECONDS:
        return None
    return "" if quiet is None else f" for {quiet:.0f} s"


def alerts(snapshot: Snapshot, *, commit_age: float | None, heartbeat: float) -> list[Alert]:
    now = snapshot.taken_at
    found: list[Alert] = []
    # Per queue: a worker busy on another queue does not drain this one.
    activity = queue_worker_activity(snapshot)
    for q in snapshot.queues.values():
        if not q.ready or q.paused or (_age(now, q.oldest_pending_at) or 0.0) < WAITING_WARN_SECONDS:
            continue
        since = workerless_for(snapshot, q.name, activity)
        if since is not None:
            found.append(Alert("warn", f"Jobs are waiting in {q.name} and no worker has been seen on it{since}. "
                                       f"Start a worker: manage.py queueworker --queue {q.name}"))
    found.extend(orphan_alerts(snapshot))
    if commit_age is not None and snapshot.seq and commit_age > 3 * heartbeat:
        found.append(Alert("warn", f"No commit for {commit_age:.0f} s; the leader commits at least every "
                                   f"{heartbeat:g} s. Is the leader down? A standby takes over after "
                                   f"{config.takeover_seconds():g} s."))
    if snapshot.size >= LARGE_DOCUMENT_BYTES:
        found.append(Alert("warn", large_document(snapshot)))
    found.extend(Alert("warn", text) for text in late_schedules(snapshot))
    for q in snapshot.queues.values():
        if q.paused:
            waits = ngettext("%(n)s pending job waits", "%(n)s pending jobs wait", q.pending) % {"n": f"{q.pending:,}"}
            found.append(Alert("info", f"Queue {q.name} is paused: {waits} for a resume."))
    for name, paused_at in sorted(pauses_of(snapshot).items()):
        found.append(Alert("info", f"Schedule {name} is paused (since {paused_at:%Y-%m-%d %H:%M} UTC): its ticks push "
                                   "nothing until it is resumed on the Schedules page."))
    return found


def orphan_alerts(snapshot: Snapshot) -> list[Alert]:
    """Per queue, its running jobs whose leases are orphaned (their worker
    stopped heartbeating, see :func:`lease_row`): they look like running
    jobs until their leases expire, then go back to pending."""
    now = snapshot.taken_at
    by_queue: dict[str, list[dict[str, Any]]] = {}
    for item in snapshot.leases():
        row = lease_row(item, now)
        if row["orphaned"]:
            by_queue.setdefault(item["queue"], []).append(row)
    found = []
    for queue, rows in sorted(by_queue.items()):
        workers = sorted({r["worker"] for r in rows})
        first = min((r["left"] for r in rows if r["left"] is not None), default=None)
        when = "" if first is None else "now" if first <= 0 else f"in {first:.0f} s"
        if len(rows) == 1:
            back = "It goes back to pending when its lease expires" + (f" ({when})" if when else "")
        else:
            back = "They go back to pending as their leases expire" + (f" (the first {when})" if when else "")
        jobs = ngettext("%(n)s running job of %(q)s has an orphaned lease",
                        "%(n)s running jobs of %(q)s have orphaned leases", len(rows)) % {"n": f"{len(rows):,}",
                                                                                      "q": queue}
        names = ", ".join(workers[:3]) + (", …" if len(workers) > 3 else "")
        found.append(Alert("warn", f"{jobs}: {names} stopped heartbeating. {back}; see the Workers page."))
    return found


def large_document(snapshot: Snapshot) -> str:
    """Why ``queue.json`` is large, for its alert: what it holds that a
    commit writes every time (delayed jobs, pending jobs outside segments,
    running jobs, dead letters; each with its largest queues), and what to
    do about each. Counts only; no I/O."""
    rows = snapshot.queues.values()

    def held(one: str, many: str, count: Callable[[QueueSummary], int]) -> str | None:
        counts = sorted(((count(q), q.name) for q in rows if count(q) > 0), reverse=True)
        if not counts:
            return None
        where = ", ".join(f"{name} {n:,}" for n, name in counts[:3]) + (", …" if len(counts) > 3 else "")
        total = sum(n for n, _ in counts)
        return f"{total:,} {ngettext(one, many, total)} ({where})"

    # In the document only: those in segment objects (delayed ones too) cost a commit nothing.
    delayed = held("delayed job", "delayed jobs", lambda q: q.delayed_here)
    ready = held("ready pending job", "ready pending jobs", lambda q: q.ready_here)
    parts = [p for p in (delayed, ready, held("running job", "running jobs", lambda q: q.running),
                         held("dead letter", "dead letters", lambda q: q.dead)) if p]
    advice = []
    if delayed:
        horizon = config.policy().delayed_horizon_seconds
        kind = "delayed jobs (scheduled, or retries waiting out their backoff)"
        if snapshot.next_pos is None:
            advice.append(f"{kind} stay in the document in format 1: set QUEUE_SEGMENT_JOBS, and "
                          "QUEUE_DELAYED_HORIZON_SECONDS, to move those due later to delayed segment objects")
        elif horizon <= 0:
            advice.append(f"{kind} stay in the document with QUEUE_DELAYED_HORIZON_SECONDS=0: set it (60 s by "
                          "default) to move those due later to delayed segment objects")
        else:
            advice.append(f"{kind} stay in the document up to each queue's share of QUEUE_HEAD_JOBS, and while due "
                          f"within {horizon:g} s (QUEUE_DELAYED_HORIZON_SECONDS): look for a failing downstream "
                          "service, or shorten the backoff")
    if ready and snapshot.next_pos is None:
        advice.append("format 1 keeps every pending job in the document: set QUEUE_SEGMENT_JOBS to move "
                      "backlogs into segment objects")
    if snapshot.dead:
        advice.append("purge the dead letters you have looked at")
    todo = "; ".join(advice)
    size = filesizeformat(snapshot.size).replace("\xa0", " ")  # as the overview's Broker card shows it
    return (f"queue.json is {size}, and every commit writes all of it, so commits and "
            f"every reader slow down. It holds {'; '.join(parts) or 'few jobs'}."
            + (f" {todo[0].upper()}{todo[1:]}." if todo else ""))


# -- jobs -----------------------------------------------------------------------------------


def task_result(job_id: str) -> tuple[StoredResult | None, str | None]:
    """The stored result of a task job, or the reason it cannot be read now."""
    try:
        return read_result(job_id), None
    except EngineError as exc:
        return None, f"{type(exc).__name__}: {exc}"


# -- one job ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Event:
    at: datetime
    kind: str  # enqueued, claimed, heartbeat, failed, expired, requeued, dead, running, action
    text: str
    detail: str | None = None
    tone: str = ""  # "", "ok", "warn", "bad"
    action: str = ""  # an operator's action (kind "action"): which one


#: The timeline events an operator's action makes on a job in the commit it
#: runs in: its entry goes just before them (see :func:`in_order`).
CAUSED = {"stop": frozenset({"failed", "dead"}), "requeue": frozenset({"requeued"})}
#: How long before its audit entry the commit an action made may have landed.
ACTION_COMMIT_SECONDS = 10.0
#: How an action reads on a job's timeline ("stopped by ops").
DONE = {"requeue": "requeued", "purge": "purged", "stop": "stopped", "redrive": "redriven", "submit": "submitted",
        "run_now": "made due now"}


def in_order(events: list[Event]) -> list[Event]:
    """``events`` by time, but an operator's action just before what it made
    happen to the job: its audit entry is written once the commit that ran it
    has landed, a few milliseconds after the job's events of that commit (a
    stop's failed attempt and its move to the dead letters)."""
    def key(e: Event) -> tuple[datetime, int]:
        caused = CAUSED.get(e.action)
        if caused:
            made = [o.at for o in events if o.kind in caused and o.at <= e.at
                    and (e.at - o.at).total_seconds() <= ACTION_COMMIT_SECONDS]
            if made:
                return (max(made), 0)
        return (e.at, 1)

    return sorted(events, key=key)


def job(snapshot: Snapshot, job_id: str, actions: list[Any], *, hidden: bool,
        sees: Callable[[str], bool] | None = None) -> dict[str, Any]:
    """The job page's context. With ``hidden``, the payload, a task's
    arguments and its return value show with secret values hidden
    (:mod:`.redaction`), as to a user without ``view_payload_secrets``.
    ``sees``: the queues the user may see (:func:`.scopes.visibility`; None:
    all), ``snapshot`` already narrowed to them: a finished job, a task
    result or an audit entry of another queue is left out, as if unknown."""
    redact = redaction.redactor(hidden=hidden)
    if sees is not None:
        actions = [a for a in actions if sees(a.queue)]
    found, segment_error, in_segment = find_job(snapshot, job_id)
    if found is None:
        # A task job that finished has left the document; its result says how it ended.
        result, result_error = task_result(job_id)
        if result is not None and sees is not None and not sees(result.task.queue_name):
            result = None
        view = _shown_task(result.task, redact) if result is not None else None
        # Its finished-job record, if it left within the retention (overrides "events").
        record = finished_job(job_id, actions, snapshot.taken_at, hidden=hidden, sees=sees)
        # Nothing at all known of it, and no read failed (then it might exist): a 404 that still
        # explains where the page looked, and stays live (the id may yet be pushed).
        unknown = (result is None and record["finished"] is None and not segment_error and not result_error
                   and not record["finished_error"])
        return {"snapshot": snapshot, "job_id": job_id, "found": False, "events": _action_events(actions),
                "segment_error": segment_error, "segments_held": snapshot.in_segments(),
                "lookup_reads": segments.JOB_LOOKUP_READS,
                "result": result, "result_error": result_error,
                "return_value": redact(result.return_value) if result is not None else None,
                "task": view,
                "task_call": task_call(view) if view is not None else None,
                "status_code": 404 if unknown else 200,
                **record}
    item, status = found
    # A job submitted from the dashboard: say who did it on the enqueue itself
    # (the audit entry is written just after the commit, so it sorts later).
    submitted = next((a for a in actions if a.action == "submit" and a.outcome == "ok"), None)
    actions = [a for a in actions if a is not submitted]
    who = f" by {submitted.username}" if submitted is not None else pushed_by(job_id)
    events: list[Event] = [Event(moment(item["enqueued_at"]), "enqueued",  # type: ignore[arg-type]
                                 f"enqueued on {item['queue']}{who}", submitted.reason if submitted else None)]
    lease = item.get("lease")
    # Its count covers the running attempt too, which has no history entry yet.
    events.extend(attempt_events(item.get("history") or (), counted=item["attempts"] - (1 if lease else 0)))
    now = snapshot.taken_at
    lease_view = None
    if lease:
        claimed, beat = moment(lease["claimed_at"]), moment(lease["heartbeat_at"])
        events.append(Event(claimed, "claimed", f"claimed by {lease['worker']} (attempt {item['attempts']})"))  # type: ignore[arg-type]
        if beat != claimed:
            events.append(Event(beat, "heartbeat", f"last heartbeat from {lease['worker']}"))  # type: ignore[arg-type]
        lease_view = lease_row(item, now)
    if status == "dead":
        # Its error is the last attempt's, already on the timeline and in full above.
        events.append(Event(moment(item["died_at"]), "dead", "moved to the dead letters",  # type: ignore[arg-type]
                            None if item.get("history") else item.get("error"), "bad"))
    events.extend(_action_events(actions))
    events = in_order(events)
    shown = redact(item.get("payload"))
    payload = orjson.dumps(shown, option=orjson.OPT_INDENT_2).decode()
    task = describe(shown)
    result, result_error = task_result(job_id) if task is not None else (None, None)
    return {
        "return_value": redact(result.return_value) if result is not None else None,
        "task": task,
        "task_call": task_call(task) if task is not None else None,
        "result": result,
        "result_error": result_error,
        "snapshot": snapshot,
        "job_id": job_id,
        "found": True,
        "in_segment": in_segment,
        # A delayed segment (format 3) holds jobs not yet due, outside the FIFO order.
        "in_delayed_segment": in_segment is not None and any(
            ref.key == in_segment for ref in snapshot.delays.get(item["queue"], ())),
        "job": item,
        "status": status,
        "events": events,
        "lease": lease_view,
        "payload": payload[:RAW_LIMIT_BYTES],
        "payload_truncated": len(payload) > RAW_LIMIT_BYTES,
        "payload_bytes": len(orjson.dumps(item.get("payload"))),
        "not_before": moment(item.get("not_before")),
        # Not due yet (a delayed push, a retry in its backoff): what Run now acts on.
        "waiting": waits(item, snapshot.taken_at),
        # Cloning would show the hidden values in the form: the button says why it is off.
        "clone_refusal": HIDDEN_VALUES if hidden and redaction.hides(item.get("payload")) else None,
        "died_at": moment(item.get("died_at")),
        "held_back": held_back(snapshot, item, status),
        "last_error": item.get("last_error") if status != "dead" else item.get("error"),
    }


def held_back(snapshot: Snapshot, item: Doc, status: str) -> list[tuple[str, datetime | None]]:
    """Why a pending job that is due does not start, as far as its queue's
    settings say, each with the time it ends if known: the queue is paused,
    its concurrency limit is reached, or its rate window is used up. [] for
    any other job (a job not due yet says when it is; a due one with none of
    these waits for a worker)."""
    q = snapshot.queues.get(item["queue"])
    if status != "pending" or q is None or waits(item, snapshot.taken_at):
        return []
    reasons: list[tuple[str, datetime | None]] = []
    if q.paused:
        reasons.append(("its queue is paused: none of its jobs start until it is resumed", None))
    if q.max_running is not None and q.running >= q.max_running:
        jobs = ngettext("job", "jobs", q.running)
        reasons.append((f"its queue runs {q.running:,} {jobs}, its concurrency limit: it starts as places free up",
                        None))
    if q.rate is not None and (reopens := q.rate.reopens(snapshot.taken_at)) is not None:
        reasons.append((f"its queue's rate limit ({q.rate.describe()}) is used up until", reopens))
    return reasons


def _shown_task(view: TaskView, redact: redaction.Redactor) -> TaskView:
    """A stored result's task call with its arguments as ``redact`` shows them."""
    return replace(view, args=redact(view.args), kwargs=redact(view.kwargs))


def attempt_events(history: Sequence[Doc], *, counted: int | None = None) -> list[Event]:
    """The timeline of a job's finished attempts (the document's ``history``
    entries, or a finished job's): each claim, last heartbeat and end. An
    attempt that ended by leaving the document (completed, purged) has no end
    event here: the caller says how the job finished. ``counted``: how many
    of them its attempt count covers; the attempt before those, if any, is
    where it moved to the dead letters before a requeue brought it back
    (:func:`redriven_after`)."""
    events = []
    died = redriven_after(history, counted) if counted is not None else None
    for index, attempt in enumerate(history):
        events.append(Event(moment(attempt["claimed_at"]), "claimed",  # type: ignore[arg-type]
                            f"claimed by {attempt['worker']}"))
        if attempt["heartbeat_at"] != attempt["claimed_at"]:
            events.append(Event(moment(attempt["heartbeat_at"]), "heartbeat",  # type: ignore[arg-type]
                                f"last heartbeat from {attempt['worker']}"))
        end = attempt["end"]
        text = {"failed": "attempt failed", "expired": "lease expired", "requeued": "requeued by an operator"}.get(end)
        if text is not None:
            events.append(Event(moment(attempt["ended_at"]), end, text, attempt.get("error"),  # type: ignore[arg-type]
                                "warn" if end == "requeued" else "bad"))
        if index == died:
            events.append(Event(moment(attempt["ended_at"]), "dead", "moved to the dead letters",  # type: ignore[arg-type]
                                None, "bad"))
    return events


def redriven_after(history: Sequence[Doc], counted: int) -> int | None:
    """The index in ``history`` of the attempt that ended with the job in the
    dead letters, for a job an operator has since requeued from them; None
    when it was not (or that attempt is no longer kept).

    ``counted`` is how many of the attempts in ``history`` its attempt count
    covers. Every ended attempt is kept (the last ten, ``HISTORY_ATTEMPTS``)
    and counted, and every way to the dead letters ends one; only a requeue
    from the dead letters sets the count back to zero, keeping the history
    (``engine.lifecycle.requeue``). So a history longer than its count was
    requeued from the dead letters after the attempt just before the counted
    ones. A second death and requeue is found the same way; an earlier one
    is not (its count is gone)."""
    if counted < 0 or len(history) <= counted:
        return None
    return len(history) - counted - 1


def _action_events(actions: list[Any]) -> list[Event]:
    return [
        Event(a.created_at, "action",
              f"{DONE.get(a.action, a.action)} by {a.username}" if a.outcome == "ok"
              else f"{a.action} by {a.username} (failed)",
              a.reason, "warn" if a.outcome == "ok" else "bad", a.action if a.outcome == "ok" else "")
        for a in actions
    ]


# -- a finished job ----------------------------------------------------------------------------

#: How each way of finishing shows: its badge tone.
FINISHED_TONES = {"completed": "ok", "purged": "warn", "dropped": "bad"}


@dataclass(frozen=True, slots=True)
class CloneSource:
    """The submit form's fields from job ``job_id`` (``initial``), or None
    with ``problem`` saying why it cannot be cloned."""

    job_id: str
    initial: dict[str, Any] | None
    problem: str = ""


#: Why a job whose payload has hidden values cannot be cloned (or run now) by a user who cannot see them.
HIDDEN_VALUES = ("its payload has values under secret-looking keys, hidden from you: cloning it needs the "
                 "view_payload_secrets permission")


def clone_source(job_id: str, *, hidden: bool, sees: Callable[[str], bool] | None = None) -> CloneSource:
    """What "Clone as new job" fills the submit form with: the queue, the
    payload (pretty-printed) and the max attempts of ``job_id``, found in the
    queue (the document, or a segment object) or, once it left, in its
    finished-job record while that keeps the whole payload. With ``hidden``
    (a user without ``view_payload_secrets``), a payload with hidden values
    cannot be cloned: the form would show them. A job of a queue ``sees``
    does not accept (:func:`.scopes.visibility`) is unknown."""
    try:
        current = source.current()
        found, segment_error, _ = find_job(current if sees is None else current.visible(sees), job_id)
    except EngineError as exc:
        found, segment_error = None, f"the queue document cannot be read ({type(exc).__name__}: {exc})"
    if found is not None:
        item = found[0]
        if hidden and redaction.hides(item.get("payload")):
            return CloneSource(job_id, None, HIDDEN_VALUES)
        return CloneSource(job_id, {"queue": item["queue"], "max_attempts": item.get("max_attempts"),
                                    "payload": orjson.dumps(item.get("payload"), option=orjson.OPT_INDENT_2).decode(),
                                    "delay_seconds": 0, "reason": f"clone of job {job_id}"})
    try:
        row = find(job_id, retention_seconds=config.finished_retention_seconds(), now=datetime.now(UTC))
    except DatabaseError as exc:
        return CloneSource(job_id, None, f"the records of finished jobs cannot be read ({exc})")
    if row is not None and sees is not None and not sees(row.queue):
        row = None
    if row is not None and not row.payload_cut:
        if hidden and redaction.hides_text(row.payload):
            return CloneSource(job_id, None, HIDDEN_VALUES)
        return CloneSource(job_id, {"queue": row.queue, "max_attempts": row.max_attempts,
                                    "payload": pretty_payload(row), "delay_seconds": 0,
                                    "reason": f"clone of job {job_id}"})
    if row is not None:
        return CloneSource(job_id, None, "its record keeps only the start of its payload")
    return CloneSource(job_id, None, segment_error or "it is neither in the queue nor among the jobs that "
                                                      "finished within the retention")


#: At most this many purges are named on an unknown job's page (see segment_purges).
SEGMENT_PURGES_SHOWN = 5


def segment_purges(since: datetime, *, sees: Callable[[str], bool] | None = None) -> list[AuditEntry]:
    """The latest purges since ``since`` (at most :data:`SEGMENT_PURGES_SHOWN`,
    newest first, of queues ``sees`` accepts) that removed jobs whose ids
    were not recorded: those that sat in segment objects when a queue's
    pending jobs were purged went with their objects' references (one
    commit however many), so neither the audit entry nor the finished-job
    records list them one by one (``AuditEntry.unlisted``, set as the entry
    is written: no join with its job rows, which the live page would redo
    on every redraw)."""
    entries = AuditEntry.objects.filter(action="purge", outcome="ok", created_at__gte=since, unlisted__gt=0)
    found: list[AuditEntry] = []
    for entry in entries.order_by("-created_at").iterator():
        if sees is None or sees(entry.queue):
            found.append(entry)
            if len(found) == SEGMENT_PURGES_SHOWN:
                break
    return found


def finished_job(job_id: str, actions: list[Any], now: datetime, *, hidden: bool,
                 sees: Callable[[str], bool] | None = None) -> dict[str, Any]:
    """What the page of a job that is not in the document shows: its
    finished-job record (:mod:`queueadmin.history`) when it left within the
    retention, with the purge's audit entry (who and why) and a timeline;
    otherwise (or when its queue is not one ``sees`` accepts) only the
    retention, to say how far back the lookup reaches. With ``hidden``, the
    kept payload (whole, or its start) shows with secret values hidden."""
    retention = config.finished_retention_seconds()
    context: dict[str, Any] = {"finished": None, "retention_seconds": retention, "finished_error": None}
    try:
        row = find(job_id, retention_seconds=retention, now=now)
    except DatabaseError as exc:  # shown on the page: the queue itself does not need the database
        context["finished_error"] = f"{type(exc).__name__}: {exc}"
        return context
    if row is None or (sees is not None and not sees(row.queue)):
        try:
            context["segment_purges"] = segment_purges(now - timedelta(seconds=retention), sees=sees)
        except DatabaseError:  # only a hint: the page says what it knows without it
            context["segment_purges"] = []
        return context
    # The purge's audit entry is written just after its commit: the latest ok one is it.
    purge = next((a for a in reversed(actions) if a.action == "purge" and a.outcome == "ok"), None)
    if row.how != FinishedJob.How.PURGED:
        purge = None
    submitted = next((a for a in actions if a.action == "submit" and a.outcome == "ok"), None)
    others = [a for a in actions if a is not submitted and a is not purge]
    who = f" by {submitted.username}" if submitted is not None else pushed_by(row.job_id)
    events = [Event(row.enqueued_at, "enqueued", f"enqueued on {row.queue}{who}",
                    submitted.reason if submitted else None)]
    events.extend(attempt_events(row.history, counted=row.attempts))
    # A dead letter's last attempt is the one that moved it there (every way there ends one).
    died = moment(row.history[-1]["ended_at"]) if row.was == "dead" and row.history else None
    if died is not None:
        events.append(Event(died, "dead", "moved to the dead letters", None, "bad"))
    events.append(_finish_event(row, purge))
    events.extend(_action_events(others))
    events = in_order(events)
    last_run = None  # how long the attempt that completed it ran
    if row.history and row.history[-1]["end"] == "completed":
        claimed = moment(row.history[-1]["claimed_at"])
        last_run = (row.finished_at - claimed).total_seconds() if claimed is not None else None
    context.update(
        finished=row,
        finished_tone=FINISHED_TONES.get(row.how, ""),
        purge=purge,
        events=events,
        duration=row.duration.total_seconds(),
        died_at=died,
        dead_for=(row.finished_at - died).total_seconds() if died is not None else None,
        last_run=last_run,
        kept_until=row.finished_at + timedelta(seconds=retention),
        finished_payload=redaction.redact_text(pretty_payload(row)) if hidden else pretty_payload(row),
        clone_refusal=HIDDEN_VALUES if hidden and redaction.hides_text(row.payload) else None,
        finished_attempts=[dict(a, **{k: moment(a[k]) for k in ("claimed_at", "heartbeat_at", "ended_at")})
                           for a in row.history],
    )
    return context


def _finish_event(row: FinishedJob, purge: Any) -> Event:
    if row.how == FinishedJob.How.COMPLETED:
        return Event(row.finished_at, "completed", f"completed by {row.worker or 'a worker'}", None, "ok")
    if row.how == FinishedJob.How.PURGED:
        if purge is None:
            return Event(row.finished_at, "purged", "purged (not from the dashboard: no audit entry)", None, "warn")
        return Event(row.finished_at, "purged", f"purged by {purge.username}", purge.reason, "warn")
    return Event(row.finished_at, "dropped", "dropped from the dead letters (the list was full; the oldest goes "
                 "first)", row.last_error or None, "bad")


# -- leases and workers -----------------------------------------------------------------------


def lease_row(item: Doc, now: datetime) -> dict[str, Any]:
    lease = item["lease"]
    beat = moment(lease["heartbeat_at"])
    expires = moment(lease["expires_at"])
    seconds = float(lease["seconds"])
    age = _age(now, beat) or 0.0
    interval = default_heartbeat_interval(seconds)
    # Green within the expected heartbeat interval, amber until two thirds of
    # the lease are gone, red after that (expiry is near or past).
    tone = "ok" if age <= interval + 1 else ("warn" if age <= seconds * 2 / 3 else "bad")
    return {
        "job": item,
        "worker": lease["worker"],
        "claimed_at": moment(lease["claimed_at"]),
        "heartbeat_age": age,
        "lease_seconds": seconds,
        "left": (expires - now).total_seconds() if expires else None,
        "orphaned": age > interval + 1,
        "tone": tone,
        "fraction": min(age / seconds, 1.0) if seconds else 1.0,
    }


def worker_state(age: float | None, held: int, orphaned: int) -> tuple[str, str, str]:
    """A worker's state on the Workers page, as (label, tone, why): silent
    while holding orphaned leases (it died, or cannot reach the broker),
    quiet when not seen for :data:`WORKERS_QUIET_SECONDS` (stopped, or
    cut off), else working (holding jobs) or idle (asking for work)."""
    if orphaned:
        return ("silent", "bad", f"{orphaned} of its leases are orphaned: it stopped heartbeating; the jobs go "
                                 "back to pending when the leases expire")
    if age is None or age > WORKERS_QUIET_SECONDS:
        return ("quiet", "muted", f"not seen for over {WORKERS_QUIET_SECONDS:.0f} s: stopped, or cut off from "
                                  "the broker")
    if held:
        return ("working", "ok", "holds jobs and heartbeats their leases")
    return ("idle", "", "asks for work; no job for it")


def workers(snapshot: Snapshot) -> dict[str, Any]:
    now = snapshot.taken_at
    leases = [lease_row(j, now) for j in snapshot.leases()]
    # Orphans first (longest silent first), then the rest by time left.
    leases.sort(key=lambda r: (not r["orphaned"], -r["heartbeat_age"] if r["orphaned"] else (r["left"] or 0)))
    people = []
    # Workers that asked for work, on whichever queues: not for a user narrowed to some queues.
    sightings = seen.known(now) if snapshot.sees is None else {}
    orphaned: dict[str, int] = {}
    for r in leases:
        if r["orphaned"]:
            orphaned[r["worker"]] = orphaned.get(r["worker"], 0) + 1
    for w in snapshot.workers(extra={name: when for name, (when, _) in sightings.items()}):
        age = _age(now, w.last_seen)
        people.append({"w": w, "age": age, "jobs": len(w.jobs), "state": worker_state(age, len(w.jobs),
                                                                                       orphaned.get(w.name, 0)),
                       "queues": sightings[w.name][1] if w.name in sightings else ()})
    return {
        "snapshot": snapshot,
        "leases": leases,
        "workers": people,
        "orphans": sum(1 for r in leases if r["orphaned"]),
        "heartbeat_seconds": worker_heartbeat_seconds(),
    }


# -- dead letters -------------------------------------------------------------------------------


def dead(snapshot: Snapshot) -> dict[str, Any]:
    retrying = snapshot.retry_groups()
    return {"snapshot": snapshot, "groups": snapshot.dead_groups(), "total": len(snapshot.dead),
            "queues": [q for q in snapshot.queues.values() if q.dead],
            "retrying": retrying, "retrying_total": sum(g.count for g in retrying)}


# -- raw document ------------------------------------------------------------------------------


def shown_document(snapshot: Snapshot, *, hidden: bool, most: int | None = None) -> Doc:
    """The committed document as the dashboard shows it: lease tokens, the
    holders' secrets (I4), as :data:`engine.wire.HIDDEN_TOKEN`, as the API
    does; with ``hidden``, payloads and error texts with secret values hidden
    (:mod:`.redaction`). With ``most``, only the first that many jobs and dead
    letters (what a page can print). No I/O."""
    redact = redaction.redactor(hidden=hidden)

    def hide(j: Doc) -> Doc:
        shown = dict(j, payload=redact(j.get("payload")))
        if hidden:
            shown = _errors_redacted(shown)
        return dict(shown, lease=dict(j["lease"], token=HIDDEN_TOKEN)) if j.get("lease") else shown

    return dict(snapshot.header, dead=[hide(d) for d in snapshot.dead[:most]],
                jobs=[hide(j) for j in snapshot.jobs[:most]])


def document(snapshot: Snapshot, *, hidden: bool) -> dict[str, Any]:
    """The committed document, pretty-printed, cut to RAW_LIMIT_BYTES.

    Only as many jobs as can be shown are printed, so a 100k-job document
    costs no more than a small one. Lease tokens are the holders' secrets
    (I4): they are shown as :data:`engine.wire.HIDDEN_TOKEN`, as the API does.
    With ``hidden``, payloads and error texts show with secret values hidden (:mod:`.redaction`).
    """
    # A job pretty-prints to at least ~300 bytes, so this many always fill the limit.
    most = RAW_LIMIT_BYTES // 300 + 1
    text = orjson.dumps(shown_document(snapshot, hidden=hidden, most=most), option=orjson.OPT_INDENT_2).decode()
    cut = len(text) > RAW_LIMIT_BYTES or len(snapshot.jobs) > most or len(snapshot.dead) > most
    return {
        "snapshot": snapshot,
        "text": text[:RAW_LIMIT_BYTES],
        "truncated": cut,
        "limit": RAW_LIMIT_BYTES,
    }


def _errors_redacted(item: Doc) -> Doc:
    """A document job or dead letter with the secret values of its error
    texts (``error``, ``last_error``, each attempt's ``error``) hidden."""
    for key in ("error", "last_error"):
        if isinstance(item.get(key), str):
            item[key] = redaction.redact_error(item[key])
    if isinstance(item.get("history"), list):
        item["history"] = [dict(a, error=redaction.redact_error(a["error"]))
                           if isinstance(a, dict) and isinstance(a.get("error"), str) else a for a in item["history"]]
    return item


def age_text(seconds: float | None) -> str:
    """"12 s", "4 min", "3 h", "2 d"; "—" for None."""
    if seconds is None:
        return "—"
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    delta = timedelta(seconds=seconds)
    if delta < timedelta(hours=1):
        return f"{seconds / 60:.0f} min"
    if delta < timedelta(days=1):
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"
