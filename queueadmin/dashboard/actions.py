"""Operator actions: plan (dry run), then run through the broker, then audit.

A dry run resolves the action, against the latest snapshot, to the exact jobs
it would touch and the status each one is in; the operator sees their count
and a sample. The plan is kept server side (:mod:`.plans`) and the
confirmation form carries only a signed reference to it. The operator writes
a reason, types a confirmation when it would remove more than
:data:`TYPED_CONFIRM_OVER` jobs, and submits. The run then sends the broker a
*conditional* operation on those ids only (never an edit of the file, and
never "whatever matches now"): a job that has since left the document or
changed status is left alone, and the result says how many (I9). Only the
broker's answer, acknowledged or refused, is written to the audit log, with
exactly the ids it acted on.

What differs from one action to another (its permission, scopes, engine
operation and wording) is in :class:`~queueadmin.models.AuditEntry.Action`.

In format 2 a purge of a queue's pending jobs (by queue and status, or by a
filter of exactly that queue and status) also counts the jobs in the queue's
segment objects, from their references (their ids would mean reading every
object), and keeps the version's ``next_pos``. The run sends the engine's
pos-bounded purge (:func:`engine.ops.purge_op` with ``before_pos``): it
removes only pending jobs that already had their place in the queue at the
dry run, so at most what the dry run counted, and drops the segment
references in the same commit.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction
from django.http import QueryDict
from django.utils.translation import ngettext

from engine import EngineError, NotLeader
from engine import ValidationError as EngineValidationError
from engine.ops import Operation, PurgeOutcome, Push, purge_op, requeue_op
from queueadmin import runtime
from queueadmin.api import forward
from queueadmin.dashboard import joblist, limit_actions, pages, redaction, schedule_actions, scopes, segments
from queueadmin.dashboard.snapshot import Doc, QueueSummary, Snapshot
from queueadmin.dashboard.source import source
from queueadmin.models import ActionSpec, AuditEntry, AuditJob

Action = AuditEntry.Action

TYPED_CONFIRM_OVER = 100
SAMPLE_SIZE = 10


@dataclass(slots=True, kw_only=True)
class Plan:
    """What an action would do, as of the snapshot at ``seq``.

    ``ids`` are the jobs it acts on, ``expect`` the status each one was in
    (same order). ``problems`` mean there is nothing to run; ``notes`` name
    requested jobs that the plan leaves out. ``key`` and ``token`` identify
    the stored plan (:mod:`.plans`) once it is saved.
    """

    action: str
    queue: str = ""
    #: The schedule an action on a schedule acts on (pause, resume, forget).
    schedule: str = ""
    #: A limit's new concurrency limit (None: none).
    max_running: int | None = None
    #: A rate limit's new jobs per window and the window's seconds (None: none).
    rate_jobs: int | None = None
    rate_seconds: float | None = None
    #: A requeue's or redrive's pace: so many jobs due in each so many seconds (None: all at once).
    pace_jobs: int | None = None
    pace_seconds: float | None = None
    target: str = ""
    status: str = ""
    group: str = ""
    #: The jobs list's filter (a query string, see :func:`.joblist.job_filters`) it was planned from.
    filter: str = ""
    #: Its filter's payload search looked at payloads with secret values
    #: hidden, as the list showed them to the user who planned it (:mod:`.redaction`).
    redacted: bool = False
    seq: int = 0
    ids: list[str] = field(default_factory=list)
    expect: list[str] = field(default_factory=list)
    #: Every queue the action touches (see :func:`touched_queues`), which the
    #: user's queue scopes must cover (:mod:`.scopes`).
    queues: list[str] = field(default_factory=list)
    #: Format 2, a purge of a queue's pending jobs: the ``next_pos`` of the
    #: version it counted (the run removes only jobs placed before it), and
    #: how many of its jobs sat in how many segment objects (counted, unlisted).
    before_pos: int | None = None
    segment_jobs: int = 0
    segment_objects: int = 0
    sample: list[Doc] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: What would keep the jobs it moves back to pending from running soon
    #: (see :func:`fill_effects`); for the dry-run page only, like ``sample``.
    effects: list[str] = field(default_factory=list)
    #: Nothing to run because the action is already in effect (a pause of a
    #: paused queue or schedule, the limit a queue has): not an error for a script.
    needless: bool = False
    key: str = ""
    token: str = ""

    @property
    def per_second(self) -> float | None:
        """The pace of the jobs it moves back to pending, in jobs a second (None: all at once)."""
        if self.pace_jobs is None or self.pace_seconds is None:
            return None
        return self.pace_jobs / self.pace_seconds

    @property
    def pace_units(self) -> list[tuple[float, str]]:
        """The pace form's units: seconds and name; and this plan's own
        window if it is none of them (``queueaction --pace 5/30s``)."""
        units = [(1.0, "second"), (60.0, "minute"), (3600.0, "hour")]
        if self.pace_seconds is not None and self.pace_seconds not in dict(units):
            units.append((self.pace_seconds, f"{self.pace_seconds:g} seconds"))
        return units

    @property
    def scope_fields(self) -> list[tuple[str, str]]:
        """The form fields that plan this action's jobs again (the dry-run
        page's pace form posts them back with a pace): the one scope it was
        planned from."""
        if self.group:
            return [("group", self.group)]
        if self.filter:
            return [("filter", self.filter)]
        if self.action == "redrive":
            return [("queue", self.queue)]
        return [("ids", " ".join(self.ids))]

    @property
    def spec(self) -> ActionSpec:
        """What the action is (see :class:`~queueadmin.models.AuditEntry.Action`)."""
        return Action(self.action).spec

    @property
    def title(self) -> str:
        """Its name for headings and buttons: "Purge", "Pause schedule"."""
        label = str(Action(self.action).label)
        return label[:1].upper() + label[1:]

    @property
    def on_schedule(self) -> bool:
        """An action on a schedule, not on a queue or jobs."""
        return ("schedule",) in self.spec.scopes

    @property
    def words(self) -> dict[str, Any]:
        """What the action's wordings (:class:`~queueadmin.models.ActionSpec`) are formatted with."""
        return {"queue": self.queue, "schedule": self.schedule, "n": self.count}

    @property
    def removes(self) -> bool:
        return self.spec.removes

    @property
    def count(self) -> int:
        return len(self.ids) + self.segment_jobs

    @property
    def more(self) -> int:
        """Jobs beyond the sample."""
        return max(self.count - len(self.sample), 0)

    @property
    def toggles(self) -> bool:
        """Pause or resume (a queue or a schedule): not an action on jobs."""
        return self.spec.pauses is not None

    @property
    def forgets(self) -> bool:
        """Forget an empty queue: an action on a queue, not on jobs."""
        return self.spec.forgets

    @property
    def would(self) -> str:
        """What becomes of each job, after "N jobs would be": "removed for
        good", "moved back to pending", "stopped, and kept in the dead letters"."""
        return self.spec.would or ("removed for good" if self.removes else "moved back to pending")

    @property
    def bulk(self) -> bool:
        """It acts on whatever a filter or a whole queue held, not on jobs the operator picked."""
        return bool(self.filter) or (bool(self.status) and not self.group)

    @property
    def runnable(self) -> bool:
        return not self.problems and (self.toggles or self.forgets or self.on_schedule or self.spec.sets_limit
                                      or bool(self.count))

    @property
    def confirm_phrase(self) -> str | None:
        """The text the operator must type, or None when no typing is needed:
        above :data:`TYPED_CONFIRM_OVER` jobs, for a removal or a bulk action."""
        if (self.removes or self.bulk) and self.count > TYPED_CONFIRM_OVER:
            return f"{self.action} {self.count}"
        return None

    @property
    def expected_status(self) -> str:
        """The one status every job was in, or a description when they differ."""
        statuses = set(self.expect)
        return statuses.pop() if len(statuses) == 1 else "in the status the dry run showed"

    def operation(self) -> Operation:
        """The broker operation: conditional on each job's dry-run status."""
        if self.before_pos is not None:  # a purge of a queue's pending jobs, in format 2
            return purge_op(queue=self.queue, status="pending", before_pos=self.before_pos)
        build = self.spec.operation
        assert build is not None, f"{self.action} has no dry run"
        return build(self)


