"""Long-poll claims that wait for work, woken in proportion to what became claimable.

A broker keeps one :class:`WaitingClaims`. A claim that found nothing joins
the line of each queue it asks for and parks on a future of its own. After
every landed commit the committer's writer thread calls :meth:`committed`
with the state, and the registry counts, per queue with someone in line, how
many jobs are claimable now (at most as many as the line could take, so the
count never walks the backlog) and wakes that many claims' worth of waiters,
first come first served. A woken waiter runs its own claim through the
committer (so a lease is only ever handed out by a landed commit, I1); if it
finds nothing it parks again, keeping its place in line. With nothing
claimable nobody is woken and no claim runs: an idle node with any number of
waiting workers commits only its heartbeat (I11).

Jobs that become due with no commit (a delayed push, a retry's backoff) wake
waiters through an alarm set for the earliest ``not_before`` the last commit
showed. A waiter that comes back empty while the last count showed jobs that
no parked waiter was woken for (a claim in flight could not be woken) claims
again at once, at most as often as such jobs were counted. Counts and due
times may overestimate (stale index entries); an overestimate costs a claim
that finds nothing and writes nothing, never a missed job.

Thread-safety: :meth:`committed` and :meth:`close` run on the writer or
control thread; waiters live on any number of event loops. All shared state is
under one lock, and a waiter is woken with ``call_soon_threadsafe`` on its own
loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Awaitable, Callable
from datetime import datetime

from engine.document import QueueState
from engine.errors import EngineError
from engine.model import ClaimedJob, utc_now
from engine.optypes import Claim

__all__ = ["WaitingClaims"]

# An alarm for a due time fires this much after it, so that the claim it
# wakes sees the job as due on the committer's clock.
DUE_MARGIN_SECONDS = 0.002


class _Waiter:
    """One parked long-poll claim. Its fields change only under the registry's lock."""

    __slots__ = ("error", "future", "loop", "op", "unused", "woken", "woken_for")

    def __init__(self, op: Claim, loop: asyncio.AbstractEventLoop) -> None:
        self.op = op
        self.loop = loop
        self.future: asyncio.Future[None] = loop.create_future()
        self.woken = True  # registered while its first claim runs: nobody needs to wake it
        self.woken_for: str | None = None  # the queue whose count woke it
        self.unused = False  # woken, and has not started its claim yet
        self.error: EngineError | None = None


