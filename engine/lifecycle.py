"""The job transitions: a job's life in the document, from push to claim,
heartbeat, completion, failure (retry or dead letter), lease expiry and
requeue. Functions of ``(state, operation, now)``, like every transition
(see :mod:`engine.transitions`, which applies them and re-exports them).

Ordering rules (I7): claims take pending jobs in FIFO order. A job that goes
back to pending — retried after ``fail``, returned by an expired lease, or
requeued — moves to the back of its queue.

Split from :mod:`engine.transitions`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from engine.document import QueueState
from engine.errors import JobNotFound, LeaseLost, QueueError, ValidationError
from engine.model import (
    Attempt,
    ClaimedJob,
    DeadLetter,
    FailOutcome,
    Job,
    Lease,
    decode_payload,
    new_lease_token,
)
from engine.optypes import Claim, Complete, Expire, Fail, Heartbeat, Push, QueueScope, Requeue, Stop
from engine.policy import HISTORY_ATTEMPTS, HISTORY_ERROR_CHARS
from engine.purging import status_of, still_expected

__all__ = ["claim", "complete", "expire", "fail", "heartbeat", "lease_problem", "push", "requeue"]


def push(state: QueueState, op: Push, now: datetime) -> list[str]:
    """Append the jobs at the back of ``op.queue``. A job whose id is already
    in the document, or left it within the dedup window, is left as it is and
    its id answered all the same (pushes are idempotent by id)."""
    jobs, dead, finished, sealed, queue = state.jobs, state.dead, state.finished, state.sealed, op.queue
    for new in op.jobs:
        if new.id in jobs or new.id in dead or new.id in finished or new.id in sealed:
            continue
        counters = state.counters(queue)
        not_before = now + timedelta(seconds=new.delay_seconds) if new.delay_seconds > 0 else None
        # Job(id=..., queue=..., ...) in field order, without the keyword-argument
        # __new__ (every push builds one).
        fields = (new.id, queue, new.payload, "pending", 0, new.max_attempts, now, not_before, None, None, ())
        state.add_job(tuple.__new__(Job, fields))
        counters.pushed += 1
    return [new.id for new in op.jobs]


def claim(state: QueueState, op: Claim, now: datetime) -> list[ClaimedJob]:
    """Lease up to ``op.max_jobs`` eligible pending jobs of the queues that
    are not paused, oldest first (with ``op.in_order``, the first queue's
    first), within their concurrency and rate limits (the starts count
    against the rate limits' windows). May be empty."""
    claimed: list[ClaimedJob] = []
    expires_at = now + timedelta(seconds=op.lease_seconds)
    queues = [q for q in op.queues if q not in state.queues or not state.queues[q].paused]
    taken = state.take_eligible(queues, op.max_jobs, now, in_order=op.in_order)
    rated = [q for q in queues if q in state.queues and state.queues[q].rate_limit is not None]
    if rated and taken:  # most claims: no rate limit, nothing to count
        for queue in rated:
            state.note_starts(queue, sum(1 for job in taken if job.queue == queue), now)
    worker, seconds = op.worker, op.lease_seconds
    for job in taken:
        # Lease(worker=..., ...) and job._replace(status="running", ...), in
        # field order, without keyword arguments (every claimed job builds both).
        lease = tuple.__new__(Lease, (worker, new_lease_token(), now, now, expires_at, seconds))
        running = tuple.__new__(Job, (*job[:3], "running", job.attempts + 1, *job[5:7], None, lease, *job[9:]))
        state.replace_job(running)
        claimed.append(
            ClaimedJob(
                id=job.id,
                queue=job.queue,
                payload=decode_payload(job.payload),
                attempt=running.attempts,
                lease=lease.token,
                lease_expires_at=expires_at,
            )
        )
    return claimed


def _leased(state: QueueState, job_id: str, token: str, scope: QueueScope | None = None) -> Job:
    """The running job ``job_id`` if ``token`` is its current lease; raises
    otherwise: JobNotFound if no job has this id, or if ``scope`` rejects its
    queue (so that a caller confined to some queues cannot tell another
    queue's job from none); else LeaseLost."""
    job = state.jobs.get(job_id)
    if job is None:
        dead = state.dead.get(job_id)
        if dead is not None and (scope is None or scope(dead.queue)):
            raise LeaseLost(job_id, "the job is in the dead letters")
        raise JobNotFound(job_id)
    if scope is not None and not scope(job.queue):
        raise JobNotFound(job_id)
    if job.lease is None or job.lease.token != token:
        raise LeaseLost(job_id, "the lease expired or the job was handed to someone else")
    return job


def lease_problem(state: QueueState, job_id: str, token: str, scope: QueueScope | None = None) -> QueueError | None:
    """Why ``token`` is not the current lease of job ``job_id`` in ``state``
    (the LeaseLost or JobNotFound a heartbeat would raise), or None if it
    is. Reads ``state`` only."""
    try:
        _leased(state, job_id, token, scope)
    except QueueError as exc:
        return exc
    return None


def heartbeat(state: QueueState, op: Heartbeat, now: datetime) -> datetime:
    """Extend the lease by its length (or ``op.lease_seconds``); return the new deadline."""
    job = _leased(state, op.job_id, op.lease, op.scope)
    assert job.lease is not None
    seconds = op.lease_seconds if op.lease_seconds is not None else job.lease.seconds
    expires_at = now + timedelta(seconds=seconds)
    lease = job.lease._replace(heartbeat_at=now, expires_at=expires_at, seconds=seconds)
    state.replace_job(job._replace(lease=lease))
    return expires_at


def complete(state: QueueState, op: Complete, now: datetime) -> None:
    """Finish the job: it leaves the document; ``completed`` is counted."""
    job = _leased(state, op.job_id, op.lease, op.scope)
    state.remove_job(job.id)
    state.add_finished(job.id, now)
    state.counters(job.queue).completed += 1
    state.departed("completed", job, now)


def _ended(job: Job, end: str, now: datetime, error: str | None = None) -> tuple[Attempt, ...]:
    """``job``'s history with its running attempt appended as ended by ``end``."""
    assert job.lease is not None
    attempt = Attempt(
        worker=job.lease.worker,
        claimed_at=job.lease.claimed_at,
        heartbeat_at=job.lease.heartbeat_at,
        ended_at=now,
        end=end,  # type: ignore[arg-type]
        error=error[-HISTORY_ERROR_CHARS:] if error is not None else None,
    )
    return (*job.history, attempt)[-HISTORY_ATTEMPTS:]


def _to_dead(state: QueueState, job: Job, error: str, now: datetime) -> None:
    state.remove_job(job.id)
    state.add_dead(
        DeadLetter(
            id=job.id,
            queue=job.queue,
            payload=job.payload,
            attempts=job.attempts,
            max_attempts=job.max_attempts,
            enqueued_at=job.enqueued_at,
            died_at=now,
            error=error,
            history=job.history,
        )
    )
    state.counters(job.queue).dead += 1


def fail(state: QueueState, op: Fail, now: datetime) -> FailOutcome:
    """Record a failed attempt: retry later at the back of the queue, or
    dead-letter the job once its attempts reach ``max_attempts`` (or at once
    with ``op.give_up``)."""
    job = _leased(state, op.job_id, op.lease, op.scope)
    state.counters(job.queue).failed += 1
    job = job._replace(history=_ended(job, "failed", now, op.error))
    if op.give_up or job.attempts >= job.max_attempts:
        _to_dead(state, job, op.error, now)
        return FailOutcome(status="dead")
    delay = op.retry_in_seconds if op.retry_in_seconds is not None else state.policy.backoff(job.attempts)
    not_before = now + timedelta(seconds=delay) if delay > 0 else None
    state.add_job(job._replace(status="pending", lease=None, not_before=not_before, last_error=op.error))
    return FailOutcome(status="pending", not_before=not_before)


def expire(state: QueueState, op: Expire | None, now: datetime) -> list[str]:
    """Return every lease past its deadline: the job goes back to pending at the
    back of its queue, or to the dead letters if its attempts are used up."""
    expired: list[str] = []
    for job in list(state.pop_expired(now)):
        assert job.lease is not None
        # The time as people read it everywhere else (the dashboard, queuestatus): to the millisecond, in UTC.
        last = job.lease.heartbeat_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        error = f"lease expired: worker {job.lease.worker!r} stopped heartbeating (last at {last} UTC)"
        state.counters(job.queue).failed += 1
        state.revoke(job)
        job = job._replace(history=_ended(job, "expired", now, error))
        if job.attempts >= job.max_attempts:
            _to_dead(state, job, error, now)
        else:
            state.add_job(job._replace(status="pending", lease=None, not_before=None, last_error=error))
        expired.append(job.id)
    return expired


def _status_of(state: QueueState, job_id: str) -> str:
    """:func:`~engine.purging.status_of`, raising JobNotFound for a job the
    document does not hold."""
    status = status_of(state, job_id)
    if status is None:
        raise JobNotFound(job_id)
    return status


#: The error of a job an operator stopped (:func:`stop`): its dead letter's,
#: and its last attempt's, which is recorded as failed (an attempt's end is
#: one of "failed", "expired", "requeued": a new one would be a format change).
STOPPED_ERROR = "JobStopped: stopped by an operator"


def stop(state: QueueState, op: Stop, now: datetime) -> list[str]:
    """Stop running jobs: revoke each one's lease (its worker is told once
    this lands, and its later result is refused) and move it to the dead
    letters, whatever attempts it had left, with :data:`STOPPED_ERROR`.
    All or nothing: an unknown id, or a job that is not running, refuses
    the whole operation. A conditional stop (``op.expect``) instead skips
    every job no longer running. Returns the stopped ids."""
    if op.expect:
        job_ids = still_expected(state, op.job_ids, op.expect)
    else:
        job_ids = list(op.job_ids)
        for job_id in job_ids:
            if (status := _status_of(state, job_id)) != "running":
                raise ValidationError(f"job {job_id!r} is {status}: only a running job can be stopped")
    for job_id in job_ids:
        job = state.jobs[job_id]
        state.counters(job.queue).failed += 1
        state.revoke(job)
        _to_dead(state, job._replace(history=_ended(job, "failed", now, STOPPED_ERROR)), STOPPED_ERROR, now)
    return job_ids


def requeue(state: QueueState, op: Requeue, now: datetime) -> list[str]:
    """Move running or dead jobs back to pending, at the back of their queue.

    A running job keeps its attempt count (its lease is revoked; the old holder
    gets LeaseLost). A dead job starts over with zero attempts. All or nothing:
    an unknown or pending id refuses the whole operation. A conditional
    requeue (``op.expect``) instead skips every job not in its expected
    status. A paced one (``op.per_second``) makes the jobs that move due one
    after another, in order, the first at once; a job not yet due never
    holds back the jobs behind it. Returns the requeued ids.
    """
    if op.expect:
        # Never a pending job: requeueing it would only move it to the back.
        job_ids = [i for i in still_expected(state, op.job_ids, op.expect) if i not in state.jobs
                   or state.jobs[i].status != "pending"]
    else:
        job_ids = list(op.job_ids)
        for job_id in job_ids:
            if _status_of(state, job_id) == "pending":
                raise ValidationError(f"job {job_id!r} is already pending")
    for i, job_id in enumerate(job_ids):
        # Paced: the i-th job that moves is due i / per_second from now (the first at once).
        not_before = now + timedelta(seconds=i / op.per_second) if op.per_second is not None and i else None
        running = state.jobs.get(job_id)
        if running is not None:
            state.revoke(running)
            history = _ended(running, "requeued", now)
            state.add_job(running._replace(status="pending", lease=None, not_before=not_before, history=history))
        else:
            dead = state.remove_dead(job_id)
            state.add_job(
                Job(
                    id=dead.id,
                    queue=dead.queue,
                    payload=dead.payload,
                    status="pending",
                    attempts=0,
                    max_attempts=dead.max_attempts,
                    enqueued_at=dead.enqueued_at,
                    not_before=not_before,
                    last_error=dead.error,
                    history=dead.history,
                )
            )
    return job_ids
