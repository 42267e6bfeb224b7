"""The queue's transitions: functions of ``(state, operation, now)``.

They do no I/O and read no clock: ``now`` comes in as an argument, so tests
control time. Each transition either raises a :class:`~engine.errors.QueueError`
*before* changing anything, or applies its whole change and returns its
outcome. :func:`apply_batch` runs several operations on one state, isolating
each one's error from the others.

Ordering rules (I7): claims take pending jobs in FIFO order. A job that goes
back to pending — retried after ``fail``, returned by an expired lease, or
requeued — moves to the back of its queue.

A public module of the engine (see :mod:`engine`): the pure layer, for tests,
tools and simulations that drive a :class:`~engine.QueueState` directly.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import orjson

from engine.document import FORMAT_SEGMENTS, QueueState, encode_dead, encode_job
from engine.errors import JobNotFound, JobSealed, LeaseLost, QueueError, ValidationError
from engine.model import (
    Attempt,
    BrokerInfo,
    ClaimedJob,
    DeadLetter,
    FailOutcome,
    Job,
    Lease,
    decode_payload,
    new_lease_token,
)
from engine.ops import (
    Claim,
    Complete,
    Expire,
    Fail,
    ForgetQueue,
    GetJob,
    Heartbeat,
    Merge,
    Operation,
    Purge,
    PurgeOutcome,
    Push,
    Refill,
    Requeue,
    Seal,
    SetPaused,
    TakeOver,
    Tick,
)
from engine.policy import HISTORY_ATTEMPTS, HISTORY_ERROR_CHARS
from engine.segments import newest_first

__all__ = [
    "apply",
    "apply_batch",
    "claim",
    "complete",
    "expire",
    "fail",
    "forget_queue",
    "get_job",
    "heartbeat",
    "merge",
    "purge",
    "push",
    "refill",
    "requeue",
    "seal",
    "set_paused",
    "still_expected",
    "take_over",
    "tick",
]


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
    are not paused, oldest first. May be empty."""
    claimed: list[ClaimedJob] = []
    expires_at = now + timedelta(seconds=op.lease_seconds)
    queues = [q for q in op.queues if q not in state.queues or not state.queues[q].paused]
    for job in state.take_eligible(queues, op.max_jobs, now):
        lease = Lease(
            worker=op.worker,
            token=new_lease_token(),
            claimed_at=now,
            heartbeat_at=now,
            expires_at=expires_at,
            seconds=op.lease_seconds,
        )
        running = job._replace(status="running", attempts=job.attempts + 1, not_before=None, lease=lease)
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


def _leased(state: QueueState, job_id: str, token: str) -> Job:
    """The running job ``job_id`` if ``token`` is its current lease; raises otherwise."""
    job = state.jobs.get(job_id)
    if job is None:
        if job_id in state.dead:
            raise LeaseLost(job_id, "the job is in the dead letters")
        raise JobNotFound(job_id)
    if job.lease is None or job.lease.token != token:
        raise LeaseLost(job_id, "the lease expired or the job was handed to someone else")
    return job


def heartbeat(state: QueueState, op: Heartbeat, now: datetime) -> datetime:
    """Extend the lease by its length (or ``op.lease_seconds``); return the new deadline."""
    job = _leased(state, op.job_id, op.lease)
    assert job.lease is not None
    seconds = op.lease_seconds if op.lease_seconds is not None else job.lease.seconds
    expires_at = now + timedelta(seconds=seconds)
    lease = job.lease._replace(heartbeat_at=now, expires_at=expires_at, seconds=seconds)
    state.replace_job(job._replace(lease=lease))
    return expires_at


def complete(state: QueueState, op: Complete, now: datetime) -> None:
    """Finish the job: it leaves the document; ``completed`` is counted."""
    job = _leased(state, op.job_id, op.lease)
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
    job = _leased(state, op.job_id, op.lease)
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
        error = (
            f"lease expired: worker {job.lease.worker!r} stopped heartbeating "
            f"(last at {job.lease.heartbeat_at.isoformat()})"
        )
        state.counters(job.queue).failed += 1
        job = job._replace(history=_ended(job, "expired", now, error))
        if job.attempts >= job.max_attempts:
            _to_dead(state, job, error, now)
        else:
            state.add_job(job._replace(status="pending", lease=None, not_before=None, last_error=error))
        expired.append(job.id)
    return expired


