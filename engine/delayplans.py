"""The lane keeper's planning of delayed segments (format 3), on the
committer's writer thread.

:class:`DelayPlanning` is a base class of :class:`~engine.lanes.LaneKeeper`.
From each landed version, :meth:`DelayPlanning._delay_tasks` plans, per
queue, at most one of:

* a :class:`~engine.lanetasks.DelayedRefillTask` when the queue's first
  delayed segment (the one due first) is due within ``delayed_lead_seconds``
  (its first jobs, at most the queue's front share; the others are written
  to a new delayed segment in its place, refilled in turn)
  (the refill lead plus a heartbeat: an idle leader lands a version at least
  once a heartbeat, and plans only from landed versions). Planned whatever
  the policy says, so that turning delayed segments off never strands jobs;
* a :class:`~engine.lanetasks.DelayedSealTask` when the queue holds more
  delayed jobs in the document than its share of ``head_jobs``: those due
  after ``now + delayed_horizon_seconds`` (after two refill leads once it
  holds more than ``PRESSED_SHARES`` shares; never within two leads), past
  the soonest-due share, in due order, up to ``merge_jobs``, if
  they make at least a seal share;
* a :class:`~engine.lanetasks.DelayedMergeTask` when a queue has a run of
  adjacent (in due order) small delayed segments, none due within the
  horizon, that together make a segment of up to ``merge_jobs`` jobs: each
  delayed reference costs every commit about 330 bytes, and seals under a
  burst of pushes, or over many queues, make small ones.

See docs/format.md, "Delayed jobs beyond a window". Every field it reads is
the keeper's, declared below.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from engine.document import QueueState
from engine.laneplans import MAX_MERGE_RUN
from engine.lanetasks import DelayedMergeTask, DelayedRefillTask, DelayedSealTask, Shares, Task
from engine.policy import Policy
from engine.segments import DelayedRef

__all__ = ["PRESSED_SHARES", "DelayPlanning"]

# A queue whose delayed-index entries in the document exceed this many front
# shares seals its delayed jobs due beyond two refill leads, not only those
# beyond the horizon: the document then holds about this many shares of
# delayed jobs at most (4,000 jobs, about 1.7 MB, at a share of 1,000), plus
# those due within two leads.
PRESSED_SHARES = 4


class DelayPlanning:
    """The delayed half of the keeper's planning (see the module)."""

    # The keeper's fields this half reads (see LaneKeeper.__init__).
    policy: Policy
    clock: Callable[[], datetime]
    monotonic: Callable[[], float]
    delayed_lead_seconds: float
    _delayed_retry_at: dict[str, float]

    def _init_delay_planning(self) -> None:
        # Per queue, how many delayed-index entries it had when a plan last
        # found too few jobs to seal: not planned again until it grew by a
        # quarter of a seal share. Time only brings jobs closer to due, so a
        # fruitless plan stays fruitless until delayed jobs arrive.
        self._delayed_fruitless: dict[str, int] = {}
        # Per queue, the shape of its delayed references when a scan last found nothing to merge.
        self._delayed_merge_none: dict[str, tuple[int, str, str]] = {}

    def _delay_tasks(self, state: QueueState, shares: Shares, busy: set[str], *, merging: bool = False) -> list[Task]:
        """The delayed refills, seals and merges to run after the landed
        ``state``; ``busy``: queues with a delayed task planned or running;
        ``merging``: a delayed merge is planned or running (one at a time for
        the whole keeper, as pending merges: each waits for the keeper's one
        merge lock on a thread of its own, and ten queues' merges queued at
        once held ten of its threads while seals waited)."""
        now = self.clock()
        due_by = now + timedelta(seconds=self.delayed_lead_seconds)
        later = self.monotonic()
        tasks: list[Task] = []
        for queue, refs in state.delays.items():
            if queue in busy or refs[0].first_due > due_by or self._delayed_retry_at.get(queue, 0.0) > later:
                continue
            # Only while fewer than a front share of the queue's jobs due by
            # then are here, and at most a share at a time: a delayed segment
            # of 16,384 jobs coming back whole was a 7 MB commit, and a batch
            # due at once (a newsletter, a retry storm's backoff running out)
            # came back a share every landed version until the document held
            # all of it. So jobs due together wait in their segment, in due
            # order, until claims make room.
            if state.delayed_due(queue, due_by, shares.head) < shares.head:
                tasks.append(DelayedRefillTask(queue, refs[0], take=shares.head))
        for queue in [q for q in self._delayed_fruitless if q not in state.queues]:
            del self._delayed_fruitless[queue]
        horizon = self.policy.delayed_horizon_seconds
        if horizon <= 0 or self.policy.segment_jobs <= 0:
            return tasks
        planned = {task.queue for task in tasks}
        # Never within two refill leads: a segment comes back a lead before
        # its first job is due, and its jobs due within the next lead must not
        # be sealed again at once (a horizon shorter than the lead made every
        # landed version seal what the one before refilled).
        soon = now + timedelta(seconds=2 * self.delayed_lead_seconds)
        beyond = max(soon, now + timedelta(seconds=horizon))
        for queue, count in state.delayed_entries().items():
            if queue in busy or queue in planned:
                continue
            # Past PRESSED_SHARES front shares of delayed jobs here the horizon
            # gives way to the two leads: a batch pushed due within the
            # horizon (100,000 reminders due in 30 s) otherwise stayed whole
            # in the document, every commit writing it, until claimed.
            cutoff = soon if count > PRESSED_SHARES * shares.head else beyond
            task = self._delayed_seal_task(state, queue, count, shares, cutoff)
            if task is not None:
                tasks.append(task)
                planned.add(queue)
        for queue in [q for q in self._delayed_merge_none if q not in state.delays]:
            del self._delayed_merge_none[queue]
        for queue, refs in state.delays.items():
            if merging:
                break
            if queue not in busy and queue not in planned and len(refs) >= 2:
                merge = self._delayed_merge_task(queue, refs, beyond)
                if merge is not None:
                    tasks.append(merge)
                    merging = True
        return tasks

    def _delayed_merge_task(self, queue: str, refs: list[DelayedRef], beyond: datetime) -> DelayedMergeTask | None:
        """The first run of adjacent small delayed segments of ``queue``, none
        due before ``beyond`` (a merged segment due soon would be written
        again at once, as share-sized segments, by its first refill), that is full
        enough to merge: up to ``merge_jobs`` jobs, the last run only once
        the next reference ends it (it may still grow), as pending merges."""
        shape = (len(refs), refs[0].key, refs[-1].key)
        if self._delayed_merge_none.get(queue) == shape:
            # Seals, refills, merges and purges of a queue change the shape. What
            # it misses (a reference in the middle written again by a purge by
            # id, time bringing one within the horizon) only delays a merge.
            return None
        limit = self.policy.merge_jobs
        small = max(1, limit // 4)
        run: list[DelayedRef] = []
        total = 0
        for ref in refs:
            fits = ref.total < small and ref.first_due > beyond
            if fits and total + ref.total <= limit and len(run) < MAX_MERGE_RUN:
                run.append(ref)
                total += ref.total
                if len(run) >= MAX_MERGE_RUN:  # long enough, as for pending merges
                    return DelayedMergeTask(queue, tuple(run))
                continue
            if len(run) >= 2:  # this reference ends the run
                return DelayedMergeTask(queue, tuple(run))
            run, total = ([ref], ref.total) if fits else ([], 0)
        self._delayed_merge_none[queue] = shape  # the last run may still grow
        return None

    def _delayed_seal_task(
        self, state: QueueState, queue: str, count: int, shares: Shares, beyond: datetime,
    ) -> DelayedSealTask | None:
        """A delayed seal of ``queue``, whose delayed index holds ``count``
        entries (an upper bound on its delayed jobs here), of jobs due after
        ``beyond``; None if there are too few."""
        if count <= shares.head:
            return None
        memo = self._delayed_fruitless.get(queue)
        if memo is not None:
            if count < memo:
                self._delayed_fruitless[queue] = memo = count  # grow from the lowest point seen
            if count < memo + max(1, shares.seal // 4):
                return None
        entries = state.delayed_in_order(queue)
        # The soonest-due share stays in the document whatever the horizon,
        # so that a queue's next delayed jobs never wait on a refill.
        later = [entry for entry in entries[shares.head:] if entry[0] > beyond]
        if len(later) < shares.seal:
            self._delayed_fruitless[queue] = count
            return None
        self._delayed_fruitless.pop(queue, None)
        # In due order, the soonest first: a reference then covers a narrow
        # span of due times, and comes back in one piece when it is due.
        chosen = later[:self.policy.merge_jobs]
        return DelayedSealTask(
            queue=queue,
            jobs=tuple((job_id, pos) for _, pos, job_id in chosen),
            parts=tuple(state.encoded_job(job_id) for _, _, job_id in chosen),
            first_due=chosen[0][0],
            last_due=chosen[-1][0],
        )