def plan(snapshot: Snapshot, data: dict[str, Any], *, user: User | AnonymousUser) -> Plan:
    """Plan ``data`` (an ActionForm's cleaned data, one scope) against
    ``snapshot``, with the queues it touches (``queues``). Raises
    :class:`.scopes.OutOfScope` if one of them is outside ``user``'s queue
    scopes (checked again by :func:`run`)."""
    p = _plan(snapshot, data, redacted=not redaction.sees_secrets(user))
    p.queues = touched_queues(p, snapshot)
    scopes.check(user, p.queues)
    return p


def touched_queues(p: Plan, snapshot: Snapshot) -> list[str]:
    """The queues ``p`` acts on: its queue, or those of its jobs (in the
    document, or found in segments by the planner). An action on a schedule
    this node does not define names no queue: ``[""]``, which no scope
    covers, so only an unscoped user may take it."""
    if p.queues:
        return sorted(set(p.queues))
    if p.queue:
        return [p.queue]
    found = {job[0]["queue"] for job_id in p.ids if (job := snapshot.job(job_id)) is not None}
    return sorted(found) if found or not p.on_schedule else [""]


def _plan(snapshot: Snapshot, data: dict[str, Any], *, redacted: bool) -> Plan:
    action = data["action"]
    p = Plan(action=action, queue=data.get("queue") or "", status=data.get("status") or "",
             group=data.get("group") or "", schedule=data.get("schedule") or "", seq=snapshot.seq,
             max_running=data.get("max_running"), rate_jobs=data.get("rate_jobs"),
             rate_seconds=data.get("rate_seconds"), pace_jobs=data.get("pace_jobs"),
             pace_seconds=data.get("pace_seconds"), redacted=redacted)
    if p.on_schedule:
        return schedule_actions.plan_schedule(p, snapshot)
    if p.spec.limits:
        return limit_actions.plan_limit(p, snapshot)
    if p.spec.rates:
        return limit_actions.plan_rate(p, snapshot)
    if p.forgets:
        return _plan_forget(p, snapshot)
    if p.queue and not p.status and not p.toggles:
        p.status = p.spec.queue_status  # redrive of a queue: its dead letters
    if p.toggles:
        p.target = f"queue={p.queue}"
        q = snapshot.queues.get(p.queue)
        if (q is not None and q.paused) == p.spec.pauses:
            p.problems.append(p.spec.needless % p.words)
            p.needless = True
        elif q is not None and not p.spec.pauses:
            p.effects = _resume_effects(q, snapshot)
        return p
    if p.group:
        group = snapshot.dead_group(p.group)
        if group is None:
            p.problems.append("That dead-letter group is gone: its jobs were requeued, purged or dropped.")
            return p
        p.queue, p.target = group.queue, f"group: {group.signature}"
        p.ids, p.expect = list(group.ids), ["dead"] * group.count
    elif data.get("filter"):
        _plan_filter(p, snapshot, data["filter"])
    elif data.get("ids"):
        p.target = "selected jobs"
        queues = set()
        sealed = 0
        # Why jobs are left out, each reason once with its jobs (a page of 50
        # selected pending jobs gave 50 lines saying the same).
        left_out: dict[str, list[str]] = {}
        for job_id in data["ids"]:
            # In format 2 a pending job may sit in a segment object: looked for
            # as its job page does (within that bound, through the cache).
            found, segment_error, in_segment = joblist.find_job(snapshot, job_id)
            if found is None and segment_error:
                p.notes.append(f"Job {job_id} could not be looked for in the segment objects ({segment_error}): "
                               "it is left out.")
            elif found is None:
                left_out.setdefault("not in the document any more", []).append(job_id)
            elif found[1] == p.spec.leaves_out:
                left_out.setdefault(f"already {found[1]}", []).append(job_id)
            elif not p.spec.acts_on_status(found[1]):
                left_out.setdefault(f"{found[1]}, not {p.spec.acts_on_text}", []).append(job_id)
            elif p.spec.delayed_only and not joblist.waits(found[0], snapshot.taken_at):
                left_out.setdefault("due already", []).append(job_id)
            else:
                p.ids.append(job_id)
                p.expect.append(found[1])
                queues.add(found[0]["queue"])
                sealed += in_segment is not None
        p.queues = sorted(queues)
        p.notes.extend(_left_out_note(why, ids) for why, ids in left_out.items())
        if sealed and p.removes:
            p.notes.append(ngettext(
                "%(n)d of these jobs waits in a segment object: the purge writes that object again without "
                "it, and swaps it in with the same commit.",
                "%(n)d of these jobs wait in segment objects: the purge writes those objects again without "
                "them, and swaps them in with the same commit.", sealed) % {"n": sealed})
        p.queue = queues.pop() if len(queues) == 1 else ""
    else:
        p.target = f"queue={p.queue} status={p.status}"
        p.ids = [j["id"] for j in snapshot.select(queue=p.queue, status=p.status)]
        p.expect = [p.status] * len(p.ids)
        if p.status == "pending":
            _plan_segments(p, snapshot)
    fill_sample(p, snapshot)
    if p.per_second is not None:
        p.target += f", paced at {pace_text(p)}"
    if not p.count:
        p.problems.append("Nothing matches: no job would change.")
    else:
        fill_effects(p, snapshot)
    return p


