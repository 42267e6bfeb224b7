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

This module applies the operations (:func:`apply`, :func:`apply_batch`) and
holds the transitions of queues and of leadership (pause, forget, get_job,
tick, take_over). The job transitions (push, claim, heartbeat, complete,
fail, expire, requeue, stop) are in :mod:`engine.lifecycle`, the purge in
:mod:`engine.purging`, the lane transitions (seal, refill, merge) in
:mod:`engine.lanemoves` and the delayed ones (format 3) in
:mod:`engine.delaymoves`; every one is re-exported here.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import orjson

from engine.delaymoves import merge_delayed, refill_delayed, seal_delayed
from engine.document import QueueState
from engine.duenow import make_due
from engine.encoding import encode_dead, encode_job
from engine.errors import JobNotFound, JobSealed, QueueError, ValidationError
from engine.lanemoves import merge, refill, seal
from engine.lifecycle import claim, complete, expire, fail, heartbeat, push, requeue, stop
from engine.model import BrokerInfo
from engine.optypes import (
    Claim,
    Complete,
    Expire,
    Fail,
    FireSchedules,
    ForgetQueue,
    ForgetSchedule,
    GetJob,
    HandOver,
    Heartbeat,
    MakeDue,
    Merge,
    MergeDelayed,
    Operation,
    Purge,
    Push,
    Refill,
    RefillDelayed,
    Requeue,
    Seal,
    SealDelayed,
    SetLimit,
    SetPaused,
    SetRateLimit,
    SetSchedulePaused,
    Stop,
    TakeOver,
    Tick,
)
from engine.purging import purge, still_expected
from engine.rates import RateLimit
from engine.schedulemoves import fire_schedules, forget_schedule, set_schedule_paused
from engine.segments import newest_first

__all__ = [
    "apply",
    "apply_batch",
    "claim",
    "complete",
    "expire",
    "fail",
    "fire_schedules",
    "forget_queue",
    "get_job",
    "heartbeat",
    "merge",
    "merge_delayed",
    "purge",
    "push",
    "refill",
    "refill_delayed",
    "requeue",
    "seal",
    "seal_delayed",
    "set_limit",
    "set_paused",
    "set_rate_limit",
    "still_expected",
    "stop",
    "take_over",
    "tick",
]


def set_paused(state: QueueState, op: SetPaused, now: datetime) -> bool:
    """Set the queue's paused flag; returns whether it was paused before."""
    counters = state.counters(op.queue)
    was = counters.paused
    counters.paused = op.paused
    state.dirty = True
    return was


def set_limit(state: QueueState, op: SetLimit, now: datetime) -> int | None:
    """Set the queue's concurrency limit; returns the limit before (None: none)."""
    counters = state.counters(op.queue)
    was = counters.max_running
    if was != op.max_running:
        counters.max_running = op.max_running
        state.dirty = True
    return was


def set_rate_limit(state: QueueState, op: SetRateLimit, now: datetime) -> dict[str, Any] | None:
    """Set or remove the queue's rate limit; returns the limit before as
    ``{"jobs", "seconds"}`` (None: none). A new rate keeps the open window's
    starts."""
    counters = state.counters(op.queue)
    was = counters.rate_limit
    before = None if was is None else {"jobs": was.jobs, "seconds": was.seconds}
    if before == ({"jobs": op.jobs, "seconds": op.seconds} if op.jobs is not None else None):
        return before  # as asked already
    if op.jobs is None or op.seconds is None:
        counters.rate_limit = None
    elif was is None:
        counters.rate_limit = RateLimit(jobs=op.jobs, seconds=op.seconds)
    else:
        counters.rate_limit = replace(was, jobs=op.jobs, seconds=op.seconds)
    state.dirty = True
    return before


def forget_queue(state: QueueState, op: ForgetQueue, now: datetime) -> bool:
    """Remove the queue's entry (counters and paused flag) from the document;
    returns False if it had none (already forgotten, or never used). Raises
    ValidationError, changing nothing, if any job or dead letter of the
    queue is in the document: its counters are still in use."""
    # A scan, not an index: forgetting is a rare operator action, and a hit stops it early.
    queue = op.queue
    if (queue in state.lanes or queue in state.delays or any(j.queue == queue for j in state.jobs.values())
            or any(d.queue == queue for d in state.dead.values())):
        held = sum(1 for j in state.jobs.values() if j.queue == queue)
        held += sum(ref.remaining for ref in state.lanes.get(queue, ())) + state.delayed_away(queue)
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
        if (state.lanes or state.delays) and op.job_id not in state.finished:
            # It may be pending in a segment (not if it finished recently:
            # the common answer to a client polling its job until done). The
            # caller looks (never on the writer thread), newest first: a job
            # sealed recently sits in a recent segment, or in one merged from
            # it since; older ones are found through the merged segments' id
            # indexes (engine.idindex).
            raise JobSealed(op.job_id, tuple(newest_first(state.lanes, state.delays)))
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
    is renewed for its full length from ``now``: no lease is reclaimed early;
    and a rate window that starts in its future starts at ``now``: no queue
    is held longer than one window (:meth:`~engine.rates.RateLimit.taken_over`).
    """
    if state.broker.epoch != op.epoch:
        raise ValidationError(f"the broker epoch changed from {op.epoch} to {state.broker.epoch}")
    state.broker = BrokerInfo(id=op.broker_id, url=op.url, epoch=op.epoch + 1)
    for job in [j for j in state.jobs.values() if j.lease is not None]:
        assert job.lease is not None
        lease = job.lease._replace(expires_at=now + timedelta(seconds=job.lease.seconds))
        state.replace_job(job._replace(lease=lease))
    _windows_from(state, now)
    state.dirty = True
    return state.broker.epoch


def hand_over(state: QueueState, op: HandOver, now: datetime) -> None:
    """Name no leader, keeping the epoch (the next TakeOver raises it).

    Leases keep their deadlines: the next leader renews them as it takes
    over, like any takeover's. Refused unless ``op.broker_id`` leads at
    ``op.epoch``, so a replaced leader cannot undo its successor's takeover."""
    named = state.broker
    if named.id != op.broker_id or named.epoch != op.epoch:
        raise ValidationError(
            f"broker {op.broker_id} (epoch {op.epoch}) does not lead: "
            f"the document names {named.id} (epoch {named.epoch})"
        )
    state.broker = BrokerInfo(epoch=named.epoch)
    state.dirty = True


