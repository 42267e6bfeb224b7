"""The operations' value types: one immutable request per kind of change
to the queue (``Push``, ``Claim``, …, and the leader's own ``Seal``,
``Refill``, ``Merge``, ``SealDelayed`` and ``RefillDelayed``), and
:data:`Operation`, their union.

Built and validated by the builders of :mod:`engine.ops` (``push_op``,
``claim_op``, …), which also re-exports every type here: code outside
``engine/`` imports them from ``engine.ops``. Applied by the transitions
(:mod:`engine.transitions`). Split from :mod:`engine.ops`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, NamedTuple

from engine.model import Job
from engine.segments import DelayedRef, SegmentRef

__all__ = [
    "Claim",
    "Complete",
    "Excision",
    "Expire",
    "Fail",
    "FireSchedules",
    "ForgetQueue",
    "ForgetSchedule",
    "GetJob",
    "HandOver",
    "Heartbeat",
    "MakeDue",
    "Merge",
    "MergeDelayed",
    "NewJob",
    "Operation",
    "Purge",
    "PurgeOutcome",
    "PurgeStatus",
    "Push",
    "QueueScope",
    "Refill",
    "RefillDelayed",
    "Requeue",
    "ScheduleFire",
    "Seal",
    "SealDelayed",
    "SetLimit",
    "SetPaused",
    "SetRateLimit",
    "SetSchedulePaused",
    "Stop",
    "TakeOver",
    "Tick",
]

PurgeStatus = Literal["pending", "running", "dead"]

#: Which queues' jobs a lease call (heartbeat, complete, fail) may touch: a
#: predicate on a queue's name. A job of a queue it rejects is not found, as a
#: job that does not exist (JobNotFound), whatever its lease: the API narrows
#: a call to its token's queues with it (queueadmin.api.grants). None: every queue.
QueueScope = Callable[[str], bool]


class NewJob(NamedTuple):
    """One job of a push. A NamedTuple: a batch push builds thousands."""

    id: str
    payload: bytes
    max_attempts: int
    delay_seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Push:
    queue: str
    jobs: tuple[NewJob, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    worker: str
    queues: tuple[str, ...]
    max_jobs: int
    lease_seconds: float
    #: False: the oldest jobs across ``queues`` first. True: ``queues`` are
    #: priorities, each drained before the next (see ``claim_op``).
    in_order: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    job_id: str
    lease: str
    lease_seconds: float | None = None
    scope: QueueScope | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Complete:
    job_id: str
    lease: str
    scope: QueueScope | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Fail:
    job_id: str
    lease: str
    error: str
    retry_in_seconds: float | None = None
    #: Dead-letter the job now, whatever attempts it has left (a failure no
    #: retry can fix, such as a job naming code that does not exist).
    give_up: bool = False
    scope: QueueScope | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Expire:
    """Send every lease past its deadline back to pending (or to the dead letters)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Stop:
    """Stop running jobs: each one's lease is revoked (its worker is told,
    engine.leasewatch) and the job goes to the dead letters at once, kept
    for inspection and a redrive, whatever attempts it had left; the attempt
    is recorded as failed with :data:`~engine.lifecycle.STOPPED_ERROR`.
    With ``expect`` (``"running"`` per id) only the jobs still running
    move; see :func:`~engine.ops.stop_op`."""

    job_ids: tuple[str, ...]
    expect: tuple[PurgeStatus, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Requeue:
    """Move running or dead jobs back to pending. With ``expect`` (one status
    per id), only the jobs still in their expected status move; see
    :func:`~engine.ops.requeue_op`."""

    job_ids: tuple[str, ...]
    expect: tuple[PurgeStatus, ...] = ()
    #: Paced (a redrive's velocity): the jobs it moves are due one after
    #: another, this many a second, the first at once. None: all at once.
    per_second: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MakeDue:
    """Make delayed pending jobs (a delayed push, a retry waiting out its
    backoff) due now: each keeps its place (``pos``) and is claimed in its
    FIFO turn, as if its delay had run out now. A pending job already due is
    left as it is. With ``expect`` (``"pending"`` per id) it is conditional,
    as a requeue's: a job no longer pending is skipped; see
    :func:`~engine.ops.make_due_op`.

    Format 3, set by the leader's broker as for a purge by ids (see
    :class:`Purge`): with ``seek``, ids that are nowhere in the document
    while it references segments refuse it with
    :class:`~engine.errors.JobSealed`, changing nothing; ``excisions`` are
    the delayed jobs found in delayed segments, each segment written again
    without them: the commit swaps the references and puts the jobs back
    into the document at their ``pos``, due (see :mod:`engine.duenow`)."""

    job_ids: tuple[str, ...]
    expect: tuple[PurgeStatus, ...] = ()
    seek: bool = False
    excisions: tuple[Excision, ...] = ()


class Excision(NamedTuple):
    """Format 2: pending jobs a purge by id removes from inside a segment.
    The leader rewrote the segment ``key`` of ``queue`` from its first
    ``consumed`` jobs on, without ``jobs``, as ``ref`` (None: no job was
    left), before the purge; the purge swaps the references. Format 3: a
    delayed segment (``consumed`` 0) is rewritten as a delayed one, whose
    ``ref`` is a :class:`~engine.segments.DelayedRef`. ``positions``: each
    job's ``pos``, in order (a :class:`MakeDue` puts the jobs back there; a
    purge needs none)."""

    queue: str
    key: str
    consumed: int
    ref: SegmentRef | DelayedRef | None
    jobs: tuple[Job, ...]
    positions: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Purge:
    """Remove jobs: the listed ids, or every job of ``queue`` with ``status``.
    With ``expect`` (one status per id), only the listed jobs still in their
    expected status go. With ``before_pos`` (format 2), only the pending
    jobs of ``queue`` whose ``pos`` is below it go, in the document and in
    segments alike; see :func:`~engine.ops.purge_op`.

    Format 2, by ids: set by the leader's broker, never by a client (nor
    forwarded). With ``seek``, ids that are in the document neither as jobs
    nor as dead letters (nor finished lately) while it references segments
    refuse the purge with :class:`~engine.errors.JobSealed` naming them all,
    changing nothing: they may be pending in a segment. ``excisions`` are
    those found there (see :class:`Excision`): the purge removes them with
    the rest in one commit, and is refused with ValidationError, changing
    nothing, if any of their segments moved on (refilled, merged, purged)."""

    job_ids: tuple[str, ...] = ()
    queue: str | None = None
    status: PurgeStatus | None = None
    expect: tuple[PurgeStatus, ...] = ()
    before_pos: int | None = None
    seek: bool = False
    excisions: tuple[Excision, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PurgeOutcome:
    """The outcome of a purge with ``before_pos``: the ids removed from the
    document, and how many jobs left with the segment references dropped
    (their ids are not read). ``kept_whole`` is the key of the segment that
    held jobs on both sides of ``before_pos`` when the purge committed,
    left whole (I9: it also holds jobs the dry run never counted), so its
    counted jobs are still pending; None if there was none. Decided at
    commit: a report read after it would race the refill that may follow."""

    ids: list[str]
    in_segments: int
    kept_whole: str | None = None

    @property
    def count(self) -> int:
        return len(self.ids) + self.in_segments


@dataclass(frozen=True, slots=True, kw_only=True)
class SetPaused:
    """Pause or resume ``queue``. A paused queue takes pushes but hands out
    no claims; running jobs carry on. Pausing a queue that has never had a
    push creates its entry, so a queue can be paused before it is used."""

    queue: str
    paused: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class SetLimit:
    """Set ``queue``'s concurrency limit: at most ``max_running`` of its jobs
    run at once, across every worker; None removes the limit. Jobs already
    running above a new, lower limit carry on; no claim is handed out until
    fewer run. Like a pause, it creates the queue's entry if there is none."""

    queue: str
    max_running: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class SetRateLimit:
    """Set ``queue``'s rate limit: at most ``jobs`` of its jobs start in each
    window of ``seconds`` (see :mod:`engine.rates`); ``jobs`` None removes
    it. A window already open carries on under the new numbers (its starts
    still count). Like a pause, it creates the queue's entry if there is
    none."""

    queue: str
    jobs: int | None
    seconds: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ForgetQueue:
    """Remove an empty queue's entry (its counters and paused flag) from the
    document. Refused, changing nothing, if the queue holds any job (pending,
    running or dead) when the operation commits; see :func:`~engine.ops.forget_op`."""

    queue: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GetJob:
    """Read one job (pending, running or dead). Changes nothing; answered once
    every write before it has landed, so it never shows uncommitted state."""

    job_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Tick:
    """The leader's heartbeat: forces a commit (and with it, lease expiry) even
    when nothing else changed, so standbys see the leader is alive."""


class ScheduleFire(NamedTuple):
    """One schedule's tick in a :class:`FireSchedules`: the job it pushes to
    ``queue``, unless ``tick`` is more than ``catch_up_seconds`` old."""

    name: str
    tick: datetime
    queue: str
    job: NewJob
    catch_up_seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class FireSchedules:
    """The leader's due schedule ticks (:mod:`engine.schedules`). Each fires
    only if the document's mark for its schedule is before its tick; a
    schedule without a mark fires a tick at or after ``since`` (when the
    leader began leading) and only registers an earlier one."""

    fires: tuple[ScheduleFire, ...]
    since: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class SetSchedulePaused:
    """Pause or resume schedule ``name`` (:mod:`engine.schedules`), on every
    node at once: the document keeps the pause. A paused schedule's ticks are
    *skipped*: the mark moves on, nothing is pushed, and resuming does not
    catch them up. A name no node defines may be paused too (before a deploy
    adds it)."""

    name: str
    paused: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ForgetSchedule:
    """Drop schedule ``name``'s mark and pause from the document: for a
    schedule removed from every node's setting. A node that still defines it
    registers its next tick afresh (see :mod:`engine.schedules`)."""

    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TakeOver:
    """Name ``broker_id`` as the leader, one epoch above ``epoch`` (the epoch
    that was read); every running lease gets a fresh full timeout."""

    broker_id: str
    url: str | None
    epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class HandOver:
    """The leader ``broker_id``, at ``epoch``, stops leading: the document
    then names no leader, and a standby takes over at its next poll instead
    of after a whole takeover interval without commits. Refused (a
    ValidationError), changing nothing, unless the document names
    ``broker_id`` at ``epoch``: a leader already replaced hands nothing over."""

    broker_id: str
    epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Seal:
    """The leader's own (see :mod:`engine.lanes`): replace the pending jobs
    ``jobs`` of ``queue`` (``(id, pos)`` pairs, in FIFO order) by ``ref``, a
    segment already written with exactly those jobs. Refused, changing
    nothing, unless each is still pending at that ``pos`` with no delay and
    the queue's last segment is still ``after`` (None: it has none), and,
    when ``parts`` (the jobs as the segment holds them) is given, unless
    each still encodes exactly so.

    ``parts`` matters because the lane keeper plans from the committer's
    state when a write lands, and that state already holds the operations
    staged for the next write: if that write fails, they are applied again
    to a fresh read, and a job pushed again keeps its id and ``pos`` but
    gets another ``enqueued_at``."""

    queue: str
    ref: SegmentRef
    jobs: tuple[tuple[str, int], ...]
    after: str | None
    parts: tuple[bytes, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Refill:
    """The leader's own (see :mod:`engine.lanes`): move ``jobs`` (``(job,
    pos)`` pairs), the next jobs of ``queue``'s first segment ``key`` after
    its first ``consumed``, back into the document. ``front`` and ``oldest``
    describe the first job still in the segment afterwards (None when none
    is left). Refused, changing nothing, unless the queue's first segment is
    still ``key`` with ``consumed`` consumed."""

    queue: str
    key: str
    consumed: int
    jobs: tuple[tuple[Job, int], ...]
    front: int | None
    oldest: datetime | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Merge:
    """The leader's own (see :mod:`engine.lanes`): replace the adjacent
    segment references ``keys`` of ``queue`` by ``ref``, one segment already
    written with all their jobs in order. Refused, changing nothing, unless
    those references are still there, adjacent, in that order, and none has
    been refilled from (``consumed`` 0)."""

    queue: str
    keys: tuple[str, ...]
    ref: SegmentRef


@dataclass(frozen=True, slots=True, kw_only=True)
class SealDelayed:
    """The leader's own (format 3, see :mod:`engine.lanes`): replace the
    delayed jobs ``jobs`` of ``queue`` (``(id, pos)`` pairs, in due order) by
    ``ref``, a delayed segment already written with exactly ``parts`` (the
    jobs as the segment holds them). Refused, changing nothing, unless each
    is still pending at that ``pos`` and still encodes exactly so (so with
    the same ``not_before``), and is due no earlier than ``ref.first_due``
    says."""

    queue: str
    ref: DelayedRef
    jobs: tuple[tuple[str, int], ...]
    parts: tuple[bytes, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RefillDelayed:
    """The leader's own (format 3, see :mod:`engine.lanes`): put ``jobs``
    (``(job, pos)`` pairs), the first jobs (in due order) of ``queue``'s
    delayed segment ``key``, back into the document with their ``pos`` and
    ``not_before``, and swap the reference for ``rests``: delayed segments
    already written with the others, in due order (none when ``jobs`` are
    all of them; the part already due split into segments of a front share,
    so that the next refills read one share and write nothing). Refused,
    changing nothing, unless the queue still references ``key``, each rest
    is a new key within its bounds, and ``jobs`` and ``rests`` account for
    every job of it."""

    queue: str
    key: str
    jobs: tuple[tuple[Job, int], ...]
    rests: tuple[DelayedRef, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class MergeDelayed:
    """The leader's own (format 3, see :mod:`engine.lanes`): replace the
    delayed segment references ``keys`` of ``queue`` by ``ref``, one delayed
    segment already written with all their jobs, in due order. Refused,
    changing nothing, unless every one is still referenced and ``ref``
    describes them together (jobs, due times and pos bounds)."""

    queue: str
    keys: tuple[str, ...]
    ref: DelayedRef


Operation = (
    Push
    | Claim
    | Heartbeat
    | Complete
    | Fail
    | Expire
    | Requeue
    | Stop
    | MakeDue
    | Purge
    | SetPaused
    | SetLimit
    | SetRateLimit
    | ForgetQueue
    | GetJob
    | Tick
    | FireSchedules
    | SetSchedulePaused
    | ForgetSchedule
    | TakeOver
    | HandOver
    | Seal
    | Refill
    | Merge
    | SealDelayed
    | RefillDelayed
    | MergeDelayed
)