def requeue(state: QueueState, op: Requeue, now: datetime) -> list[str]:
    """Move running or dead jobs back to pending, at the back of their queue.

    A running job keeps its attempt count (its lease is revoked; the old holder
    gets LeaseLost). A dead job starts over with zero attempts. All or nothing:
    an unknown or pending id refuses the whole operation. A conditional
    requeue (``op.expect``) instead skips every job not in its expected
    status. Returns the requeued ids.
    """
    if op.expect:
        # Never a pending job: requeueing it would only move it to the back.
        job_ids = [i for i in still_expected(state, op.job_ids, op.expect) if i not in state.jobs
                   or state.jobs[i].status != "pending"]
    else:
        job_ids = list(op.job_ids)
        for job_id in job_ids:
            job = state.jobs.get(job_id)
            if job is None and job_id not in state.dead:
                raise JobNotFound(job_id)
            if job is not None and job.status == "pending":
                raise ValidationError(f"job {job_id!r} is already pending")
    for job_id in job_ids:
        running = state.jobs.get(job_id)
        if running is not None:
            history = _ended(running, "requeued", now)
            state.add_job(running._replace(status="pending", lease=None, not_before=None, history=history))
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
                    last_error=dead.error,
                    history=dead.history,
                )
            )
    return job_ids


def purge(state: QueueState, op: Purge, now: datetime) -> list[str] | PurgeOutcome:
    """Remove jobs by id (pending, running or dead; all or nothing), or every
    job of one queue and status. A conditional purge (``op.expect``) skips
    every listed job not in its expected status. Returns the removed ids;
    a purge bounded by ``op.before_pos`` (see :func:`~engine.ops.purge_op`)
    returns a :class:`~engine.ops.PurgeOutcome`."""
    in_segments = 0
    kept_whole: str | None = None
    excised: list[str] = []
    if op.before_pos is not None:
        assert op.queue is not None
        ids, in_segments, kept_whole = _purge_before(state, op.queue, op.before_pos)
    elif op.job_ids:
        ids = _purge_ids(state, op)
        excised = _excise(state, op, now)  # after every check: from here on nothing refuses
    elif op.status == "dead":
        ids = [d.id for d in state.dead.values() if d.queue == op.queue]
    else:
        ids = [j.id for j in state.jobs.values() if j.queue == op.queue and j.status == op.status]
        if op.status == "pending" and op.queue in state.lanes:
            # The jobs in segments go with their references: one commit,
            # whatever the backlog. Their ids are not listed one by one.
            assert op.queue is not None
            dropped = state.drop_refs(op.queue)
            state.counters(op.queue).purged += sum(ref.remaining for ref in dropped)
    for job_id in ids:
        removed = state.remove_job(job_id) if job_id in state.jobs else state.remove_dead(job_id)
        state.add_finished(job_id, now)  # a retried push must not bring it back either
        state.counters(removed.queue).purged += 1
        state.departed("purged", removed, now)
    if op.before_pos is not None:
        return PurgeOutcome(ids=ids, in_segments=in_segments, kept_whole=kept_whole)
    return ids + excised


def _purge_ids(state: QueueState, op: Purge) -> list[str]:
    """The ids of a purge by ids to remove from the document (see
    :class:`~engine.ops.Purge`): every listed one (all or nothing) or, with
    ``expect``, those still in their expected status, less those its
    excisions remove from segments. Raises JobNotFound, or with ``seek``
    JobSealed naming every id that may be pending in a segment; changes
    nothing."""
    excised = {job.id for excision in op.excisions for job in excision.jobs}
    if op.seek and state.lanes:
        sought = op.job_ids if not op.expect else tuple(
            job_id for job_id, status in zip(op.job_ids, op.expect, strict=True) if status == "pending")
        missing = tuple(job_id for job_id in sought if job_id not in state.jobs and job_id not in state.dead
                        and job_id not in state.finished)
        if missing:
            raise JobSealed(missing[0], tuple(newest_first(state.lanes)), job_ids=missing)
    if op.expect:
        kept = [(job_id, status) for job_id, status in zip(op.job_ids, op.expect, strict=True)
                if job_id not in excised]
        return still_expected(state, tuple(j for j, _ in kept), tuple(s for _, s in kept))
    for job_id in op.job_ids:
        if job_id not in excised and job_id not in state.jobs and job_id not in state.dead:
            raise JobNotFound(job_id)
    return [job_id for job_id in op.job_ids if job_id not in excised]


