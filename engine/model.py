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
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

import orjson

from engine.rates import RateLimit

JobStatus = Literal["pending", "running"]


def utc_now() -> datetime:
    """The default clock: the current time, timezone-aware UTC."""
    return datetime.now(UTC)


# Job ids are drawn from the OS's random source in blocks. One os.urandom call
# per id would release and re-take the GIL on every push: with the committer's
# writer thread busy, each id then waits for the GIL (measured ~40 us instead
# of ~1 us), which dominated the event loop's push path at 2,048 submitters.
_ID_BYTES = 16
_IDS_PER_DRAW = 256
_ids: deque[str] = deque()  # popleft and extend are atomic under the GIL


def _draw_ids() -> None:
    raw = os.urandom(_ID_BYTES * _IDS_PER_DRAW).hex()
    step = 2 * _ID_BYTES
    _ids.extend([raw[i : i + step] for i in range(0, len(raw), step)])


def _forget_ids() -> None:
    _ids.clear()  # a forked child must not hand out its parent's ids


os.register_at_fork(after_in_child=_forget_ids)


def new_job_id() -> str:
    """A fresh job id: 32 random hex characters, unique without coordination.

    Thread-safe: two threads never get the same id (each id is popped once),
    and a forked child draws its own."""
    while True:
        try:
            return _ids.popleft()
        except IndexError:  # empty (other threads may empty it again before we pop)
            _draw_ids()


def new_lease_token() -> str:
    """A fresh, unguessable lease token."""
    return secrets.token_hex(12)


def new_process_id(*, nonce_bytes: int) -> str:
    """``host:pid:nonce``, with ``nonce_bytes`` random bytes as hex: an id
    unique per process start, that says where it runs. Writer, worker and
    broker ids are built this way."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(nonce_bytes)}"


def new_writer_id() -> str:
    """An id for one writer (a client or committer instance): host, pid and a nonce.

    It is written into every commit so that an ambiguous write can be settled
    by re-reading: our id and sequence number there means our write landed.
    """
    return new_process_id(nonce_bytes=4)


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


#: Why a job left the document (see :class:`Departure`).
DepartureHow = Literal["completed", "purged", "dropped"]


class Departure(NamedTuple):
    """A job that left the document, as the commit that removed it saw it last.

    ``how`` says why it left, and ``item`` is what the document held just
    before:

    * ``completed``: its worker completed it; ``item`` is the running
      :class:`Job`, whose ``lease`` is the attempt that succeeded;
    * ``purged``: an operator's Purge removed it; ``item`` is the
      :class:`Job` (pending or running) or the :class:`DeadLetter`;
    * ``dropped``: a dead letter pushed out of the full list (the oldest
      goes first, see ``Policy.dead_letter_limit``); ``item`` is the
      :class:`DeadLetter`.

    ``at`` is the leader's clock when it left. Reported, only once the commit
    has landed, to a committer's ``on_departures`` listener.
    """

    how: DepartureHow
    at: datetime
    item: Job | DeadLetter


@dataclass(slots=True, kw_only=True)
class QueueCounters:
    """Running totals for one queue, kept in the document.

    ``failed`` counts attempts that ended badly (an explicit fail or an expired
    lease); ``dead`` counts jobs moved to the dead letters; ``dead_dropped``
    counts dead letters discarded because the list was full. ``paused``,
    ``max_running`` and ``rate_limit`` are not counters but the queue's
    settings: a paused queue takes pushes and hands out no claims; a queue
    with ``max_running`` hands out a claim only while fewer of its jobs run,
    across every worker (None: no limit); a queue with a ``rate_limit``
    starts at most its ``jobs`` in each window of its ``seconds`` (see
    :mod:`engine.rates`).
    """

    pushed: int = 0
    completed: int = 0
    failed: int = 0
    dead: int = 0
    purged: int = 0
    dead_dropped: int = 0
    paused: bool = False
    max_running: int | None = None
    rate_limit: RateLimit | None = None


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
