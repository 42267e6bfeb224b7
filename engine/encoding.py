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
#: How many entries each of the caches of this module keeps before it is emptied.
_CACHED_MAX = 64


def _plain_middle(key: tuple[Any, ...]) -> bytes:
    queue, status, attempts, max_attempts, enqueued_at, not_before, compact = key
    rest = {
        **({} if compact and not_before is None else {"not_before": not_before}),
        **({} if compact else {"lease": None, "last_error": None, "history": []}),
    }
    middle = _fields_between(queue, status, attempts, max_attempts, enqueued_at, rest, b',"payload":')
    return _remember(_PLAIN_MIDDLES, key, middle)


def _fields_between(queue: str, status: str, attempts: int, max_attempts: int, enqueued_at: Any,
                    rest: dict[str, Any], then: bytes) -> bytes:
    """A job's bytes after its id (and pos): ``,"queue":…,"enqueued_at":…``,
    the fields of ``rest``, and ``then`` (the next field's name)."""
    fields = orjson.dumps(
        {
            "queue": queue,
            "status": status,
            "attempts": attempts,
            "max_attempts": max_attempts,
            "enqueued_at": enqueued_at,
            **rest,
        },
        option=DUMPS_OPTS,
    )
    return b"".join((b",", fields[1:-1], then))  # {...} -> ,...<then>


def _remember[V](cache: dict[tuple[Any, ...], V], key: tuple[Any, ...], value: V) -> V:
    """Keep ``value`` under ``key`` in one of the caches below, emptied when full."""
    if len(cache) >= _CACHED_MAX:
        cache.clear()
    cache[key] = value
    return value


# encode_job's shortcut for a job on its first lease (every claimed job, and
# every heartbeat of one): no history, error or not_before. The bytes around
# its lease token are the same for all jobs of one claim (one worker, one
# instant, one lease length), so they are encoded once per claim and reused:
# the job's fields up to the lease, and the lease's fields after its token.
_LEASED_FIELDS: dict[tuple[Any, ...], bytes] = {}
_LEASE_TIMES: dict[tuple[Any, ...], tuple[bytes, bytes]] = {}


def _leased_fields(key: tuple[Any, ...]) -> bytes:
    """``,"queue":…,"enqueued_at":…,"lease":`` (format 1: ``not_before`` null before the lease)."""
    queue, status, attempts, max_attempts, enqueued_at, compact = key
    rest = {} if compact else {"not_before": None}
    return _remember(_LEASED_FIELDS, key,
                     _fields_between(queue, status, attempts, max_attempts, enqueued_at, rest, b',"lease":'))


def _lease_around_token(key: tuple[Any, ...]) -> tuple[bytes, bytes]:
    """``{"worker":…,"token":`` and ``,"claimed_at":…,"seconds":…}``."""
    worker, claimed_at, heartbeat_at, expires_at, seconds = key
    before = b"".join((b'{"worker":', orjson.dumps(worker), b',"token":'))
    after = orjson.dumps(
        {"claimed_at": claimed_at, "heartbeat_at": heartbeat_at, "expires_at": expires_at, "seconds": seconds},
        option=DUMPS_OPTS,
    )
    return _remember(_LEASE_TIMES, key, (before, b"," + after[1:]))


def _encode_leased(job: Job, lease: Lease, pos: int | None) -> bytes:
    """A job on its first lease (see ``encode_job``), from the caches above."""
    key = (job.queue, job.status, job.attempts, job.max_attempts, job.enqueued_at, pos is not None)
    fields = _LEASED_FIELDS.get(key)
    if fields is None:
        fields = _leased_fields(key)
    times = (lease.worker, lease.claimed_at, lease.heartbeat_at, lease.expires_at, lease.seconds)
    around = _LEASE_TIMES.get(times)
    if around is None:
        around = _lease_around_token(times)
    at = b"" if pos is None else b',"pos":%d' % pos
    # Format 1 writes last_error and history even when empty (format 2 leaves them out).
    tail = b',"payload":' if pos is not None else b',"last_error":null,"history":[],"payload":'
    return b"".join((
        b'{"id":', orjson.dumps(job.id), at, fields,
        around[0], orjson.dumps(lease.token), around[1],
        tail, job.payload, b"}",
    ))


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
    lease = job.lease
    if (
        lease is not None
        and not job.history
        and job.last_error is None
        and not_before is None
        # As above: keys compare by ==, so only types that encode one way.
        and type(job.attempts) is int
        and type(job.max_attempts) is int
        and job.enqueued_at.tzinfo is UTC
        and type(lease.worker) is str
        and type(lease.seconds) is float
        and lease.seconds > 0  # not -0.0, equal to 0.0 as a key
        and lease.claimed_at.tzinfo is UTC
        and lease.heartbeat_at.tzinfo is UTC
        and lease.expires_at.tzinfo is UTC
    ):
        return _encode_leased(job, lease, pos)
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