def _excise(state: QueueState, op: Purge, now: datetime) -> list[str]:
    """Apply a purge's excisions (see :class:`~engine.ops.Excision`): swap
    each segment reference for its rewritten one (or drop it) and count its
    jobs as purged; returns their ids. Raises ValidationError, changing
    nothing, unless every reference is still there as planned."""
    if not op.excisions:
        return []
    for excision in op.excisions:
        if not any(ref.key == excision.key and ref.consumed == excision.consumed
                   for ref in state.lanes.get(excision.queue, ())) or any(
                job.id not in op.job_ids for job in excision.jobs) or (
                excision.ref is not None and excision.ref.total <= 0):
            raise ValidationError(f"the segment {excision.key} of queue {excision.queue!r} changed since "
                                  "the purge looked in it")
    if len({excision.key for excision in op.excisions}) != len(op.excisions):
        raise ValidationError("a purge names the same segment twice")
    removed: list[str] = []
    for excision in op.excisions:
        refs = state.lanes[excision.queue]
        # Found again by key: an excision before it may have dropped a reference and moved the rest.
        at = next(i for i, ref in enumerate(refs) if ref.key == excision.key)
        if excision.ref is None:
            del refs[at]
            if not refs:
                del state.lanes[excision.queue]
        else:
            refs[at] = excision.ref
        state.dropped_segments.append(excision.key)
        for job in excision.jobs:
            state.add_finished(job.id, now)  # a retried push must not bring it back
            state.counters(excision.queue).purged += 1
            state.departed("purged", job, now)
            removed.append(job.id)
    state.dirty = True
    return removed


def _purge_before(state: QueueState, queue: str, before_pos: int) -> tuple[list[str], int, str | None]:
    """The pos-bounded part of a purge (see :func:`~engine.ops.purge_op`):
    drops the queue's leading segment references that hold only jobs below
    ``before_pos`` (counting their jobs as purged), and returns the ids of
    the queue's pending jobs in the document below it (for the caller to
    remove), how many jobs left with the references, and the key of the
    next reference if it holds jobs on both sides of the bound (left whole)."""
    ids = [job_id for job_id, job in state.jobs.items()
           if job.queue == queue and job.status == "pending" and state.pos[job_id] < before_pos]
    refs = state.lanes.get(queue, [])
    lead = 0
    # References are in pos order: the ones wholly below the bound lead.
    while lead < len(refs) and refs[lead].last_pos < before_pos:
        lead += 1
    straddling = refs[lead] if lead < len(refs) and refs[lead].front < before_pos else None
    dropped = state.drop_refs(queue, lead) if lead else []
    in_segments = sum(ref.remaining for ref in dropped)
    if in_segments:
        state.counters(queue).purged += in_segments
    return ids, in_segments, straddling.key if straddling is not None else None


def still_expected(state: QueueState, job_ids: tuple[str, ...], expect: tuple[str, ...]) -> list[str]:
    """The ids whose job is in the document in its expected status (each
    id's status is ``expect`` at the same position)."""
    def status(job_id: str) -> str | None:
        job = state.jobs.get(job_id)
        return job.status if job is not None else ("dead" if job_id in state.dead else None)

    return [job_id for job_id, want in zip(job_ids, expect, strict=True) if status(job_id) == want]


def set_paused(state: QueueState, op: SetPaused, now: datetime) -> bool:
    """Set the queue's paused flag; returns whether it was paused before."""
    counters = state.counters(op.queue)
    was = counters.paused
    counters.paused = op.paused
    state.dirty = True
    return was


