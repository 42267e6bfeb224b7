"""The lane keeper's steps (format 2): sealing, refilling and merging, on
the keeper's own threads.

:class:`LaneSteps` is a base class of :class:`~engine.lanes.LaneKeeper`
holding what its threads do with a task (:mod:`engine.lanetasks`) planned on
the committer's writer thread (:mod:`engine.laneplans`): a seal writes its
segment and queues its Seal without waiting for the commit (``_seal``; the
outcome goes to ``_seal_done``), a refill brings the next jobs of a queue's
first segment back into the document (``_refill``), and a merge writes
adjacent small segments again as one (``_merge``). ``_submit`` and
``_note_applied`` run a task's operation through the committer and tell the
planner when a version shows it. Writing the segment objects and their id
indexes, the keeper's lifecycle and its thread loop are in
:mod:`engine.lanes`. Every field it reads is the keeper's, declared below,
and shared with its threads under ``_cond``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from engine.document import QueueState
from engine.errors import (
    CommitterNotRunning,
    CommitterStopped,
    EngineError,
    NotLeader,
    SegmentUnreadable,
    StoreError,
    ValidationError,
)
from engine.lanecache import HeldSegments
from engine.lanetasks import MergeTask, RefillTask, SealTask, Task
from engine.ops import Merge, Operation, Refill, Seal
from engine.reaper import SegmentReaper
from engine.segments import SegmentRef

__all__ = ["LaneSteps"]

log = logging.getLogger("engine.lanes")  # where the lane keeper has always logged


class LaneSteps:
    """The seal, refill and merge steps of :class:`~engine.lanes.LaneKeeper` (see the module)."""

    # The keeper's fields this half reads or sets (see LaneKeeper.__init__).
    execute: Callable[..., Any]
    submit: Callable[[Operation, Callable[[Any], None]], None]
    monotonic: Callable[[], float]
    retry_seconds: float
    problems: dict[str, str]
    sealed: int
    refilled: int
    abandoned: int
    merged: int
    reaper: SegmentReaper
    _cond: threading.Condition
    _busy: dict[str, Task]
    _applied: dict[str, Callable[[QueueState], bool]]
    _merge_slot: MergeTask | None
    _merge_applied: Callable[[QueueState], bool] | None
    _retry_at: dict[str, float]
    _referenced: frozenset[str] | None
    _held: HeldSegments
    _merging: threading.Lock
    # The keeper's methods this half calls (engine.lanes).
    _count: Callable[[str], None]
    _finished: Callable[[Task], None]
    _unsubmitted: Callable[[str], None]
    _write_index: Callable[[SegmentRef, Sequence[bytes]], None]
    _write_segment: Callable[..., SegmentRef | None]
    _write_and_swap: Callable[..., str | None]

    def _seal(self, task: SealTask) -> bool:
        """Write the task's segment and queue its Seal. True once the Seal is
        queued: its outcome then goes to :meth:`_seal_done`, and this thread
        is free for other work while the commit is written (ten queues
        sealing every write kept all 16 threads waiting on commits, and each
        planned seal waited ~150 ms for a thread to write its segment: the
        Seal missed a write, and the push commits carried that many more
        jobs). False if it gave up (nothing queued, the object deleted)."""
        try:
            ref = self._write_segment(
                task, task.parts, first_pos=task.jobs[0][1], last_pos=task.jobs[-1][1], oldest=task.oldest)
            if ref is None:
                return False
            op = Seal(queue=task.queue, ref=ref, jobs=task.jobs, after=task.after_key(), parts=task.parts)
            key = ref.key
            self._note_applied(task, lambda state: any(r.key == key for r in state.lanes.get(task.queue, ())))
            try:
                self.submit(op, lambda outcome: self._seal_done(task, key, outcome))
            except CommitterNotRunning:
                self._unsubmitted(key)
                raise
            # The seal behind this one may go now: it waits only for this
            # Seal to be queued, not for the index below.
            task.queued.set()
            # Every segment gets its id index: written after the Seal is
            # queued, never delaying it (the document's size waits on
            # seals); a lookup meanwhile reads the segment. Small seals too:
            # without theirs, a lookup after a takeover read them blindly,
            # at most 8, and a job in an older one answered 404 (chaos seed
            # 52: 17 small seals). Merging one deletes its index with it.
            self._write_index(ref, task.parts)
            return True
        finally:
            task.queued.set()  # queued, or given up: never leave the seal behind this one waiting

    def _submit_by_execute(self, op: Operation, done: Callable[[Any], None]) -> None:
        """``submit`` for a keeper given only ``execute`` (tests): run ``op``
        and hand its outcome to ``done`` at once. Raises CommitterNotRunning
        (nothing submitted), as ``GroupCommitter.submit`` does."""
        try:
            outcome = self.execute(op)
        except CommitterNotRunning:
            raise
        except EngineError as exc:
            outcome = exc
        done(outcome)

    def _seal_done(self, task: SealTask, key: str, outcome: Any) -> None:
        """The outcome of the task's Seal (on the committer's writer thread
        with ``submit``: quick, no I/O). Refused (the queue moved on: a
        purge, a requeue, a refill, a seal before it refused): nothing
        references the object, which is deleted at once by a keeper thread.
        NotLeader or a stopped committer: it may have landed before the
        takeover read the document, so the object is left to the next
        leader's collector. Any other error (the write's outcome unknown and
        then the document unreadable, say): the next version this keeper's
        committer lands says whether the Seal landed, and the object is
        deleted if not (``SegmentReaper.doubtful``)."""
        try:
            if not isinstance(outcome, BaseException):
                self._count("sealed")
                self._held.keep(key, task.parts)
            elif isinstance(outcome, ValidationError):
                self._count("abandoned")
                self.reaper.delete_now(key)
            elif not isinstance(outcome, (NotLeader, CommitterStopped)):
                log.warning("queue %s: committing segment %s: %s", task.queue, key, outcome)
                self.reaper.doubtful(key)  # the next landed version says whether it is referenced
        finally:
            self._finished(task)

    def _refill(self, task: RefillTask) -> None:
        ref, queue = task.ref, task.queue
        # The jobs the refill takes, and the one after them if any (the new front).
        take = min(ref.total - ref.consumed, max(task.want, 1))
        try:
            jobs = self._held.jobs(ref, ref.consumed, take + 1, keep=True)
            if not jobs or jobs[0][1] != ref.front:
                raise SegmentUnreadable(ref.key, f"its job {ref.consumed} is not at pos {ref.front}")
        except SegmentUnreadable as exc:
            with self._cond:
                referenced = self._referenced
            if referenced is not None and ref.key not in referenced:
                # A landed commit dropped the reference since this refill was
                # planned (a purge, a refill to its end) and the object went
                # after its grace: the task is stale, the queue is fine. Not
                # a problem to report, nor a reason to delay its refills.
                return
            if self.problems.get(queue) != str(exc):
                log.error("%s", exc)
            self.problems[queue] = str(exc)
            self._retry_at[queue] = self.monotonic() + self.retry_seconds
            return
        except StoreError as exc:
            log.warning("refilling queue %s from %s: %s", queue, ref.key, exc)
            self._retry_at[queue] = self.monotonic() + self.retry_seconds
            return
        self.problems.pop(queue, None)
        after = jobs[take] if take < len(jobs) else None
        try:
            self._submit(task, Refill(
                queue=queue, key=ref.key, consumed=ref.consumed, jobs=tuple(jobs[:take]),
                front=after[1] if after is not None else None,
                oldest=after[0].enqueued_at if after is not None else None,
            ), lambda state: not any(r.key == ref.key and r.consumed == ref.consumed
                                     for r in state.lanes.get(queue, ())[:1]))
        except ValidationError:
            return  # the segment moved on (a purge): the next commit plans again
        except (NotLeader, CommitterStopped):
            raise
        except EngineError as exc:
            log.warning("refilling queue %s from %s: %s", queue, ref.key, exc)
            return
        self._count("refilled")

    def _merge(self, task: MergeTask) -> None:
        with self._merging:
            self._merge_alone(task)

    def _merge_alone(self, task: MergeTask) -> None:
        first = task.refs[0]
        try:
            parts = [part for ref in task.refs for part in self._held.parts(ref)]
        except (SegmentUnreadable, StoreError) as exc:
            with self._cond:
                referenced = self._referenced
            if isinstance(exc, SegmentUnreadable) and referenced is not None and exc.key not in referenced:
                # Merges run beside refills: the segment became the first one,
                # was used up and deleted since this merge was planned. Stale.
                return
            # Not urgent: the refill of that segment reports a lasting problem.
            log.warning("merging segments of queue %s: %s", task.queue, exc)
            return
        keys = tuple(r.key for r in task.refs)
        if self._write_and_swap(
            task, parts, first_pos=first.front, last_pos=task.refs[-1].last_pos, oldest=first.oldest_enqueued_at,
            swap=lambda ref: Merge(queue=task.queue, keys=keys, ref=ref),
        ) is not None:
            self._count("merged")

    def _submit(self, task: RefillTask | MergeTask, op: Operation, applied: Callable[[QueueState], bool]) -> None:
        """Run ``op`` through the committer for ``task`` and wait for it;
        ``applied`` says whether a version shows it (see ``_busy``)."""
        self._note_applied(task, applied)
        self.execute(op)

    def _note_applied(self, task: Task, applied: Callable[[QueueState], bool]) -> None:
        """From now on, ``applied`` tells whether a version shows ``task``'s operation (see ``_busy``)."""
        with self._cond:
            if self._busy.get(task.queue) is task:
                self._applied[task.queue] = applied
            elif self._merge_slot is task:
                self._merge_applied = applied
