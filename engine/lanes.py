"""The leader's lane keeper (format 2): moves pending jobs between the
document and segment objects, in the background.

While a node leads, its :class:`LaneKeeper` watches every landed commit
(:meth:`LaneKeeper.committed`, on the committer's writer thread, where it
only plans: :mod:`engine.laneplans`) and does the work on its own threads:

* **seal**: a queue whose pending jobs in the document pass ``head_jobs +
  segment_jobs`` gets its tail (the jobs after its front, or after its last
  segment) written to a new segment object, then a
  :class:`~engine.ops.Seal` commit swaps them for the reference. The next
  seal of the queue is planned behind it before it lands (pipelined, see
  ``LaneKeeper._busy``);
* **refill**: a queue with segments whose front holds fewer than
  ``refill_below`` claimable jobs gets the next jobs of its first segment
  back, by a :class:`~engine.ops.Refill` commit; the read happens before the
  front runs dry, so claims do not wait for it while the front has jobs;
* **merge**: adjacent small segments that have not been refilled from are
  merged into one of up to ``merge_jobs`` jobs (a :class:`~engine.ops.Merge`
  commit swaps the references), so that a backlog of millions needs a few
  hundred references, not thousands. A merged segment, and a seal too large
  to be merged, gets an id index (:mod:`engine.idindex`), written before its
  Merge is committed or just after its Seal is queued, so that a job in it
  is found by id (:meth:`SegmentLookup.find_pending`, :mod:`engine.lookup`);
* **delete** and **collect**: segments a landed commit dropped go after a
  grace, and orphans no version can reference any more are collected, by
  the keeper's :class:`~engine.reaper.SegmentReaper` (see
  :mod:`engine.reaper`).

Seal and Refill are conditional on the queue not having moved since they
were planned; when one is refused, nothing changed, and a sealed object is
deleted at once (it was never referenced). The keeper never delays an
acknowledgement: pushes land in the tail and claims take from the front as
before. A segment that is missing or does not verify stops that queue's
refills (never its pushes, nor other queues) and is reported in
:attr:`LaneKeeper.problems` until it reads correctly again (I6).

This module holds :class:`LaneKeeper` itself: its state, its lifecycle,
its threads' loop (and the warm-up of a new tenure), and the writing of
segment objects. Its base classes hold the rest: writing their id indexes,
and again when that failed (:class:`~engine.indexwrites.IndexWrites`); the
planning on the writer thread is :class:`~engine.laneplans.LanePlanning`;
the seal, refill and merge steps on its threads,
:class:`~engine.lanesteps.LaneSteps`; and rewriting segments for a purge
by ids, :class:`~engine.excision.LaneExcision` (:mod:`engine.excision`,
which calls :meth:`LaneKeeper.excise`). The tasks it plans and the shares
of the budget are in :mod:`engine.lanetasks`; the segment jobs it holds in
memory (decoded windows for refills, encoded jobs for merges and lookups)
in :mod:`engine.lanecache`.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from engine.delayplans import DelayPlanning
from engine.delaysteps import DelaySteps
from engine.document import QueueState
from engine.errors import (
    CommitterNotRunning,
    CommitterStopped,
    CommitTimeout,
    EngineError,
    NotLeader,
    PreconditionFailed,
    StoreError,
    ValidationError,
)
from engine.excision import LaneExcision
from engine.idindex import (
    shared_index_cache,
)
from engine.indexrepair import IndexRepairs
from engine.indexwrites import IndexWrites
from engine.lanecache import HeldSegments
from engine.laneplans import LanePlanning
from engine.lanesteps import LaneSteps
from engine.lanetasks import (
    DelayedMergeTask,
    DelayedRefillTask,
    DelayedSealTask,
    MergeTask,
    RefillTask,
    SealTask,
    Task,
    WarmTask,
)
from engine.lookup import SegmentLookup
from engine.ops import Operation
from engine.policy import Policy
from engine.reaper import SegmentReaper
from engine.segments import (
    SegmentRef,
    delete_quietly,
    digest,
    encode_segment,
    segment_key,
    write_segment,
)
from engine.stores.base import ObjectStore

log = logging.getLogger(__name__)

# A new leader reads the id indexes of the segments it found (see
# warm) this many at a time, and checks between batches of WARM_BATCH
# whether it is stopping: a gentle start, next to its first refills.
WARM_THREADS = 4
WARM_BATCH = 32



class LaneKeeper(LanePlanning, DelayPlanning, LaneSteps, DelaySteps, LaneExcision, IndexWrites):
    """Seals, refills, deletes and collects segments for one leader (see
    the module). ``execute(op)`` runs an operation through the leader's
    committer and returns its outcome or raises (``GroupCommitter.execute``);
    ``submit(op, done)`` queues a Seal without waiting (an operation
    submitted after it returns is applied after it) and calls
    ``done(outcome)`` (its result or its EngineError) once it landed or
    failed, on the committer's writer thread (``GroupCommitter.submit``), so
    that a seal holds a keeper thread only while its segment is written
    (without it, seals go through ``execute``, which tests use);
    ``epoch`` is the broker epoch this leader took over with.

    Thread-safe: :meth:`committed` and :meth:`dropped` run on the
    committer's writer thread and never block on I/O; everything else runs
    on the keeper's own thread. :meth:`stop` is idempotent.
    ``monotonic`` is the clock of its deadlines (``time.monotonic``; a
    replayed test's own, which the keeper's threads must not then run on).
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        key: str,
        policy: Policy,
        execute: Callable[..., Any],
        epoch: int,
        submit: Callable[[Operation, Callable[[Any], None]], None] | None = None,
        clock: Callable[[], datetime],
        grace_seconds: float,
        collect_seconds: float,
        retry_seconds: float,
        threads: int = 16,
        monotonic: Callable[[], float] = time.monotonic,
        delayed_lead_seconds: float = 2.0,
    ) -> None:
        self.store = store
        self.key = key
        self.policy = policy
        self.execute = execute
        self.submit = submit or self._submit_by_execute
        self.epoch = epoch
        # Written into every key this keeper makes (engine.segments.keeper_of_key):
        # its collector tells what an earlier keeper of this epoch left behind.
        self.tag = secrets.token_hex(4)
        self.clock = clock
        self.retry_seconds = retry_seconds
        self.threads = threads
        # Every deadline and pace below (deletions, retries, the collector,
        # a refill's boost) reads this clock. Tests that replay a sequence
        # of steps (the Hypothesis machines) pass one that follows their
        # model time: with the real clock, how fast the steps ran changed
        # what a refill took, and Hypothesis refused a test whose steps
        # drew differently on a replay (FlakyStrategyDefinition).
        self.monotonic = monotonic
        # Format 3: a delayed segment is refilled once its first job is due
        # within this many seconds (the broker's: the refill lead plus a
        # heartbeat, since an idle leader plans once a heartbeat).
        self.delayed_lead_seconds = delayed_lead_seconds
        #: Per queue, why its next segment cannot be read (I6), while it cannot.
        self.problems: dict[str, str] = {}
        #: Counters for tests, benchmarks and health pages.
        self.sealed = 0
        self.refilled = 0
        self.abandoned = 0
        self.merged = 0
        # The keeper's threads (and a refill's parallel writers) count at
        # once: ``+=`` on an attribute is not atomic, and the tests decide on
        # these counts (a seal that neither landed nor was refused).
        self._counting = threading.Lock()
        self._cond = threading.Condition()
        self._tasks: list[Task] = []
        # Queues with a task planned or running. Once the task's operation is
        # submitted, ``_applied`` tells when a landed version shows it: from
        # then on the queue is planned again (the task only tidies up), so a
        # backlog pushed at once is sealed commit after commit, not one
        # segment per heartbeat.
        self._busy: dict[str, Task] = {}
        self._applied: dict[str, Callable[[QueueState], bool]] = {}
        #
        # Seals are pipelined: while a queue's busy task is a seal that has
        # not landed, the next landed version plans the next seal behind it
        # (``prev``): its segment is written while the one before is written
        # or committed, and its Seal, conditional on that one (``after`` its
        # key), is submitted right after it. A queue under a push burst then
        # has a seal landing about every commit, not every write + commit +
        # plan cycle, and its tail stays small. Never more than two seals of
        # a queue outstanding beyond the version planned from (three not yet
        # landed while that version's write is in flight, see ``writing``):
        # the next is planned only behind a seal that can still land (its
        # ``after`` is the queue's last segment in that version, so the one
        # before it is in it). Otherwise it was
        # refused, or will be, and every seal behind it would be too: a burst
        # would keep a chain of doomed seals going and its tail would never
        # be sealed.
        # The one merge planned or running (merges copy up to merge_jobs jobs
        # each: one at a time keeps the leader's memory flat), outside
        # ``_busy`` so that a queue whose seals follow one another under a
        # push burst still gets its small segments merged. A merge never
        # takes a queue's first segment (refills draw from it) nor, while a
        # seal of that queue is planned or in flight, its last (the seal's
        # ``after``), so it does not race them.
        self._merge_slot: MergeTask | None = None
        self._merge_applied: Callable[[QueueState], bool] | None = None
        # Format 3: per queue, its one delayed seal or refill planned or
        # running, apart from ``_busy``: a queue's delayed jobs move beside
        # its FIFO lane. Held until the task's commit landed or failed.
        self._delayed_busy: dict[str, Task] = {}
        self._init_planning()
        self._init_delay_planning()
        self._init_delay_steps()
        self._retry_at: dict[str, float] = {}  # queue -> monotonic time of the next refill attempt
        self._referenced: frozenset[str] | None = None  # keys the latest landed version references
        # Decoded windows of the segments refills read, and the encoded jobs
        # of the segments this keeper sealed or a lookup by id read.
        self._held = HeldSegments(store)
        # The id indexes of the segments (engine.idindex), for lookups by id:
        # the process's one cache of them, which the dashboard and this
        # leader's next tenure use too.
        self._indexes = shared_index_cache(store, key)
        self.warmed = 0  # id indexes read as the tenure started (see warm)
        #: The segments this keeper owes an id index (engine.indexrepair).
        self.repairs = IndexRepairs(self._cond, monotonic=monotonic, delay_seconds=retry_seconds)
        #: Finds pending jobs by id in the segments, for Broker.get_job and excise.
        self.lookup = SegmentLookup(self._held, self._indexes, unindexed=self.repairs.owe)
        #: What this keeper deletes: dropped segments after their grace, and orphans.
        self.reaper = SegmentReaper(
            store, key=key, epoch=epoch, tag=self.tag, cond=self._cond, monotonic=monotonic,
            grace_seconds=grace_seconds, collect_seconds=collect_seconds, held=self._held, indexes=self._indexes,
        )
        # Merges copy up to merge_jobs jobs each (~7 MB encoded, more decoded):
        # one at a time, so that many threads sealing and refilling in
        # parallel do not also multiply the leader's memory.
        self._merging = threading.Lock()
        self._stopping = False
        self._threads: list[threading.Thread] = []

    @property
    def deleted(self) -> int:
        """Segments deleted after a landed commit dropped them."""
        return self.reaper.deleted

    @property
    def collected(self) -> int:
        """Orphan segments collected."""
        return self.reaper.collected

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> LaneKeeper:
        """Start ``threads`` threads. A queue has one refill or seal planned
        at a time, plus the seal it follows (pipelined, see ``_busy``), and
        the keeper one merge: a slow merge of one queue does not hold up
        another's refill. A seal waits for the one it follows, which was
        queued before it, so the threads cannot all wait on each other.

        16 by default. A seal holds its thread only while its segment is
        written (see :meth:`_seal`); refills and merges hold theirs until
        their commit lands. More threads measured more leader memory: at
        one queue and 1M pending, 16 threads peaked at 232 MB, 24 at 265 MB
        and 48 at 375 MB (the target is 300 MB)."""
        for i in range(self.threads):
            thread = threading.Thread(target=self._run, name=f"lanes:{self.key}:{i}", daemon=True)
            self._threads.append(thread)
            thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        self.reaper.stop()
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout)

    # -- the keeper's thread -------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while (not self._stopping and not self._tasks and not self.reaper.due_now()
                       and not self.repairs.due_now()):
                    # Never a short poll: an idle leader's threads sleep until
                    # a deletion, the collector's pass or an index repair is due (I11).
                    deadlines = [d for d in (self.reaper.deadline(), self.repairs.deadline()) if d is not None]
                    deadline = min(deadlines) if deadlines else None
                    self._cond.wait(None if deadline is None else max(0.01, deadline - self.monotonic()))
                if self._stopping:
                    return
                task = self._tasks.pop(0) if self._tasks else None
            handed = False  # a seal whose outcome now goes to _seal_done
            try:
                if isinstance(task, SealTask):
                    handed = self._seal(task)
                elif isinstance(task, RefillTask):
                    self._refill(task)
                elif isinstance(task, MergeTask):
                    self._merge(task)
                elif isinstance(task, WarmTask):
                    self.warm(task.refs)
                elif isinstance(task, DelayedSealTask):
                    self._seal_delayed(task)
                elif isinstance(task, DelayedRefillTask):
                    self._refill_delayed(task)
                elif isinstance(task, DelayedMergeTask):
                    self._merge_delayed(task)
                self.reaper.delete_due()
                self._repair_due()
                self.reaper.collect()
            except (NotLeader, CommitterStopped):
                return  # the broker stops this keeper on a step-down
            except Exception:  # a bug: log it, keep the keeper alive (I8)
                log.exception("lane keeper for %s: a step failed unexpectedly", self.key)
            finally:
                if task is not None and not handed:
                    self._finished(task)

    def warm(self, refs: Sequence[SegmentRef]) -> int:
        """Read the id indexes of ``refs`` not cached yet (engine.idindex),
        so that the first lookup by id after a takeover does not read them
        all while its client waits (~630 of them at 5 million jobs: seconds
        on a store with 50 ms requests). Returns how many it tried to read
        (a store error leaves one unread: a lookup reads it). A segment found
        without a usable index (its write failed under an earlier leader, or
        it predates indexes) is owed one (:attr:`repairs`). In batches, so that a
        stop is not held up. A keeper does this once a tenure, as a task
        queued behind the first refills and seals; the benchmark calls it."""
        started = self.monotonic()
        read = 0
        for at in range(0, len(refs), WARM_BATCH):
            if self._stopping:
                break
            batch = refs[at:at + WARM_BATCH]
            read += self._indexes.prefetch(batch, threads=WARM_THREADS)
            for ref in batch:
                if self._indexes.lacks(ref.key):  # never written, or damaged: owed
                    self.repairs.owe(ref)
        self.warmed += read
        if read:
            log.info("lane keeper for %s: read %d id indexes in %.2f s", self.key, read, self.monotonic() - started)
        return read

    def _finished(self, task: Task) -> None:
        """``task`` is over (done, refused, given up): its queue, or the
        merge slot, is free for the next plan."""
        with self._cond:
            if self._busy.get(task.queue) is task:
                del self._busy[task.queue]
                self._applied.pop(task.queue, None)
            if self._delayed_busy.get(task.queue) is task:
                del self._delayed_busy[task.queue]
            if self._merge_slot is task:
                self._merge_slot = self._merge_applied = None

    def _count(self, counter: str) -> None:
        """Add one to the counter named ``counter`` (``sealed``,
        ``abandoned``, …), from any of the keeper's threads."""
        with self._counting:
            setattr(self, counter, getattr(self, counter) + 1)

    def _unsubmitted(self, key: str) -> None:
        """The swap naming ``key`` was refused at submission, so it is in no
        write (a fenced leader whose segment write returned late): delete the
        object now. Left, it waited for a later leader's collector pass, an
        hour on an idle one."""
        self._count("abandoned")
        self.reaper.delete_segment(key)

    def _prev_queued(self, task: SealTask | MergeTask) -> bool:
        """For a seal planned behind another: wait until that one is in the
        committer's queue (submitted first, it is applied first); False if
        it gave up before writing its segment, or this keeper is stopping."""
        prev = task.prev if isinstance(task, SealTask) else None
        if prev is None:
            return True
        while not prev.queued.wait(0.1):
            if self._stopping:
                return False
        return bool(prev.key)

    def _put_new(self, queue: str, key: str, data: bytes) -> bool:
        """Create the segment object ``key`` of ``queue`` with ``data``
        (``If-None-Match``). False if the write failed (logged): the object
        is then deleted if it may have landed, since nothing references it
        (a key that exists with other bytes is another object's, and left)."""
        try:
            write_segment(self.store, key, data)
        except StoreError as exc:
            log.warning("queue %s: writing segment %s failed: %s", queue, key, exc)
            if not isinstance(exc, PreconditionFailed) or self._holds(key, data):
                delete_quietly(self.store, key)  # it may have landed (ambiguous); never referenced
            return False
        return True

    def _write_segment(
        self, task: SealTask | MergeTask, parts: Sequence[bytes], *, first_pos: int, last_pos: int,
        oldest: datetime,
    ) -> SegmentRef | None:
        """Write ``parts`` as a new segment of the task's queue; its reference,
        once the seal this one follows (if any) is queued. None if the write
        failed, or if the task must not go on (the seal it follows gave up,
        or this keeper is stopping): the object is then deleted, since no
        version can name it."""
        queue = task.queue
        key = segment_key(self.key, queue=queue, epoch=self.epoch, first_pos=first_pos, keeper=self.tag)
        data = encode_segment(queue, first_pos, parts)
        if not self._put_new(queue, key, data):
            return None
        ref = SegmentRef(
            key=key, total=len(parts), consumed=0, front=first_pos, last_pos=last_pos, size=len(data),
            sha256=digest(data), oldest_enqueued_at=oldest, epoch=self.epoch, sealed_at=self.clock(),
        )
        if isinstance(task, SealTask):
            task.key[:] = [key]  # before it is queued: the seal behind it names it as its ``after``
        if not self._prev_queued(task) or self._stopping:
            # The seal it follows never wrote its segment: its jobs are still in
            # the document, and these must not be sealed before them (I7). Or
            # this keeper stopped (a step-down) while the segment was written.
            # Either way nothing was submitted: no version can name the object.
            self._count("abandoned")
            delete_quietly(self.store, key)
            return None
        return ref

    def _write_and_swap(
        self, task: MergeTask, parts: Sequence[bytes], *, first_pos: int, last_pos: int,
        oldest: datetime, swap: Callable[[SegmentRef], Operation],
    ) -> str | None:
        """Write ``parts`` as a new segment of the task's queue, then commit
        ``swap(ref)`` (a Merge) and wait for it. Returns the new key once the
        swap is applied; None if it is not, after deleting the object when
        nothing can reference it. Raises NotLeader/CommitterStopped: the
        object is then an orphan, for the next leader's collector (a
        NotLeader swap may have landed before the takeover read the
        document), except when the swap was refused at submission
        (CommitterNotRunning): it is in no write, and the object is deleted
        first."""
        queue = task.queue
        ref = self._write_segment(task, parts, first_pos=first_pos, last_pos=last_pos, oldest=oldest)
        if ref is None:
            return None
        key = ref.key
        self._write_index(ref, parts)
        landed = self._swap(queue, key, lambda: self._submit(
            task, swap(ref), lambda state: any(r.key == key for r in state.lanes.get(queue, ()))))
        return key if landed else None

    def _swap(self, queue: str, key: str, commit: Callable[[], object], *, also: Sequence[str] = ()) -> bool:
        """Run ``commit``, the operation that makes a version reference the
        new segment ``key`` of ``queue`` (a Merge, a SealDelayed), and the
        new segments ``also`` with it (a RefillDelayed's rests, each treated
        as ``key``), and wait for it. True once applied. Refused (ValidationError: the queue moved
        on, a purge, a requeue, a refill): nothing references the object,
        which is deleted; False. Refused at submission (CommitterNotRunning):
        it is in no write, and the object is deleted before the error is
        raised. NotLeader/CommitterStopped are raised, leaving the object
        for the next leader's collector (the swap may have landed before the
        takeover read the document). Any other EngineError is logged and
        gives False: a commit timeout leaves the object (the swap may still
        land; if it does not, a later leader collects it); any other error,
        the committer's answer, leaves it to the next landed version
        (``SegmentReaper.doubtful``)."""
        try:
            commit()
        except CommitterNotRunning:
            for each in (key, *also):
                self._unsubmitted(each)
            raise
        except ValidationError:
            for each in (key, *also):
                self._count("abandoned")
                self.reaper.delete_segment(each)
            return False
        except (NotLeader, CommitterStopped):
            raise
        except EngineError as exc:
            log.warning("queue %s: committing segment %s: %s", queue, key, exc)
            if not isinstance(exc, CommitTimeout):
                # The committer's answer: the swap will not be applied again,
                # and the next landed version says whether it is referenced.
                # (A timeout is no answer: the swap may still be applied by a
                # later write, so its objects stay for a later leader.)
                for each in (key, *also):
                    self.reaper.doubtful(each)
            return False
        return True
