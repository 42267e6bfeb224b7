"""Which pending jobs a claim may take, and how many: the claim indexes of
a :class:`~engine.document.QueueState` read in FIFO order (I7), behind a
queue's segments, with delayed jobs promoted as they come due, and within
its concurrency and rate limits (:meth:`Eligibility.take_eligible`,
:meth:`Eligibility.claimable`, :meth:`Eligibility.front_ready`,
:meth:`Eligibility.delayed_due`).

Every field it reads is the state's, declared below and set up in
``QueueState.__init__``; it changes no job, only tidies the indexes (stale
entries dropped, due delayed jobs promoted) and, in
:meth:`Eligibility.note_starts`, a rate limit's window. Split from
:mod:`engine.document`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from datetime import datetime
from itertools import islice
from typing import Any

from engine.model import Job, QueueCounters
from engine.segments import SegmentRef

__all__ = ["Eligibility"]

# Promoted delayed entries a queue keeps before its list is first compacted.
_PROMOTED_MIN_CAP = 1024


def _in_order[E: tuple[Any, ...]](heap: list[E]) -> Iterator[E]:
    """The entries of ``heap`` (a heapq list), smallest first, found from its
    root: taking the first k costs O(k log k), whatever the heap's size. The
    heap must not change while this is read."""
    frontier = [(heap[0], 0)] if heap else []
    while frontier:
        entry, i = heapq.heappop(frontier)
        yield entry
        for child in (2 * i + 1, 2 * i + 2):
            if child < len(heap):
                heapq.heappush(frontier, (heap[child], child))


class Eligibility:
    """The claim-side reads of a :class:`~engine.document.QueueState` (see the module)."""

    # The state's fields this part reads (see QueueState.__init__).
    queues: dict[str, QueueCounters]
    jobs: dict[str, Job]
    pos: dict[str, int]
    lanes: dict[str, list[SegmentRef]]
    running_here: dict[str, int]
    dirty: bool
    _ready: dict[str, list[tuple[int, str]]]
    _delayed: dict[str, list[tuple[datetime, int, str]]]
    _promoted: dict[str, list[tuple[int, str]]]
    _promoted_cap: dict[str, int]

    def frontier(self, queue: str) -> int | None:
        """The ``pos`` of the queue's first job still in a segment (None: it
        has none). Only pending jobs before it may be claimed."""
        refs = self.lanes.get(queue)
        return refs[0].front if refs else None

    def _is_current(self, job_id: str, pos: int) -> Job | None:
        job = self.jobs.get(job_id)
        if job is None or job.status != "pending" or self.pos[job_id] != pos:
            return None
        return job

    def room(self, queue: str, now: datetime) -> int | None:
        """How many more of ``queue``'s jobs may start running at ``now``
        under its concurrency limit (``max_running``, against the jobs
        running) and its rate limit (what its window has left); 0 when
        either is used up, None when it has neither."""
        counters = self.queues.get(queue)
        if counters is None:
            return None
        room: int | None = None
        if counters.max_running is not None:
            room = max(counters.max_running - self.running_here.get(queue, 0), 0)
        if counters.rate_limit is not None:
            left = counters.rate_limit.left(now)
            room = left if room is None else min(room, left)
        return room

    def at_concurrency_limit(self, queue: str) -> bool:
        """Whether ``queue`` runs as many jobs as its ``max_running`` allows
        (or more): only a job leaving running makes room, not time."""
        counters = self.queues.get(queue)
        return (counters is not None and counters.max_running is not None
                and self.running_here.get(queue, 0) >= counters.max_running)

    def rate_reopens(self, queue: str, now: datetime) -> datetime | None:
        """When ``queue``'s rate limit lets jobs start again, if its window
        is used up at ``now``; None otherwise."""
        counters = self.queues.get(queue)
        if counters is None or counters.rate_limit is None:
            return None
        return counters.rate_limit.reopens(now)

    def note_starts(self, queue: str, count: int, now: datetime) -> None:
        """Count ``count`` jobs of ``queue`` started at ``now`` against its
        rate limit's window (nothing when it has none)."""
        counters = self.queues.get(queue)
        if counters is not None and counters.rate_limit is not None and count > 0:
            counters.rate_limit = counters.rate_limit.started(now, count)
            self.dirty = True

    def take_eligible(self, queues: Iterable[str], limit: int, now: datetime, *,
                      in_order: bool = False) -> list[Job]:
        """Return up to ``limit`` pending jobs of ``queues`` that may run at
        ``now``, oldest position first across all the queues (I7), or with
        ``in_order`` every job the first queue may give before any of the
        second's, and so on; and no more of a queue than its concurrency and
        rate limits leave room for (:meth:`room`). The jobs stay pending; the
        caller changes them (and counts them against the rate limits,
        :meth:`note_starts`)."""
        if in_order:
            taken: list[Job] = []
            for queue in queues:
                if len(taken) >= limit:
                    break
                taken += self.take_eligible((queue,), limit - len(taken), now)
            return taken
        heads: list[tuple[int, str, str]] = []  # (pos, id, queue)
        rooms: dict[str, int] = {}
        for queue in queues:
            room = self.room(queue, now)
            if room is not None:
                if room == 0:
                    continue
                rooms[queue] = room
            self._promote_due(queue, now)
            head = self._ready_head(queue)
            if head is not None:
                heads.append((head[0], head[1], queue))
        heapq.heapify(heads)
        taken = []
        # Each job has one current entry: a seal drops its jobs' entries
        # (tidy_ready), so a job restored from a segment at its old pos gets
        # the only one.
        while heads and len(taken) < limit:
            _, job_id, queue = heapq.heappop(heads)
            ready = self._ready[queue]
            heapq.heappop(ready)
            taken.append(self.jobs[job_id])
            if queue in rooms:
                rooms[queue] -= 1
                if rooms[queue] == 0:
                    continue  # its limit reached: its next job stays for a later claim
            head = self._ready_head(queue)
            if head is not None:
                heapq.heappush(heads, (head[0], head[1], queue))
        return taken

    def _ready_head(self, queue: str) -> tuple[int, str] | None:
        ready = self._ready.get(queue)
        while ready:
            pos, job_id = ready[0]
            # Valid while the job is pending at that position: any change that
            # could make it ineligible (a retry, a requeue) also moves it.
            if self._is_current(job_id, pos) is not None:
                # Behind the queue's segments: their jobs come first (I7).
                front = self.frontier(queue)
                return ready[0] if front is None or pos < front else None
            heapq.heappop(ready)
        return None

    def _promote_due(self, queue: str, now: datetime) -> None:
        delayed = self._delayed.get(queue)
        while delayed and delayed[0][0] <= now:
            not_before, pos, job_id = heapq.heappop(delayed)
            job = self._is_current(job_id, pos)
            if job is not None and job.not_before == not_before:
                heapq.heappush(self._ready.setdefault(queue, []), (pos, job_id))
                promoted = self._promoted.setdefault(queue, [])
                promoted.append((pos, job_id))
                if len(promoted) > self._promoted_cap.get(queue, _PROMOTED_MIN_CAP):
                    self._live_promoted(queue)  # amortized O(1) a promotion

    def _live_promoted(self, queue: str) -> list[tuple[int, str]]:
        """The queue's promoted delayed jobs still pending here with their
        delay (claims, retries and requeues make entries stale), after
        dropping the stale entries and setting the next compaction at twice
        what is left. O(entries)."""
        live = [(pos, job_id) for pos, job_id in self._promoted.get(queue, ())
                if (job := self._is_current(job_id, pos)) is not None and job.not_before is not None]
        if live:
            self._promoted[queue] = live
        else:
            self._promoted.pop(queue, None)
        self._promoted_cap[queue] = max(_PROMOTED_MIN_CAP, 2 * len(live))
        return live

    def delayed_due(self, queue: str, by: datetime, limit: int) -> int:
        """How many of the queue's pending jobs in the document have a delay
        that is due by ``by``, counted up to ``limit``: those already due and
        waiting for their FIFO turn, and those still in the delayed index.
        Walks the promoted entries (about what it counts: a bound on them is
        what the caller keeps) and at most ``2 * limit + 64`` delayed-index
        entries from the heap's root; past that budget it answers ``limit``
        (an overestimate, never an underestimate). Changes no job."""
        if limit <= 0:
            return 0
        seen = {job_id for _, job_id in self._live_promoted(queue)}
        budget = 2 * limit + 64
        for not_before, pos, job_id in _in_order(self._delayed.get(queue, [])):
            if len(seen) >= limit or not_before > by:
                break  # in order: every entry left is due later
            budget -= 1
            if budget < 0:
                return limit
            job = self._is_current(job_id, pos)
            if job is not None and job.not_before == not_before:
                seen.add(job_id)  # a set: the index may hold an entry twice
        return min(len(seen), limit)

    def claimable(self, queue: str, now: datetime, limit: int) -> int:
        """How many jobs of ``queue`` a claim at ``now`` could lease, counted up
        to ``limit`` and to the room its concurrency and rate limits leave
        (the paused flag aside). Never walks much more than
        ``limit`` index entries: with many stale entries it may answer
        ``limit`` when fewer are claimable (an overestimate, never an
        underestimate). Changes no job; tidies the indexes as a claim would."""
        self._promote_due(queue, now)
        room = self.room(queue, now)
        if room is not None:
            limit = min(limit, room)  # a queue at its limit has nothing to hand out
        if limit <= 0 or self._ready_head(queue) is None:
            return 0
        count, budget = 0, 2 * limit + 64  # entries to look at before giving up and answering ``limit``
        front = self.frontier(queue)
        for pos, job_id in self._ready[queue]:
            if budget == 0:
                return limit
            budget -= 1
            if (front is None or pos < front) and self._is_current(job_id, pos) is not None:
                count += 1
                if count == limit:
                    break
        return count

    def front_ready(self, queue: str, now: datetime, limit: int) -> int:
        """How many jobs of ``queue`` a claim at ``now`` could take from its
        front (before its segments; every eligible job when it has none),
        counted exactly up to ``limit``. Walks only the index entries below
        the first segment's ``front``, from the heap's root: O(limit) when
        the front is full, whatever the size of the tail. Tidies the indexes
        as a claim would; changes no job."""
        self._promote_due(queue, now)
        heap = self._ready.get(queue)
        if not heap or limit <= 0:
            return 0
        front = self.frontier(queue)
        seen: set[str] = set()
        stack = [0]
        while stack and len(seen) < limit:
            i = stack.pop()
            pos, job_id = heap[i]
            if front is not None and pos >= front:
                continue  # a heap's children are never smaller: nothing below here
            if self._is_current(job_id, pos) is not None:
                seen.add(job_id)
            stack.extend(child for child in (2 * i + 1, 2 * i + 2) if child < len(heap))
        return len(seen)

    def due_times(self, queue: str, limit: int) -> list[datetime]:
        """The not_before of up to ``limit`` delayed jobs of ``queue``, earliest
        first, in O(limit log limit) whatever the backlog. Entries may be stale
        (the job changed since): each one is a wake-up that may find nothing."""
        if limit <= 0:
            return []
        return [not_before for not_before, _, _ in islice(_in_order(self._delayed.get(queue, [])), limit)]

    def next_due(self) -> dict[str, datetime]:
        """Per queue with delayed jobs, the earliest not_before indexed (it may
        be stale: the job changed since). O(queues)."""
        return {queue: heap[0][0] for queue, heap in self._delayed.items() if heap}
