"""Operations as requests (docs/api.md), in both directions.

* Client side: :func:`request_for` gives the method, path and JSON body that
  carry a validated operation to the broker.
* Broker side: :func:`push_from`, :func:`claim_from`, :func:`heartbeat_from`,
  :func:`complete_from` and :func:`fail_from` read a parsed body back into
  the operation, strictly: a missing field, a field of the wrong type and an
  unknown field are each refused with a message naming the field. Values
  then go through the engine's builders (:mod:`engine.ops`), so
  ranges, queue names, ids and payloads follow exactly the engine's rules.
  Optional fields may be sent as ``null``, which means the same as leaving
  them out (clients built on dataclasses tend to send ``None``).
* Operator operations (requeue, purge, pause, forget, and a push from the dashboard)
  have no public endpoint; a standby forwards them to the leader, signed, as
  :func:`operator_json` gives them, and the leader reads them back with
  :func:`operator_from_json`.

Pure: no I/O. The readers raise ValidationError (or a subclass, whose
``code`` is the API's error code) before anything reaches a commit.
"""

from __future__ import annotations

from typing import Any, NamedTuple
from urllib.parse import quote

import orjson

from engine.errors import EngineError, ValidationError
from engine.model import decode_payload, new_job_id
from engine.ops import (
    check_queue,
    claim_op,
    complete_op,
    fail_op,
    forget_op,
    heartbeat_op,
    limit_op,
    make_due_op,
    pause_op,
    purge_op,
    push_op,
    rate_limit_op,
    requeue_op,
    stop_op,
)
from engine.optypes import (
    Claim,
    Complete,
    Fail,
    ForgetQueue,
    ForgetSchedule,
    GetJob,
    Heartbeat,
    MakeDue,
    NewJob,
    Operation,
    Purge,
    Push,
    Requeue,
    SetLimit,
    SetPaused,
    SetRateLimit,
    SetSchedulePaused,
    Stop,
)
from engine.policy import Policy
from engine.schedules import forget_schedule_op, pause_schedule_op
from engine.wire.reading import Fields, json_type

#: The longest a claim may hold a request (docs/api.md: wait_seconds 0..30).
MAX_WAIT_SECONDS = 30.0


class Request(NamedTuple):
    """What carries one operation: a method, a path under ``/api/v1``, a JSON
    body (None for a GET), the job the path names, and how long the broker
    may hold the request (a claim's long poll)."""

    method: str
    path: str
    body: dict[str, Any] | None
    job_id: str = ""
    wait_seconds: float = 0.0


def job_path(job_id: str, action: str = "") -> str:
    """``/jobs/<id><action>``, the id quoted as one path segment."""
    return f"/jobs/{quote(job_id, safe='')}{action}"


def request_for(op: Operation, *, wait_seconds: float = 0.0, send_lease: bool = True) -> Request:
    """The request that carries ``op`` (validated by its builder). A claim
    waits ``wait_seconds`` and, with ``send_lease``, names its lease length
    (without it the broker's own applies). Raises EngineError for an
    operation with no endpoint (operator actions, the broker's own ones)."""
    match op:
        case Push():
            jobs = [
                {
                    "id": j.id,
                    "payload": orjson.Fragment(j.payload),
                    "max_attempts": j.max_attempts,
                    "delay_seconds": j.delay_seconds,
                }
                for j in op.jobs
            ]
            # The ids travel with the body, which is built once: every retry
            # sends the same ids, so a push that landed is not duplicated.
            return Request("POST", "/jobs", {"queue": op.queue, "jobs": jobs})
        case Claim():
            body: dict[str, Any] = {"worker": op.worker, "queues": list(op.queues), "max_jobs": op.max_jobs}
            if send_lease:
                body["lease_seconds"] = op.lease_seconds
            if wait_seconds > 0:
                body["wait_seconds"] = wait_seconds
            if op.in_order:  # only then: a broker from before the field refuses it as unknown
                body["in_order"] = True
            return Request("POST", "/claim", body, wait_seconds=wait_seconds)
        case Heartbeat():
            body = {"lease": op.lease}
            if op.lease_seconds is not None:
                body["lease_seconds"] = op.lease_seconds
            return Request("POST", job_path(op.job_id, "/heartbeat"), body, op.job_id)
        case Complete():
            return Request("POST", job_path(op.job_id, "/complete"), {"lease": op.lease}, op.job_id)
        case Fail():
            body = {"lease": op.lease, "error": op.error}
            if op.retry_in_seconds is not None:
                body["retry_in_seconds"] = op.retry_in_seconds
            if op.give_up:
                body["give_up"] = True
            return Request("POST", job_path(op.job_id, "/fail"), body, op.job_id)
        case GetJob():
            return Request("GET", job_path(op.job_id), None, op.job_id)
        case (Requeue() | Stop() | MakeDue() | Purge() | SetPaused() | SetLimit() | SetRateLimit() | ForgetQueue()
              | SetSchedulePaused() | ForgetSchedule()):
            name = {Requeue: "requeue", Stop: "stop", MakeDue: "run now", Purge: "purge", SetPaused: "pause",
                    SetLimit: "limit",
                    SetRateLimit: "rate_limit", ForgetQueue: "forget", SetSchedulePaused: "pause_schedule",
                    ForgetSchedule: "forget_schedule"}[type(op)]
            raise EngineError(
                f"{name} is an operator action with no broker API endpoint: do it on the dashboard, "
                "where it is audited (or with a DirectClient on the store, for maintenance)"
            )
        case _:
            raise EngineError(f"{type(op).__name__} is internal to the broker and cannot be sent over HTTP")


