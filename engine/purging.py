"""The purge transition: jobs removed by id (pending, running or dead, all
or nothing, or conditionally with ``expect``), or every job of one queue and
status, and in format 2 the jobs in segments too: a queue's segment
references dropped whole, the excisions of a purge by ids (see
:mod:`engine.excision`) and the pos-bounded purge of an operator's dry run.
Also :func:`still_expected`, the check behind every conditional requeue and
purge.

A function of ``(state, operation, now)``, like every transition (see
:mod:`engine.transitions`, which applies it and re-exports it). Split from
:mod:`engine.transitions`.
"""

from __future__ import annotations

from datetime import datetime

from engine.document import QueueState
from engine.errors import JobNotFound, JobSealed, ValidationError
from engine.model import DeadLetter, Job
from engine.optypes import Excision, Purge, PurgeOutcome
from engine.segments import DelayedRef, SegmentRef, newest_first

__all__ = ["purge", "status_of", "still_expected", "swap_excisions"]


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
        if op.status == "pending" and (op.queue in state.lanes or op.queue in state.delays):
            # The jobs in segments go with their references: one commit,
            # whatever the backlog. Their ids are not listed one by one.
            assert op.queue is not None
            dropped = state.drop_refs(op.queue) if op.queue in state.lanes else []
            gone = state.drop_delayed(op.queue)
            state.counters(op.queue).purged += sum(ref.remaining for ref in dropped) + sum(r.total for r in gone)
    for job_id in ids:
        removed: Job | DeadLetter
        if job_id in state.jobs:
            removed = job = state.remove_job(job_id)
            state.revoke(job)  # a running job's lease ends without its holder
        else:
            removed = state.remove_dead(job_id)
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
    if op.seek and (state.lanes or state.delays):
        sought = op.job_ids if not op.expect else tuple(
            job_id for job_id, status in zip(op.job_ids, op.expect, strict=True) if status == "pending")
        missing = tuple(job_id for job_id in sought if job_id not in state.jobs and job_id not in state.dead
                        and job_id not in state.finished)
        if missing:
            raise JobSealed(missing[0], tuple(newest_first(state.lanes, state.delays)), job_ids=missing)
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
    swap_excisions(state, op.excisions, op.job_ids, what="purge")
    removed: list[str] = []
    for excision in op.excisions:
        for job in excision.jobs:
            state.add_finished(job.id, now)  # a retried push must not bring it back
            state.counters(excision.queue).purged += 1
            state.departed("purged", job, now)
            removed.append(job.id)
    return removed


def swap_excisions(state: QueueState, excisions: tuple[Excision, ...], job_ids: tuple[str, ...], *,
                   what: str) -> None:
    """Swap each segment reference an excision rewrote for its new one (or
    drop it); what becomes of the excised jobs is the caller's (a purge
    counts them purged, :func:`engine.duenow.make_due` puts them back).
    Raises ValidationError, changing nothing, unless every reference is
    still there as planned and every excised job is one of ``job_ids``
    (``what``: the operation, for the message)."""
    for excision in excisions:
        if not _still_there(state, excision) or any(job.id not in job_ids for job in excision.jobs) or (
                excision.ref is not None and excision.ref.total <= 0):
            raise ValidationError(f"the segment {excision.key} of queue {excision.queue!r} changed since "
                                  f"the {what} looked in it")
    if len({excision.key for excision in excisions}) != len(excisions):
        raise ValidationError(f"a {what} names the same segment twice")
    for excision in excisions:
        if any(ref.key == excision.key for ref in state.delays.get(excision.queue, ())):
            # A delayed segment (format 3): its rewrite takes its place in due order.
            state.drop_delayed(excision.queue, (excision.key,))
            if isinstance(excision.ref, DelayedRef):
                state.add_delayed_ref(excision.queue, excision.ref)
        else:
            refs = state.lanes[excision.queue]
            # Found again by key: an excision before it may have dropped a reference and moved the rest.
            at = next(i for i, ref in enumerate(refs) if ref.key == excision.key)
            if isinstance(excision.ref, SegmentRef):
                refs[at] = excision.ref
            else:
                del refs[at]
                if not refs:
                    del state.lanes[excision.queue]
            state.dropped_segments.append(excision.key)
    state.dirty = True


def _still_there(state: QueueState, excision: Excision) -> bool:
    """Whether the segment an excision rewrote is still referenced as it
    was read: a pending one with the same ``consumed`` (rewritten as a
    pending one), or a delayed one (rewritten as a delayed one)."""
    if any(ref.key == excision.key for ref in state.delays.get(excision.queue, ())):
        return excision.consumed == 0 and not isinstance(excision.ref, SegmentRef)
    return not isinstance(excision.ref, DelayedRef) and any(
        ref.key == excision.key and ref.consumed == excision.consumed for ref in state.lanes.get(excision.queue, ()))


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
    straddling = refs[lead].key if lead < len(refs) and refs[lead].front < before_pos else None
    dropped = state.drop_refs(queue, lead) if lead else []
    in_segments = sum(ref.remaining for ref in dropped)
    # Delayed segments (format 3) hold jobs in due order, so their pos spans
    # overlap: each goes whole if all its jobs are below the bound, and one
    # that also holds later jobs stays whole, reported like a straddling
    # pending reference when there is none of those.
    delays = state.delays.get(queue, ())
    below = [ref.key for ref in delays if ref.max_pos < before_pos]
    if straddling is None:
        straddling = next((ref.key for ref in delays if ref.min_pos < before_pos <= ref.max_pos), None)
    if below:
        in_segments += sum(ref.total for ref in state.drop_delayed(queue, below))
    if in_segments:
        state.counters(queue).purged += in_segments
    return ids, in_segments, straddling


def status_of(state: QueueState, job_id: str) -> str | None:
    """The status of job ``job_id`` in the document ("dead" for a dead
    letter), or None if it holds no such job."""
    job = state.jobs.get(job_id)
    return job.status if job is not None else ("dead" if job_id in state.dead else None)


def still_expected(state: QueueState, job_ids: tuple[str, ...], expect: tuple[str, ...]) -> list[str]:
    """The ids whose job is in the document in its expected status (each
    id's status is ``expect`` at the same position)."""
    return [job_id for job_id, want in zip(job_ids, expect, strict=True) if status_of(state, job_id) == want]
