"""Operations: validated, immutable requests to change the queue. A public
module of the engine (see :mod:`engine`): import from ``engine.ops``.

Builders (``push_op``, ``claim_op``, …) check their input and raise
:class:`~engine.errors.ValidationError` subclasses *before* anything is
submitted, so a bad request never reaches a commit. Ids and payload bytes are
fixed here, so re-applying an operation after a lost race pushes the same
job ids again (and pushes are idempotent by id).

This module holds the builders and the checks of names, ids and text they
run; the operations' types (``Push``, ``Claim``, …, :data:`Operation`) are
in :mod:`engine.optypes` and payload encoding (:func:`encode_payload`) in
:mod:`engine.payloads`, both re-exported here.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

from engine.errors import ValidationError
from engine.model import new_job_id
from engine.optypes import (
    Claim,
    Complete,
    Excision,
    Expire,
    Fail,
    FireSchedules,
    ForgetQueue,
    GetJob,
    HandOver,
    Heartbeat,
    MakeDue,
    Merge,
    MergeDelayed,
    NewJob,
    Operation,
    Purge,
    PurgeOutcome,
    PurgeStatus,
    Push,
    QueueScope,
    Refill,
    RefillDelayed,
    Requeue,
    ScheduleFire,
    Seal,
    SealDelayed,
    SetLimit,
    SetPaused,
    SetRateLimit,
    Stop,
    TakeOver,
    Tick,
)
from engine.payloads import MAX_PAYLOAD_DEPTH, encode_payload
from engine.policy import MAX_CLAIM_JOBS, MAX_DELAY_SECONDS, MAX_LEASE_SECONDS, Policy
from engine.rates import MAX_RATE_JOBS, MAX_RATE_SECONDS, MIN_RATE_SECONDS

__all__ = [
    "ID_PATTERN",
    "ID_RULE",
    "MAX_PACE_PER_SECOND",
    "MAX_PAYLOAD_DEPTH",
    "MAX_RATE_JOBS",
    "MAX_RATE_SECONDS",
    "MAX_RUNNING_LIMIT",
    "MAX_WORKER_CHARS",
    "MIN_PACE_PER_SECOND",
    "MIN_RATE_SECONDS",
    "QUEUE_NAME",
    "Claim",
    "Complete",
    "Excision",
    "Expire",
    "Fail",
    "FireSchedules",
    "ForgetQueue",
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
    "Stop",
    "TakeOver",
    "Tick",
    "check_queue",
    "check_text",
    "claim_op",
    "complete_op",
    "encode_payload",
    "fail_op",
    "forget_op",
    "get_job_op",
    "heartbeat_op",
    "limit_op",
    "make_due_op",
    "pause_op",
    "purge_op",
    "push_op",
    "rate_limit_op",
    "requeue_op",
    "scoped",
    "stop_op",
]

#: The bounds of a paced requeue's jobs a second (one a day; no pause at all is no pace).
MIN_PACE_PER_SECOND = 1 / 86400
MAX_PACE_PER_SECOND = 100_000.0

QUEUE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")
# Ids travel as URL path segments (/api/v1/jobs/<id>/...) and must arrive as
# they were sent: 1-200 of letters, digits, '_', '.', ':' and '-', and not
# made only of dots ("." and ".." are dot segments, which clients collapse).
# Everything else ('/', '?', '#', '%', spaces, control characters, non-ASCII)
# would be rewritten or cut by some client or proxy on the way.
ID_PATTERN = re.compile(r"(?!\.+\Z)[A-Za-z0-9_.:-]{1,200}")
ID_RULE = "1-200 of letters, digits, '_', '.', ':' or '-', not only dots"
MAX_WORKER_CHARS = 200


# Queue names already checked (a few per broker): a dict lookup instead of a
# regular expression on every push. Bounded, so random names cannot grow it.
_CHECKED_QUEUES: dict[str, None] = {}
_CHECKED_QUEUES_MAX = 1024


def check_queue(name: object) -> str:
    if type(name) is str and name in _CHECKED_QUEUES:
        return name
    if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name):
        raise ValidationError(
            f"invalid queue name {name!r}: use 1-100 letters, digits, '_', '.', ':' or '-', starting alphanumeric"
        )
    if type(name) is str:
        if len(_CHECKED_QUEUES) >= _CHECKED_QUEUES_MAX:
            _CHECKED_QUEUES.clear()
        _CHECKED_QUEUES[name] = None
    return name


def _check_number(name: str, value: object, *, low: float, high: float, integer: bool = False) -> float:
    if type(value) is int and low <= value <= high:  # the common case, checked cheaply
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) or (integer and not isinstance(value, int)):
        raise ValidationError(f"{name} must be {'an integer' if integer else 'a number'}, got {value!r}")
    if not math.isfinite(value) or not low <= value <= high:
        raise ValidationError(f"{name} must be between {low:g} and {high:g}, got {value!r}")
    return value


def _check_id(name: str, value: object) -> str:
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        raise ValidationError(f"{name} must be {ID_RULE}, got {value!r}")
    return value


def check_text(name: str, value: object) -> str:
    """Return ``value`` if it is a string that UTF-8 can encode; raise
    ValidationError otherwise. A lone surrogate ("\\ud800") is a valid Python
    string that no JSON document can hold: refused here, before it reaches a
    commit."""
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(f"{name} is not valid text: {exc.reason} at position {exc.start}") from None
    return value


def _new_job(fields: tuple[str, bytes, int, float]) -> NewJob:
    """``NewJob(*fields)`` without the Python-level ``__new__`` call."""
    return tuple.__new__(NewJob, fields)


def push_op(
    queue: str,
    payloads: Sequence[Any],
    *,
    policy: Policy,
    max_attempts: int | None = None,
    delay_seconds: float = 0,
    ids: Sequence[str] | None = None,
) -> Push:
    """Build a push of one or many payloads to ``queue``."""
    check_queue(queue)
    if type(payloads) is not list and (isinstance(payloads, str | bytes) or not isinstance(payloads, Sequence)):
        raise ValidationError("payloads must be a list of JSON values")
    if not payloads:
        raise ValidationError("push needs at least one payload")
    attempts = policy.max_attempts if max_attempts is None else max_attempts
    if type(attempts) is not int or not 1 <= attempts <= 1000:  # else valid as it is
        attempts = int(_check_number("max_attempts", attempts, low=1, high=1000, integer=True))
    if delay_seconds == 0 and type(delay_seconds) is int:  # the default, valid
        delay = 0.0
    else:
        delay = float(_check_number("delay_seconds", delay_seconds, low=0, high=MAX_DELAY_SECONDS))
    if ids is not None and len(ids) != len(payloads):
        raise ValidationError("ids and payloads differ in length")
    limit = policy.max_payload_bytes
    if ids is None and len(payloads) == 1:
        # The common case, one payload, without a generator (a push per call
        # is the hot path of a busy broker).
        jobs: tuple[NewJob, ...] = (
            _new_job((new_job_id(), encode_payload(payloads[0], limit=limit), attempts, delay)),
        )
    elif ids is None:
        jobs = tuple(NewJob(new_job_id(), encode_payload(p, limit=limit), attempts, delay) for p in payloads)
    else:
        jobs = tuple(
            NewJob(_check_id("job id", i), encode_payload(p, limit=limit), attempts, delay)
            for i, p in zip(ids, payloads, strict=True)
        )
    return Push(queue=queue, jobs=jobs)


def claim_op(
    worker: str,
    queues: Iterable[str],
    *,
    policy: Policy,
    max_jobs: int = 1,
    lease_seconds: float | None = None,
    in_order: bool = False,
) -> Claim:
    """Build a claim of up to ``max_jobs`` jobs from ``queues`` for ``worker``.

    By default the claim takes the oldest eligible jobs across all of
    ``queues``. With ``in_order`` the queues are priorities, as the queues of
    an RQ worker: a job of a queue is taken only when no queue before it has
    a job the claim may take (pending, due, not paused, within its limits).
    Either way each queue gives its jobs in FIFO order (I7)."""
    if not isinstance(worker, str) or not worker or len(worker) > MAX_WORKER_CHARS:
        raise ValidationError(f"worker must be a non-empty string of at most {MAX_WORKER_CHARS} characters")
    check_text("worker", worker)
    if isinstance(queues, str):
        queues = [queues]
    names = tuple(dict.fromkeys(check_queue(q) for q in queues))
    if not names:
        raise ValidationError("claim needs at least one queue")
    count = int(_check_number("max_jobs", max_jobs, low=1, high=MAX_CLAIM_JOBS, integer=True))
    seconds = policy.lease_seconds if lease_seconds is None else lease_seconds
    seconds = float(_check_number("lease_seconds", seconds, low=0.001, high=MAX_LEASE_SECONDS))
    if type(in_order) is not bool:
        raise ValidationError(f"in_order must be true or false, got {in_order!r}")
    return Claim(worker=worker, queues=names, max_jobs=count, lease_seconds=seconds, in_order=in_order)


def heartbeat_op(job_id: str, lease: str, *, lease_seconds: float | None = None) -> Heartbeat:
    if lease_seconds is not None:
        lease_seconds = float(_check_number("lease_seconds", lease_seconds, low=0.001, high=MAX_LEASE_SECONDS))
    return Heartbeat(job_id=_check_id("job id", job_id), lease=_check_id("lease", lease), lease_seconds=lease_seconds)


def scoped[T: Operation](op: T, scope: QueueScope | None) -> T:
    """``op`` confined to the jobs of the queues ``scope`` accepts, if it is
    a lease call (Heartbeat, Complete or Fail; see :data:`QueueScope`);
    any other operation, and any with ``scope`` None, unchanged."""
    if scope is None or not isinstance(op, Heartbeat | Complete | Fail):
        return op
    return dataclasses.replace(op, scope=scope)


def get_job_op(job_id: str) -> GetJob:
    return GetJob(job_id=_check_id("job id", job_id))


def complete_op(job_id: str, lease: str) -> Complete:
    return Complete(job_id=_check_id("job id", job_id), lease=_check_id("lease", lease))


def fail_op(
    job_id: str, lease: str, *, error: str, retry_in_seconds: float | None, policy: Policy, give_up: bool = False
) -> Fail:
    check_text("error", error)
    if not isinstance(give_up, bool):
        raise ValidationError(f"give_up must be true or false, got {give_up!r}")
    if retry_in_seconds is not None:
        retry_in_seconds = float(_check_number("retry_in_seconds", retry_in_seconds, low=0, high=MAX_DELAY_SECONDS))
    # Keep the end of long errors: a traceback's last lines name the failure.
    error = error[-policy.max_error_chars :]
    return Fail(job_id=_check_id("job id", job_id), lease=_check_id("lease", lease), error=error,
                retry_in_seconds=retry_in_seconds, give_up=give_up)


def _expected(
    job_ids: Iterable[str], expect: Iterable[str], allowed: tuple[str, ...]
) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """Ids and their expected statuses (one per id), checked and without repeats."""
    pairs: dict[str, str] = {}
    ids, statuses = list(job_ids), list(expect)
    if len(ids) != len(statuses):
        raise ValidationError(f"expect needs one status per job id ({len(ids)} ids, {len(statuses)} statuses)")
    for job_id, status in zip(ids, statuses, strict=True):
        if status not in allowed:
            raise ValidationError(f"expected status must be one of {', '.join(allowed)}, got {status!r}")
        if pairs.setdefault(_check_id("job id", job_id), status) != status:
            raise ValidationError(f"job {job_id!r} is expected in two statuses")
    return tuple(pairs), tuple(pairs.values())


def _listed(
    job_ids: Iterable[str], expect: Iterable[str] | None, allowed: tuple[str, ...], what: str
) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """The ids an operator's action on jobs names (one id alone may be a str),
    checked and without repeats, and with ``expect`` their expected statuses
    (each one of ``allowed``), else ``()``. ValidationError names ``what``
    when there is none."""
    if isinstance(job_ids, str):
        job_ids = [job_ids]
    if expect is not None:
        ids, statuses = _expected(job_ids, expect, allowed)
    else:
        ids, statuses = tuple(dict.fromkeys(_check_id("job id", j) for j in job_ids)), ()
    if not ids:
        raise ValidationError(f"{what} needs at least one job id")
    return ids, statuses


def requeue_op(
    job_ids: Iterable[str], *, expect: Iterable[str] | None = None, per_second: float | None = None
) -> Requeue:
    """Requeue ``job_ids``: all or nothing, an unknown or pending id refuses
    the whole operation. With ``expect``, one status ("running" or "dead")
    per id, it is conditional instead: each job moves only if it is still in
    its expected status when the operation commits, the others are skipped
    (not refused), and the outcome lists the ids that moved. An operator's
    dry run uses this, so its run never acts on a job that changed since.

    With ``per_second`` (at most :data:`MAX_PACE_PER_SECOND`), the jobs that
    move are paced: the first is due at once, each next one ``1 /
    per_second`` seconds after the one before, in the order of ``job_ids``,
    so a redrive does not hand a recovering service every job at once. The
    last is due within :data:`~engine.policy.MAX_DELAY_SECONDS`, as any
    delayed job."""
    ids, statuses = _listed(job_ids, expect, ("running", "dead"), "requeue")
    if per_second is not None:
        per_second = float(_check_number("per_second", per_second, low=MIN_PACE_PER_SECOND,
                                         high=MAX_PACE_PER_SECOND))
        if (len(ids) - 1) / per_second > MAX_DELAY_SECONDS:
            raise ValidationError(f"at {per_second:g} a second, the last of {len(ids)} jobs would be due in more "
                                  f"than {MAX_DELAY_SECONDS / 86400:.0f} days: pace them faster")
    return Requeue(job_ids=ids, expect=statuses, per_second=per_second)


def stop_op(job_ids: Iterable[str], *, expect: Iterable[str] | None = None) -> Stop:
    """Stop the running jobs ``job_ids`` (to the dead letters, kept; see
    :class:`~engine.optypes.Stop`): all or nothing, an unknown id or a job
    that is not running refuses the whole operation. With ``expect``
    (``"running"`` per id) it is conditional instead, as a requeue's: a job
    no longer running when it commits is skipped, and the outcome lists the
    ids that were stopped."""
    ids, statuses = _listed(job_ids, expect, ("running",), "stop")
    return Stop(job_ids=ids, expect=statuses)


def make_due_op(job_ids: Iterable[str], *, expect: Iterable[str] | None = None) -> MakeDue:
    """Make the delayed pending jobs ``job_ids`` due now, each in its place
    (an operator's "Run now"; see :class:`~engine.optypes.MakeDue`): all or
    nothing, an unknown id or a job that is not pending refuses the whole
    operation; a pending job already due is left as it is. With ``expect``
    (``"pending"`` per id) it is conditional instead, as a requeue's: a job
    no longer pending when it commits is skipped. The outcome lists the ids
    made due."""
    ids, statuses = _listed(job_ids, expect, ("pending",), "run now")
    return MakeDue(job_ids=ids, expect=statuses)


def pause_op(queue: str, *, paused: bool = True) -> SetPaused:
    """Pause (``paused=True``) or resume (``paused=False``) one queue."""
    if not isinstance(paused, bool):
        raise ValidationError(f"paused must be true or false, got {paused!r}")
    return SetPaused(queue=check_queue(queue), paused=paused)


#: The highest concurrency limit a queue takes (a limit is for protecting a
#: downstream service; more than this is no limit).
MAX_RUNNING_LIMIT = 100_000


def limit_op(queue: str, max_running: int | None) -> SetLimit:
    """Limit ``queue`` to ``max_running`` jobs running at once (1 to
    :data:`MAX_RUNNING_LIMIT`), or remove its limit with None. Its outcome
    is the limit before."""
    if max_running is not None and (isinstance(max_running, bool) or not isinstance(max_running, int)
                                    or not 1 <= max_running <= MAX_RUNNING_LIMIT):
        raise ValidationError(f"max_running must be a whole number from 1 to {MAX_RUNNING_LIMIT}, or null for "
                              f"no limit, got {max_running!r}")
    return SetLimit(queue=check_queue(queue), max_running=max_running)


def rate_limit_op(queue: str, jobs: int | None, seconds: float | None = None) -> SetRateLimit:
    """Let at most ``jobs`` of ``queue``'s jobs start in each window of
    ``seconds`` (1 to :data:`~engine.rates.MAX_RATE_JOBS` jobs per
    :data:`~engine.rates.MIN_RATE_SECONDS` to
    :data:`~engine.rates.MAX_RATE_SECONDS` seconds), across every worker;
    ``jobs`` None (and no ``seconds``) removes the limit. Its outcome is the
    limit before, as ``{"jobs": ..., "seconds": ...}``, or None."""
    if jobs is None:
        if seconds is not None:
            raise ValidationError("a rate limit without jobs has no seconds: give both, or neither to remove it")
        return SetRateLimit(queue=check_queue(queue), jobs=None, seconds=None)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= MAX_RATE_JOBS:
        raise ValidationError(f"a rate limit's jobs must be a whole number from 1 to {MAX_RATE_JOBS}, got {jobs!r}")
    if (isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds)
            or not MIN_RATE_SECONDS <= seconds <= MAX_RATE_SECONDS):
        raise ValidationError(f"a rate limit's seconds must be a number from {MIN_RATE_SECONDS:g} to "
                              f"{MAX_RATE_SECONDS:g}, got {seconds!r}")
    return SetRateLimit(queue=check_queue(queue), jobs=jobs, seconds=float(seconds))


def forget_op(queue: str) -> ForgetQueue:
    """Forget the empty queue ``queue``: its line of counters and its paused
    flag leave the document. The emptiness check happens in the commit, so a
    job pushed after an operator's dry run makes the operation fail (with a
    ValidationError) instead of orphaning the job's counters. A later push
    to the queue starts it again from zero."""
    return ForgetQueue(queue=check_queue(queue))


def purge_op(
    job_ids: Iterable[str] | None = None, *, queue: str | None = None, status: str | None = None,
    expect: Iterable[str] | None = None, before_pos: int | None = None,
) -> Purge:
    """Purge ``job_ids`` (all or nothing: an unknown id refuses the whole
    operation), or every job of ``queue`` with ``status``. With ``expect``,
    one status per id, a purge by ids is conditional: each job goes only if
    it is still in its expected status when the operation commits, the others
    are skipped (not refused), and the outcome lists the removed ids.

    ``before_pos`` (format 2, with ``queue`` and status ``pending``) makes
    the purge of a queue's pending jobs conditional on an operator's dry run
    of it: pass the ``next_pos`` of the version the dry run counted. Only
    the queue's pending jobs with a smaller ``pos`` go, and each of those
    was pending, with that ``pos``, when the dry run counted (a job gets a
    new ``pos`` whenever it becomes pending again, a pos is never handed
    out twice, and a job refilled from a segment keeps its own): so the run
    removes at most what the dry run counted (I9), whatever was claimed,
    pushed, sealed, refilled or merged since. The queue's leading segment
    references whose jobs all lie below it are dropped (one commit,
    whatever their size); a segment that also holds later jobs is left,
    with the ones behind it. Its outcome is a :class:`PurgeOutcome`."""
    if before_pos is not None:
        if type(before_pos) is not int or before_pos < 0:
            raise ValidationError(f"before_pos must be an integer >= 0, got {before_pos!r}")
        if job_ids is not None or expect is not None or queue is None or status != "pending":
            raise ValidationError("before_pos goes with a queue and status pending, and no job ids")
        return Purge(queue=check_queue(queue), status="pending", before_pos=before_pos)
    if job_ids is not None:
        if queue is not None or status is not None:
            raise ValidationError("purge takes job ids, or a queue and a status, not both")
        if isinstance(job_ids, str):
            job_ids = [job_ids]
        if expect is not None:
            ids, statuses = _expected(job_ids, expect, ("pending", "running", "dead"))
        else:
            ids, statuses = tuple(dict.fromkeys(_check_id("job id", j) for j in job_ids)), ()
        if not ids:
            raise ValidationError("purge needs at least one job id")
        return Purge(job_ids=ids, expect=statuses)
    if expect is not None:
        raise ValidationError("expect goes with job ids")
    if queue is None or status not in ("pending", "running", "dead"):
        raise ValidationError("purge needs job ids, or a queue and a status of pending, running or dead")
    return Purge(queue=check_queue(queue), status=status)  # type: ignore[arg-type]