class WaitingClaims:
    """The long-poll claims waiting on one broker. See the module docstring.

    :meth:`claim` is the entry point (async); :meth:`committed` is the
    committer's ``on_commit`` hook; :meth:`close` answers every waiter in line
    with an error (the broker stepped down or stopped). Claims that arrive
    later learn it from their own first claim (the broker raises NotLeader).
    """

    def __init__(self, *, clock: Callable[[], datetime] = utc_now) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._tickets = itertools.count()
        # Per queue, its waiters in arrival order (a dict is an ordered set).
        self._lines: dict[str, dict[int, _Waiter]] = {}
        self._ids: dict[_Waiter, int] = {}
        self._loops: dict[asyncio.AbstractEventLoop, int] = {}  # waiters per event loop
        # Per queue: claimable jobs the last count found that no parked waiter
        # was woken for, and the due times of its delayed jobs (earliest first).
        self._surplus: dict[str, int] = {}
        self._due: dict[str, list[datetime]] = {}
        # The earliest due time per queue (not paused) that the last commit
        # showed, lined or not: a waiter that lines up for a queue learns
        # from it when to look again, without waiting for another commit.
        self._next_due: dict[str, datetime] = {}
        self._alarms: dict[asyncio.AbstractEventLoop, tuple[datetime, asyncio.TimerHandle]] = {}
        self.wakes = 0  # waiters woken to claim, for tests and benchmarks

    # -- the waiter's side (on its event loop) ----------------------------------

    async def claim(
        self, execute: Callable[[Claim], Awaitable[list[ClaimedJob]]], op: Claim, wait: float
    ) -> list[ClaimedJob]:
        """Run ``op`` with ``execute`` until it leases a job or ``wait`` seconds
        have passed; returns the jobs, or [] when the time ran out.

        Claims once at once, then only when woken (see the module docstring).
        Raises what ``execute`` raises, and the error :meth:`close` was given
        (NotLeader on a step-down) while it was in line. Cancelling it leaves the
        line at once; a wake it did not use passes on to the next waiter.
        """
        if wait <= 0:
            return await execute(op)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        # In line (as woken, so not woken again) before the first claim: a
        # commit during it is then counted against this queue's line, and its
        # jobs show up as surplus when the claim comes back empty.
        waiter = self._enter(op, loop)
        try:
            while True:
                with self._lock:
                    waiter.unused = False
                jobs = await execute(op)
                if jobs or loop.time() >= deadline:
                    return jobs
                if not await self._park(waiter, deadline - loop.time()):
                    return []
        finally:
            self._leave(waiter)

    def _enter(self, op: Claim, loop: asyncio.AbstractEventLoop) -> _Waiter:
        waiter = _Waiter(op, loop)
        with self._lock:
            ticket = next(self._tickets)
            self._ids[waiter] = ticket
            self._loops[loop] = self._loops.get(loop, 0) + 1
            earliest: datetime | None = None
            for queue in op.queues:
                self._lines.setdefault(queue, {})[ticket] = waiter
                due = self._due.get(queue)
                if due is None and queue in self._next_due:
                    due = self._due[queue] = [self._next_due[queue]]
                if due and (earliest is None or due[0] < earliest):
                    earliest = due[0]
            if earliest is not None:
                self._set_alarms(earliest)
        return waiter

    async def _park(self, waiter: _Waiter, timeout: float) -> bool:
        """Wait to be woken; True to claim again, False when the time is up.
        Raises the error the waiter was woken with."""
        with self._lock:
            if waiter.error is not None:
                raise waiter.error
            waiter.woken, waiter.future = False, waiter.loop.create_future()
            for queue in waiter.op.queues:
                if self._surplus.get(queue, 0) > 0:
                    self._surplus[queue] -= waiter.op.max_jobs
                    waiter.woken, waiter.woken_for, waiter.unused = True, queue, True
                    self.wakes += 1
                    return True
            future = waiter.future
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(future, timeout)
        with self._lock:
            if waiter.error is not None:
                raise waiter.error
            # Woken just as the time ran out: claim all the same, or the
            # jobs counted for it would wait for the next commit.
            return waiter.woken

    def _leave(self, waiter: _Waiter) -> None:
        with self._lock:
            ticket = self._ids.pop(waiter)
            for queue in waiter.op.queues:
                line = self._lines.get(queue)
                if line is not None:
                    line.pop(ticket, None)
                    if not line:
                        del self._lines[queue]
                        self._surplus.pop(queue, None)
                        self._due.pop(queue, None)
            if waiter.unused and waiter.woken_for is not None and waiter.error is None:
                # Cancelled after it was woken, before it claimed: the jobs
                # counted for it go to the next in line.
                self._wake_line(waiter.woken_for, waiter.op.max_jobs)
            left = self._loops[waiter.loop] = self._loops[waiter.loop] - 1
            if not left:
                del self._loops[waiter.loop]
                alarm = self._alarms.pop(waiter.loop, None)
                if alarm is not None:
                    alarm[1].cancel()  # we are on that loop

    # -- the broker's side (writer and control threads) -------------------------

    def committed(self, state: QueueState) -> None:
        """The committer's ``on_commit`` hook: runs on the writer thread, which
        owns ``state``. Counts what each line could claim and wakes that many
        waiters. Cost: O(waiters + what they could claim), never the backlog."""
        with self._lock:
            # A queue that hands out nothing until a commit says otherwise
            # (paused, or at its concurrency limit) has no due time for a
            # waiter to wait for: the commit that changes that counts again.
            # One whose rate limit's window is used up is due when the
            # window closes.
            now = self.clock()
            self._next_due = {queue: when for queue, when in state.next_due().items() if not _holds(state, queue)}
            for queue, counters in state.queues.items():
                if counters.rate_limit is not None and not _holds(state, queue):
                    reopens = state.rate_reopens(queue, now)
                    if reopens is not None:
                        self._next_due[queue] = reopens
            if not self._lines:
                return
            earliest: datetime | None = None
            for queue, line in self._lines.items():
                if _holds(state, queue):
                    self._surplus[queue], self._due[queue] = 0, []
                    continue
                capacity = sum(w.op.max_jobs for w in line.values())
                self._surplus[queue] = self._wake_line(queue, state.claimable(queue, now, capacity))
                reopens = state.rate_reopens(queue, now)
                if reopens is not None:
                    # Nothing starts before the window closes; then as many
                    # as the next window allows may (an overestimate costs
                    # claims that find nothing and write nothing).
                    due = self._due[queue] = [reopens] * min(capacity, state.room(queue, reopens) or 0)
                else:
                    due = self._due[queue] = state.due_times(queue, capacity)
                if due and (earliest is None or due[0] < earliest):
                    earliest = due[0]
            if earliest is not None:
                self._set_alarms(earliest)

    def close(self, error: EngineError) -> None:
        """Answer every claim in line with ``error`` (the broker stepped down or
        stopped): a parked one at once, one claiming when its claim comes back
        empty. Any thread."""
        with self._lock:
            for waiter in self._ids:
                waiter.error = error
                self._resolve(waiter)
            self._surplus.clear()
            self._due.clear()

    def waiting(self) -> int:
        """How many long-poll claims are in line, parked or claiming (for tests and health pages)."""
        with self._lock:
            return len(self._ids)

    def parked(self) -> int:
        """How many of them are parked: waiting to be woken, not claiming."""
        with self._lock:
            return sum(1 for waiter in self._ids if not waiter.woken)

    # -- internals (under the lock) ----------------------------------------------

    def _wake_line(self, queue: str, jobs: int) -> int:
        """Wake parked waiters of ``queue`` in arrival order until they could
        take ``jobs``. Returns the jobs no waiter was woken for."""
        line = self._lines.get(queue)
        if line is None or jobs <= 0:
            return max(jobs, 0)
        for waiter in line.values():
            if jobs <= 0:
                break
            if waiter.woken:
                continue  # claiming already, or woken for another queue
            waiter.woken, waiter.woken_for, waiter.unused = True, queue, True
            self.wakes += 1
            self._resolve(waiter)
            jobs -= waiter.op.max_jobs
        return max(jobs, 0)

    def _resolve(self, waiter: _Waiter) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits there any more
            waiter.loop.call_soon_threadsafe(_set_result, waiter.future)

    def _set_alarms(self, when: datetime) -> None:
        """Have every loop with waiters run :meth:`_due_reached` at ``when``."""
        for loop in self._loops:
            armed = self._alarms.get(loop)
            if armed is None or when < armed[0]:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._arm, loop, when)

    def _arm(self, loop: asyncio.AbstractEventLoop, when: datetime) -> None:
        """On ``loop``: set its alarm for ``when`` unless one is set earlier."""
        with self._lock:
            armed = self._alarms.get(loop)
            if armed is not None and armed[0] <= when:
                return
            if armed is not None:
                armed[1].cancel()
            delay = max((when - self.clock()).total_seconds(), 0.0) + DUE_MARGIN_SECONDS
            self._alarms[loop] = (when, loop.call_later(delay, self._due_reached, loop))

    def _due_reached(self, loop: asyncio.AbstractEventLoop) -> None:
        """An alarm went off: wake waiters for the jobs now due, and set the
        next alarm. Due jobs nobody was woken for count as surplus."""
        with self._lock:
            self._alarms.pop(loop, None)
            now = self.clock()
            earliest: datetime | None = None
            for queue, due in self._due.items():
                ready = sum(1 for t in due if t <= now)
                if ready:
                    del due[:ready]
                    self._surplus[queue] = self._surplus.get(queue, 0) + self._wake_line(queue, ready)
                if due and (earliest is None or due[0] < earliest):
                    earliest = due[0]
            if earliest is not None:
                self._set_alarms(earliest)


def _holds(state: QueueState, queue: str) -> bool:
    """Whether ``queue`` hands out no job whatever is due, until a commit
    changes it: it is paused, or at its concurrency limit (a completion's
    commit makes room). A used-up rate window is not a hold: time ends it."""
    counters = state.queues.get(queue)
    return counters is not None and (counters.paused or state.at_concurrency_limit(queue))


def _set_result(future: asyncio.Future[None]) -> None:
    if not future.done():  # it timed out or was cancelled meanwhile
        future.set_result(None)
