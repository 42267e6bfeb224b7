"""The document's JSON for its parts that change one at a time: a job, a
dead letter, a queue's counters, a schedule's mark. A
:class:`~engine.document.QueueState` caches each job's and dead letter's
bytes as it changes, and a commit joins them (see :mod:`engine.document`);
segment objects and lookups by id reuse the same bytes.
:mod:`engine.decoding` reads them back.

Pure: no I/O. Split from :mod:`engine.document`.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

import orjson

from engine.model import Attempt, DeadLetter, Job, Lease, QueueCounters, exact
from engine.rates import RateLimit
from engine.schedules import ScheduleMark

__all__ = ["DUMPS_OPTS", "counters_dict", "encode_dead", "encode_job", "rate_limit_dict", "schedule_dict"]

#: orjson's options for every part of the document (UTC times end in Z).
DUMPS_OPTS = orjson.OPT_UTC_Z


def schedule_dict(mark: ScheduleMark) -> dict[str, Any]:
    """``schedules.<name>``: the latest tick handled, how, and the job it pushed."""
    return {"tick": mark.tick, "outcome": mark.outcome, "job": mark.job, "at": mark.at}


def counters_dict(c: QueueCounters) -> dict[str, Any]:
    """``queues.<name>``; ``max_running`` and ``rate_limit`` only when the
    queue has them, and a rate limit's window only once a job started
    under it."""
    counters: dict[str, Any] = {
        "pushed": c.pushed,
        "completed": c.completed,
        "failed": c.failed,
        "dead": c.dead,
        "purged": c.purged,
        "dead_dropped": c.dead_dropped,
        "paused": c.paused,
    }
    if c.max_running is not None:
        counters["max_running"] = c.max_running
    if c.rate_limit is not None:
        counters["rate_limit"] = rate_limit_dict(c.rate_limit)
    return counters


def rate_limit_dict(rate: RateLimit) -> dict[str, Any]:
    """``queues.<name>.rate_limit``: the limit, and its window once open."""
    out: dict[str, Any] = {"jobs": rate.jobs, "seconds": rate.seconds}
    if rate.window_start is not None:
        out["window_start"] = rate.window_start
        out["window_started"] = rate.window_started
    return out


def _lease_dict(lease: Lease | None) -> dict[str, Any] | None:
    if lease is None:
        return None
    return {
        "worker": lease.worker,
        "token": lease.token,
        "claimed_at": lease.claimed_at,
        "heartbeat_at": lease.heartbeat_at,
        "expires_at": lease.expires_at,
        "seconds": lease.seconds,
    }


def _history_list(history: tuple[Attempt, ...]) -> list[dict[str, Any]]:
    return [
        {
            "worker": a.worker,
            "claimed_at": a.claimed_at,
            "heartbeat_at": a.heartbeat_at,
            "ended_at": a.ended_at,
            "end": a.end,
            "error": a.error,
        }
        for a in history
    ]


# encode_job's shortcut for jobs without a lease, history or error (every
# pushed job): the bytes between the id and the payload are the same for all
# jobs of one push batch, so they are encoded once per (queue, status,
# attempts, max_attempts, enqueued_at, not_before) and reused.
_PLAIN_MIDDLES: dict[tuple[Any, ...], bytes] = {}
_PLAIN_MIDDLES_MAX = 64


def _plain_middle(key: tuple[Any, ...]) -> bytes:
    queue, status, attempts, max_attempts, enqueued_at, not_before, compact = key
    fields = orjson.dumps(
        {
            "queue": queue,
            "status": status,
            "attempts": attempts,
            "max_attempts": max_attempts,
            "enqueued_at": enqueued_at,
            **({} if compact and not_before is None else {"not_before": not_before}),
            **({} if compact else {"lease": None, "last_error": None, "history": []}),
        },
        option=DUMPS_OPTS,
    )
    middle = b"".join((b",", fields[1:-1], b',"payload":'))  # {...} -> ,...,"payload":
    if len(_PLAIN_MIDDLES) >= _PLAIN_MIDDLES_MAX:
        _PLAIN_MIDDLES.clear()
    _PLAIN_MIDDLES[key] = middle
    return middle


def encode_job(job: Job, pos: int | None = None) -> bytes:
    """The job's JSON object (byte for byte what ``_encode_job_fields`` gives),
    with ``"pos"`` after the id when ``pos`` is given (format 2). Format 2
    leaves out ``not_before``, ``lease`` and ``last_error`` when null and
    ``history`` when empty (every reader takes them as absent): 55 of a
    pushed job's ~430 bytes, in every commit and every segment."""
    not_before = job.not_before
    if (
        job.lease is None
        and not job.history
        and job.last_error is None
        # The cache key compares by ==: keep out what is equal but encodes
        # differently (True == 1; the same instant in another time zone).
        and type(job.attempts) is int
        and type(job.max_attempts) is int
        and job.enqueued_at.tzinfo is UTC
        and (not_before is None or not_before.tzinfo is UTC)
    ):
        key = (job.queue, job.status, job.attempts, job.max_attempts, job.enqueued_at, not_before, pos is not None)
        middle = _PLAIN_MIDDLES.get(key)
        if middle is None:
            middle = _plain_middle(key)
        at = b"" if pos is None else b',"pos":%d' % pos
        return b"".join((b'{"id":', orjson.dumps(job.id), at, middle, job.payload, b"}"))
    return _encode_job_fields(job, pos)


def _encode_job_fields(job: Job, pos: int | None = None) -> bytes:
    """The general encoding of a job, field by field (format 2, ``pos``
    given: without null or empty optional fields, see ``encode_job``)."""
    fields: dict[str, Any] = {"id": job.id} if pos is None else {"id": job.id, "pos": pos}
    optional: dict[str, Any] = {
        "not_before": job.not_before,
        "lease": _lease_dict(job.lease),
        "last_error": job.last_error,
        "history": _history_list(job.history),
    }
    if pos is not None:
        optional = {name: value for name, value in optional.items() if value is not None and value != []}
    return exact(orjson.dumps(
        {
            **fields,
            "queue": job.queue,
            "status": job.status,
            "attempts": job.attempts,
            "max_attempts": job.max_attempts,
            "enqueued_at": job.enqueued_at,
            **optional,
            "payload": orjson.Fragment(job.payload),
        },
        option=DUMPS_OPTS,
    ))


def encode_dead(dead: DeadLetter) -> bytes:
    return exact(orjson.dumps(
        {
            "id": dead.id,
            "queue": dead.queue,
            "attempts": dead.attempts,
            "max_attempts": dead.max_attempts,
            "enqueued_at": dead.enqueued_at,
            "died_at": dead.died_at,
            "error": dead.error,
            "history": _history_list(dead.history),
            "payload": orjson.Fragment(dead.payload),
        },
        option=DUMPS_OPTS,
    ))
