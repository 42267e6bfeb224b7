"""Outcomes as answers (docs/api.md), in both directions.

* Broker side: :func:`outcome_json` gives the JSON object that answers an
  operation with its outcome. Times stay datetimes: the API encodes them as
  RFC 3339 strings.
* Client side: :func:`outcome_from` reads such an answer back into the
  outcome the local clients return; :func:`health_from` reads a node's
  health answer.

Lease tokens are their holders' secrets (I4): no answer carries one. Where a
job shows its lease, the token is replaced by :data:`HIDDEN_TOKEN`
(:func:`hide_token`, :func:`hide_tokens`).

Pure: no I/O. The readers raise EngineError for an answer no broker sends.
"""

from __future__ import annotations

from typing import Any

from engine.errors import EngineError
from engine.model import ClaimedJob, FailOutcome
from engine.optypes import Claim, Complete, Fail, GetJob, Heartbeat, Operation, Push
from engine.wire.reading import check_url, parse_time

#: Shown instead of a lease token, wherever a job's lease is shown.
HIDDEN_TOKEN = "…"


def hide_token(job: Any) -> None:
    """In one job as ``get_job`` shows it, replace the lease token, if there
    is one, with HIDDEN_TOKEN. In place."""
    lease = job.get("lease") if isinstance(job, dict) else None
    if isinstance(lease, dict) and "token" in lease:
        lease["token"] = HIDDEN_TOKEN


def hide_tokens(document: dict[str, Any]) -> None:
    """In a whole document, set every job's lease token to HIDDEN_TOKEN. In place."""
    for entry in document.get("jobs", ()):
        if isinstance(entry, dict) and isinstance(entry.get("lease"), dict):
            entry["lease"]["token"] = HIDDEN_TOKEN


def claimed_json(job: ClaimedJob) -> dict[str, Any]:
    """One claimed job as a claim answer lists it (with its lease: it is the claimant's)."""
    return {
        "id": job.id,
        "queue": job.queue,
        "payload": job.payload,
        "attempt": job.attempt,
        "lease": job.lease,
        "lease_expires_at": job.lease_expires_at,
    }


def outcome_json(op: Operation, outcome: Any) -> dict[str, Any]:
    """The answer to ``op`` whose outcome is ``outcome``. A job read by
    GetJob has its lease token hidden, in place (the engine drops it
    already; never rely on one layer alone). Raises EngineError for an
    operation with no endpoint."""
    match op:
        case Push():
            return {"ids": outcome}
        case Claim():
            return {"jobs": [claimed_json(job) for job in outcome]}
        case Heartbeat():
            return {"lease_expires_at": outcome}
        case Complete():
            return {"ok": True}
        case Fail():
            return {"status": outcome.status, "not_before": outcome.not_before}
        case GetJob():
            hide_token(outcome)
            return dict(outcome)
    raise EngineError(f"{type(op).__name__} has no answer on the broker API")


def outcome_from(op: Operation, answer: Any) -> Any:
    """The outcome of ``op`` from the broker's parsed answer: what the local
    clients return for it. Raises EngineError for a malformed answer."""
    match op:
        case Push():
            return list(_field(answer, "ids", list))
        case Claim():
            try:
                return [
                    ClaimedJob(
                        id=str(j["id"]),
                        queue=str(j["queue"]),
                        payload=j["payload"],
                        attempt=int(j["attempt"]),
                        lease=str(j["lease"]),
                        lease_expires_at=parse_time(j["lease_expires_at"]),
                    )
                    for j in _field(answer, "jobs", list)
                ]
            except (KeyError, TypeError, ValueError) as exc:
                raise EngineError(f"the broker sent a malformed claim answer: {exc!r}") from exc
        case Heartbeat():
            return parse_time(_field(answer, "lease_expires_at", str))
        case Complete():
            return None
        case Fail():
            status = _field(answer, "status", str)
            if status not in ("pending", "dead"):
                raise EngineError(f"the broker answered fail with status {status!r}")
            not_before = answer.get("not_before")
            return FailOutcome(status=status, not_before=None if not_before is None else parse_time(not_before))
        case GetJob():
            if not isinstance(answer, dict):
                raise EngineError("the broker answered get_job with something other than a JSON object")
            return answer
    raise EngineError(f"{type(op).__name__} has no answer on the broker API")


def health_from(answer: Any) -> tuple[str, str | None]:
    """A node's role (``leader``, ``standby``, ...) and the leader's URL as it
    names it (None if none, or not an http(s) URL), from its health answer.
    Raises EngineError if the answer names no role."""
    role = answer.get("role") if isinstance(answer, dict) else None
    if not isinstance(role, str):
        raise EngineError("its health answer has no role")
    broker = answer.get("broker")
    named = broker.get("url") if isinstance(broker, dict) else None
    try:
        return role, check_url(named) if isinstance(named, str) and named else None
    except ValueError:
        return role, None


def _field(answer: Any, name: str, kind: type) -> Any:
    if not isinstance(answer, dict) or not isinstance(answer.get(name), kind):
        raise EngineError(f"the broker's answer has no {kind.__name__} {name!r}: {answer!r:.200}")
    return answer[name]
