"""``POST /api/v1/leases/watch`` (docs/api.md, "Lease watches"), in both
directions: a worker names the leases it holds, and the broker answers once
one of them is no longer current, or once the wait is over
(:mod:`engine.leasewatch`).

* Broker side: :func:`watch_from` reads the body into (job id, lease) pairs
  and the wait; :func:`watch_json` answers ``{"lost": [{"id", "error",
  "message"}, ...]}`` (empty: every lease still held when the wait ended).
* Client side: :func:`watch_request` gives the request, and
  :func:`watch_outcome_from` reads the answer back into (job id, the
  LeaseLost or JobNotFound a heartbeat would get) pairs.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.errors import EngineError
from engine.ops import heartbeat_op
from engine.wire.batches import _items
from engine.wire.codes import error_from_answer, error_json
from engine.wire.reading import Fields
from engine.wire.requests import Request, wait_seconds_from

__all__ = ["WATCH_PATH", "watch_from", "watch_json", "watch_outcome_from", "watch_request"]

WATCH_PATH = "/leases/watch"


def watch_from(data: object) -> tuple[list[tuple[str, str]], float]:
    """``{"leases": [{"id", "lease"}, ...], "wait_seconds"?}`` (0 to
    :data:`MAX_WAIT_SECONDS`, 0 by default: answer at once). Raises
    ValidationError for anything else, a bad item included: a watch is
    answered as a whole."""
    body, items = _items(data, "leases")
    wait = body.optional("wait_seconds")
    body.done()
    wait = wait_seconds_from(wait)
    leases: list[tuple[str, str]] = []
    for i, raw in enumerate(items):
        item = Fields(raw, f"leases[{i}]")
        job_id, lease = item.string("id"), item.string("lease")
        item.done()
        heartbeat_op(job_id, lease)  # the same checks as a heartbeat's id and lease
        leases.append((job_id, lease))
    return list(dict.fromkeys(leases)), wait


def watch_json(lost: Sequence[tuple[str, EngineError]]) -> dict[str, Any]:
    """The answer: each lost lease's job and why, as a heartbeat of it would be refused."""
    return {"lost": [{"id": job_id, **error_json(error)} for job_id, error in lost]}


def watch_request(leases: Sequence[tuple[str, str]], wait_seconds: float) -> Request:
    """The request watching ``leases`` for up to ``wait_seconds``."""
    body = {"leases": [{"id": job_id, "lease": lease} for job_id, lease in leases], "wait_seconds": wait_seconds}
    return Request("POST", WATCH_PATH, body, wait_seconds=wait_seconds)


def watch_outcome_from(answer: Any) -> list[tuple[str, EngineError]]:
    """The lost leases of a watch's answer: (job id, its error). Raises
    EngineError for an answer that is not a watch's."""
    lost = answer.get("lost") if isinstance(answer, dict) else None
    if not isinstance(lost, list) or not all(isinstance(item, dict) and isinstance(item.get("id"), str)
                                             for item in lost):
        raise EngineError(f"the broker answered a lease watch with {answer!r:.200}")
    return [(item["id"], error_from_answer(409, item, job_id=item["id"])) for item in lost]
