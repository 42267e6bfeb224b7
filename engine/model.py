"""Value objects: jobs, leases, dead letters, counters, and what clients receive.

``Job``, ``Lease`` and ``DeadLetter`` are immutable NamedTuples rather than
frozen dataclasses: every push and claim builds them, and a frozen dataclass
costs about five times as much to construct. Change them with ``_replace``.

All datetimes are timezone-aware UTC. Payloads are kept as their encoded JSON
bytes: they are validated and sized once at push, and written back into the
document verbatim, so a commit never re-encodes a payload.
"""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

import orjson

JobStatus = Literal["pending", "running"]


def utc_now() -> datetime:
    """The default clock: the current time, timezone-aware UTC."""
    return datetime.now(UTC)


def new_job_id() -> str:
    """A fresh job id: 32 random hex characters, unique without coordination."""
    return os.urandom(16).hex()


def new_lease_token() -> str:
    """A fresh, unguessable lease token."""
    return secrets.token_hex(12)


def new_writer_id() -> str:
    """An id for one writer (a client or committer instance): host, pid and a nonce.

    It is written into every commit so that an ambiguous write can be settled
    by re-reading: our id and sequence number there means our write landed.
    """
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class Lease(NamedTuple):
    """A running job's lease. Only the holder of ``token`` may heartbeat,
    complete or fail the job (I4)."""

    worker: str
    token: str
    claimed_at: datetime
    heartbeat_at: datetime
    expires_at: datetime
    seconds: float


class Attempt(NamedTuple):
    """One finished attempt of a job, kept in the job's bounded ``history``.

    ``end`` says how it ended: ``failed`` (the worker called fail),
    ``expired`` (the lease ran out) or ``requeued`` (an operator took it back).
    A completed attempt needs no record: the job leaves the document.
    """

    worker: str
    claimed_at: datetime
    heartbeat_at: datetime
    ended_at: datetime
    end: Literal["failed", "expired", "requeued"]
    error: str | None = None


class Job(NamedTuple):
    """A job in the document. ``payload`` is the job's encoded JSON.

    ``history`` holds the last few finished attempts, oldest first; the
    running attempt, if any, is ``lease``.
    """

    id: str
    queue: str
    payload: bytes
    status: JobStatus
    attempts: int
    max_attempts: int
    enqueued_at: datetime
    not_before: datetime | None = None
    lease: Lease | None = None
    last_error: str | None = None
    history: tuple[Attempt, ...] = ()


class DeadLetter(NamedTuple):
    """A job that used up its attempts, with its last error. It stays in the
    bounded dead-letter list until requeued, purged or pushed out by newer ones."""

    id: str
    queue: str
    payload: bytes
    attempts: int
    max_attempts: int
    enqueued_at: datetime
    died_at: datetime
    error: str
    history: tuple[Attempt, ...] = ()


@dataclass(slots=True, kw_only=True)
class QueueCounters:
    """Running totals for one queue, kept in the document.

    ``failed`` counts attempts that ended badly (an explicit fail or an expired
    lease); ``dead`` counts jobs moved to the dead letters; ``dead_dropped``
    counts dead letters discarded because the list was full. ``paused`` is
    not a counter but the queue's one flag: a paused queue takes pushes and
    hands out no claims.
    """

    pushed: int = 0
    completed: int = 0
    failed: int = 0
    dead: int = 0
    purged: int = 0
    dead_dropped: int = 0
    paused: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerInfo:
    """Which broker leads: its id, advertised URL and fencing epoch."""

    id: str | None = None
    url: str | None = None
    epoch: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimedJob:
    """What a worker receives from ``claim``."""

    id: str
    queue: str
    payload: Any
    attempt: int
    lease: str
    lease_expires_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class FailOutcome:
    """The result of ``fail``: back to ``pending`` (retry at ``not_before``) or ``dead``."""

    status: Literal["pending", "dead"]
    not_before: datetime | None = None


def exact(raw: bytes) -> bytes:
    """A copy of ``raw`` that owns exactly its length.

    orjson (3.13) returns each ``bytes`` with a 4 KiB allocation behind it
    whatever its length; the engine keeps two such objects per job, which at
    100k jobs would cost ~800 MB. Everything it keeps passes through here.
    """
    return bytes(memoryview(raw))


def decode_payload(raw: bytes) -> Any:
    """Decode a stored payload."""
    return orjson.loads(raw)