#: A note on jobs left out of a selection names at most this many of them.
LEFT_OUT_NAMED = 3


def _left_out_note(why: str, ids: list[str]) -> str:
    """One note for the selected jobs left out for one reason (``why``:
    "already pending", "pending, not running", ...), naming the first few."""
    if len(ids) == 1:
        return f"Job {ids[0]} is {why}: it is left out."
    named = ", ".join(ids[:LEFT_OUT_NAMED]) + (", …" if len(ids) > LEFT_OUT_NAMED else "")
    return f"{len(ids)} of the selected jobs are {why}: they are left out ({named})."


def pace_text(p: Plan) -> str:
    """A pace as the operator gave it: "10 per 1 s", "1 per 60 s"."""
    return f"{p.pace_jobs} per {p.pace_seconds:g} s"


def _pace_effect(p: Plan) -> None:
    """Say when the paced jobs are due, or why the pace cannot be run."""
    assert p.per_second is not None
    try:
        requeue_op(p.ids, expect=p.expect, per_second=p.per_second)
    except EngineValidationError as exc:
        p.problems.append(f"This pace cannot be run: {exc}.")
        return
    last = (p.count - 1) / p.per_second
    p.effects.insert(0, ngettext(
        "Paced at %(pace)s: the job is due at once.",
        "Paced at %(pace)s: the jobs are due one after another, in the order of the list, one every %(every)s; "
        "the first at once, the last %(last)s after you confirm (fewer, and sooner, if some of them change "
        "before then). Each waits as a delayed job, so it never holds back the jobs behind it; the queue's own "
        "limits still apply.", p.count) % {"pace": pace_text(p), "every": _short(1 / p.per_second),
                                          "last": _short(last)})


def _short(seconds: float) -> str:
    """:func:`.pages.age_text`, with the three digits a pace's intervals need under an hour ("0.25 s", "1.5 min")."""
    if seconds < 60:
        return f"{seconds:.3g} s"
    return f"{seconds / 60:.3g} min" if seconds < 3600 else pages.age_text(seconds)


