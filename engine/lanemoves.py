"""The lane transitions (format 2): the leader's commits that move pending
jobs between the document and segment objects. :func:`seal` swaps a run of
a queue's pending jobs for the reference to a segment already written with
them, :func:`refill` brings the next jobs of its first segment back, and
:func:`merge` swaps adjacent references for one merged segment. Each is
refused, changing nothing, if the queue moved on since the lane keeper
(:mod:`engine.lanes`) planned it.

Functions of ``(state, operation, now)``, like every transition (see
:mod:`engine.transitions`, which applies them and re-exports them). Split
from :mod:`engine.transitions`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from engine.document import QueueState
from engine.errors import ValidationError
from engine.model import Job
from engine.optypes import Merge, Refill, Seal

__all__ = ["merge", "refill", "restore_from_segment", "seal"]


def seal(state: QueueState, op: Seal, now: datetime) -> int:
    """Replace ``op.jobs`` by the segment reference ``op.ref`` (see
    :class:`~engine.ops.Seal`); returns how many jobs moved. Raises
    ValidationError, changing nothing, when the queue moved on since the
    segment was written: the caller deletes the unused object."""
    if not state.segmented:
        raise ValidationError("the document is not in format 2 or 3")
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
    restored = restore_from_segment(state, op.queue, op.jobs, now)
    consumed = op.consumed + len(op.jobs)
    if consumed >= ref.total or op.front is None or op.oldest is None:
        state.drop_refs(op.queue, 1)
    else:
        refs[0] = ref._replace(consumed=consumed, front=op.front, oldest_enqueued_at=op.oldest)
    state.dirty = True
    return restored


def restore_from_segment(state: QueueState, queue: str, jobs: Iterable[tuple[Job, int]], now: datetime) -> int:
    """Put ``jobs`` (``(job, pos)``, read from a segment of ``queue``, pending
    or delayed) back into the document at their ``pos``; returns how many
    came back. A job whose id is in the document, the dead letters or the
    ``finished`` window stays out, counted as purged: the other job with
    that id (pushed again after this one left the ``sealed`` window) is the
    newer. (``finished``: both copies were in segments, the re-push was
    sealed too, and the first one came back and ran; without this check the
    id ran twice.)"""
    restored = 0
    for job, pos in jobs:
        if job.id in state.jobs or job.id in state.dead or job.id in state.finished:
            state.counters(queue).purged += 1
            state.departed("purged", job, now)
            continue
        state.restore_job(job, pos)
        restored += 1
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
