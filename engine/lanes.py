"""The leader's lane keeper (format 2): moves pending jobs between the
document and segment objects, in the background.

While a node leads, its :class:`LaneKeeper` watches every landed commit
(:meth:`LaneKeeper.committed`, on the committer's writer thread, where it
only plans) and does the work on its own thread:

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

The tasks it plans and the shares of the budget are in
:mod:`engine.lanetasks`; the segment jobs it holds in memory (decoded
windows for refills, encoded jobs for merges and lookups) in
:mod:`engine.lanecache`; a purge that removes jobs from segments is
:mod:`engine.excision`, calling :meth:`LaneKeeper.excise`.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import orjson

from engine.document import FORMAT_SEGMENTS, QueueState
from engine.errors import (
    CommitterNotRunning,
    CommitterStopped,
    EngineError,
    NotLeader,
    PreconditionFailed,
    SegmentUnreadable,
    StoreError,
    ValidationError,
)
from engine.idindex import (
    build_index,
    index_key,
    shared_index_cache,
)
from engine.lanecache import HeldSegments
from engine.lanetasks import MergeTask, RefillTask, SealTask, Shares, Task, WarmTask, id_prefix, last_key
from engine.lookup import SegmentLookup, one_job
from engine.model import Job
from engine.ops import Excision, Merge, Operation, Refill, Seal
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

# A queue whose front is claimed fast gets a deeper one, so that the next
# refill (a segment read and a commit, behind the commit in flight) lands
# before the front runs dry: its front share and refill share grow to the
# jobs claimed in this many seconds (measured between its refills), up to
# MAX_FRONT_BOOST times their size. One batched worker with 256-320 slots
# claims about 3,000 jobs a second; a front of 1,000 refilled below 500
# lasted it ~0.2 s, about one refill's time on a 50 ms store, and its claims
# came back short (bench network, memory+50ms: 2,193 jobs/s; up to twice
# the share, 2,686-3,506; up to four times, 3,147-3,547). Idle or slow
# queues keep the configured shares. And never more than MAX_FRONT_HEADS
# times head_jobs, whatever the share: one queue's front four times deep
# (4,000 jobs, 1.7 MB) with the tail a drain leaves behind made 2.2-2.5 MB
# commits in bench backlog (1.5-2.0 MB at 2,000 jobs). A cap on the boost
# alone (twice) starved a fast queue sharing the budget with a second one
# (a share of 500, so a front of 1,000: bench network, memory+50ms, after
# the push run, 2,316-2,441 jobs/s at 320 slots; 2,974-3,070 at four times).
# And all queues' fronts together aim for at most MAX_FRONTS_HEADS times
# head_jobs: ten queues drained at once each boosted four times their tenth
# (4,000 jobs with shares of 100), and their commits reached 2.05 and
# 2.54 MB in bench backlog. Two and a half leaves one fast queue its 2,000
# beside a second one's share of 500 (the bench network case above).
REFILL_LEAD_SECONDS = 1.0
MAX_FRONT_BOOST = 4.0
MAX_FRONT_HEADS = 2.0
MAX_FRONTS_HEADS = 2.5
# Whether a front is short is counted up to this many times its refill
# threshold (see LaneKeeper._front_short).
FRONT_COUNT_AHEAD = 2


# A new leader reads the id indexes of the segments it found (see
# warm) this many at a time, and checks between batches of WARM_BATCH
# whether it is stopping: a gentle start, next to its first refills.
WARM_THREADS = 4
WARM_BATCH = 32

# A merge waits until its run of small segments holds ``merge_jobs`` jobs, or
# this many segments (a queue with many small shares), whichever comes first.
MAX_MERGE_RUN = 64


class LaneKeeper:
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
        #: Per queue, why its next segment cannot be read (I6), while it cannot.
        self.problems: dict[str, str] = {}
        #: Counters for tests, benchmarks and health pages.
        self.sealed = 0
        self.refilled = 0
        self.abandoned = 0
        self.merged = 0
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
        # Writer-thread memo: per queue, the shape of its lane when a scan last found nothing to merge.
        self._merge_none: dict[str, tuple[int, str, str, bool]] = {}
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
        #: Finds pending jobs by id in the segments, for Broker.get_job and excise.
        self.lookup = SegmentLookup(self._held, self._indexes)
        #: What this keeper deletes: dropped segments after their grace, and orphans.
        self.reaper = SegmentReaper(
            store, key=key, epoch=epoch, tag=self.tag, cond=self._cond, monotonic=monotonic,
            grace_seconds=grace_seconds, collect_seconds=collect_seconds, held=self._held, indexes=self._indexes,
        )
        # Merges copy up to merge_jobs jobs each (~7 MB encoded, more decoded):
        # one at a time, so that many threads sealing and refilling in
        # parallel do not also multiply the leader's memory.
        self._merging = threading.Lock()
        # Writer-thread planning memos (see _refill_task and _seal_task).
        self._front_counted: dict[str, tuple[int, int, int]] = {}
        self._boost: dict[str, float] = {}  # queue -> how much deeper its front is kept (see MAX_FRONT_BOOST)
        self._paced: dict[str, tuple[float, int]] = {}  # queue -> (when its last refill was planned, front aimed for)
        self._seal_fruitless: dict[str, tuple[int, int]] = {}
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
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout)

    # -- called on the committer's writer thread ----------------------------------

    def committed(self, state: QueueState) -> None:
        """Plan work from a landed version. Cheap unless a queue needs work:
        a few dict lookups per queue with pending jobs."""
        self._plan(state, landed=True)

    def writing(self, state: QueueState) -> None:
        """Plan seals, and only seals, from a version whose write has just
        started (the committer's ``on_write``): the segment is then written
        while that write is, and its Seal rides the next write. Planned only
        once a write landed, a seal's segment write and the committer's
        linger ended together, the Seal missed the next write about every
        other time, and each commit carried two or three writes' worth of
        pushes in its tail instead of one (``python -m bench backlog
        --depths 0 --queues 1 --duration 8``: the push window's largest
        commit 2.68-2.79 MB, 1.98-2.55 MB planned here; docs/benchmark.md).

        Safe if the write fails: its Seal then names jobs that are not in
        the document, or that were applied again with other times, and is
        refused (``Seal.parts``); the keeper deletes its object. A fenced
        leader's seals planned here are orphans for the collector, like
        those planned from a landed version (see ``_seal_done``).
        Nothing else is planned from such a version: refills and merges wait
        until it lands, and the collector only trusts landed versions."""
        self._plan(state, landed=False)

    def _plan(self, state: QueueState, *, landed: bool) -> None:
        """Plan from ``state``: a landed version (``landed``), or one whose
        write has just started (see :meth:`writing`)."""
        if state.format != FORMAT_SEGMENTS:
            return
        now = self.monotonic()
        # Every queue with pending jobs shares the budget, not only those
        # holding segments already: otherwise n queues filling up together
        # each keep head_jobs + segment_jobs before their first seal (10
        # queues at depth 0: 12 MB commits in ``python -m bench backlog``).
        queues = {*(q for q, n in state.pending_here.items() if n > 0), *state.lanes}
        shares = Shares.of(self.policy, len(queues))
        tasks: list[Task] = []
        with self._cond:
            busy = {queue for queue in self._busy
                    if queue not in self._applied or not self._applied[queue](state)}
            sealing = {queue: seal for queue in busy if isinstance(seal := self._busy.get(queue), SealTask)}
            behind = {queue: seal for queue, seal in sealing.items() if seal.can_follow(last_key(state, queue))}
            merge_free = landed and (self._merge_slot is None or (
                self._merge_applied is not None and self._merge_applied(state)))
        for queue in queues:
            task: Task | None
            if queue in behind:
                # Only another seal, behind the one not landed yet, and only while
                # the front needs no refill: a refill waits for the chain to
                # land, then comes first (claims outrank a small tail).
                if self._front_short(state, queue, now, shares) is not None:
                    continue
                task = self._seal_task(state, queue, shares, prev=behind[queue])
            elif queue in busy:
                continue
            elif not landed:
                if self._front_short(state, queue, now, shares) is not None:
                    continue  # the refill comes first, planned once a version lands
                task = self._seal_task(state, queue, shares)
            else:
                task = self._refill_task(state, queue, now, shares) or self._seal_task(state, queue, shares)
            if task is not None:
                tasks.append(task)
        merge = None
        if merge_free:
            for queue, refs in state.lanes.items():
                spare_last = queue in sealing or any(t.queue == queue and isinstance(t, SealTask) for t in tasks)
                # Scanning every queue's references on every landed version is
                # writer-thread time (hundreds of references at 5M): a lane whose
                # ends and length did not change since a scan found nothing to
                # merge still has nothing (only merges change its middle).
                shape = (len(refs), refs[0].key, refs[-1].key, spare_last)
                if self._merge_none.get(queue) == shape:
                    continue
                merge = self._merge_task(state, queue, spare_last=spare_last)
                if merge is not None:
                    break
                self._merge_none[queue] = shape
        if landed:
            for queue in [q for q in self._merge_none if q not in state.lanes]:
                del self._merge_none[queue]
            # A queue with no segments left cannot be stopped at one: a problem
            # reported by a refill that raced the drop of its segment is void.
            for queue in [q for q in self.problems if q not in state.lanes]:
                self.problems.pop(queue, None)
        if landed and self._referenced is None and state.lanes:
            # The first landed version of this tenure (only this thread sets
            # _referenced): read the indexes a lookup by id would ask for, of
            # every segment.
            tasks.append(WarmTask(tuple(ref for refs in state.lanes.values() for ref in refs)))
        with self._cond:
            if landed:
                # Hundreds of references at 5M: only a landed version's count.
                referenced = frozenset(ref.key for refs in state.lanes.values() for ref in refs)
                self._referenced = referenced
                self.reaper.seen(referenced)
            for task in tasks:
                if not isinstance(task, WarmTask):
                    self._busy[task.queue] = task
                    self._applied.pop(task.queue, None)
                self._tasks.append(task)
            if merge is not None:
                self._merge_slot, self._merge_applied = merge, None
                self._tasks.append(merge)
            self._cond.notify_all()

    def _refill_task(self, state: QueueState, queue: str, now: float, shares: Shares) -> RefillTask | None:
        """A refill of ``queue``'s front, if it runs short (see _front_short)."""
        ready = self._front_short(state, queue, now, shares)
        if ready is None:
            return None
        # The fronts the other queues with segments were last aimed for (a
        # share if never refilled): what the document holds for them.
        others = sum(self._paced[q][1] if q in self._paced else shares.head for q in state.lanes if q != queue)
        want = self._front_target(queue, now, ready, shares, others=others) - ready
        return RefillTask(queue, state.lanes[queue][0], want=want)

    def _front_short(self, state: QueueState, queue: str, now: float, shares: Shares) -> int | None:
        """How many claimable jobs ``queue``'s front holds if that is below its
        refill share (None: enough, or nothing to refill from). Plans nothing:
        the pace a refill aims by is taken only when one is planned."""
        refs = state.lanes.get(queue)
        if not refs:
            self._front_counted.pop(queue, None)
            self._boost.pop(queue, None)
            self._paced.pop(queue, None)
            return None
        if self._retry_at.get(queue, 0.0) > now:
            return None
        threshold = int(shares.refill * self._boost.get(queue, 1.0))
        here, appended = state.pending_here.get(queue, 0), state.next_pos
        counted = self._front_counted.get(queue)
        if counted is not None:
            # Each job that leaves the front (a claim, a purge, a move to the
            # back) takes one out of ``pending_here``; but jobs appended to
            # the tail meanwhile (pushes, retries, requeues: each takes a new
            # ``pos``) put as many back, so count those as gone too. The
            # difference alone let pushes that kept pace with claims hide a
            # front that ran dry: no refill, the queue stalled for good.
            # Still a lower bound on the front without walking it.
            count, here_then, appended_then = counted
            if count - max(0, here_then - here + appended - appended_then) >= threshold:
                return None
        # Count up to twice the threshold: the bound then lasts about a
        # threshold's worth of claims before the next walk, instead of
        # walking the front again after every commit of a drain (~6 % of
        # the node's CPU under 64 single-job workers, a py-spy profile).
        ready = state.front_ready(queue, self.clock(), FRONT_COUNT_AHEAD * threshold)
        self._front_counted[queue] = (ready, here, appended)
        if ready >= threshold:
            return None
        del self._front_counted[queue]  # the refill changes the front: count again after it
        return ready

    def _front_target(self, queue: str, now: float, ready: int, shares: Shares, *, others: int = 0) -> int:
        """The front a refill planned now aims for: the front share, made
        deeper for a queue claimed fast (see MAX_FRONT_BOOST,
        MAX_FRONT_HEADS and MAX_FRONTS_HEADS), by the pace since its last
        refill was planned; ``others``: the fronts the other queues are
        aimed for. Never below the share. Sets the boost its next plans use."""
        boost = 1.0
        paced = self._paced.get(queue)
        if paced is not None and now - paced[0] > 0.01:
            rate = max(0, paced[1] - ready) / (now - paced[0])  # jobs claimed per second since
            head_jobs = self.policy.head_jobs
            room = (MAX_FRONTS_HEADS * head_jobs - others) / shares.head
            cap = max(1.0, min(MAX_FRONT_BOOST, MAX_FRONT_HEADS * head_jobs / shares.head, room))
            boost = min(cap, max(1.0, rate * REFILL_LEAD_SECONDS / shares.head))
        self._boost[queue] = boost
        target = int(shares.head * boost)
        self._paced[queue] = (now, target)
        return target

    def _seal_task(
        self, state: QueueState, queue: str, shares: Shares, *, prev: SealTask | None = None
    ) -> SealTask | None:
        """The next seal of ``queue``, or None. ``prev``: a seal planned
        earlier that ``state`` does not show yet; the plan then takes only
        jobs after it, and follows it (see ``_busy``)."""
        policy = self.policy
        here = state.pending_here.get(queue, 0)
        if policy.segment_jobs <= 0 or here < shares.head + shares.seal:
            return None
        # A plan that found too few jobs to seal (the rest are delayed, or in
        # the front) is not tried again until the queue grew by a quarter segment.
        # (Keyed by the share too: a share that shrank, as more queues filled
        # up, may find enough at once.) Not behind a seal in flight: its jobs
        # still count in ``here`` and leave when it lands, so a memo taken
        # then would hold back the first plan after it.
        fruitless = self._seal_fruitless.get(queue) if prev is None else None
        if fruitless is not None and fruitless[1] <= shares.seal and here < fruitless[0] + max(1, shares.seal // 4):
            return None
        refs = state.lanes.get(queue)
        after, last = (None, prev.jobs[-1][1]) if prev is not None else (
            (refs[-1].key, refs[-1].last_pos) if refs else (None, None))
        # A delayed job that came due is indexed as ready but keeps its
        # not_before until claimed, and Seal refuses such a job: naming it
        # would get every seal of the queue refused until it is claimed. It
        # stays in the document, like a delayed job that is not due yet.
        jobs = state.jobs
        ready = [entry for entry in state.ready_in_order(queue, after=-1 if last is None else last)
                 if jobs[entry[1]].not_before is None]
        # Without segments, the front stays in the document.
        tail = ready if last is not None else ready[shares.head:]
        if len(tail) < shares.seal:
            if prev is None:
                self._seal_fruitless[queue] = (here, shares.seal)
            return None  # the rest are delayed, or in the front: they stay in the document
        self._seal_fruitless.pop(queue, None)
        # The whole tail, up to merge_jobs, in one segment: a queue has one
        # task at a time, and a seal costs a segment write and a commit
        # (~0.3 s at 50 ms), so sealing one share per task let 2,048
        # submitters outrun it: the tail, and every commit, grew by the push
        # rate x that cycle (and with n queues, shares of segment_jobs / n,
        # n times faster). Sealing what accumulated keeps the tail small, so
        # a small segment_jobs keeps the resting document small and still
        # keeps up (bench backlog, 1 queue, --segments 1024,1000,500: mean
        # commit 2.9 -> 1.2 MB and push 6,510 -> 9,867 ops/s at depth 1M).
        # Not only whole shares: those left up to a share behind, a third
        # of one queue's push commit (2,048 pushes a write, a share of 1,024).
        count = min(len(tail), max(shares.seal, policy.merge_jobs))
        chosen = tuple(tail[:count])
        return SealTask(
            queue=queue,
            jobs=tuple((job_id, pos) for pos, job_id in chosen),
            parts=tuple(state.encoded_job(job_id) for _, job_id in chosen),
            after=after,
            oldest=state.jobs[chosen[0][1]].enqueued_at,
            prev=prev,
        )

    def _merge_task(self, state: QueueState, queue: str, *, spare_last: bool = False) -> MergeTask | None:
        """The first run of adjacent small segments (not the first segment,
        which refills draw from, nor with ``spare_last`` the last, which a
        planned seal names as its ``after``) that is full enough to merge."""
        refs = state.lanes.get(queue)
        candidates = refs[1:-1] if spare_last and refs else refs[1:] if refs else []
        if len(candidates) < 2:
            return None
        limit = self.policy.merge_jobs
        small = self.small_below
        run: list[SegmentRef] = []
        total = 0
        for ref in candidates:
            if ref.consumed or ref.total >= small or total + ref.total > limit:
                if len(run) >= 2 and (total + ref.total > limit or len(run) >= MAX_MERGE_RUN):
                    return MergeTask(queue, tuple(run))
                run, total = [], 0
                if ref.consumed or ref.total >= small:
                    continue
            run.append(ref)
            total += ref.total
            if len(run) >= MAX_MERGE_RUN:
                return MergeTask(queue, tuple(run))
        return None  # the last run may still grow

    @property
    def small_below(self) -> int:
        """Segments of fewer jobs are small: merged with their neighbours.
        One of this many or more is never merged."""
        return max(1, self.policy.merge_jobs // 4)

    # -- the keeper's thread -------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not self._tasks and not self.reaper.due_now():
                    # Never a short poll: an idle leader's threads sleep until
                    # a deletion or the collector's pass is due (I11).
                    deadline = self.reaper.deadline()
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
                self.reaper.delete_due()
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
        (a store error leaves one unread: a lookup reads it). In batches, so that a
        stop is not held up. A keeper does this once a tenure, as a task
        queued behind the first refills and seals; the benchmark calls it."""
        started = self.monotonic()
        read = 0
        for at in range(0, len(refs), WARM_BATCH):
            if self._stopping:
                break
            read += self._indexes.prefetch(refs[at:at + WARM_BATCH], threads=WARM_THREADS)
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
            if self._merge_slot is task:
                self._merge_slot = self._merge_applied = None

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
        leader's collector. Any other error (a commit timeout): left too; if
        it did not land, a later leader collects it."""
        try:
            if not isinstance(outcome, BaseException):
                self.sealed += 1
                self._held.keep(key, task.parts)
            elif isinstance(outcome, ValidationError):
                self.abandoned += 1
                self.reaper.delete_now(key)
            elif not isinstance(outcome, (NotLeader, CommitterStopped)):
                log.warning("queue %s: committing segment %s: %s", task.queue, key, outcome)
        finally:
            self._finished(task)

    def _unsubmitted(self, key: str) -> None:
        """The swap naming ``key`` was refused at submission, so it is in no
        write (a fenced leader whose segment write returned late): delete the
        object now. Left, it waited for a later leader's collector pass, an
        hour on an idle one."""
        self.abandoned += 1
        self.reaper.delete_segment(key)

    def _write_index(self, ref: SegmentRef, parts: Sequence[bytes]) -> None:
        """Write the id index of the segment ``ref`` (engine.idindex) and keep
        it. A failed write is only logged: a lookup then reads the segment
        itself. Deleted with the segment (:meth:`SegmentReaper.delete_segment`); a seal's
        index is written after its Seal was queued, so the segment may have
        been refused and deleted already. A deletion marks its segment gone
        before deleting the index; the write checks the mark before and after
        its put, and deletes what it wrote if the segment went meanwhile, so
        that no index outlives its segment (the collector never takes
        this keeper's own objects)."""
        data, built = build_index(ref.sha256, parts)
        key = index_key(self.key, ref.key)
        if self.reaper.gone(ref.key):
            return
        try:
            self.store.put(key, data, if_none_match=True)
        except StoreError as exc:
            log.warning("writing the id index %s failed: %s", key, exc)
            delete_quietly(self.store, key)  # it may have landed (ambiguous)
            return
        if self.reaper.gone(ref.key):  # deleted while the index was written: it may have missed this one
            delete_quietly(self.store, key)
            return
        self._indexes.put(ref.key, built)

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

    def _holds(self, key: str, data: bytes) -> bool:
        """Whether ``key`` holds exactly ``data``: a write refused because
        the key exists is this very write landing on an earlier attempt
        (deletable, as nothing references it) only then. Otherwise another
        object drew the same key, and it may be referenced."""
        try:
            blob = self.store.get(key)
        except StoreError:
            return False
        return blob is not None and blob.data == data

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
        try:
            write_segment(self.store, key, data)
        except StoreError as exc:
            log.warning("queue %s: writing segment %s failed: %s", queue, key, exc)
            if not isinstance(exc, PreconditionFailed) or self._holds(key, data):
                delete_quietly(self.store, key)  # it may have landed (ambiguous); never referenced
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
            self.abandoned += 1
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
        try:
            self._submit(task, swap(ref), lambda state: any(r.key == key for r in state.lanes.get(queue, ())))
        except CommitterNotRunning:
            self._unsubmitted(key)
            raise
        except ValidationError:
            # The queue moved on (a purge, a requeue, a refill): nothing references the object.
            self.abandoned += 1
            self.reaper.delete_segment(key)
            return None
        except (NotLeader, CommitterStopped):
            raise
        except EngineError as exc:
            # The outcome is unknown (a commit timeout): leave the object; if
            # the swap did not land, a later leader collects it.
            log.warning("queue %s: committing segment %s: %s", queue, key, exc)
            return None
        return key

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
        self.refilled += 1

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
            self.merged += 1

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

    def excise(
        self, job_ids: Sequence[str], refs: Sequence[tuple[str, SegmentRef]], *, all_or_nothing: bool = False,
    ) -> tuple[list[Excision], list[str]]:
        """For a purge by ids (the broker's, see ``Broker.execute``): find
        each of ``job_ids`` pending in ``refs`` (as :meth:`SegmentLookup.find_pending`
        does, within its bound), and write each segment holding some of
        them again, from its first job not moved back on, without them: a
        new object with its id index, this leader's epoch and a new key
        (segments never change). Returns an :class:`~engine.ops.Excision`
        per segment, for the purge to commit, and the ids found in none
        (with ``all_or_nothing``, when there is one, nothing is written: the
        purge will be refused).

        Nothing references the new objects until that purge lands: if it is
        refused or never submitted, hand them to :meth:`discard`. The old
        objects go once a landed version stops referencing them, like a
        merge's. Raises SegmentUnreadable, or StoreError (a write failed, or
        this keeper is stopping); nothing written is left behind then. Any
        thread but the writer's."""
        found: dict[str, tuple[SegmentRef, list[Job]]] = {}
        missing: list[str] = []
        for job_id in dict.fromkeys(job_ids):
            hit = self.lookup.find_pending(job_id, refs)
            if hit is None:
                missing.append(job_id)
            else:
                found.setdefault(hit[2].key, (hit[2], []))[1].append(hit[0])
        if missing and all_or_nothing:
            return [], missing
        queue_of = {ref.key: queue for queue, ref in refs}
        excisions: list[Excision] = []
        try:
            for key, (ref, jobs) in found.items():
                excisions.append(self._rewrite_without(queue_of[key], ref, jobs))
        except BaseException:
            self.discard(excisions)
            raise
        return excisions, missing

    def _rewrite_without(self, queue: str, ref: SegmentRef, jobs: list[Job]) -> Excision:
        """Segment ``ref`` of ``queue`` written again without ``jobs`` (see :meth:`excise`)."""
        needles = tuple(id_prefix(job.id) for job in jobs)
        parts = self._held.parts(ref)
        kept = [(index, part) for index, part in enumerate(parts[ref.consumed:], ref.consumed)
                if not part.startswith(needles)]
        if not kept:
            return Excision(queue=queue, key=ref.key, consumed=ref.consumed, ref=None, jobs=tuple(jobs))
        first_job, first_pos, _ = one_job(ref, orjson.loads(kept[0][1]), kept[0][0])
        _, last_pos, _ = one_job(ref, orjson.loads(kept[-1][1]), kept[-1][0])
        rest = [part for _, part in kept]
        new = self._write_segment(MergeTask(queue, (ref,)), rest, first_pos=first_pos, last_pos=last_pos,
                                  oldest=first_job.enqueued_at)
        if new is None:  # the write failed (logged), or this keeper is stopping
            raise StoreError(f"writing segment {ref.key} again without the purged jobs failed")
        self._write_index(new, rest)
        self._held.keep(new.key, tuple(rest))
        return Excision(queue=queue, key=ref.key, consumed=ref.consumed, ref=new, jobs=tuple(jobs))

    def discard(self, excisions: Sequence[Excision]) -> None:
        """Delete the new objects of ``excisions`` whose purge did not land
        (refused, or never submitted): nothing references them."""
        for excision in excisions:
            if excision.ref is not None:
                self.reaper.delete_segment(excision.ref.key)