def _plan_segments(p: Plan, snapshot: Snapshot) -> None:
    """A purge of ``p.queue``'s pending jobs in format 2: bound it by the
    version's ``next_pos`` and count the jobs in the queue's segments."""
    if not p.removes or snapshot.next_pos is None:
        return
    p.before_pos = snapshot.next_pos
    # Delayed segments too (format 3): every one the dry run sees holds only
    # jobs placed before its next_pos, so the purge drops them all.
    refs = [*snapshot.lanes.get(p.queue, []), *snapshot.delays.get(p.queue, [])]
    p.segment_jobs, p.segment_objects = snapshot.in_segments(p.queue), len(refs)
    if refs:
        p.notes.append(ngettext(
            "%(n)d of these jobs sits in a segment object: it goes with the object's reference, in the same "
            "commit as the others.",
            "%(n)d of these jobs sit in %(objects)d segment objects: they go with the objects' references, in "
            "the same commit as the others.", p.segment_jobs) % {"n": p.segment_jobs, "objects": len(refs)})


def _plan_forget(p: Plan, snapshot: Snapshot) -> Plan:
    """Forgetting ``p.queue``: possible while it is in the document and empty."""
    p.target = f"queue={p.queue}"
    q = snapshot.queues.get(p.queue)
    if q is None:
        p.problems.append(f"Queue {p.queue} is not in the document: there is nothing to forget.")
        return p
    held = q.pending + q.running + q.dead
    if held:
        p.problems.append(ngettext(
            "Queue %(queue)s holds %(n)d job (pending, running or dead): only an empty queue can be forgotten.",
            "Queue %(queue)s holds %(n)d jobs (pending, running or dead): only an empty queue can be forgotten.",
            held) % {"queue": p.queue, "n": held})
        return p
    p.notes.append(f"Its counters go with it ({q.pushed} pushed, {q.completed} completed, {q.failed} failed, "
                   f"{q.purged} purged){', and its pause' if q.paused else ''}. A later push starts it again "
                   "from zero.")
    return p


def _plan_filter(p: Plan, snapshot: Snapshot, query: str) -> None:
    """Every job the jobs list's filter ``query`` matches now (not only its
    page), read as the list reads it, less those the action leaves out."""
    filters = joblist.job_filters(QueryDict(query))
    p.filter = urlencode({k: v for k, v in filters.items() if v})
    if not p.filter:
        p.problems.append("Choose a filter first: an action on all matching jobs needs at least one.")
        return
    p.target = "filter: " + " ".join(f"{k}={v}" for k, v in filters.items() if v)
    if joblist.segmented_queue(snapshot, filters) is not None and p.removes:
        # Exactly one queue's pending jobs: those in segments too, as the list shows them.
        p.queue = filters["queue"]
        p.ids = [j["id"] for j in snapshot.select(queue=p.queue, status="pending")]
        p.expect = ["pending"] * len(p.ids)
        _plan_segments(p, snapshot)
        return
    matches, notice, _ = joblist.matching(snapshot, filters, redact=redaction.redactor(hidden=p.redacted))
    if notice:
        p.notes.append(notice)
    # A payload search lists hits inside segment objects too; acting on all of
    # them at once would have the leader look each one up and rewrite its
    # segment (one lookup per id): they are selected on the list instead.
    sealed = sum(1 for job in matches if job.get("segment"))
    if sealed:
        p.notes.append(ngettext(
            "%(n)d matching job waits in a segment object and is left out: select it on the list to act on it.",
            "%(n)d matching jobs wait in segment objects and are left out: select them on the list (a page at a "
            "time) to act on them.", sealed) % {"n": sealed})
    skipped = others = due = 0
    queues = set()
    for job in (j for j in matches if not j.get("segment")):
        if job["status"] == p.spec.leaves_out:
            skipped += 1
            continue
        if not p.spec.acts_on_status(job["status"]):
            others += 1
            continue
        if p.spec.delayed_only and not joblist.waits(job, snapshot.taken_at):
            due += 1
            continue
        p.ids.append(job["id"])
        p.expect.append(job["status"])
        queues.add(job["queue"])
    p.queues = sorted(queues)
    if skipped:
        p.notes.append(ngettext("%(n)d matching job is already %(status)s: it is left out.",
                                "%(n)d matching jobs are already %(status)s: they are left out.",
                                skipped) % {"n": skipped, "status": p.spec.leaves_out})
    if others:
        p.notes.append(ngettext("%(n)d matching job is not %(status)s: it is left out.",
                                "%(n)d matching jobs are not %(status)s: they are left out.",
                                others) % {"n": others, "status": p.spec.acts_on_text})
    if due:
        p.notes.append(ngettext("%(n)d matching pending job is due already: it is left out.",
                                "%(n)d matching pending jobs are due already: they are left out.", due) % {"n": due})
    p.queue = queues.pop() if len(queues) == 1 else ""