def forget_queue(state: QueueState, op: ForgetQueue, now: datetime) -> bool:
    """Remove the queue's entry (counters and paused flag) from the document;
    returns False if it had none (already forgotten, or never used). Raises
    ValidationError, changing nothing, if any job or dead letter of the
    queue is in the document: its counters are still in use."""
    # A scan, not an index: forgetting is a rare operator action, and a hit stops it early.
    queue = op.queue
    if (queue in state.lanes or any(j.queue == queue for j in state.jobs.values())
            or any(d.queue == queue for d in state.dead.values())):
        held = sum(1 for j in state.jobs.values() if j.queue == queue)
        held += sum(ref.remaining for ref in state.lanes.get(queue, ()))
        held += sum(1 for d in state.dead.values() if d.queue == queue)
        raise ValidationError(
            f"queue {op.queue!r} is not empty: it holds {held} job{'' if held == 1 else 's'} "
            "(pending, running or dead), and only an empty queue can be forgotten"
        )
    if state.queues.pop(op.queue, None) is None:
        return False
    state.dirty = True
    return True


def get_job(state: QueueState, op: GetJob, now: datetime) -> dict[str, Any]:
    """The job as the document shows it, with ``status`` pending, running or
    dead, and without its lease token (a secret of the lease holder)."""
    job = state.jobs.get(op.job_id)
    if job is not None:
        view = orjson.loads(encode_job(job))
        if view["lease"] is not None:
            del view["lease"]["token"]
        return view  # type: ignore[no-any-return]
    dead = state.dead.get(op.job_id)
    if dead is None:
        if state.lanes and op.job_id not in state.finished:
            # It may be pending in a segment (not if it finished recently:
            # the common answer to a client polling its job until done). The
            # caller looks (never on the writer thread), newest first: a job
            # sealed recently sits in a recent segment, or in one merged from
            # it since; older ones are found through the merged segments' id
            # indexes (engine.idindex).
            raise JobSealed(op.job_id, tuple(newest_first(state.lanes)))
        raise JobNotFound(op.job_id)
    view = orjson.loads(encode_dead(dead))
    view["status"] = "dead"
    return view  # type: ignore[no-any-return]


def tick(state: QueueState, op: Tick, now: datetime) -> int:
    """Force a commit. Returns the sequence number the commit will have."""
    state.dirty = True
    return state.seq + 1


def take_over(state: QueueState, op: TakeOver, now: datetime) -> int:
    """Name a new leader and return its epoch.

    The new leader cannot trust the old leader's clock, so every running lease
    is renewed for its full length from ``now``: no lease is reclaimed early.
    """
    if state.broker.epoch != op.epoch:
        raise ValidationError(f"the broker epoch changed from {op.epoch} to {state.broker.epoch}")
    state.broker = BrokerInfo(id=op.broker_id, url=op.url, epoch=op.epoch + 1)
    for job in [j for j in state.jobs.values() if j.lease is not None]:
        assert job.lease is not None
        lease = job.lease._replace(expires_at=now + timedelta(seconds=job.lease.seconds))
        state.replace_job(job._replace(lease=lease))
    state.dirty = True
    return state.broker.epoch


def seal(state: QueueState, op: Seal, now: datetime) -> int:
    """Replace ``op.jobs`` by the segment reference ``op.ref`` (see
    :class:`~engine.ops.Seal`); returns how many jobs moved. Raises
    ValidationError, changing nothing, when the queue moved on since the
    segment was written: the caller deletes the unused object."""
    if state.format != FORMAT_SEGMENTS:
        raise ValidationError("the document is not in format 2")
    refs = state.lanes.get(op.queue, [])
    last = refs[-1] if refs else None
    if (last.key if last is not None else None) != op.after:
        raise ValidationError(f"the segments of queue {op.queue!r} changed since the seal began")
    if not op.jobs or (last is not None and op.jobs[0][1] <= last.last_pos):
        raise ValidationError("a segment must follow the queue's last one")
    for job_id, pos in op.jobs:
        job = state.jobs.get(job_id)
        if (job is None or job.queue != op.queue or job.status != "pending" or job.not_before is not None
                or state.pos[job_id] != pos):
            raise ValidationError(f"job {job_id!r} changed since the seal began")
    if op.parts and (len(op.parts) != len(op.jobs) or any(
            state.encoded_job(job_id) != part for (job_id, _), part in zip(op.jobs, op.parts, strict=False))):
        raise ValidationError(f"a job of queue {op.queue!r} changed since the seal began")
    for job_id, _ in op.jobs:
        state.remove_job(job_id)
        state.sealed.add(job_id, now)
    state.lanes.setdefault(op.queue, []).append(op.ref)
    state.tidy_ready(op.queue)
    state.dirty = True
    return len(op.jobs)


