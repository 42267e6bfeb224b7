"""Writing finished-job rows off the commit path: :class:`FinishedRecorder`.

The leader's committer reports, after each landed write, the jobs that
write removed (:class:`engine.Departure`, through the broker's
``on_departures`` hook). :meth:`FinishedRecorder.offer` runs on the
committer's writer thread, so it only appends them to a bounded backlog and
wakes the recorder's own thread, which turns them into rows and inserts
them, the departures of a quarter of a second in one transaction
(:mod:`queueadmin.history.records`), and now and then deletes rows older
than the retention. The commit never waits for the
database: throughput does not change, and a database that is down or slow
costs finished-job rows, never commits.

What a crash can lose: the backlog lives in the leader's memory, so a
leader that dies between a commit and the insert of its rows (up to a
quarter of a second; as long as the database is down) loses those rows. A
process that exits normally writes them first (for up to
:data:`EXIT_SECONDS`). The jobs themselves left the queue as they should,
and their queue's counters count them. A backlog over ``max_backlog`` (the
database down for long) drops its oldest departures, counted in
:attr:`RecorderStats.dropped` and logged. Nothing here can lose or delay a
job in ``queue.json``.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django import db

from engine import Departure, utc_now
from queueadmin.history.records import FinishedJob, Row, insert_rows, row_of

log = logging.getLogger(__name__)

#: Departures held in memory at most while the database lags or is down.
DEFAULT_MAX_BACKLOG = 100_000
#: How long a process that exits normally waits for its backlog to be written.
EXIT_SECONDS = 5.0
#: Until a retention is given (queueadmin.config's default is the same).
DEFAULT_RETENTION_SECONDS = 7 * 24 * 3600.0
#: Rows per INSERT.
DEFAULT_BATCH_ROWS = 1_000
#: How long departures wait for more to join them in one transaction.
DEFAULT_LINGER_SECONDS = 0.25
#: Rows deleted per statement when pruning.
PRUNE_CHUNK_ROWS = 10_000
#: How often rows past the retention are deleted.
DEFAULT_PRUNE_SECONDS = 600.0
#: After this many failures in a row, a batch is written row by row (see _write_alone).
ALONE_AFTER_FAILURES = 3
#: Waits between tries while the database fails: from the first to the cap.
RETRY_FIRST_SECONDS = 0.5
RETRY_CAP_SECONDS = 30.0


def prune(*, older_than: datetime, chunk: int = PRUNE_CHUNK_ROWS) -> int:
    """Delete rows that finished before ``older_than``; returns how many.
    Indexed DELETEs of at most ``chunk`` rows each, so that a large backlog of
    expired rows (after a long stop) never holds the database's write lock
    for long."""
    total = 0
    while True:
        oldest = FinishedJob.objects.filter(finished_at__lt=older_than).order_by().values("pk")[:chunk]
        deleted, _ = FinishedJob.objects.filter(pk__in=oldest).delete()
        total += deleted
        if deleted < chunk:
            return total


@dataclass(slots=True)
class RecorderStats:
    """Counters, for tests and health pages."""

    offered: int = 0
    written: int = 0
    dropped: int = 0
    failures: int = 0
    pruned: int = 0


class FinishedRecorder:
    """A bounded backlog of departures and the one thread that records them.

    ``offer`` is cheap and never blocks on I/O (see the module); the thread
    starts with the first offer. :meth:`flush` waits until what was offered
    has been written or dropped; :meth:`stop` is idempotent and writes what
    is left first (bounded by its timeout).
    """

    def __init__(
        self,
        *,
        retention_seconds: float,
        max_backlog: int = DEFAULT_MAX_BACKLOG,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        prune_seconds: float = DEFAULT_PRUNE_SECONDS,
        linger_seconds: float = DEFAULT_LINGER_SECONDS,
        clock: Callable[[], datetime] = utc_now,
        write: Callable[[list[Row]], None] = insert_rows,
    ) -> None:
        self.retention_seconds = retention_seconds
        self.max_backlog = max_backlog
        self.batch_rows = batch_rows
        self.prune_seconds = prune_seconds
        self.linger_seconds = linger_seconds
        self.clock = clock
        self.write = write
        self.stats = RecorderStats()
        self._cond = threading.Condition()
        self._backlog: deque[Departure] = deque()
        self._settled = 0  # departures written or dropped, of stats.offered
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._next_prune = 0.0
        self._flushing = 0  # callers waiting in flush(): write at once

    def offer(self, departures: list[Departure]) -> None:
        """Queue ``departures`` to be recorded. The broker's ``on_departures``:
        called on the committer's writer thread after a commit landed."""
        with self._cond:
            if self._stopping:
                return
            self._backlog.extend(departures)
            self.stats.offered += len(departures)
            excess = len(self._backlog) - self.max_backlog
            if excess > 0:
                for _ in range(excess):
                    self._backlog.popleft()
                self._drop(excess)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="finished-jobs", daemon=True)
                self._thread.start()
            self._cond.notify_all()  # the thread, and flush() callers share the condition

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every departure offered so far is written (or dropped).
        Returns False if that took longer than ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            target = self.stats.offered
            self._flushing += 1
            self._cond.notify_all()
            try:
                while self._settled < target:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._cond.wait(left)
            finally:
                self._flushing -= 1
        return True

    def stop(self, timeout: float | None = 10.0) -> None:
        """Write what is queued (within ``timeout``), then end the thread. Idempotent."""
        with self._cond:
            self._stopping = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _drop(self, count: int) -> None:
        """Count ``count`` departures as lost (call with the lock held)."""
        self.stats.dropped += count
        self._settled += count
        log.warning("finished-job records: %d dropped (the backlog is full: the database is behind or down)", count)
        self._cond.notify_all()

    def _run(self) -> None:
        failures = 0
        while True:
            with self._cond:
                while not self._backlog and not self._stopping and time.monotonic() < self._next_prune:
                    self._cond.wait(self._next_prune - time.monotonic())
                # Gather the departures of a few commits into one transaction,
                # unless someone waits for them (flush) or we stop.
                linger_until = time.monotonic() + self.linger_seconds
                while (
                    self._backlog
                    and len(self._backlog) < self.batch_rows
                    and not self._stopping
                    and not self._flushing
                    and not failures
                    and time.monotonic() < linger_until
                ):
                    self._cond.wait(linger_until - time.monotonic())
                if self._stopping and (not self._backlog or failures):
                    if self._backlog:  # stopping while the database fails: give up on them
                        self._drop(len(self._backlog))
                        self._backlog.clear()
                    break
                batch = [self._backlog.popleft() for _ in range(min(self.batch_rows, len(self._backlog)))]
            if time.monotonic() >= self._next_prune:
                self._prune()
            if not batch:
                continue
            try:
                db.close_old_connections()  # a connection broken by an outage is replaced
                refused = 0
                if failures >= ALONE_AFTER_FAILURES:
                    refused = self._write_alone(batch)
                else:
                    self.write([row_of(d) for d in batch])
            except Exception:
                failures += 1
                self.stats.failures += 1
                if failures == 1 or failures % 100 == 0:
                    log.exception(
                        "finished-job records: writing %d failed (%d times in a row); retrying", len(batch), failures
                    )
                with self._cond:
                    self._backlog.extendleft(reversed(batch))
                    excess = len(self._backlog) - self.max_backlog
                    for _ in range(max(excess, 0)):
                        self._backlog.popleft()
                    if excess > 0:
                        self._drop(excess)
                    # A deadline, not one wait: every commit's offer wakes the
                    # condition, and a database that is down must not be retried
                    # at the commit rate.
                    retry_at = time.monotonic() + min(RETRY_FIRST_SECONDS * 2 ** (failures - 1), RETRY_CAP_SECONDS)
                    while not self._stopping and time.monotonic() < retry_at:
                        self._cond.wait(retry_at - time.monotonic())
                continue
            failures = 0
            with self._cond:
                self.stats.written += len(batch) - refused
                self.stats.dropped += refused
                self._settled += len(batch)
                self._cond.notify_all()
        db.connections.close_all()  # this thread's connections

    def _write_alone(self, batch: list[Departure]) -> int:
        """Write ``batch`` row by row, after it failed as a whole several
        times: a row the database refuses while it answers otherwise (a value
        it cannot store) is dropped and logged, so it cannot hold back the
        rows behind it forever. Returns how many were refused; raises when
        the database does not answer."""
        refused = 0
        for departure in batch:
            try:
                self.write([row_of(departure)])
            except Exception:
                FinishedJob.objects.exists()  # raises if the database is down: the caller retries them all
                refused += 1
                log.exception(
                    "finished-job records: the database refuses the record of job %s; dropped", departure.item.id
                )
        return refused

    def _prune(self) -> None:
        """Delete rows past the retention; a failure waits for the next round."""
        self._next_prune = time.monotonic() + self.prune_seconds
        try:
            db.close_old_connections()
            self.stats.pruned += prune(older_than=self.clock() - timedelta(seconds=self.retention_seconds))
        except Exception:
            log.exception("finished-job records: pruning failed; trying again in %g s", self.prune_seconds)


_lock = threading.Lock()
_shared: FinishedRecorder | None = None


def shared_recorder(*, retention_seconds: float | None = None) -> FinishedRecorder:
    """This process's recorder, created on first use (its thread starts with
    its first departures). Every broker this process builds shares it; its
    retention is the latest given (a week until one is)."""
    global _shared
    with _lock:
        if _shared is None:
            _shared = FinishedRecorder(retention_seconds=retention_seconds or DEFAULT_RETENTION_SECONDS)
            # A process that exits normally (daphne stopped by a signal it
            # handles) writes what it holds first; only a crash loses it.
            atexit.register(_shared.stop, timeout=EXIT_SECONDS)
        if retention_seconds is not None:
            _shared.retention_seconds = retention_seconds
        return _shared
