"""Operator actions taken on a standby node, run by the leader.

Every node serves the dashboard, but only the leader commits. When an
operator acts on a standby (behind a load balancer, say), the node signs the
operation with Django's signing (the nodes share ``DJANGO_SECRET_KEY``, as
they must for sessions) and posts it to the leader's ``/api/v1/operator``.
The leader checks the signature and its age, runs the operation like any
other, and answers with the outcome; the standby then writes the audit entry
in the shared database. Workers' API tokens cannot make such a request: only
a node holding the secret key can.

Only operator operations travel this way: requeue, purge, pause and resume,
and a push from the Submit page.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
from django.core import signing

from engine.errors import EngineError, NotLeader
from engine.model import decode_payload
from engine.operations import Operation, Purge, Push, Requeue, SetPaused, pause_op, purge_op, push_op, requeue_op
from engine.policy import Policy

SALT = "queueadmin.dashboard.forward"
# A signed operation is good for this long: enough for a slow network, too
# short to be worth replaying.
MAX_AGE_SECONDS = 60
TIMEOUT_SECONDS = 30.0


class ForwardRefused(EngineError):
    """The leader refused a forwarded operation, or could not be reached."""

    code = "forward_refused"


def encode(op: Operation) -> dict[str, Any]:
    """The operation as plain JSON values (what gets signed)."""
    match op:
        case Requeue():
            return {"kind": "requeue", "job_ids": list(op.job_ids), "expect": list(op.expect)}
        case Purge():
            return {"kind": "purge", "job_ids": list(op.job_ids), "queue": op.queue, "status": op.status,
                    "expect": list(op.expect)}
        case SetPaused():
            return {"kind": "pause", "queue": op.queue, "paused": op.paused}
        case Push():
            return {"kind": "push", "queue": op.queue, "jobs": [
                {"id": j.id, "payload": decode_payload(j.payload), "max_attempts": j.max_attempts,
                 "delay_seconds": j.delay_seconds} for j in op.jobs]}
    raise ValueError(f"{type(op).__name__} is not an operator operation")


def decode(data: Any, *, policy: Policy) -> Operation:
    """The operation back from :func:`encode`'s values, through the engine's
    own builders (so it is validated like any other). Raises ValidationError."""
    kind = data.get("kind") if isinstance(data, dict) else None
    # "expect" (a dry run's statuses, one per id) makes requeue and purge
    # conditional; without it they are all or nothing.
    if kind == "requeue":
        return requeue_op(data["job_ids"], expect=data.get("expect") or None)
    if kind == "purge":
        if data.get("job_ids"):
            return purge_op(data["job_ids"], expect=data.get("expect") or None)
        return purge_op(queue=data.get("queue"), status=data.get("status"))
    if kind == "pause":
        return pause_op(data["queue"], paused=data["paused"])
    if kind == "push":
        jobs = data["jobs"]
        # A dashboard push has one job (one max_attempts and delay for all).
        first = jobs[0]
        return push_op(data["queue"], [j["payload"] for j in jobs], policy=policy, ids=[j["id"] for j in jobs],
                       max_attempts=first["max_attempts"], delay_seconds=first["delay_seconds"])
    raise ValueError(f"unknown operator operation {kind!r}")


def sign(op: Operation) -> str:
    return signing.dumps(encode(op), salt=SALT, compress=True)


def unsign(text: str, *, policy: Policy) -> Operation:
    """The signed operation. Raises signing.BadSignature (or SignatureExpired)
    for a forged, altered or stale one, ValueError/ValidationError for a bad one."""
    data = signing.loads(text, salt=SALT, max_age=MAX_AGE_SECONDS)
    return decode(data, policy=policy)


def forward(op: Operation, leader_url: str) -> tuple[Any, int | None]:
    """Run ``op`` on the leader at ``leader_url``; return its outcome and the
    seq after it. Raises ForwardRefused (or NotLeader, if the leader moved)."""
    try:
        response = httpx.post(f"{leader_url}/api/v1/operator", content=sign(op).encode(),
                              headers={"Content-Type": "text/plain"}, timeout=TIMEOUT_SECONDS)
    except httpx.HTTPError as exc:
        raise ForwardRefused(f"the leader at {leader_url} could not be reached: {exc}") from exc
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        body = {}
    if response.is_success and isinstance(body, dict) and "result" in body:
        return body["result"], body.get("seq")
    code = body.get("error") if isinstance(body, dict) else None
    message = body.get("message") if isinstance(body, dict) else None
    if code == "not_leader":
        raise NotLeader(body.get("leader_url"), f"{leader_url} is no longer the leader: {message}")
    raise ForwardRefused(f"the leader at {leader_url} answered {response.status_code} {code or ''}: "
                         f"{message or response.reason_phrase}")