# -- the broker's side: bodies back into operations ---------------------------------------------


def _built(where: str | None, build: Any, *args: Any, **kwargs: Any) -> Any:
    """Run an engine builder; its ValidationError names ``where`` first."""
    try:
        return build(*args, **kwargs)
    except ValidationError as exc:
        if where:
            exc.args = (f"{where}: {exc}",)
        raise


def push_from(data: object, policy: Policy) -> Push:
    """``POST /api/v1/jobs``: ``{"queue", "payload", ...job fields}`` or
    ``{"queue", "jobs": [{"payload", "id"?, "max_attempts"?, "delay_seconds"?}, ...]}``.

    All jobs go into one Push, so they land in one commit and are answered
    together. Missing ids are generated here, once, so a re-applied push
    keeps them.
    """
    body = Fields(data)
    queue = body.string("queue")
    _built(None, check_queue, queue)
    if "jobs" in body.data:
        if "payload" in body.data:
            raise ValidationError("send 'payload' for one job or 'jobs' for several, not both")
        entries = body.array("jobs")
        if not entries:
            raise ValidationError("'jobs' must hold at least one job")
        body.done()
        return Push(
            queue=queue, jobs=tuple(_new_job(queue, Fields(e, f"jobs[{i}]"), policy) for i, e in enumerate(entries))
        )
    if "payload" not in body.data:
        raise ValidationError("missing field 'payload' (or 'jobs' for several)")
    job = _new_job(queue, body, policy)  # the single form is one job's fields beside "queue"
    return Push(queue=queue, jobs=(job,))


def _new_job(queue: str, job: Fields, policy: Policy) -> NewJob:
    payload = job.required("payload")
    job_id = job.optional_string("id")
    max_attempts = job.optional("max_attempts")
    delay = job.optional("delay_seconds")
    job.done()
    where = None if job.where == "body" else job.where
    # One job through the engine's own builder: the same checks as every client.
    op: Push = _built(
        where,
        push_op,
        queue,
        [payload],
        policy=policy,
        max_attempts=max_attempts,
        delay_seconds=0 if delay is None else delay,
        ids=[new_job_id() if job_id is None else job_id],
    )
    return op.jobs[0]


def wait_seconds_from(wait: object) -> float:
    """A long poll's ``wait_seconds`` (absent: 0, answer at once), 0 to
    :data:`MAX_WAIT_SECONDS`; ValidationError for anything else."""
    if wait is None:
        return 0.0
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= MAX_WAIT_SECONDS:
        raise ValidationError(f"'wait_seconds' must be a number from 0 to {MAX_WAIT_SECONDS:g}, got {wait!r}")
    return float(wait)


def claim_from(data: object, policy: Policy) -> tuple[Claim, float]:
    """``POST /api/v1/claim``: the Claim and how long to wait for a job (seconds)."""
    body = Fields(data)
    worker = body.string("worker")
    queues = body.array("queues")
    for index, name in enumerate(queues):
        if not isinstance(name, str):
            raise ValidationError(f"'queues[{index}]' must be a string, not {json_type(name)}")
    max_jobs = body.optional("max_jobs")
    lease_seconds = body.optional("lease_seconds")
    wait = body.optional("wait_seconds")
    in_order = body.optional("in_order")
    body.done()
    wait = wait_seconds_from(wait)
    op: Claim = _built(
        None,
        claim_op,
        worker,
        queues,
        policy=policy,
        max_jobs=1 if max_jobs is None else max_jobs,
        lease_seconds=lease_seconds,
        in_order=False if in_order is None else in_order,
    )
    return op, wait


def heartbeat_from(job_id: str, data: object) -> Heartbeat:
    """``POST /api/v1/jobs/<id>/heartbeat``: ``{"lease", "lease_seconds"?}``."""
    body = Fields(data)
    lease = body.string("lease")
    lease_seconds = body.optional("lease_seconds")
    body.done()
    return heartbeat_op(job_id, lease, lease_seconds=lease_seconds)


def complete_from(job_id: str, data: object) -> Complete:
    """``POST /api/v1/jobs/<id>/complete``: ``{"lease"}``."""
    body = Fields(data)
    lease = body.string("lease")
    body.done()
    return complete_op(job_id, lease)


