"""A worker's heartbeats: the thread that extends every running job's lease.

:class:`WorkerHeartbeats` is the part of :class:`~engine.worker.Worker`
that runs on its heartbeat thread: every ``heartbeat_interval`` seconds it
extends the lease of each running job that is not being reported, all of
them in one ``execute_many`` (``POST /api/v1/heartbeat``) with ``batch``, or
one call each without. A lease found lost (LeaseLost or JobNotFound) marks
its job lost and cancels it (:mod:`engine.cancellation`): a handler that
checks stops, and one that does not keeps running, since a thread cannot be
killed; either way its result is never sent. A transient error retries that lease well before it
ends. Every field it reads is the worker's, declared below and guarded by
the worker's ``_cond``. Split from :mod:`engine.worker`.

Its lease-watch thread (:meth:`WorkerHeartbeats._watch_loop`, with a client
that has ``watch_leases``) finds a lost lease sooner: it keeps a long-poll
watch of every running job's lease open, which the broker answers as soon
as a commit revokes one (:mod:`engine.leasewatch`), and settles it the same way.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engine.client import QueueClient
from engine.errors import EngineError, JobNotFound, LeaseLost
from engine.ops import heartbeat_op

if TYPE_CHECKING:
    from engine.reporter import AckReporter
    from engine.worker import WorkerStats, _Running

__all__ = ["WorkerHeartbeats"]

log = logging.getLogger("engine.worker")  # the worker's log, as before the split

#: The longest one lease watch lasts: a job started while one is open is watched from the next.
WATCH_SECONDS = 5.0
#: With no job running, how often the watch thread looks again (a new job also wakes it).
WATCH_IDLE_SECONDS = 1.0


class WorkerHeartbeats:
    """The heartbeat thread of a :class:`~engine.worker.Worker` (see the module)."""

    # The worker's fields this part reads or sets (see Worker.__init__).
    client: QueueClient
    monotonic: Callable[[], float]
    heartbeat_interval: float
    lease_seconds: float
    timeout_seconds: float | None
    backoff_seconds: float
    backoff_cap_seconds: float
    stats: WorkerStats
    _cond: threading.Condition
    _running: dict[str, _Running]
    _exit: threading.Event
    _reporter: AckReporter | None
    _wait_step: Callable[[float | None], float]  # the worker's: how long to wait, at most, until ``until``

    def _heartbeat_loop(self) -> None:
        while not self._exit.is_set():
            now = self.monotonic()
            self._time_out(now)
            with self._cond:
                due = [r for r in self._running.values()
                       if r.next_beat <= now and not (r.lost or r.reporting or r.timed_out)]
            if self._reporter is not None and due:
                self._beat_all(due)
            for record in due if self._reporter is None else ():
                if self._exit.is_set():
                    return
                self._beat(record)
            with self._cond:
                beats = [r.next_beat for r in self._running.values() if not (r.lost or r.reporting or r.timed_out)]
                beats += self._timeouts()
            until = min(beats, default=self.monotonic() + self.heartbeat_interval)
            self._exit.wait(self._wait_step(until))

    def _watch_loop(self, watch: Callable[[list[tuple[str, str]], float], list[tuple[str, Any]]]) -> None:
        """While jobs run, keep one lease watch open (``watch``, the client's
        ``watch_leases``, :mod:`engine.leasewatch`) and settle each lease it
        finds lost as a heartbeat would: the job is marked lost and cancelled.
        A watch lasts at most :data:`WATCH_SECONDS`, so a job started since
        is watched from the next one. A broker that answers with no known
        code (a release without lease watches: 404 not_found) ends the
        watching; heartbeats still find lost leases."""
        failures = 0
        while not self._exit.is_set():
            with self._cond:
                # One lease per job: a job held twice (an older attempt still
                # ending) keeps its newest; heartbeats watch the older one.
                watched = {r.job.id: r for r in self._running.values() if not (r.lost or r.reporting or r.timed_out)}
                if not watched:
                    self._cond.wait(WATCH_IDLE_SECONDS)
                    continue
            sent = self.monotonic()
            try:
                lost = watch([(job_id, r.job.lease) for job_id, r in watched.items()], WATCH_SECONDS)
            except Exception as exc:
                if type(exc) is EngineError:
                    log.info("worker: the broker does not watch leases (%s); heartbeats alone find lost leases",
                             exc)
                    return
                failures += 1
                log.debug("worker: a lease watch failed (%s: %s)", type(exc).__name__, exc)
                self._exit.wait(min(self.backoff_cap_seconds, self.backoff_seconds * 2**failures))
                continue
            failures = 0
            for job_id, error in lost:
                if (record := watched.get(job_id)) is not None:
                    self._beaten(record, sent, error)

    def _timeouts(self) -> list[float]:
        """When each running handler not timed out yet reaches the timeout
        (monotonic); none without one. Call with ``self._cond`` held."""
        if self.timeout_seconds is None:
            return []
        return [r.started + self.timeout_seconds for r in self._running.values()
                if r.started is not None and not (r.timed_out or r.lost or r.reporting)]

    def _time_out(self, now: float) -> None:
        """Time out every handler that has run ``timeout_seconds`` by ``now``:
        cancel its job and stop renewing its lease. Its handler's return then
        fails the attempt (:meth:`Worker._handle`); a handler that never
        returns leaves the lease to run out, which fails it too."""
        if self.timeout_seconds is None:
            return
        with self._cond:
            late = [r for r in self._running.values() if r.started is not None and not (
                r.timed_out or r.lost or r.reporting) and now >= r.started + self.timeout_seconds]
            for record in late:
                record.timed_out = True
                self.stats.timed_out += 1
        for record in late:
            job = record.job
            record.cancellation.cancel(f"it ran longer than the worker's timeout ({self.timeout_seconds:g} s)")
            log.warning("job %s (%s, attempt %d) timed out after %gs: cancelled; its lease is no longer renewed, so "
                        "it fails when its handler returns or its lease runs out", job.id, job.queue, job.attempt,
                        self.timeout_seconds)

    def _beat_all(self, records: list[_Running]) -> None:
        """Heartbeat every lease of ``records`` in one ``execute_many``."""
        sent = self.monotonic()
        try:
            outcomes = self.client.execute_many([heartbeat_op(r.job.id, r.job.lease) for r in records])
        except Exception as exc:  # the whole call failed: each lease is retried soon
            outcomes = [exc] * len(records)
        for record, outcome in zip(records, outcomes, strict=True):
            self._beaten(record, sent, outcome)

    def _beat(self, record: _Running) -> None:
        sent = self.monotonic()
        try:
            outcome: Any = self.client.heartbeat(record.job.id, record.job.lease)
        except Exception as exc:
            outcome = exc
        self._beaten(record, sent, outcome)

    def _beaten(self, record: _Running, sent: float, outcome: Any) -> None:
        """Settle one heartbeat sent at ``sent`` whose outcome (a deadline,
        or the exception it failed with) is ``outcome``."""
        job = record.job
        try:
            if isinstance(outcome, BaseException):
                raise outcome
        except (LeaseLost, JobNotFound) as exc:
            with self._cond:
                if record.reporting or job.lease not in self._running:
                    return  # raced with this job's own complete or fail, which decides
                record.lost = True
            record.cancellation.cancel(f"its lease was lost ({exc})")  # after ``lost``: the handler's end reads it
            log.warning("job %s (%s, attempt %d): lease lost while running (%s); cancelled, and its result will "
                        "not be sent", job.id, job.queue, job.attempt, exc)
        except Exception as exc:  # transient: try again soon, well before the lease ends
            with self._cond:
                self.stats.errors += 1
                record.next_beat = self.monotonic() + min(self.heartbeat_interval, self.backoff_cap_seconds) / 2
            log.warning("job %s: heartbeat failed (%s: %s)", job.id, type(exc).__name__, exc)
        else:
            with self._cond:
                self.stats.heartbeats += 1
                record.lease_until = sent + self.lease_seconds
                record.next_beat = sent + self.heartbeat_interval
