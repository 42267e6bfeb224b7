"""The lane keeper's planning (format 2): what to seal, refill and merge,
decided on the committer's writer thread from each version.

:class:`LanePlanning` is the half of :class:`~engine.lanes.LaneKeeper` that
runs on the writer thread: :meth:`LanePlanning.committed` (a landed version)
and :meth:`LanePlanning.writing` (a version whose write just started) plan
tasks (:mod:`engine.lanetasks`) with a few dictionary lookups per queue and
queue them for the keeper's threads, which do the store I/O
(:mod:`engine.lanes`). It holds the writer thread's memos; every other field
it reads is the keeper's, declared below, and shared with its threads under
``_cond``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

from engine.document import QueueState
from engine.lanetasks import DelayedMergeTask, MergeTask, RefillTask, SealTask, Shares, Task, WarmTask, last_key
from engine.policy import Policy
from engine.reaper import SegmentReaper
from engine.segments import SegmentRef, newest_first

__all__ = [
    "FRONT_COUNT_AHEAD",
    "MAX_FRONTS_HEADS",
    "MAX_FRONT_BOOST",
    "MAX_FRONT_HEADS",
    "MAX_MERGE_RUN",
    "REFILL_LEAD_SECONDS",
    "LanePlanning",
]

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
# A merge waits until its run of small segments holds ``merge_jobs`` jobs, or
# this many segments (a queue with many small shares), whichever comes first.
MAX_MERGE_RUN = 64


class LanePlanning:
    """The writer-thread half of :class:`~engine.lanes.LaneKeeper` (see the module)."""

    # The keeper's fields this half reads or sets (see LaneKeeper.__init__).
    policy: Policy
    monotonic: Callable[[], float]
    clock: Callable[[], datetime]
    problems: dict[str, str]
    reaper: SegmentReaper
    _cond: threading.Condition
    _tasks: list[Task]
    _busy: dict[str, Task]
    _delayed_busy: dict[str, Task]
    delayed_problems: dict[str, str]
    _delay_tasks: Callable[..., list[Task]]
    _applied: dict[str, Callable[[QueueState], bool]]
    _merge_slot: MergeTask | None
    _merge_applied: Callable[[QueueState], bool] | None
    _retry_at: dict[str, float]
    _referenced: frozenset[str] | None

    def _init_planning(self) -> None:
        """The writer thread's memos (see _refill_task, _seal_task and _plan)."""
        self._front_counted: dict[str, tuple[int, int, int, int]] = {}
        self._boost: dict[str, float] = {}  # queue -> how much deeper its front is kept (see MAX_FRONT_BOOST)
        self._paced: dict[str, tuple[float, int]] = {}  # queue -> (when its last refill was planned, front aimed for)
        self._seal_fruitless: dict[str, tuple[int, int]] = {}
        # Per queue, the shape of its lane when a scan last found nothing to merge.
        self._merge_none: dict[str, tuple[int, str, str, bool]] = {}

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
        if not state.segmented:
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
            delayed_busy = set(self._delayed_busy)
            delayed_merging = any(isinstance(t, DelayedMergeTask) for t in self._delayed_busy.values())
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
        delayed = self._delay_tasks(state, shares, delayed_busy, merging=delayed_merging) if landed else []
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
            for queue in [q for q in self.delayed_problems if q not in state.delays]:
                self.delayed_problems.pop(queue, None)
        if landed and self._referenced is None and (state.lanes or state.delays):
            # The first landed version of this tenure (only this thread sets
            # _referenced): read the indexes a lookup by id would ask for, of
            # every segment, delayed ones too.
            tasks.append(WarmTask(tuple(ref for _, ref in newest_first(state.lanes, state.delays))))
        with self._cond:
            queued = len(self._tasks)
            if landed:
                # Hundreds of references at 5M: only a landed version's count.
                referenced = frozenset((*(ref.key for refs in state.lanes.values() for ref in refs),
                                        *(ref.key for refs in state.delays.values() for ref in refs)))
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
            for task in delayed:
                self._delayed_busy[task.queue] = task
                self._tasks.append(task)
            # Wake a thread per task added, no more: this runs on every commit,
            # twice, and waking all the keeper's threads each time cost the
            # node ~5 % of its GIL in a one-job-per-request drain (py-spy
            # --gil), with nothing for them to take. A thread already awake
            # takes a task before it waits again (LaneKeeper._run), so none is
            # missed; the reaper wakes them for its own deadlines (seen).
            if len(self._tasks) > queued:
                self._cond.notify(len(self._tasks) - queued)

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
        # A delayed refill (format 3) puts jobs back into ``pending_here``
        # with their old pos, appending nothing: the bound below would take
        # them for front jobs still there, and a front that claims emptied
        # meanwhile went unrefilled (the segments machine). Count again then.
        away = state.delayed_away(queue) if state.delays else 0
        if counted is not None and counted[3] != away:
            counted = None
        if counted is not None:
            # Each job that leaves the front (a claim, a purge, a move to the
            # back) takes one out of ``pending_here``; but jobs appended to
            # the tail meanwhile (pushes, retries, requeues: each takes a new
            # ``pos``) put as many back, so count those as gone too. The
            # difference alone let pushes that kept pace with claims hide a
            # front that ran dry: no refill, the queue stalled for good.
            # Still a lower bound on the front without walking it.
            count, here_then, appended_then, _ = counted
            if count - max(0, here_then - here + appended - appended_then) >= threshold:
                return None
        # Count up to twice the threshold: the bound then lasts about a
        # threshold's worth of claims before the next walk, instead of
        # walking the front again after every commit of a drain (~6 % of
        # the node's CPU under 64 single-job workers, a py-spy profile).
        ready = state.front_ready(queue, self.clock(), FRONT_COUNT_AHEAD * threshold)
        self._front_counted[queue] = (ready, here, appended, away)
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
        fruitless = self._seal_fruitless.get(queue) if prev is None else None
        if fruitless is not None and here < fruitless[0]:
            # Jobs left the document since (claimed, purged, or delayed ones
            # sealed into delayed segments): count the growth from here. Kept
            # at its high-water mark, a memo taken while a seeded backlog of
            # delayed jobs sat in the document held back the seals of the
            # pushes after it until the document held as many again: 5.35 MB
            # commits in ``python -m bench backlog --delayed 3600``.
            self._seal_fruitless[queue] = fruitless = (here, fruitless[1])
        if policy.segment_jobs <= 0 or here < shares.head + shares.seal:
            return None
        # A plan that found too few jobs to seal (the rest are delayed, or in
        # the front) is not tried again until the queue grew by a quarter segment.
        # (Keyed by the share too: a share that shrank, as more queues filled
        # up, may find enough at once.) Not behind a seal in flight: its jobs
        # still count in ``here`` and leave when it lands, so a memo taken
        # then would hold back the first plan after it.
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