def fail_from(job_id: str, data: object, policy: Policy) -> Fail:
    """``POST /api/v1/jobs/<id>/fail``: ``{"lease", "error", "retry_in_seconds"?, "give_up"?}``."""
    body = Fields(data)
    lease = body.string("lease")
    error = body.string("error")
    retry = body.optional("retry_in_seconds")
    give_up = body.optional("give_up")
    body.done()
    return fail_op(
        job_id, lease, error=error, retry_in_seconds=retry, policy=policy, give_up=False if give_up is None else give_up
    )


# -- operator operations, forwarded from a standby to the leader ---------------------------------


def operator_json(op: Operation) -> dict[str, Any]:
    """An operator operation as plain JSON values (what a standby signs).
    Raises ValueError for any other operation."""
    match op:
        case Requeue(per_second=None):
            return {"kind": "requeue", "job_ids": list(op.job_ids), "expect": list(op.expect)}
        case Requeue():
            # Its own kind: a leader that does not know paced requeues refuses
            # it rather than requeue every job at once.
            return {"kind": "requeue_paced", "job_ids": list(op.job_ids), "expect": list(op.expect),
                    "per_second": op.per_second}
        case Stop():
            return {"kind": "stop", "job_ids": list(op.job_ids), "expect": list(op.expect)}
        case MakeDue():
            # A leader of a release before it refuses the kind, changing nothing.
            return {"kind": "make_due", "job_ids": list(op.job_ids), "expect": list(op.expect)}
        case Purge() if op.before_pos is not None:
            # A kind of its own: a node that does not know the bound must
            # refuse it, never read it as "every pending job of the queue".
            return {"kind": "purge_before", "queue": op.queue, "before_pos": op.before_pos}
        case Purge():
            return {
                "kind": "purge",
                "job_ids": list(op.job_ids),
                "queue": op.queue,
                "status": op.status,
                "expect": list(op.expect),
            }
        case SetPaused():
            return {"kind": "pause", "queue": op.queue, "paused": op.paused}
        case ForgetQueue():
            return {"kind": "forget", "queue": op.queue}
        case SetLimit():
            return {"kind": "limit", "queue": op.queue, "max_running": op.max_running}
        case SetRateLimit():
            return {"kind": "rate_limit", "queue": op.queue, "jobs": op.jobs, "seconds": op.seconds}
        case SetSchedulePaused():
            return {"kind": "pause_schedule", "name": op.name, "paused": op.paused}
        case ForgetSchedule():
            return {"kind": "forget_schedule", "name": op.name}
        case Push():
            return {
                "kind": "push",
                "queue": op.queue,
                "jobs": [
                    {
                        "id": j.id,
                        "payload": decode_payload(j.payload),
                        "max_attempts": j.max_attempts,
                        "delay_seconds": j.delay_seconds,
                    }
                    for j in op.jobs
                ],
            }
    raise ValueError(f"{type(op).__name__} is not an operator operation")


def operator_from_json(data: Any, *, policy: Policy) -> Operation:
    """The operation back from :func:`operator_json`'s values, through the
    engine's own builders (so it is validated like any other). Raises
    ValidationError, or KeyError, TypeError, IndexError or ValueError for
    values no :func:`operator_json` made."""
    kind = data.get("kind") if isinstance(data, dict) else None
    # "expect" (a dry run's statuses, one per id) makes requeue, stop and
    # purge conditional; without it they are all or nothing.
    if kind == "requeue":
        return requeue_op(data["job_ids"], expect=data.get("expect") or None)
    if kind == "requeue_paced":
        return requeue_op(data["job_ids"], expect=data.get("expect") or None, per_second=data["per_second"])
    if kind == "stop":
        return stop_op(data["job_ids"], expect=data.get("expect") or None)
    if kind == "make_due":
        return make_due_op(data["job_ids"], expect=data.get("expect") or None)
    if kind == "purge":
        if data.get("job_ids"):
            return purge_op(data["job_ids"], expect=data.get("expect") or None)
        return purge_op(queue=data.get("queue"), status=data.get("status"))
    if kind == "purge_before":
        return purge_op(queue=data["queue"], status="pending", before_pos=data["before_pos"])
    if kind == "pause":
        return pause_op(data["queue"], paused=data["paused"])
    if kind == "forget":
        return forget_op(data["queue"])
    if kind == "limit":
        return limit_op(data["queue"], data["max_running"])
    if kind == "rate_limit":
        return rate_limit_op(data["queue"], data["jobs"], data["seconds"])
    if kind == "pause_schedule":
        return pause_schedule_op(data["name"], paused=data["paused"])
    if kind == "forget_schedule":
        return forget_schedule_op(data["name"])
    if kind == "push":
        jobs = data["jobs"]
        # A dashboard push has one job (one max_attempts and delay for all).
        first = jobs[0]
        return push_op(
            data["queue"],
            [j["payload"] for j in jobs],
            policy=policy,
            ids=[j["id"] for j in jobs],
            max_attempts=first["max_attempts"],
            delay_seconds=first["delay_seconds"],
        )
    raise ValueError(f"unknown operator operation {kind!r}")
