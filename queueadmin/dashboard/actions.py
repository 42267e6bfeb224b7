"""Operator actions: plan (dry run), then run through the broker, then audit.

An action is planned from the latest snapshot: which jobs it would touch, how
many, a sample. The operator sees the plan, writes a reason, types a
confirmation when it would remove more than :data:`TYPED_CONFIRM_OVER` jobs,
and submits. The action then goes to the broker as an ordinary operation
(never an edit of the file), and only the broker's answer, acknowledged or
refused, is written to the audit log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction

from engine.errors import EngineError, NotLeader
from engine.operations import Operation, Push, pause_op, purge_op, requeue_op
from queueadmin import runtime
from queueadmin.dashboard import forward
from queueadmin.dashboard.snapshot import Doc, Snapshot
from queueadmin.models import AuditEntry, AuditJob

TYPED_CONFIRM_OVER = 100
SAMPLE_SIZE = 10

PERMISSIONS = {
    "requeue": "queueadmin.requeue_job",
    "redrive": "queueadmin.requeue_job",
    "purge": "queueadmin.purge_job",
    "pause": "queueadmin.pause_queue",
    "resume": "queueadmin.pause_queue",
    "submit": "queueadmin.submit_job",
}


@dataclass(slots=True, kw_only=True)
class Plan:
    """What an action would do, as of one snapshot."""

    action: str
    queue: str = ""
    target: str = ""
    ids: list[str] = field(default_factory=list)
    sample: list[Doc] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    removes: bool = False
    status: str = ""
    group: str = ""

    @property
    def count(self) -> int:
        return len(self.ids)

    @property
    def more(self) -> int:
        """Jobs beyond the sample."""
        return max(self.count - len(self.sample), 0)

    @property
    def confirm_phrase(self) -> str | None:
        """The text the operator must type, or None when no typing is needed."""
        if self.removes and self.count > TYPED_CONFIRM_OVER:
            return f"purge {self.count}"
        return None

    def operation(self) -> Operation:
        if self.action in ("requeue", "redrive"):
            return requeue_op(self.ids)
        if self.action == "purge":
            if self.status and not self.group and self.queue:
                # By queue and status: the broker removes whatever matches when
                # it commits, which may differ from the dry run; the audit entry
                # records what it actually removed.
                return purge_op(queue=self.queue, status=self.status)
            return purge_op(self.ids)
        return pause_op(self.queue, paused=self.action == "pause")


def plan(snapshot: Snapshot, data: dict[str, Any]) -> Plan:
    """Plan ``data`` (an ActionForm's cleaned data) against ``snapshot``."""
    action = data["action"]
    queue = data.get("queue") or ""
    ids: list[str] = data.get("ids") or []
    p = Plan(action=action, queue=queue, removes=action == "purge", status=data.get("status") or "",
             group=data.get("group") or "")
    if action in ("pause", "resume"):
        p.target = f"queue={queue}"
        q = snapshot.queues.get(queue)
        if action == "pause" and q is not None and q.paused:
            p.problems.append(f"Queue {queue} is already paused.")
        if action == "resume" and (q is None or not q.paused):
            p.problems.append(f"Queue {queue} is not paused.")
        return p
    if p.group:
        group = snapshot.dead_group(p.group)
        if group is None:
            p.problems.append("That dead-letter group is gone: its jobs were requeued, purged or dropped.")
            return p
        p.queue, p.ids, p.target = group.queue, list(group.ids), f"group: {group.signature}"
    elif ids:
        p.target = "selected jobs"
        for job_id in ids:
            found = snapshot.job(job_id)
            if found is None:
                p.problems.append(f"Job {job_id} is not in the document any more.")
            elif action == "requeue" and found[1] == "pending":
                p.problems.append(f"Job {job_id} is already pending.")
        p.ids = ids
        queues = {found[0]["queue"] for i in ids if (found := snapshot.job(i)) is not None}
        p.queue = queues.pop() if len(queues) == 1 else ""
    else:
        p.target = f"queue={queue} status={p.status}"
        p.ids = [j["id"] for j in snapshot.select(queue=queue, status=p.status)]
    for job_id in p.ids[:SAMPLE_SIZE]:
        found = snapshot.job(job_id)
        if found is not None:
            p.sample.append(dict(found[0], status=found[1]))
    if not p.ids:
        p.problems.append("Nothing matches: no job would change.")
    return p


@dataclass(frozen=True, slots=True)
class Outcome:
    entry: AuditEntry
    ok: bool
    message: str


def execute(op: Operation) -> tuple[Any, int | None, str]:
    """Run ``op`` on this node's broker, or, when this node is a standby, on
    the leader it names (:mod:`.forward`). Returns the outcome, the seq after
    it, and where it ran ("" here, else " on the leader <url>"). Raises the
    broker's EngineError."""
    broker = runtime.get_broker()
    try:
        return broker.execute(op), broker.seq, ""
    except NotLeader as exc:
        leader = exc.leader_url
        if not leader or leader == broker.url:
            raise
        result, seq = forward.forward(op, leader)
        return result, seq, f" on the leader {leader}"


def run(p: Plan, *, user: AbstractBaseUser | AnonymousUser, reason: str) -> Outcome:
    """Send the plan's operation to the broker and audit the answer."""
    ids = p.ids
    try:
        result, seq, where = execute(p.operation())
    except EngineError as exc:  # NotLeader, a QueueError, a store outage
        message = f"{type(exc).__name__}: {exc}"
        entry = audit(user, p.action, reason=reason, queue=p.queue, target=p.target, ids=ids,
                      ok=False, detail=message)
        return Outcome(entry, False, f"{p.action.title()} failed: {message}")
    if isinstance(result, list):
        ids = [str(i) for i in result]
    detail = {
        "requeue": f"requeued {len(ids)} job(s)",
        "redrive": f"redrove {len(ids)} dead letter(s) back to pending",
        "purge": f"purged {len(ids)} job(s)",
        "pause": f"paused {p.queue}",
        "resume": f"resumed {p.queue}",
    }[p.action] + where
    entry = audit(user, p.action, reason=reason, queue=p.queue, target=p.target, ids=ids, ok=True,
                  detail=detail, seq=seq)
    return Outcome(entry, True, detail[0].upper() + detail[1:] + ".")


def submit(op: Push, *, user: AbstractBaseUser | AnonymousUser, reason: str) -> tuple[str | None, str | None]:
    """Push one job through this node's broker and audit the answer.
    Returns the new job's id, or None and the broker's refusal."""
    ids = [job.id for job in op.jobs]
    try:
        [created], seq, where = execute(op)
    except EngineError as exc:
        refusal = f"The broker refused: {type(exc).__name__}: {exc}"
        audit(user, "submit", reason=reason, queue=op.queue, target="new job", ids=ids, ok=False, detail=refusal)
        return None, refusal
    audit(user, "submit", reason=reason, queue=op.queue, target="new job", ids=[created], ok=True,
          detail=f"pushed 1 job to {op.queue}{where}", seq=seq)
    return str(created), None


def audit(user: AbstractBaseUser | AnonymousUser, action: str, *, reason: str, queue: str, target: str,
          ids: list[str], ok: bool, detail: str, seq: int | None = None) -> AuditEntry:
    """Write one audit entry and its job index rows, together."""
    with transaction.atomic():
        entry = AuditEntry.objects.create(
            user=user if user.is_authenticated else None,
            username=user.get_username() if user.is_authenticated else "(anonymous)",
            action=action,
            reason=reason,
            queue=queue,
            target=target[:500],
            count=len(ids),
            outcome=AuditEntry.Outcome.OK if ok else AuditEntry.Outcome.FAILED,
            detail=detail,
            seq=seq,
        )
        AuditJob.objects.bulk_create([AuditJob(entry=entry, job_id=i) for i in ids], batch_size=1000)
    return entry
