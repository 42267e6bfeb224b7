"""The lane keeper's steps for delayed segments (format 3), on its own threads.

:class:`DelaySteps` is a base class of :class:`~engine.lanes.LaneKeeper`: a
delayed seal writes its jobs to a new delayed segment (``If-None-Match``,
this leader's epoch and keeper tag in the key) and commits
:class:`~engine.ops.SealDelayed`, then writes the segment's id index; a
delayed refill reads a delayed segment whole, verifies it (size, SHA-256,
kind, and each job's queue and ``pos``) and commits
:class:`~engine.ops.RefillDelayed`. A refused swap leaves nothing
referencing a new object, which is deleted at once; a segment that is
missing or does not verify stops only that queue's delayed refills and is
reported in :attr:`delayed_problems`, never dropped (I6). See
docs/format.md, "Delayed jobs beyond a window".
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import orjson

from engine.encoding import encode_job
from engine.errors import (
    CommitterStopped,
    DocumentError,
    EngineError,
    NotLeader,
    SegmentUnreadable,
    StoreError,
    ValidationError,
)
from engine.lanecache import HeldSegments
from engine.lanetasks import DelayedMergeTask, DelayedRefillTask, DelayedSealTask, id_prefix
from engine.lookup import one_job
from engine.model import Job
from engine.optypes import Excision, MergeDelayed, RefillDelayed, SealDelayed
from engine.parsing import parse_segment_jobs
from engine.reaper import SegmentReaper
from engine.segments import (
    DELAYED_KIND,
    DelayedRef,
    SegmentRef,
    delayed_segment_key,
    delete_quietly,
    digest,
    encode_segment,
    read_segment,
)
from engine.stores.base import ObjectStore

__all__ = ["DelaySteps", "read_delayed"]

log = logging.getLogger("engine.lanes")  # where the lane keeper logs

# A refill of a segment whose rest is due writes that rest as segments of a
# front share, at most this many (16,384 jobs at a share of 1,000)...
MAX_REFILL_PARTS = 17
# ...this many at a time: sixteen writes one after the other took 0.8 s at
# 50 ms each, while the claims ate the share in the document.
MAX_REFILL_WRITERS = 4


def _due(job: Job) -> datetime:
    """A delayed segment's job's not_before (checked set when it was read)."""
    assert job.not_before is not None
    return job.not_before


def read_delayed(store: ObjectStore, queue: str, ref: DelayedRef) -> list[tuple[Job, int]]:
    """The jobs of ``queue``'s delayed segment ``ref``, as ``(job, pos)``,
    after checking the object against the reference (size, SHA-256, kind,
    count) and each job against it (pending, of ``queue``, with a delay, its
    ``pos`` within the reference's). Raises SegmentUnreadable naming the
    object, or a StoreError (worth retrying)."""
    items = read_segment(store, ref.as_segment(), kind=DELAYED_KIND)
    try:
        jobs = parse_segment_jobs(ref.key, items)
    except DocumentError as exc:  # a matching hash makes this a writer's bug; still refuse it
        raise SegmentUnreadable(ref.key, str(exc)) from exc
    for job, pos in jobs:
        if job.queue != queue or job.not_before is None or not ref.min_pos <= pos <= ref.max_pos:
            raise SegmentUnreadable(ref.key, f"job {job.id!r} is not a delayed job of queue {queue!r} "
                                             f"with a pos from {ref.min_pos} to {ref.max_pos}")
    return jobs


class DelaySteps:
    """The delayed seal and refill steps of :class:`~engine.lanes.LaneKeeper` (see the module)."""

    # The keeper's fields this half reads or sets (see LaneKeeper.__init__).
    store: ObjectStore
    key: str
    epoch: int
    tag: str
    clock: Callable[[], datetime]
    delayed_lead_seconds: float
    execute: Callable[..., Any]
    monotonic: Callable[[], float]
    retry_seconds: float
    abandoned: int
    reaper: SegmentReaper
    _cond: threading.Condition
    _referenced: frozenset[str] | None
    _stopping: bool
    _held: HeldSegments
    _merging: threading.Lock
    # The keeper's methods this half calls (engine.lanes).
    _count: Callable[[str], None]
    _unsubmitted: Callable[[str], None]
    _write_index: Callable[[SegmentRef, Sequence[bytes]], None]
    _put_new: Callable[[str, str, bytes], bool]
    _swap: Callable[..., bool]

    def _init_delay_steps(self) -> None:
        #: Per queue, why its next delayed segment cannot be read (I6), while it cannot.
        self.delayed_problems: dict[str, str] = {}
        self._delayed_retry_at: dict[str, float] = {}  # queue -> monotonic time of the next attempt
        #: Counters for tests, benchmarks and health pages.
        self.sealed_delayed = 0
        self.refilled_delayed = 0
        self.merged_delayed = 0

    def _write_delayed(
        self, queue: str, parts: Sequence[bytes], positions: Sequence[int], *, first_due: datetime,
        last_due: datetime,
    ) -> DelayedRef | None:
        """Write ``parts`` (jobs in due order, at ``positions``, due from
        ``first_due`` to ``last_due``) as a new delayed segment of ``queue``;
        its reference, or None if the write failed or this keeper is
        stopping (the object is then deleted: nothing can name it)."""
        first_pos = min(positions)
        key = delayed_segment_key(self.key, queue=queue, epoch=self.epoch, first_pos=first_pos, keeper=self.tag)
        data = encode_segment(queue, first_pos, parts, kind=DELAYED_KIND)
        if not self._put_new(queue, key, data):
            return None
        if self._stopping:  # a step-down while it was written
            self._count("abandoned")
            delete_quietly(self.store, key)
            return None
        return DelayedRef(
            key=key, total=len(parts), size=len(data), sha256=digest(data), epoch=self.epoch,
            sealed_at=self.clock(), first_due=first_due, last_due=last_due, min_pos=first_pos,
            max_pos=max(positions),
        )

    def _rewrite_delayed_without(self, queue: str, ref: SegmentRef, jobs: list[Job]) -> Excision:
        """The delayed segment ``ref`` of ``queue`` (as
        :meth:`DelayedRef.as_segment` describes it) written again without
        ``jobs``, for a purge by ids (see ``LaneExcision.excise``): a new
        delayed segment, its id index, and the excision that swaps them."""
        needles = tuple(id_prefix(job.id) for job in jobs)
        kept = [(index, part) for index, part in enumerate(self._held.parts(ref)) if not part.startswith(needles)]
        if not kept:
            return Excision(queue=queue, key=ref.key, consumed=0, ref=None, jobs=tuple(jobs))
        decoded = [one_job(ref, orjson.loads(part), index)[:2] for index, part in kept]
        dues = [job.not_before for job, _ in decoded if job.not_before is not None]
        if len(dues) != len(decoded):
            raise SegmentUnreadable(ref.key, "a job of a delayed segment has no not_before")
        rest = [part for _, part in kept]
        new = self._write_delayed(queue, rest, [pos for _, pos in decoded], first_due=min(dues), last_due=max(dues))
        if new is None:
            raise StoreError(f"writing delayed segment {ref.key} again without the purged jobs failed")
        self._write_index(new.as_segment(), rest)
        self._held.keep(new.key, tuple(rest))
        return Excision(queue=queue, key=ref.key, consumed=0, ref=new, jobs=tuple(jobs))

    def _seal_delayed(self, task: DelayedSealTask) -> None:
        """Write the task's delayed segment, commit its SealDelayed and wait for it."""
        queue = task.queue
        ref = self._write_delayed(queue, task.parts, [pos for _, pos in task.jobs], first_due=task.first_due,
                                  last_due=task.last_due)
        if ref is None:
            return
        # Refused when a job moved on since the plan (claimed when due, retried, purged).
        if not self._swap(queue, ref.key, lambda: self.execute(
                SealDelayed(queue=queue, ref=ref, jobs=task.jobs, parts=task.parts))):
            return
        self._count("sealed_delayed")
        # After the commit, as a pending seal's: a lookup by id reads it then.
        self._write_index(ref.as_segment(), task.parts)

    def _refill_delayed(self, task: DelayedRefillTask) -> None:
        """Read the task's delayed segment whole and commit its RefillDelayed."""
        ref, queue = task.ref, task.queue
        try:
            jobs = read_delayed(self.store, queue, ref)
        except SegmentUnreadable as exc:
            with self._cond:
                referenced = self._referenced
            if referenced is not None and ref.key not in referenced:
                return  # dropped since the plan (a purge) and deleted after its grace: stale
            if self.delayed_problems.get(queue) != str(exc):
                log.error("%s", exc)
            self.delayed_problems[queue] = str(exc)
            self._delayed_retry_at[queue] = self.monotonic() + self.retry_seconds
            return
        except StoreError as exc:
            log.warning("refilling queue %s from delayed segment %s: %s", queue, ref.key, exc)
            self._delayed_retry_at[queue] = self.monotonic() + self.retry_seconds
            return
        self.delayed_problems.pop(queue, None)
        take = max(1, task.take)
        back, others = jobs[:take], jobs[take:]
        if not others:
            try:
                self.execute(RefillDelayed(queue=queue, key=ref.key, jobs=tuple(back)))
            except ValidationError:
                return  # the reference went since the plan (a purge): the next version plans again
            except (NotLeader, CommitterStopped):
                raise
            except EngineError as exc:
                log.warning("refilling queue %s from delayed segment %s: %s", queue, ref.key, exc)
                return
            self._count("refilled_delayed")
            return
        # The others go to new delayed segments in its place, swapped in the
        # refill's own commit: a segment never changes, and one that came back
        # whole (up to merge_jobs jobs) made a commit of several megabytes.
        rests = self._write_rests(queue, others, take)
        if rests is None:
            self._delayed_retry_at[queue] = self.monotonic() + self.retry_seconds
            return
        if self._swap(queue, rests[0][0].key, lambda: self.execute(
                RefillDelayed(queue=queue, key=ref.key, jobs=tuple(back), rests=tuple(r for r, _ in rests))),
                also=[r.key for r, _ in rests[1:]]):
            self._count("refilled_delayed")
            # Each with its id index, as any segment: without one, a lookup
            # of an id no segment holds would read all of them.
            self._in_parallel([partial(self._write_index, rest.as_segment(), parts) for rest, parts in rests])

    def _write_rests(
        self, queue: str, others: list[tuple[Job, int]], take: int,
    ) -> list[tuple[DelayedRef, list[bytes]]] | None:
        """Write ``others`` (in due order) as the new delayed segments of a
        refill: those due within the refill lead in segments of ``take``
        jobs (at most MAX_REFILL_PARTS of them), so that a batch due at once
        comes back a share at a time with one small read each, not the
        whole rest read and written again each time; the others in one. In
        parallel, MAX_REFILL_WRITERS at a time. Each with its encoded jobs;
        None if a write failed (those written are deleted: nothing names
        them)."""
        due_by = self.clock() + timedelta(seconds=self.delayed_lead_seconds)
        due = 0
        while due < len(others) and due < MAX_REFILL_PARTS * take and _due(others[due][0]) <= due_by:
            due += 1
        groups = [others[start:min(start + take, due)] for start in range(0, due, take)]
        if due < len(others):
            groups.append(others[due:])
        encoded = [[encode_job(job, pos) for job, pos in group] for group in groups]

        def write(index: int) -> DelayedRef | None:
            group = groups[index]
            return self._write_delayed(queue, encoded[index], [pos for _, pos in group],
                                       first_due=_due(group[0][0]), last_due=_due(group[-1][0]))

        written = self._in_parallel([partial(write, index) for index in range(len(groups))])
        if any(ref is None for ref in written):
            for ref in written:
                if ref is not None:
                    self._count("abandoned")
                    self.reaper.delete_segment(ref.key)
            return None
        return [(ref, parts) for ref, parts in zip(written, encoded, strict=True) if ref is not None]

    @staticmethod
    def _in_parallel[T](calls: Sequence[Callable[[], T]]) -> list[T]:
        """The results of ``calls``, in order, run MAX_REFILL_WRITERS at a
        time (store writes, which wait on the network, not the GIL)."""
        if len(calls) <= 1:
            return [call() for call in calls]
        workers = min(MAX_REFILL_WRITERS, len(calls))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="delayed-rest") as pool:
            return list(pool.map(lambda call: call(), calls))

    def _merge_delayed(self, task: DelayedMergeTask) -> None:
        """Read the task's delayed segments, write their jobs as one, in due
        order, and commit the MergeDelayed that swaps the references. One
        merge at a time for the whole keeper, pending or delayed: each holds
        up to ``merge_jobs`` jobs in memory."""
        queue = task.queue
        with self._merging:
            try:
                jobs = [pair for ref in task.refs for pair in read_delayed(self.store, queue, ref)]
            except (SegmentUnreadable, StoreError) as exc:
                # Not urgent: the refill of that segment reports a lasting problem.
                log.warning("merging delayed segments of queue %s: %s", queue, exc)
                return
            jobs.sort(key=lambda pair: (pair[0].not_before, pair[1]))
            parts = [encode_job(job, pos) for job, pos in jobs]
            dues = [job.not_before for job, _ in jobs if job.not_before is not None]
            ref = self._write_delayed(queue, parts, [pos for _, pos in jobs], first_due=dues[0], last_due=dues[-1])
            if ref is None:
                return
            keys = tuple(r.key for r in task.refs)
            if self._swap(queue, ref.key, lambda: self.execute(MergeDelayed(queue=queue, keys=keys, ref=ref))):
                self._count("merged_delayed")
                self._write_index(ref.as_segment(), parts)
