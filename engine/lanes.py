"""The leader's lane keeper (format 2): moves pending jobs between the
document and segment objects, in the background.

While a node leads, its :class:`LaneKeeper` watches every landed commit
(:meth:`LaneKeeper.committed`, on the committer's writer thread, where it
only plans) and does the work on its own thread:

* **seal**: a queue whose pending jobs in the document pass ``head_jobs +
  segment_jobs`` gets its oldest ``segment_jobs`` jobs after its front (or
  after its last segment) written to a new segment object, then a
  :class:`~engine.ops.Seal` commit swaps them for the reference;
* **refill**: a queue with segments whose front holds fewer than
  ``refill_below`` claimable jobs gets the next jobs of its first segment
  back, by a :class:`~engine.ops.Refill` commit; the read happens before the
  front runs dry, so claims do not wait for it while the front has jobs;
* **delete**: a segment a landed commit stopped referencing (refilled to
  its end, purged) is deleted ``grace_seconds`` later, so that readers of
  the version before (dashboards, standbys) can finish reading it;
* **collect**: an object under the segment prefix written at an epoch
  below this leader's, and referenced by no version since this leader took
  over, is an orphan (its writer lost the commit that would have referenced
  it, or died before deleting it). See ``docs/format.md`` for why this is
  safe: such a writer's commit is conditional on a version this leader's
  takeover already replaced, so it can never land.

Seal and Refill are conditional on the queue not having moved since they
were planned; when one is refused, nothing changed, and a sealed object is
deleted at once (it was never referenced). The keeper never delays an
acknowledgement: pushes land in the tail and claims take from the front as
before. A segment that is missing or does not verify stops that queue's
refills (never its pushes, nor other queues) and is reported in
:attr:`LaneKeeper.problems` until it reads correctly again (I6).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engine.document import FORMAT_SEGMENTS, QueueState
from engine.errors import (
    CommitterStopped,
    DocumentError,
    EngineError,
    NotLeader,
    SegmentUnreadable,
    StoreError,
    ValidationError,
)
from engine.model import Job
from engine.ops import Operation, Refill, Seal
from engine.parsing import parse_segment_jobs
from engine.policy import Policy
from engine.segments import (
    SegmentRef,
    delete_quietly,
    digest,
    encode_segment,
    epoch_of_key,
    read_segment,
    segment_key,
    segment_prefix,
    write_segment,
)
from engine.stores.base import ObjectStore

log = logging.getLogger(__name__)

# Segments whose decoded jobs are kept, most recently used last: a queue
# refills from its first segment several times before it is used up.
CACHED_SEGMENTS = 4


@dataclass(frozen=True, slots=True)
class _SealTask:
    queue: str
    jobs: tuple[tuple[str, int], ...]
    parts: tuple[bytes, ...]
    after: str | None
    oldest: datetime


@dataclass(frozen=True, slots=True)
class _RefillTask:
    queue: str
    ref: SegmentRef
    want: int


class LaneKeeper:
    """Seals, refills, deletes and collects segments for one leader (see
    the module). ``execute`` runs an operation through the leader's
    committer and returns its outcome or raises (``GroupCommitter.execute``);
    ``epoch`` is the broker epoch this leader took over with.

    Thread-safe: :meth:`committed` and :meth:`dropped` run on the
    committer's writer thread and never block on I/O; everything else runs
    on the keeper's own thread. :meth:`stop` is idempotent.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        key: str,
        policy: Policy,
        execute: Callable[[Operation], Any],
        epoch: int,
        clock: Callable[[], datetime],
        grace_seconds: float,
        collect_seconds: float,
        retry_seconds: float,
    ) -> None:
        self.store = store
        self.key = key
        self.policy = policy
        self.execute = execute
        self.epoch = epoch
        self.clock = clock
        self.grace_seconds = grace_seconds
        self.collect_seconds = collect_seconds
        self.retry_seconds = retry_seconds
        #: Per queue, why its next segment cannot be read (I6), while it cannot.
        self.problems: dict[str, str] = {}
        #: Counters for tests, benchmarks and health pages.
        self.sealed = 0
        self.refilled = 0
        self.deleted = 0
        self.collected = 0
        self.abandoned = 0
        self._cond = threading.Condition()
        self._tasks: list[_SealTask | _RefillTask] = []
        self._busy: set[str] = set()  # queues with a task planned or running
        self._retry_at: dict[str, float] = {}  # queue -> monotonic time of the next refill attempt
        self._deletions: list[tuple[float, str]] = []  # (monotonic deadline, key), in deadline order
        self._referenced: frozenset[str] | None = None  # keys the latest landed version references
        self._suspects: dict[str, float] = {}  # orphan candidates -> monotonic time first seen
        self._next_collect = 0.0
        self._cache: OrderedDict[str, list[tuple[Job, int]]] = OrderedDict()
        self._stopping = False
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> LaneKeeper:
        self._thread = threading.Thread(target=self._run, name=f"lanes:{self.key}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    # -- called on the committer's writer thread ----------------------------------

    def committed(self, state: QueueState) -> None:
        """Plan work from a landed version. Cheap unless a queue needs work:
        a few dict lookups per queue with pending jobs."""
        if state.format != FORMAT_SEGMENTS:
            return
        now = time.monotonic()
        referenced = frozenset(ref.key for refs in state.lanes.values() for ref in refs)
        tasks: list[_SealTask | _RefillTask] = []
        with self._cond:
            busy = set(self._busy)
        for queue in {*state.pending_here, *state.lanes}:
            if queue in busy:
                continue
            task = self._refill_task(state, queue, now) or self._seal_task(state, queue)
            if task is not None:
                tasks.append(task)
        # A queue with no segments left cannot be stopped at one: a problem
        # reported by a refill that raced the drop of its segment is void.
        for queue in [q for q in self.problems if q not in state.lanes]:
            self.problems.pop(queue, None)
        with self._cond:
            self._referenced = referenced
            for task in tasks:
                if task.queue not in self._busy:
                    self._busy.add(task.queue)
                    self._tasks.append(task)
            self._cond.notify_all()

    def _refill_task(self, state: QueueState, queue: str, now: float) -> _RefillTask | None:
        refs = state.lanes.get(queue)
        if not refs or self._retry_at.get(queue, 0.0) > now:
            return None
        policy = self.policy
        ready = state.claimable(queue, self.clock(), policy.refill_below)
        if ready >= policy.refill_below:
            return None
        return _RefillTask(queue, refs[0], want=policy.head_jobs - ready)

    def _seal_task(self, state: QueueState, queue: str) -> _SealTask | None:
        policy = self.policy
        if policy.segment_jobs <= 0 or state.pending_here.get(queue, 0) < policy.head_jobs + policy.segment_jobs:
            return None
        refs = state.lanes.get(queue)
        # A delayed job that came due is indexed as ready but keeps its
        # not_before until claimed, and Seal refuses such a job: naming it
        # would get every seal of the queue refused until it is claimed. It
        # stays in the document, like a delayed job that is not due yet.
        ready = [entry for entry in state.ready_in_order(queue) if state.jobs[entry[1]].not_before is None]
        if refs:
            last = refs[-1].last_pos
            tail = [entry for entry in ready if entry[0] > last]
        else:
            tail = ready[policy.head_jobs:]  # the front stays in the document
        if len(tail) < policy.segment_jobs:
            return None  # the rest are delayed: they stay in the document
        chosen = tuple(tail[:policy.segment_jobs])
        return _SealTask(
            queue=queue,
            jobs=tuple((job_id, pos) for pos, job_id in chosen),
            parts=tuple(state.encoded_job(job_id) for _, job_id in chosen),
            after=refs[-1].key if refs else None,
            oldest=state.jobs[chosen[0][1]].enqueued_at,
        )

    def dropped(self, keys: list[str]) -> None:
        """A landed commit stopped referencing ``keys``: delete them after the grace."""
        deadline = time.monotonic() + self.grace_seconds
        with self._cond:
            self._deletions.extend((deadline, key) for key in keys)
            self._cond.notify_all()

    # -- the keeper's thread -------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not self._tasks and not self._due_now():
                    self._cond.wait(self._wait_seconds())
                if self._stopping:
                    return
                task = self._tasks.pop(0) if self._tasks else None
            try:
                if isinstance(task, _SealTask):
                    self._seal(task)
                elif isinstance(task, _RefillTask):
                    self._refill(task)
                self._delete_due()
                self._collect()
            except (NotLeader, CommitterStopped):
                return  # the broker stops this keeper on a step-down
            except Exception:  # a bug: log it, keep the keeper alive (I8)
                log.exception("lane keeper for %s: a step failed unexpectedly", self.key)
            finally:
                if task is not None:
                    with self._cond:
                        self._busy.discard(task.queue)

    def _due_now(self) -> bool:
        now = time.monotonic()
        return bool(self._deletions and self._deletions[0][0] <= now) or (
            self._referenced is not None and now >= self._next_collect)

    def _wait_seconds(self) -> float:
        now = time.monotonic()
        deadlines = [self._next_collect] + ([self._deletions[0][0]] if self._deletions else [])
        return max(0.01, min(deadlines) - now)

    def _seal(self, task: _SealTask) -> None:
        first_pos = task.jobs[0][1]
        key = segment_key(self.key, queue=task.queue, epoch=self.epoch, first_pos=first_pos)
        data = encode_segment(task.queue, first_pos, task.parts)
        try:
            write_segment(self.store, key, data)
        except StoreError as exc:
            log.warning("sealing queue %s: writing %s failed: %s", task.queue, key, exc)
            delete_quietly(self.store, key)  # it may have landed (ambiguous); never referenced
            return
        ref = SegmentRef(
            key=key, total=len(task.jobs), consumed=0, front=first_pos, last_pos=task.jobs[-1][1],
            size=len(data), sha256=digest(data), oldest_enqueued_at=task.oldest, epoch=self.epoch,
            sealed_at=self.clock(),
        )
        try:
            self.execute(Seal(queue=task.queue, ref=ref, jobs=task.jobs, after=task.after))
        except ValidationError:
            # The queue moved on (a purge, a requeue): nothing references the object.
            self.abandoned += 1
            delete_quietly(self.store, key)
            return
        except (NotLeader, CommitterStopped):
            raise  # an orphan now, for the next leader's collector
        except EngineError as exc:
            # The outcome is unknown (a commit timeout): leave the object; if
            # the seal did not land, a later leader collects it.
            log.warning("sealing queue %s into %s: %s", task.queue, key, exc)
            return
        self.sealed += 1

    def _refill(self, task: _RefillTask) -> None:
        ref, queue = task.ref, task.queue
        try:
            jobs = self._segment_jobs(ref)
            if jobs[ref.consumed][1] != ref.front:
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
            self._retry_at[queue] = time.monotonic() + self.retry_seconds
            return
        except StoreError as exc:
            log.warning("refilling queue %s from %s: %s", queue, ref.key, exc)
            self._retry_at[queue] = time.monotonic() + self.retry_seconds
            return
        self.problems.pop(queue, None)
        end = min(ref.total, ref.consumed + max(task.want, 1))
        after = jobs[end] if end < ref.total else None
        try:
            self.execute(Refill(
                queue=queue, key=ref.key, consumed=ref.consumed, jobs=tuple(jobs[ref.consumed:end]),
                front=after[1] if after is not None else None,
                oldest=after[0].enqueued_at if after is not None else None,
            ))
        except ValidationError:
            return  # the segment moved on (a purge): the next commit plans again
        except (NotLeader, CommitterStopped):
            raise
        except EngineError as exc:
            log.warning("refilling queue %s from %s: %s", queue, ref.key, exc)
            return
        self.refilled += 1

    def _segment_jobs(self, ref: SegmentRef) -> list[tuple[Job, int]]:
        """The segment's jobs, from the cache (segments never change) or read and verified."""
        cached = self._cache.get(ref.key)
        if cached is not None:
            self._cache.move_to_end(ref.key)
            return cached
        items = read_segment(self.store, ref)
        try:
            jobs = parse_segment_jobs(ref.key, items)
        except DocumentError as exc:
            raise SegmentUnreadable(ref.key, exc.problem) from exc
        self._remember(ref.key, jobs)
        return jobs

    def _remember(self, key: str, jobs: list[tuple[Job, int]]) -> None:
        self._cache[key] = jobs
        while len(self._cache) > CACHED_SEGMENTS:
            self._cache.popitem(last=False)

    def _delete_due(self) -> None:
        now = time.monotonic()
        with self._cond:
            due = [key for deadline, key in self._deletions if deadline <= now]
            self._deletions = [(deadline, key) for deadline, key in self._deletions if deadline > now]
        for key in due:
            self._cache.pop(key, None)
            if delete_quietly(self.store, key):
                self.deleted += 1
            else:
                self.dropped([key])  # try again after another grace

    def _collect(self) -> None:
        """One pass of the orphan collector (see the module)."""
        now = time.monotonic()
        with self._cond:
            referenced = self._referenced
            if referenced is None or now < self._next_collect:
                return
            self._next_collect = now + self.collect_seconds
        try:
            keys = self.store.list(segment_prefix(self.key))
        except StoreError as exc:
            log.warning("collecting orphan segments of %s: %s", self.key, exc)
            return
        suspects: dict[str, float] = {}
        for key in keys:
            epoch = epoch_of_key(key)
            if epoch is None or epoch >= self.epoch or key in referenced:
                continue
            first_seen = self._suspects.get(key, now)
            # Seen unreferenced in two passes at least collect_seconds apart:
            # defence in depth on top of the epoch rule.
            if now - first_seen >= self.collect_seconds and delete_quietly(self.store, key):
                self.collected += 1
                continue
            suspects[key] = first_seen
        self._suspects = suspects