def fill_sample(p: Plan, snapshot: Snapshot) -> None:
    """Show the plan's first jobs as ``snapshot`` has them; when the
    document holds fewer than a sample's worth, the first segment's next
    ones (one object read at most, through :data:`.segments.cache`). Their
    payloads show as the list showed them to the planner (:mod:`.redaction`)."""
    p.sample = []
    for job_id in p.ids[:SAMPLE_SIZE]:
        found = snapshot.job(job_id)
        if found is None and snapshot.lanes and not p.segment_jobs:
            found = joblist.find_job(snapshot, job_id)[0]  # a selected job in a segment: cached since the plan
        if found is not None:
            p.sample.append(dict(found[0], status=found[1]))
    refs = snapshot.lanes.get(p.queue) if p.segment_jobs else None
    if len(p.sample) < SAMPLE_SIZE and refs:
        ref = refs[0]
        try:
            jobs = segments.cache.jobs(ref)
        except EngineError as exc:  # the count stands (the reference says it); only the sample is missing
            p.notes.append(f"The sample could not read a segment object: {segments.describe(exc)}")
            return
        start = ref.consumed
        p.sample.extend(dict(j, status="pending") for j in jobs[start:start + SAMPLE_SIZE - len(p.sample)])
    _redact_sample(p)


def _redact_sample(p: Plan) -> None:
    redact = redaction.redactor(hidden=p.redacted)
    p.sample = [dict(j, payload=redact(j.get("payload"))) for j in p.sample]


def _resume_effects(q: QueueSummary, snapshot: Snapshot) -> list[str]:
    """What a resume of ``q`` lets go, as of ``snapshot``: its ready jobs at
    once, its delayed ones at their time; and, by the overview's rule, that
    no worker has been seen on it (nothing would take them)."""
    effects = []
    if q.pending:
        ready = ngettext("%(n)s ready job may be claimed", "%(n)s ready jobs may be claimed", q.ready) % {
            "n": f"{q.ready:,}"}
        later = q.pending - q.ready
        effects.append(f"{ready} at once" + (f"; {later:,} delayed wait for their time." if later else "."))
    since = pages.workerless_for(snapshot, q.name, pages.queue_worker_activity(snapshot))
    if q.ready and since is not None:
        effects.append(f"No worker has been seen on queue {q.name}{since}: its jobs wait for one "
                       f"(manage.py queueworker --queue {q.name}).")
    return effects


def fill_effects(p: Plan, snapshot: Snapshot) -> None:
    """What the plan's running jobs' workers do about it (see
    :func:`_running_effect`); and for an action that moves jobs back to
    pending (requeue, redrive), name each queue they go back to that would not
    run them soon, as of
    ``snapshot``: a paused queue, or one on which no worker has been seen
    for :data:`.pages.WORKERS_QUIET_SECONDS` (the overview's warning, by
    the same rule); and how a queue's rate limit paces them. The action
    still runs; the operator decides."""
    p.effects = []
    if p.count and p.spec.effect:
        p.effects.append(p.spec.effect)
    if p.count:
        _running_effect(p, snapshot)
    if not p.spec.to_pending:
        return
    if p.per_second is not None:
        _pace_effect(p)
    # Requeue and redrive leave pending jobs out, so each of the plan's jobs
    # is running or dead: in the document, where its queue is one lookup. A
    # run now's jobs in delayed segments are not (found again, they would cost
    # I/O): they count in the plan, not in these per-queue notes.
    going: Counter[str] = Counter()
    for job_id in p.ids:
        if (found := snapshot.job(job_id)) is not None:
            going[found[0]["queue"]] += 1
    activity = pages.queue_worker_activity(snapshot)
    for queue, n in sorted(going.items()):
        summary = snapshot.queues.get(queue)
        if p.spec.delayed_only:
            _due_effects(p, snapshot, queue, n, activity)
            continue
        jobs = ngettext("%(n)d job goes", "%(n)d jobs go", n) % {"n": n}
        if summary is not None and summary.paused:
            p.effects.append(f"Queue {queue} is paused: the {jobs} back to it and wait{'s' if n == 1 else ''} "
                             "there until it is resumed.")
        if summary is not None and summary.rate is not None:
            p.effects.append(limit_actions.paced(queue, summary.rate, n, ahead=summary.ready))
        free = None if summary is None or summary.max_running is None else max(
            summary.max_running - summary.running, 0)
        if summary is not None and free is not None and summary.ready + n > free:
            # Not all of them start at once; when depends on how long the running ones take, which nothing
            # here knows.
            behind = f" behind its {summary.ready:,} ready" if summary.ready else ""
            p.effects.append(f"Queue {queue} runs at most {summary.max_running:,} of its jobs at once: the {jobs} "
                             f"back to it{behind}, and start as places free up"
                             + (", later than its rate alone allows." if summary.rate is not None else "."))
        since = pages.workerless_for(snapshot, queue, activity)
        if since is not None:
            p.effects.append(f"No worker has been seen on queue {queue}{since}: the {jobs} back to it and "
                             f"wait{'s' if n == 1 else ''} for one (manage.py queueworker --queue {queue}).")