def refill(state: QueueState, op: Refill, now: datetime) -> int:
    """Move the next jobs of the queue's first segment back into the
    document (see :class:`~engine.ops.Refill`); returns how many came back.
    Raises ValidationError, changing nothing, if the segment moved on.

    A job whose id is in the document already (a push reused the id after
    it left the ``sealed`` window) stays in the document as it is; the copy
    from the segment, the older, is counted as purged. So is a copy whose id
    is in the ``finished`` window: the other job with that id (pushed while
    this one sat in a segment) has run already."""
    refs = state.lanes.get(op.queue)
    if not refs or refs[0].key != op.key or refs[0].consumed != op.consumed:
        raise ValidationError(f"the first segment of queue {op.queue!r} changed since the refill began")
    ref = refs[0]
    restored = 0
    for job, pos in op.jobs:
        # ``finished``: both copies were in segments (the re-push was sealed
        # too), the first one came back and ran; without this check the id
        # ran twice.
        if job.id in state.jobs or job.id in state.dead or job.id in state.finished:
            state.counters(op.queue).purged += 1
            state.departed("purged", job, now)
            continue
        state.restore_job(job, pos)
        restored += 1
    consumed = op.consumed + len(op.jobs)
    if consumed >= ref.total or op.front is None or op.oldest is None:
        state.drop_refs(op.queue, 1)
    else:
        refs[0] = ref._replace(consumed=consumed, front=op.front, oldest_enqueued_at=op.oldest)
    state.dirty = True
    return restored


def merge(state: QueueState, op: Merge, now: datetime) -> int:
    """Replace the adjacent references ``op.keys`` by ``op.ref`` (see
    :class:`~engine.ops.Merge`); returns how many references went. Raises
    ValidationError, changing nothing, if they changed meanwhile."""
    refs = state.lanes.get(op.queue, [])
    keys = [ref.key for ref in refs]
    try:
        start = keys.index(op.keys[0]) if op.keys else -1
    except ValueError:
        start = -1
    run = refs[start:start + len(op.keys)] if start >= 0 else []
    if (len(op.keys) < 2 or [ref.key for ref in run] != list(op.keys) or any(ref.consumed for ref in run)
            or op.ref.total != sum(ref.total for ref in run) or op.ref.front != run[0].front
            or op.ref.last_pos != run[-1].last_pos):
        raise ValidationError(f"the segments of queue {op.queue!r} changed since the merge began")
    refs[start:start + len(run)] = [op.ref]
    state.dropped_segments.extend(op.keys)
    state.dirty = True
    return len(run)


_TRANSITIONS: dict[type, Any] = {
    Push: push,
    Claim: claim,
    Heartbeat: heartbeat,
    Complete: complete,
    Fail: fail,
    Expire: expire,
    Requeue: requeue,
    Purge: purge,
    SetPaused: set_paused,
    ForgetQueue: forget_queue,
    GetJob: get_job,
    Tick: tick,
    TakeOver: take_over,
    Seal: seal,
    Refill: refill,
    Merge: merge,
}


def apply(state: QueueState, op: Operation, now: datetime) -> Any:
    """Apply one operation; returns its outcome or raises QueueError (state unchanged)."""
    return _TRANSITIONS[type(op)](state, op, now)


def apply_batch(state: QueueState, ops: list[Operation], now: datetime) -> list[Any]:
    """Expire due leases and prune the dedup window, then apply ``ops`` in
    order. Each entry of the result is the operation's outcome, or the
    QueueError it raised; one operation's error never affects the others."""
    expire(state, None, now)
    # Pruning alone does not make the state dirty: an idle node must not
    # write for it (I11); the next commit carries it.
    policy = state.policy
    state.finished.prune(now, max_ids=policy.dedup_window_ids, max_seconds=policy.dedup_window_seconds)
    state.sealed.prune(now, max_ids=policy.dedup_window_ids, max_seconds=policy.dedup_window_seconds)
    if policy.segment_jobs > 0 and state.format != FORMAT_SEGMENTS:
        state.upgrade()  # a node with segments on writes format 2 from its first commit
    results: list[Any] = []
    for op in ops:
        try:
            results.append(apply(state, op, now))
        except QueueError as exc:
            results.append(exc)
    return results