def _windows_from(state: QueueState, now: datetime) -> bool:
    """Start every rate window that starts after ``now`` at ``now``, keeping
    its count (:meth:`~engine.rates.RateLimit.taken_over`): the clock
    committing reads earlier than the one that opened it. Returns whether
    one moved (the state is then dirty)."""
    moved = False
    for counters in state.queues.values():
        limit = counters.rate_limit
        if limit is not None and (taken := limit.taken_over(now)) is not limit:
            counters.rate_limit = taken
            state.dirty = moved = True
    return moved


def clock_behind(state: QueueState, now: datetime) -> int:
    """Bring the state's deadlines within their lengths of ``now``, a time
    earlier than one the state was already stamped with: the committing
    clock stepped back (an NTP step, a VM restored), or reads behind the
    clock of the node that wrote the version. Returns how many leases moved.

    Without it, a lease stamped on the later clock would outlive its length
    by the difference (a dead worker's job held that much longer), and a
    rate window opened on it would hold its queue as long. So, as a takeover
    does (:func:`take_over`): a running lease expires at most its full
    length from ``now`` (it never gets less), and a rate window that starts
    after ``now`` starts at ``now``, keeping its count. Due times (delayed
    pushes, retry backoffs) and schedule marks keep the clock that stamped
    them: a job due later stays due later, and a tick already handled does
    not fire again (docs/format.md, "Clocks")."""
    moved = 0
    for job in [j for j in state.jobs.values() if j.lease is not None]:
        lease = job.lease
        assert lease is not None
        latest = now + timedelta(seconds=lease.seconds)
        if lease.expires_at > latest:
            state.replace_job(job._replace(lease=lease._replace(expires_at=latest)))
            moved += 1  # (replace_job marks the state dirty)
    _windows_from(state, now)
    return moved


_TRANSITIONS: dict[type, Any] = {
    Push: push,
    Claim: claim,
    Heartbeat: heartbeat,
    Complete: complete,
    Fail: fail,
    Expire: expire,
    Requeue: requeue,
    Stop: stop,
    MakeDue: make_due,
    Purge: purge,
    SetPaused: set_paused,
    SetLimit: set_limit,
    SetRateLimit: set_rate_limit,
    ForgetQueue: forget_queue,
    GetJob: get_job,
    Tick: tick,
    FireSchedules: fire_schedules,
    SetSchedulePaused: set_schedule_paused,
    ForgetSchedule: forget_schedule,
    TakeOver: take_over,
    HandOver: hand_over,
    Seal: seal,
    Refill: refill,
    Merge: merge,
    SealDelayed: seal_delayed,
    RefillDelayed: refill_delayed,
    MergeDelayed: merge_delayed,
}


def apply(state: QueueState, op: Operation, now: datetime) -> Any:
    """Apply one operation; returns its outcome or raises QueueError (state unchanged)."""
    return _TRANSITIONS[type(op)](state, op, now)


def apply_batch(state: QueueState, ops: list[Operation], now: datetime) -> list[Any]:
    """Expire due leases and prune the dedup window, then apply ``ops`` in
    order. Each entry of the result is the operation's outcome, or the
    QueueError it raised; one operation's error never affects the others."""
    if state.clock_mark is not None and now < state.clock_mark:
        clock_behind(state, now)
    state.clock_mark = now
    expire(state, None, now)
    # Pruning alone does not make the state dirty: an idle node must not
    # write for it (I11); the next commit carries it.
    policy = state.policy
    state.finished.prune(now, max_ids=policy.dedup_window_ids, max_seconds=policy.dedup_window_seconds)
    state.sealed.prune(now, max_ids=policy.dedup_window_ids, max_seconds=policy.dedup_window_seconds)
    if policy.segment_jobs > 0 and not state.segmented:
        state.upgrade()  # a node with segments on writes format 2 from its first commit
    results: list[Any] = []
    for op in ops:
        try:
            results.append(apply(state, op, now))
        except QueueError as exc:
            results.append(exc)
    return results