def _due_effects(p: Plan, snapshot: Snapshot, queue: str, n: int, activity: dict[str, datetime]) -> None:
    """A run now's effects for the ``n`` jobs it makes due in ``queue``
    (see :func:`fill_effects`): they keep their places, so they go behind
    no one; what holds them back once due is the queue's pause, its limits
    and the lack of a worker."""
    summary = snapshot.queues.get(queue)
    jobs = ngettext("the %(n)d job made due waits", "the %(n)d jobs made due wait", n) % {"n": n}
    if summary is not None and summary.paused:
        p.effects.append(f"Queue {queue} is paused: {jobs} until it is resumed.")
    if summary is not None and summary.rate is not None:
        p.effects.append(f"Queue {queue} starts at most {summary.rate.describe()}: {jobs} for their turn within "
                         f"it, behind those of its {summary.ready:,} ready jobs that were pushed before them.")
    if (summary is not None and summary.max_running is not None
            and summary.ready + n > max(summary.max_running - summary.running, 0)):
        p.effects.append(f"Queue {queue} runs at most {summary.max_running:,} of its jobs at once: {jobs} for "
                         "places to free up.")
    since = pages.workerless_for(snapshot, queue, activity)
    if since is not None:
        p.effects.append(f"No worker has been seen on queue {queue}{since}: {jobs} for one "
                         f"(manage.py queueworker --queue {queue}).")


def _running_effect(p: Plan, snapshot: Snapshot) -> None:
    """Say what happens to the plan's running jobs' handlers: each worker
    finds out as soon as the run commits (it watches its leases,
    :mod:`engine.leasewatch`), at the latest at its next heartbeat, and
    cancels the job (:mod:`engine.cancellation`); a handler that checks
    stops, any other runs to its end and its result is refused. With the
    workers' default heartbeat (a third of the lease) the latest is within a
    third of the longest lease among them, as of ``snapshot``."""
    leases = []
    for job_id, status in zip(p.ids, p.expect, strict=True):
        if status == "running" and (found := snapshot.job(job_id)) is not None and found[0].get("lease"):
            leases.append(found[0]["lease"])
    if not leases:
        return
    n = len(leases)
    longest = max(float(lease["seconds"]) for lease in leases)  # the lease's length, which every parsed lease has
    again = " It runs again from the start once a worker claims it." if p.spec.to_pending and n == 1 else (
        " They run again from the start once workers claim them." if p.spec.to_pending else "")
    p.effects.append(ngettext(
        "%(n)d of these jobs is running now. Its worker finds out as soon as this runs (it watches its leases), "
        "at the latest at its next heartbeat (every third of the lease by default: within %(within)s here), and "
        "cancels it: a handler that calls engine.check_cancelled() stops there; one that does not runs to its "
        "end, and its result is refused.",
        "%(n)d of these jobs are running now. Each one's worker finds out as soon as this runs (it watches its "
        "leases), at the latest at its next heartbeat (every third of the lease by default: within %(within)s "
        "here), and cancels it: a handler that calls engine.check_cancelled() stops there; one that does not runs "
        "to its end, and its result is refused.", n)
        % {"n": n, "within": pages.age_text(longest / 3)} + again)


@dataclass(frozen=True, slots=True)
class Outcome:
    entry: AuditEntry
    ok: bool
    message: str
    #: Something differed from the dry run (jobs left alone, newcomers, a queue already toggled).
    changed: bool = False


def execute(op: Operation) -> tuple[Any, int | None, str]:
    """Run ``op`` on this node's broker, or, when this node is a standby, on
    the leader it names (:mod:`.forward`); in a process that runs no broker
    (``manage.py queueaction``), on the leader the latest document names.
    Returns the outcome, the seq after it, and where it ran ("" here, else
    " on the leader <url>"). Raises the broker's EngineError.

    Every write of the dashboard goes through here: whatever the answer (a
    failed write may still have landed), the snapshot source reads again
    at its next call rather than share one from before (a job just submitted
    would be unknown to its own page)."""
    try:
        return _execute(op)
    finally:
        source.changed()


def _execute(op: Operation) -> tuple[Any, int | None, str]:
    broker = runtime.get_broker()
    try:
        return broker.execute(op), broker.seq, ""
    except NotLeader as exc:
        leader = exc.leader_url
        if broker.role == "stopped":
            # Never started here, so it names no leader of its own; and the
            # leader's URL may be this process's configured one (a command run
            # beside the node, with its settings): that node is another process.
            # The version the dry run just read names it (the source's cached
            # one, no second read); a leader that moved since answers not_leader.
            leader = leader or source.current().broker.get("url")
        elif leader == broker.url:
            raise
        if not leader:
            raise
        result, seq = forward.forward(op, leader)
        return result, seq, f" on the leader {leader}"


