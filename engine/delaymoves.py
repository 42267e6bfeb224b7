"""The delayed-lane transitions (format 3): the leader's commits that move
delayed jobs between the document and *delayed segments*, objects that hold
a queue's delayed jobs in due order, outside its FIFO order.

:func:`seal_delayed` swaps delayed jobs due later for the reference to a
delayed segment already written with them; :func:`refill_delayed` brings a
delayed segment's first jobs back as it comes due, the others swapped in as a
new delayed segment. Each is refused, changing
nothing, if the jobs or the reference moved on since the lane keeper
(:mod:`engine.lanes`) planned it. See docs/format.md, "Delayed jobs beyond a
window".

Functions of ``(state, operation, now)``, like every transition (see
:mod:`engine.transitions`, which applies them and re-exports them).
"""

from __future__ import annotations

from datetime import datetime

from engine.document import QueueState
from engine.errors import ValidationError
from engine.lanemoves import restore_from_segment
from engine.optypes import MergeDelayed, RefillDelayed, SealDelayed

__all__ = ["merge_delayed", "refill_delayed", "seal_delayed"]


def seal_delayed(state: QueueState, op: SealDelayed, now: datetime) -> int:
    """Replace ``op.jobs`` by the delayed segment reference ``op.ref`` (see
    :class:`~engine.ops.SealDelayed`); returns how many jobs moved. Their
    ids join the ``sealed`` window, so a push retried with one is answered
    with it, as for a pending seal. Raises ValidationError, changing
    nothing, when a job changed since the segment was written: the caller
    deletes the unused object."""
    if not state.segmented:
        raise ValidationError("the document is not in format 2 or 3")
    ref = op.ref
    if not op.jobs or len(op.jobs) != ref.total or len(op.parts) != len(op.jobs):
        raise ValidationError("a delayed segment must hold exactly the jobs its seal names")
    if any(r.key == ref.key for r in state.delays.get(op.queue, ())):
        raise ValidationError(f"the delayed segment {ref.key} is referenced already")
    positions = [pos for _, pos in op.jobs]
    if min(positions) != ref.min_pos or max(positions) != ref.max_pos:
        raise ValidationError("a delayed segment's reference must name its jobs' smallest and largest pos")
    for (job_id, pos), part in zip(op.jobs, op.parts, strict=True):
        job = state.jobs.get(job_id)
        # The encoding check covers not_before, attempts and everything else:
        # a job retried, requeued or pushed again since the plan encodes otherwise.
        if (job is None or job.queue != op.queue or job.status != "pending" or job.not_before is None
                or state.pos[job_id] != pos or state.encoded_job(job_id) != part
                or not ref.first_due <= job.not_before <= ref.last_due):
            raise ValidationError(f"job {job_id!r} changed since the delayed seal began")
    for job_id, _ in op.jobs:
        state.remove_job(job_id)
        state.sealed.add(job_id, now)
    state.add_delayed_ref(op.queue, ref)
    state.tidy_delayed(op.queue)
    return len(op.jobs)


def refill_delayed(state: QueueState, op: RefillDelayed, now: datetime) -> int:
    """Put the first jobs of the delayed segment ``op.key`` back into the
    document with their ``pos`` and ``not_before``, and swap the reference
    for ``op.rests`` (the others, written again) or drop it (see
    :class:`~engine.ops.RefillDelayed`); returns how many came back.
    Raises ValidationError, changing nothing, unless the queue still
    references it and the jobs and ``rests`` are all of its jobs.

    As for a pending refill, a job whose id is in the document, the dead
    letters or the ``finished`` window (a push reused the id after it left
    the ``sealed`` window, and that job may have run already) does not come
    back: the older copy, this one, is counted as purged."""
    refs = state.delays.get(op.queue, ())
    ref = next((r for r in refs if r.key == op.key), None)
    if ref is None:
        raise ValidationError(f"queue {op.queue!r} no longer references the delayed segment {op.key}")
    rests = op.rests
    left = sum(rest.total for rest in rests)
    if not op.jobs or len(op.jobs) + left != ref.total:
        raise ValidationError(f"the delayed segment {op.key} holds {ref.total} jobs, the refill names "
                              f"{len(op.jobs)} and a rest of {left}")
    keys = {rest.key for rest in rests}
    if len(keys) < len(rests) or op.key in keys or any(r.key in keys for r in refs):
        raise ValidationError(f"the rest of the delayed segment {op.key} names a key twice")
    for rest in rests:
        if (not ref.min_pos <= rest.min_pos <= rest.max_pos <= ref.max_pos
                or not ref.first_due <= rest.first_due <= rest.last_due <= ref.last_due):
            raise ValidationError(f"the rest of the delayed segment {op.key} is not a part of it")
    for job, pos in op.jobs:
        if job.queue != op.queue or job.status != "pending" or not ref.min_pos <= pos <= ref.max_pos:
            raise ValidationError(f"job {job.id!r} of the delayed segment {op.key} does not belong there")
    restored = restore_from_segment(state, op.queue, op.jobs, now)
    state.drop_delayed(op.queue, (op.key,))
    for rest in rests:
        state.add_delayed_ref(op.queue, rest)
    return restored


def merge_delayed(state: QueueState, op: MergeDelayed, now: datetime) -> int:
    """Replace the delayed segment references ``op.keys`` of ``op.queue`` by
    ``op.ref`` (see :class:`~engine.ops.MergeDelayed`); returns how many went.
    Raises ValidationError, changing nothing, unless each is still
    referenced and ``op.ref`` holds exactly their jobs: their total, and
    their due times and pos within its bounds, with the bounds met."""
    refs = {ref.key: ref for ref in state.delays.get(op.queue, ())}
    merged = [refs.get(key) for key in op.keys]
    if len(set(op.keys)) < 2 or any(ref is None for ref in merged) or op.ref.key in refs:
        raise ValidationError(f"the delayed segments of queue {op.queue!r} changed since the merge began")
    run = [ref for ref in merged if ref is not None]
    new = op.ref
    if (new.total != sum(ref.total for ref in run) or new.first_due != min(ref.first_due for ref in run)
            or new.last_due != max(ref.last_due for ref in run) or new.min_pos != min(ref.min_pos for ref in run)
            or new.max_pos != max(ref.max_pos for ref in run)):
        raise ValidationError(f"the merged delayed segment of queue {op.queue!r} does not describe its parts")
    state.drop_delayed(op.queue, op.keys)
    state.add_delayed_ref(op.queue, new)
    return len(run)
