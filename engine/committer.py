"""Layer 2: group commit. One writer thread, many callers, one write per batch.

The committer keeps the document in memory and reads it only at start and
after a failed write. Operations submitted while a write is in flight wait for
it; the writer thread applies them to the in-memory state as they arrive (so
the CPU work overlaps the write's latency), and as soon as the write lands it
writes all of them with one conditional PUT. Every caller is answered only
after the write containing its operation has landed (I1); an operation that
changed nothing is answered once every write before it has landed.

A failed write is settled by re-reading the document:

* it records our writer id and sequence number: the write landed (a retried
  PUT reported a lost race, or the reply timed out) — answer the batch;
* otherwise: discard the in-memory state, adopt what was read, and re-apply
  the same operations (job ids are fixed in the operations, so pushes are not
  duplicated). A lost race is counted and reported to ``on_lost_race``.

Listeners (``on_commit``, ``on_departures``) run on the writer thread after a
write lands, before its callers are answered: they must be quick and must
not block (hand work to another thread). One that raises is logged and
ignored; commits go on. ``on_write`` runs on the writer thread just after a
write has started, with the state it writes; the same rules apply, and that
state may never land.

A document that cannot be parsed is never overwritten (I6): the batch fails
with DocumentError and the committer keeps refusing until it can read it. A
document that this node read (or whose creation marker exists) and that is
gone now is never re-created (I10): the batch fails with DocumentMissing, and
so does every later one until an operator restores the document.

A write that takes three times as long as the median of the last landed ones
(and at least ``hedge_seconds``) is sent a second time, the same conditional
PUT (a *hedge*, see ``CommitWrites._hedge``): on a remote store one slow
request, a stalled connection or a slow node, would otherwise hold every
caller of the write. Both are conditioned on the same version, so at most
one lands; the first that does decides the write.

Every operation is answered exactly once, whatever escapes (I8). An operation
whose transition or encoding raises something unexpected is refused alone
with OperationFailed: the state it may have half changed is thrown away, the
document is read again and the rest of its batch is re-applied and written.

This module holds :class:`GroupCommitter`: its tuning constants, its
lifecycle and its writer thread's loop (taking, staging and lingering,
then writing; every step guarded). Its base classes hold the rest: the
callers' half, submitting operations and waiting for them, is
:class:`~engine.commitcalls.CommitCalls`; applying, writing, settling a
write and recovering after a failed one, :class:`~engine.commitwrites.CommitWrites`.
What it tracks while it works is in :mod:`engine.pending`, and finding the
operation that broke a batch in :mod:`engine.isolation`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from engine.backoff import READ_RETRIES, jittered
from engine.client import AsyncQueueMethods, QueueClient
from engine.commitcalls import CommitCalls
from engine.commitwrites import HEDGE_WINDOW, MAX_STRAGGLERS, CommitWrites
from engine.document import QueueState
from engine.errors import CommitterStopped, EngineError
from engine.lineage import Presence
from engine.model import Departure, new_writer_id, utc_now
from engine.ops import Merge, Refill, Seal, Tick
from engine.pending import (
    FAILED,
    Batches,
    CommitStats,
    Pending,
    Write,
    answer,
    fail,
    printable,
)
from engine.policy import DOCUMENT_KEY, Policy
from engine.stores.base import ObjectStore

log = logging.getLogger(__name__)

__all__ = ["CommitStats", "GroupCommitter"]

DEFAULT_MAX_BATCH = 20_000
DEFAULT_MAX_RETRIES = 50
DEFAULT_RETRY_BACKOFF_SECONDS = 0.005
DEFAULT_RETRY_BACKOFF_CAP_SECONDS = 1.0
# After a write lands and its callers are answered, the next write waits (at
# most this long, and at most as long as the last write took) while answered
# callers keep sending new operations, so that they join it instead of waiting
# a whole extra write. It stops waiting as soon as arrivals pause.
DEFAULT_MAX_LINGER_SECONDS = 0.05
# ...and at most this share of the last write's duration. With 2,048 asyncio
# callers on one loop, answering and re-submitting all of them takes ~20 ms of
# CPU: waiting up to one whole write for them lets every caller ride every
# write (one cohort), instead of half of them missing the linger and waiting
# two writes each time (measured: 20.5k -> 22.7k pushes/s, p99 157 -> 143 ms).
# The linger still ends as soon as every answered caller is back, or when
# arrivals pause for idle_gap_seconds.
LINGER_SHARE = 1.0
# Operations no caller waits on: the broker's heartbeat Tick and the lane
# keeper's seals, refills and merges. Staged alone, they ride the next write
# of a caller instead of writing on their own (see GroupCommitter._linger_end).
# A Seal written at once went out alone while the callers just answered came
# back, every other write, and they waited for it: with it here, 2,048
# producers on one queue ride every write (python -m bench backlog --depths 0
# --queues 1 --duration 8, three runs each: 12,689-14,332 -> 14,940-16,124
# pushes/s, p99 181-228 -> 148-174 ms). (It once let ten queues' commits grow
# from 3 to 5 MB, while seals waited on keeper threads held by commits; they
# no longer hold one, see LaneKeeper._seal.)
_BACKGROUND = (Tick, Refill, Merge, Seal)
DEFAULT_IDLE_GAP_SECONDS = 0.005
# Hedged writes: off by default in the engine (a folder's disk is no faster
# the second time); the app turns them on for remote stores (QUEUE_STORE_HEDGE_SECONDS).
DEFAULT_HEDGE_SECONDS = 0.0
# The longest wait before a hedge: a write slower than an hour is not one a
# hedge helps, and the writer thread waits on this (Condition.wait refuses
# timeouts past threading.TIMEOUT_MAX, which would stop the writer, I8).
MAX_HEDGE_SECONDS = 3600.0


class GroupCommitter(CommitCalls, CommitWrites, QueueClient, AsyncQueueMethods):
    """Applies operations in batches, one conditional write per batch.

    ``start()`` reads the document (raising DocumentError if it is unreadable)
    and starts the writer thread; ``stop()`` is idempotent and, by default,
    commits what was already submitted before returning. Sync methods block the
    calling thread; the ``a``-prefixed methods await without blocking the loop.
    ``claim`` accepts ``wait_seconds`` (the :class:`QueueClient` contract) and
    ignores it: it answers once its batch is written, with [] if nothing is
    claimable (the broker's HTTP API does the long polling).
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        key: str = DOCUMENT_KEY,
        policy: Policy | None = None,
        clock: Callable[[], datetime] = utc_now,
        writer_id: str | None = None,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_retries: int = DEFAULT_MAX_RETRIES,
        retry_backoff_seconds: float = DEFAULT_RETRY_BACKOFF_SECONDS,
        on_lost_race: Callable[[QueueState], None] | None = None,
        on_load: Callable[[QueueState], None] | None = None,
        on_commit: Callable[[QueueState], None] | None = None,
        on_write: Callable[[QueueState], None] | None = None,
        on_departures: Callable[[list[Departure]], None] | None = None,
        on_segments_dropped: Callable[[list[str]], None] | None = None,
        on_segments_doubtful: Callable[[list[str]], None] | None = None,
        max_linger_seconds: float = DEFAULT_MAX_LINGER_SECONDS,
        idle_gap_seconds: float = DEFAULT_IDLE_GAP_SECONDS,
        hedge_seconds: float = DEFAULT_HEDGE_SECONDS,
        presence: Presence | None = None,
        stats: CommitStats | None = None,
    ) -> None:
        self.store = store
        self.key = key
        self.policy = policy or Policy()
        self.clock = clock
        self.writer_id = writer_id or new_writer_id()
        self.max_batch = max_batch
        self.max_retries = max_retries
        self.retry_backoff_seconds = retry_backoff_seconds
        self.on_lost_race = on_lost_race
        self.on_load = on_load
        self.on_commit = on_commit
        self.on_write = on_write
        # Jobs that left the document, per landed write (completed, purged,
        # dead letters dropped); only kept when someone listens.
        self.on_departures = on_departures
        # Keys of segment objects that a landed write stopped referencing
        # (format 2): they may be deleted now (engine.lanes does, after a grace).
        self.on_segments_dropped = on_segments_dropped
        # Keys of segment objects that a write whose outcome was never learned
        # would have stopped referencing (its callers were failed while it may
        # have landed): the next landed version says whether they are still
        # referenced (engine.reaper, SegmentReaper.doubtful).
        self.on_segments_doubtful = on_segments_doubtful
        self.max_linger_seconds = max_linger_seconds
        self.idle_gap_seconds = idle_gap_seconds
        # The least time a write waits before its hedge is sent (0: never; see CommitWrites._hedge).
        if not 0 <= hedge_seconds <= MAX_HEDGE_SECONDS:
            raise ValueError(f"hedge_seconds must be in [0, {MAX_HEDGE_SECONDS:g}] (0: off), got {hedge_seconds!r}")
        self.hedge_seconds = hedge_seconds
        self._attempts_out = 0  # attempts at writes sent and not answered, stragglers included
        self._put_times: deque[float] = deque(maxlen=HEDGE_WINDOW)  # seconds of the last landed writes
        # Whether the document existed (I10); a broker shares one across its committers.
        self.presence = presence or Presence(store, key, writer=self.writer_id)
        # A broker passes one for all its committers, so its counts span takeovers.
        self.stats = stats if stats is not None else CommitStats()
        self.committed_seq = 0  # seq of the latest version read or written (landed), for health pages
        self._lock = threading.Lock()  # a plain Lock: cheaper than the default RLock
        self._cond = threading.Condition(self._lock)
        self._queue: list[Pending] = []
        self._running = False
        self._thread: threading.Thread | None = None
        self._state: QueueState | None = None
        # The latest version read or landed, as one (etag, parts) tuple (the
        # parts are joined only on demand), replaced whole, so that a reader
        # on another thread never pairs one version's parts with another's ETag.
        self._committed: tuple[str | None, list[bytes]] | None = None
        self._unsettled: list[Write] = []  # failed writes whose outcome we have not learned
        # The highest seq this committer has written under its writer id. Each
        # write takes a higher one, even one built on a version re-read while
        # an earlier write was in flight (after an error), so that "the
        # document records (writer, seq)" can only mean that very write landed.
        self._last_seq = 0
        self._io: ThreadPoolExecutor | None = None
        self._abandon: EngineError | None = None  # set by stop(drain=False)

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> GroupCommitter:
        """Read the document and start the writer thread. Raises DocumentError
        or StoreError. A read that fails with StoreUnavailable (one that raced
        the document's creation by another writer, or a store down for a
        moment) is tried again, up to ``READ_RETRIES`` times in a row."""
        with self._cond:
            if self._running:
                return self
            if self._thread is not None and self._thread.is_alive():
                raise EngineError("the committer is still stopping; wait for stop() to return")
            self._abandon = None
            # Bounded, unlike recovery's reads (max_retries): starting on a
            # store that is down fails within a few reads. A read that raced
            # another committer's creation of the document (StoreUnavailable
            # from the presence check) is simply read again.
            self._state = self._load_retrying(READ_RETRIES)
            self._unsettled.clear()
            # One thread runs the puts, so the writer can apply new operations
            # while a write is in flight.
            # With hedging, a write's two attempts and the stragglers of earlier
            # writes up to MAX_STRAGGLERS (no hedge is sent beyond them).
            self._io = ThreadPoolExecutor(max_workers=MAX_STRAGGLERS + 2 if self.hedge_seconds > 0 else 1,
                                          thread_name_prefix=f"committer-io:{self.writer_id}")
            self._running = True
            self._thread = threading.Thread(target=self._run, name=f"committer:{self.key}", daemon=True)
            self._thread.start()
        return self

    def stop(self, *, drain: bool = True, timeout: float | None = None, error: EngineError | None = None) -> None:
        """Stop the writer. With ``drain``, every operation already submitted is
        committed first. Without it, operations whose write has not started
        fail with ``error`` (CommitterStopped by default); a write already in
        flight finishes and its callers are answered as usual. Idempotent; may
        be called from the writer thread itself (it then does not wait).

        Without ``drain``, operations the writer has not taken yet are failed
        here, by the caller, so that they are answered even if the writer
        thread is stuck (in a store call that hangs, say); ``timeout`` bounds
        the wait for the writer."""
        orphans: list[Pending] = []
        with self._cond:
            self._running = False
            if not drain and self._abandon is None:
                self._abandon = error or CommitterStopped("the committer was stopped")
            if self._abandon is not None:
                orphans, self._queue[:] = list(self._queue), []
            self._cond.notify_all()
            thread = self._thread
            abandon = self._abandon
        if orphans and abandon is not None:
            fail(orphans, abandon, self.stats)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def __enter__(self) -> GroupCommitter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def state(self) -> QueueState | None:
        """The in-memory state (only the writer thread changes it). For inspection."""
        return self._state

    # -- the writer ------------------------------------------------------------

    def _run(self) -> None:
        """The writer thread, which owns ``self._state``. Each turn moves
        operations one stage on (:class:`~engine.pending.Batches`):

        * submitted → new (:meth:`_take_new`): taken from the queue;
        * new → staged (:meth:`_stage_new`): applied to the in-memory state,
          on top of what the write in flight holds;
        * staged → in flight (:meth:`_write_staged`): one conditional write
          on the I/O thread, once no write is in flight and the linger is
          over (a batch that changed nothing is answered at once instead);
        * in flight → settled (:meth:`_settle_write`): a landed write's
          operations are answered with their results (I1); a failed one's,
          unless it landed after all, are re-applied to a fresh read and
          staged again, so the state never runs ahead of the store.

        Every operation is answered exactly once (I8): with its result,
        refused alone (OperationFailed), failed with its batch when a step
        fails (:meth:`_guarded`) or anything else escapes, or abandoned by
        ``stop(drain=False)``. Returns once stopped with nothing left.
        """
        b = Batches()
        while True:
            abandon = self._take_new(b)
            if abandon is not None:
                # Stopping without draining: nothing more is written. (The
                # state keeps the abandoned changes; start() reads afresh.)
                fail(b.staged + b.new, abandon, self.stats)
                b.staged, b.new = [], []
            if b.inflight is None and not b.staged and not b.new and not self._running:
                assert self._io is not None
                self._io.shutdown(wait=False)
                return  # stopped and drained
            b.settling = []
            try:
                now = time.monotonic()
                self._stage_new(b)
                landed = self._settle_write(b, now)
                if b.staged and self._abandon is not None:
                    fail(b.staged, self._abandon, self.stats)
                    b.staged = []
                b.settling = []
                answer(landed, self.stats)
                if b.inflight is None and b.staged and not self._lingering(b, now):
                    self._write_staged(b)
            except Exception as exc:  # a bug: never leave callers waiting forever (I8)
                log.exception("group commit failed unexpectedly")
                self._state = None
                self._unsettled.clear()
                fail(b.settling + b.staged + b.new, EngineError(printable(f"group commit failed: {exc!r}")),
                     self.stats)
                b.staged, b.new = [], []

    def _take_new(self, b: Batches) -> EngineError | None:
        """Wait for something to do: submitted operations, a finished write,
        the end of the linger, or a stop. Moves up to ``max_batch`` submitted
        operations into ``b.new``; returns the error to fail everything with
        after ``stop(drain=False)``, else None."""
        with self._cond:
            if b.inflight is not None:
                self._hedge(b.inflight)  # due while the writer was busy
            while not self._queue and (b.inflight is None or not b.inflight.done):
                if (b.inflight is None and not self._running) or (b.staged and self._abandon is not None):
                    break
                if b.inflight is None and b.staged:
                    wait = self._linger_end(b) - time.monotonic()
                    if wait <= 0:
                        break
                    self._cond.wait(wait)
                    continue
                hedge = None if b.inflight is None else self._hedge(b.inflight)
                self._cond.wait(hedge)
            b.new = self._queue[: self.max_batch]
            del self._queue[: self.max_batch]
            return self._abandon

    def _stage_new(self, b: Batches) -> None:
        """new → staged: apply ``b.new`` on top of the staged operations."""
        if not b.new:
            return
        outcome = self._guarded(b.staged + b.new, self._apply, b.staged, b.new)
        b.new = []
        if outcome is FAILED:
            b.staged = []
        else:
            b.staged = outcome
            # The idle gap counts from when the writer is ready for more, so
            # that its own pauses (applying a large batch, a garbage
            # collection, which also stops the callers) do not look like
            # callers that stopped coming back.
            b.last_arrival = time.monotonic()

    def _settle_write(self, b: Batches, now: float) -> list[Pending]:
        """in flight → settled, if the write has finished (see :meth:`_finish`).
        Returns the operations now durable, to be answered; what must be
        written again joins ``b.staged``. A landed write starts the linger."""
        if b.inflight is None or not b.inflight.done:
            return []
        done, b.inflight = b.inflight, None
        b.settling = done.batch
        outcome = self._guarded(done.batch + b.staged, self._finish, done, b.staged)
        landed: list[Pending]
        b.staged, landed = ([], []) if outcome is FAILED else outcome
        if done.error is None:
            b.linger_until = now + min(self.max_linger_seconds, LINGER_SHARE * (now - done.started))
            b.linger_target = len(done.batch) + len(b.staged)
            b.last_arrival = now
        return landed

    def _lingering(self, b: Batches, now: float) -> bool:
        """Whether to hold the staged operations back from the next write a
        little longer, for the callers just answered to come back (see
        DEFAULT_MAX_LINGER_SECONDS)."""
        if not self._running or now >= self._linger_end(b):
            return False
        return self._background_only(b) or len(b.staged) < b.linger_target

    def _linger_end(self, b: Batches) -> float:
        """When the linger ends: at ``linger_until``, or earlier once arrivals
        pause for ``idle_gap_seconds`` (the callers are not coming back).

        Staged background operations alone (heartbeat Ticks, the lane
        keeper's Refill and Merge) linger until ``linger_until``,
        whatever the count or the pause: they wait for no caller, while a
        write of their own, started just before the answered callers come
        back, makes all of them wait one whole write more (measured on a
        50 ms store: a worker's batch of 256 acks and a claim held 41 and
        61 ms behind the broker's two Ticks of a 4 s drain; a batched drain
        of 12,000 jobs took 71 commits where 48 carry its cycles)."""
        if self._background_only(b):
            return b.linger_until
        return min(b.linger_until, b.last_arrival + self.idle_gap_seconds)

    @staticmethod
    def _background_only(b: Batches) -> bool:
        return all(type(p.op) in _BACKGROUND for p in b.staged)

    def _write_staged(self, b: Batches) -> None:
        """staged → in flight: start one write of every staged operation."""
        batch, b.staged = b.staged, []
        b.linger_target = 0
        outcome = self._guarded(batch, self._start_write, batch)
        b.inflight = None if outcome is FAILED else outcome

    def _guarded(self, victims: list[Pending], step: Callable[..., Any], *args: Any) -> Any:
        """Run ``step``; if it raises, fail ``victims`` with the error (an
        unexpected exception is wrapped in EngineError), forget the state (it
        will be read again) and return ``FAILED``."""
        try:
            return step(*args)
        except Exception as exc:
            if not isinstance(exc, EngineError):
                log.exception("group commit step %s failed unexpectedly", getattr(step, "__name__", step))
                exc = EngineError(printable(f"group commit failed: {exc!r}"))
            self._state = None
            # Writes whose outcome is still unknown are forgotten here: if one
            # landed, the segments it dropped were never reported, and
            # nothing would delete them while this committer leads.
            doubtful = [key for write in self._unsettled for key in write.dropped_segments]
            self._unsettled.clear()
            fail(victims, exc, self.stats)
            if doubtful and self.on_segments_doubtful is not None:
                try:
                    self.on_segments_doubtful(doubtful)
                except Exception:  # a listener's bug must not break commits
                    log.exception("on_segments_doubtful listener failed")
            return FAILED

    def _backoff(self, attempt: int) -> None:
        time.sleep(jittered(attempt, self.retry_backoff_seconds, DEFAULT_RETRY_BACKOFF_CAP_SECONDS))