def run(p: Plan, *, user: User | AnonymousUser, reason: str) -> Outcome:
    """Send the plan's conditional operation to the broker and audit the
    answer: the ids it acted on (never more than the plan's), and what was
    left alone because the document changed since the dry run. Raises
    :class:`.scopes.OutOfScope`, sending and auditing nothing, if the user's
    queue scopes no longer cover the plan's queues (narrowed since the dry run)."""
    scopes.check(user, p.queues or [p.queue])
    try:
        result, seq, where = execute(p.operation())
    except EngineError as exc:  # NotLeader, a QueueError, a store outage
        message = f"{type(exc).__name__}: {exc}"
        entry = audit(user, p.action, reason=reason, queue=p.queue, target=p.target, ids=p.ids,
                      ok=False, detail=message)
        return Outcome(entry, False, f"{p.title} failed: {message}")
    in_segments = 0
    if p.toggles:
        detail, changed = _toggled(p, was_paused=bool(result))
        ids: list[str] = []
    elif p.forgets:
        detail, changed = (p.spec.done, False) if result else (p.spec.overtaken, True)
        detail, ids = detail % p.words, []
    elif p.spec.sets_limit:
        detail, changed = limit_actions.limited(p, was=result) if p.spec.limits else limit_actions.rated(p, was=result)
        ids = []
    else:
        ids, in_segments, kept_whole = _removed(result)
        detail, changed = _acted(p, ids, in_segments, kept_whole)
        if not ids and not in_segments:
            # Refused in effect (a conflict): every planned job had left or
            # changed (completed by a worker, purged, requeued) before the
            # run. Nothing changed; audit it as failed, with why, on the
            # planned jobs' timelines, as a refused broker answer is.
            detail = _refused(p) + where
            entry = audit(user, p.action, reason=reason, queue=p.queue, target=p.target, ids=p.ids, ok=False,
                          detail=f"{detail} (dry run at seq {p.seq})", seq=seq)
            return Outcome(entry, False, detail[0].upper() + detail[1:] + ".", True)
    detail += where
    entry = audit(user, p.action, reason=reason, queue=p.queue, target=p.target, ids=ids, ok=True,
                  detail=f"{detail} (dry run at seq {p.seq})", seq=seq, unlisted=in_segments)
    return Outcome(entry, True, detail[0].upper() + detail[1:] + ".", changed)


def _removed(result: Any) -> tuple[list[str], int, bool | None]:
    """The ids a requeue or purge acted on, how many jobs went with segment
    references, and whether a bounded purge left a segment straddling its
    bound whole (a purge of planned segments: a
    :class:`~engine.ops.PurgeOutcome` here, its fields as a dict when
    forwarded from a standby; None: not said, by a leader of an earlier
    release)."""
    if isinstance(result, PurgeOutcome):
        return list(result.ids), result.in_segments, result.kept_whole is not None
    if isinstance(result, dict):
        kept = result["kept_whole"] is not None if "kept_whole" in result else None
        return [str(i) for i in result.get("ids") or ()], int(result.get("in_segments") or 0), kept
    return [str(i) for i in result], 0, False


def _toggled(p: Plan, *, was_paused: bool) -> tuple[str, bool]:
    if was_paused == p.spec.pauses:
        return p.spec.overtaken % p.words, True
    return p.spec.done % p.words, False


def _refused(p: Plan) -> str:
    """Why a run acted on none of its jobs."""
    values = {"action": p.action, "n": p.count, "status": p.expected_status}
    return ngettext("%(action)s refused, nothing changed: the job is no longer %(status)s (completed, purged or "
                    "moved since the dry run)",
                    "%(action)s refused, nothing changed: none of the %(n)d jobs is still %(status)s (completed, "
                    "purged or moved since the dry run)", p.count) % values


def _acted(p: Plan, ids: list[str], in_segments: int = 0, kept_whole: bool | None = False) -> tuple[str, bool]:
    n = len(ids) + in_segments
    parts = [str(p.spec.done % {"n": n, "queue": p.queue})]
    if in_segments:
        parts[0] += ngettext(" (%(n)d of them in a segment object, whose ids are not listed)",
                             " (%(n)d of them in segment objects, whose ids are not listed)",
                             in_segments) % {"n": in_segments}
    left = p.count - n
    # The document after the run, read once for both questions below (only
    # a plan with a scope asks them).
    after = _current() if (p.group or p.status or p.filter) else None
    # The engine says whether it left a straddling segment whole, as it
    # committed; only an earlier release's leader does not (read after).
    if left and (kept_whole if kept_whole is not None else _sealed_with_later(p, after)):
        # A bounded purge of a queue's pending jobs (format 2): a job it
        # counted is left if it was claimed, or if the queue's tail it sat
        # in was sealed together with pushes the dry run never saw. That
        # segment stays whole (I9), its counted jobs still pending.
        parts.append(ngettext("%(left)d of %(total)d jobs was claimed, or sealed into a segment with jobs pushed "
                              "after the dry run, and was left alone",
                              "%(left)d of %(total)d jobs were claimed, or sealed into a segment with jobs pushed "
                              "after the dry run, and were left alone", left) % {"left": left, "total": p.count})
    elif left:
        why = p.spec.left_alone or f"no longer {p.expected_status}"
        if p.count == 1:
            parts.append(f"the job was {why} and was left alone")
        else:
            parts.append(ngettext("%(left)d of %(total)d jobs was %(why)s and was left alone",
                                  "%(left)d of %(total)d jobs were %(why)s and were left alone",
                                  left) % {"left": left, "total": p.count, "why": why})
    arrived = arrivals(p, after)
    if arrived and p.filter:
        parts.append(ngettext("%(n)d more job matching the filter arrived after the dry run and was not touched",
                              "%(n)d more jobs matching the filter arrived after the dry run and were not touched",
                              arrived) % {"n": arrived})
    elif arrived and p.group:
        parts.append(ngettext("%(n)d more dead letter of this group arrived after the dry run and was not touched",
                              "%(n)d more dead letters of this group arrived after the dry run and were not "
                              "touched", arrived) % {"n": arrived})
    elif arrived:
        values = {"n": arrived, "status": p.status, "queue": p.queue}
        parts.append(ngettext("%(n)d more %(status)s job of %(queue)s arrived after the dry run and was not touched",
                              "%(n)d more %(status)s jobs of %(queue)s arrived after the dry run and were not "
                              "touched", arrived) % values)
    return "; ".join(parts), bool(left or arrived)


def _current() -> Snapshot | None:
    """The latest document, read now (None if it cannot be read)."""
    try:
        return source.current(fresh_seconds=0)
    except EngineError:
        return None


def _sealed_with_later(p: Plan, snapshot: Snapshot | None) -> bool:
    """Whether a bounded purge's queue has, in ``snapshot``, a segment that
    holds jobs from both sides of its dry run's ``next_pos``: one the purge
    left whole. False when unknown."""
    if p.before_pos is None or snapshot is None:
        return False
    return any(ref.front < p.before_pos <= ref.last_pos for ref in snapshot.lanes.get(p.queue, ())) or any(
        ref.min_pos < p.before_pos <= ref.max_pos for ref in snapshot.delays.get(p.queue, ()))


def arrivals(p: Plan, snapshot: Snapshot | None) -> int:
    """How many jobs are in the plan's scope (a queue and status, a
    dead-letter group, or a filter) in ``snapshot`` (the document after the
    run) that were not in its dry run: they were left alone, and the
    operator should know. 0 when unknown."""
    if not (p.group or p.status or p.filter) or snapshot is None:
        return 0
    if p.filter:
        # The document only: the plan left the hits in segments out, and reading them again would cost I/O.
        matches, _, _ = joblist.matching(snapshot, joblist.job_filters(QueryDict(p.filter)), segments_too=False,
                                      redact=redaction.redactor(hidden=p.redacted))
        now = tuple(j["id"] for j in matches
                    if p.spec.takes(j["status"]) and (not p.spec.delayed_only or joblist.waits(j, snapshot.taken_at)))
    elif p.group:
        group = snapshot.dead_group(p.group)
        now = group.ids if group is not None else ()
    else:
        now = tuple(j["id"] for j in snapshot.select(queue=p.queue, status=p.status))
    planned = set(p.ids)
    if p.before_pos is not None:
        # Placed after the dry run: in the document, or sealed into segments since.
        bound = p.before_pos
        later = sum(1 for j in snapshot.select(queue=p.queue, status="pending") if j.get("pos", 0) >= bound)
        return (later + sum(ref.remaining for ref in snapshot.lanes.get(p.queue, ()) if ref.front >= bound)
                + sum(ref.total for ref in snapshot.delays.get(p.queue, ()) if ref.min_pos >= bound))
    return sum(1 for job_id in now if job_id not in planned)


def submit(op: Push, *, user: User | AnonymousUser, reason: str) -> tuple[str | None, str | None]:
    """Push one job through this node's broker and audit the answer.
    Returns the new job's id, or None and the broker's refusal. Raises
    :class:`.scopes.OutOfScope`, pushing nothing, for a queue outside the
    user's queue scopes."""
    scopes.check(user, [op.queue])
    ids = [job.id for job in op.jobs]
    try:
        [created], seq, where = execute(op)
    except EngineError as exc:
        refusal = f"The broker refused: {type(exc).__name__}: {exc}"
        audit(user, Action.SUBMIT, reason=reason, queue=op.queue, target="new job", ids=ids, ok=False, detail=refusal)
        return None, refusal
    audit(user, Action.SUBMIT, reason=reason, queue=op.queue, target="new job", ids=[created], ok=True,
          detail=f"pushed 1 job to {op.queue}{where}", seq=seq)
    return str(created), None


def already_submitted(job_id: str) -> bool:
    """Whether a submit of ``job_id`` was already acknowledged (and audited):
    the same Submit form posted again. Reads the database."""
    return AuditJob.objects.filter(job_id=job_id, entry__action=Action.SUBMIT,
                                   entry__outcome=AuditEntry.Outcome.OK).exists()


def audit(user: User | AnonymousUser, action: str, *, reason: str, queue: str, target: str,
          ids: list[str], ok: bool, detail: str, seq: int | None = None, unlisted: int = 0) -> AuditEntry:
    """Write one audit entry and its job index rows, together. ``unlisted``
    jobs were acted on too, without their ids (jobs in segment objects):
    they count, with no index rows."""
    with transaction.atomic():
        entry = AuditEntry.objects.create(
            user=user if user.is_authenticated else None,
            username=user.get_username() if user.is_authenticated else "(anonymous)",
            action=action,
            reason=reason,
            queue=queue,
            target=target[:500],
            count=len(ids) + unlisted,
            unlisted=unlisted,
            outcome=AuditEntry.Outcome.OK if ok else AuditEntry.Outcome.FAILED,
            detail=detail,
            seq=seq,
        )
        AuditJob.objects.bulk_create([AuditJob(entry=entry, job_id=i) for i in ids], batch_size=1000)
    return entry
