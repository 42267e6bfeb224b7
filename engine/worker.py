"""Workers: claim jobs, run a handler on each, heartbeat their leases, report the outcome.

A :class:`Worker` is handed a client (a :class:`~engine.http_client.BrokerClient`
in production; anything with the :class:`~engine.client.QueueClient` methods,
such as a GroupCommitter, in tests). Threads, all daemons:

* the claimer asks for as many jobs as there are free slots, long-polling
  for ``wait_seconds`` where the client honours it (a BrokerClient does; a
  GroupCommitter or DirectClient answers at once, and the claimer then waits
  ``poll_seconds`` between empty claims);
* ``concurrency`` handler threads call ``handler(payload)`` (or
  ``handler(job)``, the whole :class:`~engine.model.ClaimedJob`, with
  ``pass_job=True``): a return completes the job, an exception fails it with
  the traceback as the error, and :class:`PermanentFailure` sends it to the
  dead letters at once (see there);
* the heartbeat thread extends every running job's lease every
  ``heartbeat_interval`` seconds. A job whose lease is lost (LeaseLost or
  JobNotFound: purged, requeued, or run out) is cancelled (see
  :mod:`engine.cancellation`): a handler that calls ``check_cancelled()``
  stops there, and one that does not keeps running, since a thread cannot be
  killed; either way its result is never sent. With ``timeout_seconds``,
  the same thread times out a handler that has run that long: it cancels
  the job and stops renewing its lease, and the handler's return fails the
  attempt with a ``JobTimeout`` error (one that never returns leaves the
  lease to run out, which fails it too);
* with ``batch`` (the default), a reporter thread (:mod:`engine.reporter`)
  sends the handlers' results in batches through the client's
  ``execute_many`` (``POST /api/v1/ack``), and the heartbeat thread extends
  all due leases in one ``execute_many`` (``POST /api/v1/heartbeat``). A
  handler thread takes its next job as soon as it has handed its result over,
  and the claimer's next claim rides the reporter's next request when one is
  due or in flight (the same commit: see :mod:`engine.reporter`).
  Without ``batch``, each handler thread reports its own job, one call each.

Either way a job is counted completed only once the client confirmed that
the commit holding its result landed; each per-job outcome is handled the
same way.

Transient errors (NotLeader, StoreUnavailable, connection trouble, anything
unexpected) are logged and retried with backoff; they never end the worker.
Only a refused token or invalid claim arguments do.

Tunables come in one frozen :class:`WorkerOptions`; it, its defaults and
:func:`default_heartbeat_interval` are in :mod:`engine.workeroptions`, and
a batching worker's acknowledgements in :mod:`engine.reporter`, its
heartbeat thread in :mod:`engine.workerbeats`. This module
holds the :class:`Worker` itself, its :class:`WorkerStats`,
:class:`PermanentFailure` and :func:`new_worker_id`.

``stop()`` stops claiming and sends waiting results at once (no linger);
running jobs get ``grace_seconds`` to finish and report, then ``run()``
returns. Jobs still running then are abandoned and cancelled: not completed,
their leases expire and the broker hands them out again. A result still unconfirmed then
is abandoned too (never counted completed). No new claim starts after
``stop()``, and a long poll in flight is not waited for once no job is
running: an idle worker's ``run()`` returns at once. The claimer thread (a
daemon) is left in its request; when the process then exits, the
connection closes and the broker drops the waiting claim, so no job is
leased. A claim the broker had already committed at that instant (or, in a
process that goes on, one answered later) leases jobs nobody runs: they are
not lost, their leases expire and the broker hands them out again.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.backoff import jittered
from engine.cancellation import Cancellation, JobCancelled, handling
from engine.client import QueueClient
from engine.errors import EngineError, QueueError, Unauthorized, ValidationError
from engine.model import ClaimedJob, new_process_id
from engine.ops import Complete, Fail, claim_op, complete_op, fail_op
from engine.policy import MAX_CLAIM_JOBS
from engine.reporter import AckReporter
from engine.workerbeats import WorkerHeartbeats
from engine.workeroptions import WorkerOptions as WorkerOptions  # re-exported: tests import it from here
from engine.workeroptions import default_heartbeat_interval

log = logging.getLogger(__name__)

# Waits re-check the (injectable) clock at least this often, so a fake clock
# that jumps forward is noticed without a real-time wait of the same length.
MAX_WAIT_STEP_SECONDS = 0.5
# Errors that retrying cannot fix: a wrong token, claim arguments refused.
FATAL_ERRORS: tuple[type[EngineError], ...] = (Unauthorized, ValidationError)


class PermanentFailure(Exception):
    """Raised by a handler for a job that no retry can fix (it names no
    runnable code, its payload is malformed).

    The worker fails the attempt with ``give_up``: the job goes to the dead
    letters at once with this error, whatever attempts it has left.
    """


@dataclass(slots=True)
class WorkerStats:
    """What one worker did. ``lost``: jobs whose lease was lost, whose result
    could not be reported, or that were still running when the grace period
    ended (``abandoned`` counts those last ones separately). ``cancelled``:
    jobs whose handler stopped on :class:`~engine.cancellation.JobCancelled`
    (lost, abandoned or timed out).
    ``timed_out``: jobs that ran past ``WorkerOptions.timeout_seconds``
    (each also counted failed or lost, as its report went)."""

    claimed: int = 0
    completed: int = 0
    failed: int = 0
    dead: int = 0
    lost: int = 0
    abandoned: int = 0
    cancelled: int = 0
    timed_out: int = 0
    heartbeats: int = 0
    errors: int = 0


@dataclass(slots=True, eq=False)
class _Running:
    job: ClaimedJob
    next_beat: float  # monotonic time of the next heartbeat
    lease_until: float  # local estimate of the lease deadline (monotonic)
    lost: bool = False
    reporting: bool = False  # a complete or fail is in flight: heartbeats hold off
    settled: bool = False  # counted in the stats (exactly once)
    # Cancelled once the job is no longer this worker's (lost, or abandoned):
    # its handler may check it (engine.cancellation).
    cancellation: Cancellation = field(default_factory=Cancellation)
    # Monotonic time its handler started (None: not yet), and whether it ran
    # past the worker's timeout: then it is cancelled and no longer heartbeated.
    started: float | None = None
    timed_out: bool = False


def new_worker_id() -> str:
    """A worker id unique per process start: host, pid and a nonce."""
    return new_process_id(nonce_bytes=3)


class Worker(WorkerHeartbeats):
    """Runs ``handler(payload)`` for jobs of ``queues`` until stopped (or
    drained, with ``options.burst``), tuned by ``options`` (see
    :class:`WorkerOptions`).

    ``pass_job``: call ``handler(job)`` with the :class:`ClaimedJob` (id,
    attempt, queue, payload) instead of ``handler(job.payload)``.
    ``worker_id``: the name its leases show (default :func:`new_worker_id`).
    ``monotonic``: the clock for heartbeats and deadlines (injectable for
    tests). Raises ValidationError for bad queues or lease, ValueError for
    a heartbeat interval that does not fit the lease. ``run()`` may be
    called once.
    """

    def __init__(
        self,
        client: QueueClient,
        *,
        queues: Iterable[str],
        handler: Callable[[Any], Any],
        pass_job: bool = False,
        worker_id: str | None = None,
        options: WorkerOptions | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        options = options or WorkerOptions()
        self.options = options
        self.client = client
        self.handler = handler
        self.pass_job = pass_job
        self.worker_id = worker_id or new_worker_id()
        lease_seconds = options.lease_seconds
        self.lease_seconds = float(lease_seconds if lease_seconds is not None else client.policy.lease_seconds)
        # Validate queues, worker id and lease once, here, rather than on every claim.
        op = claim_op(self.worker_id, queues, policy=client.policy, max_jobs=1, lease_seconds=self.lease_seconds,
                      in_order=options.in_order)
        self.queues = op.queues
        self.in_order = op.in_order
        self.concurrency = options.concurrency
        self.heartbeat_interval = (
            options.heartbeat_interval if options.heartbeat_interval is not None
            else default_heartbeat_interval(self.lease_seconds)
        )
        if not 0 < self.heartbeat_interval < self.lease_seconds:
            raise ValueError("need 0 < heartbeat_interval < lease_seconds")
        self.burst = options.burst
        self.wait_seconds = 0.0 if options.burst else float(options.wait_seconds)
        self.poll_seconds = options.poll_seconds
        self.grace_seconds = options.grace_seconds
        self.timeout_seconds = options.timeout_seconds
        self.max_jobs = options.max_jobs
        self.backoff_seconds = options.backoff_seconds
        self.backoff_cap_seconds = options.backoff_cap_seconds
        self.monotonic = monotonic
        self.stats = WorkerStats()
        self.fatal: EngineError | None = None  # why the worker stopped by itself, if it did
        # One lock guards everything below and stats, with three conditions
        # on it, so that a change wakes only the threads waiting for it: the
        # reporter and the lease watch wait on ``_cond`` (results to send, a
        # handler done, jobs dispatched), the claimer on ``_claims`` (a slot
        # freed, the claim or the reporter's request in flight ended, a job
        # ended) and run() on ``_ends`` (the last job or the claimer ended, a
        # stop). With one condition every change woke all of them: sixteen
        # one-slot workers switched threads 14 times a job, now 6.6, and
        # spend a quarter less CPU a job (python -m bench worker).
        lock = threading.RLock()
        self._cond = threading.Condition(lock)
        self._claims = threading.Condition(lock)
        self._ends = threading.Condition(lock)
        # By lease token, not job id: the worker may hold one job twice, an
        # attempt requeued (or timed out) whose handler is still ending and
        # the new attempt it claimed since, each with its own lease.
        self._running: dict[str, _Running] = {}
        self._inbox: queue.SimpleQueue[_Running | None] = queue.SimpleQueue()
        self._stopping = threading.Event()  # stop claiming
        self._exit = threading.Event()  # run() is returning: every thread ends
        self._deadline: float | None = None  # end of the grace period (monotonic)
        self._stopped_at: float | None = None
        self._claimer_done = False
        self._awaiting_end = False  # a burst's claimer found nothing and waits for a running job to end
        self._finished = 0  # jobs whose handling ended; a burst claims again after any
        self._busy = 0  # jobs dispatched whose handler has not returned (free slots: concurrency - busy)
        # A claim is in flight, the claimer's own or one an acknowledgement
        # carries: never two at once, so a claim asks only for slots no
        # other claim will fill.
        self._claim_in_flight = False
        self._started = False
        self._reporter = AckReporter(self, linger_seconds=options.ack_linger_seconds) if options.batch else None

    # -- lifecycle -------------------------------------------------------------

    def run(self) -> WorkerStats:
        """Work until stopped or, with ``burst``, drained. Blocks; returns the stats.

        Raises Unauthorized or ValidationError (after the grace period for the
        running jobs) if claims are refused for a reason retrying cannot fix.
        """
        with self._cond:
            if self._started:
                raise RuntimeError("a Worker runs only once; make a new one")
            self._started = True
        log.info("worker %s: queues %s%s, concurrency %d", self.worker_id, ", ".join(self.queues),
                 " (in this order)" if self.in_order else "", self.concurrency)
        threads = [threading.Thread(target=self._handle_loop, name=f"handler-{i}", daemon=True)
                   for i in range(self.concurrency)]
        threads.append(threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True))
        threads.append(threading.Thread(target=self._claim_loop, name="claimer", daemon=True))
        watch = getattr(self.client, "watch_leases", None) if self.options.watch_leases else None
        if watch is not None:
            threads.append(threading.Thread(target=self._watch_loop, args=(watch,), name="lease-watch", daemon=True))
        if self._reporter is not None:
            threads.append(threading.Thread(target=self._reporter.run, name="reporter", daemon=True))
        for thread in threads:
            thread.start()
        abandoned: list[_Running] = []
        try:
            with self._cond:
                while not (self._claimer_done and not self._running):
                    if self._deadline is not None and self.monotonic() >= self._deadline:
                        break
                    if self._stopped_at is not None and not self._running:
                        # Idle: do not wait out the long poll in flight (see
                        # the module docstring for what happens to its answer).
                        break
                    self._ends.wait(self._wait_step(self._deadline))
                # From here on no result is reported: what still runs is left to expire.
                self._exit.set()
                for record in self._running.values():
                    if self._settle(record, "lost"):
                        self.stats.abandoned += 1
                        abandoned.append(record)
                        record.cancellation.cancel("the worker stopped before the job finished; its lease will "
                                                   "run out and the job will run again")
        finally:
            self._stopping.set()
            self._exit.set()
            for _ in range(self.concurrency):
                self._inbox.put(None)
        for record in abandoned:
            log.warning("job %s abandoned: still running after the grace period; cancelled, its lease will expire",
                        record.job.id)
        s = self.stats
        log.info("worker %s stopped: claimed %d, completed %d, failed %d (dead %d), lost %d",
                 self.worker_id, s.claimed, s.completed, s.failed, s.dead, s.lost)
        if self.fatal is not None:
            raise self.fatal
        return self.stats

    def stop(self, grace_seconds: float | None = None) -> None:
        """Stop claiming; running jobs get ``grace_seconds`` (default: the
        worker's) to finish. Idempotent; a later call may only shorten the
        grace period (``stop(0)`` makes ``run()`` return at once). Safe from
        any thread and from a signal handler: it only holds a reentrant lock
        for a moment, and never waits."""
        grace = self.grace_seconds if grace_seconds is None else grace_seconds
        with self._cond:
            now = self.monotonic()
            if self._stopped_at is None:
                self._stopped_at = now
            if self._deadline is None or now + grace < self._deadline:
                self._deadline = now + grace
            self._stopping.set()
            self._wake_all()

    def _wake_all(self) -> None:
        """Wake every waiting thread (a stop, the claimer's end). Call with the lock held."""
        self._cond.notify_all()
        self._claims.notify_all()
        self._ends.notify_all()

    def _job_ended(self, record: _Running) -> None:
        """``record``'s job is no longer running here (its handler ended, or
        its handed-off result settled): free it, wake the claimer if it has
        something to do, and run() once none is left after the claimer
        ended or a stop. Call with the lock held."""
        self._running.pop(record.job.lease, None)
        self._finished += 1
        self._wake_claimer()
        if not self._running and (self._claimer_done or self._stopped_at is not None):
            self._ends.notify_all()  # what run() waits for; a worker between two jobs is not

    def _wake_claimer(self) -> None:
        """Wake the claimer if it has something to do: a claim it may send
        now, its quota claimed (it then ends), or a job ended while a
        burst's empty claim waits for one. Most changes, a one-slot worker's
        all, find it with nothing to do: a result's acknowledgement carries
        the next claim. Call with the lock held."""
        if self._awaiting_end or self._may_claim() or self._quota_used():
            self._claims.notify_all()

    @property
    def running(self) -> int:
        """Jobs claimed and not yet reported."""
        with self._cond:
            return len(self._running)

    def _wait_step(self, until: float | None) -> float:
        if until is None:
            return MAX_WAIT_STEP_SECONDS
        return max(0.0, min(MAX_WAIT_STEP_SECONDS, until - self.monotonic()))

    def _settle(self, record: _Running, outcome: Literal["completed", "failed", "lost"]) -> bool:
        """Count ``record``'s outcome once; False if it was already counted.
        Call with ``self._cond`` held."""
        if record.settled:
            return False
        record.settled = True
        setattr(self.stats, outcome, getattr(self.stats, outcome) + 1)
        return True

    def _backoff(self, failures: int) -> float:
        return jittered(failures, self.backoff_seconds, self.backoff_cap_seconds)

    # -- claiming --------------------------------------------------------------

    def _claim_loop(self) -> None:
        failures = 0
        try:
            while not self._stopping.is_set():
                with self._cond:
                    while not (self._may_claim() or self._stopping.is_set() or self._quota_used()):
                        self._claims.wait(MAX_WAIT_STEP_SECONDS)
                    if self._stopping.is_set():
                        break
                    if self._quota_used():
                        log.info("worker %s: claimed its %d jobs (max_jobs); stops once they end",
                                 self.worker_id, self.max_jobs)
                        break
                    free = self._free_slots()
                    finished = self._finished
                    self._claim_in_flight = True
                started = self.monotonic()
                try:
                    jobs = self._claim(free)
                except FATAL_ERRORS as exc:
                    self._claimed([], started)
                    self._fatal_claim(exc)
                    break
                except Exception as exc:  # transient, or a bug: never end the worker
                    self._claimed([], started)
                    failures += 1
                    with self._cond:
                        self.stats.errors += 1
                    delay = self._backoff(failures)
                    log.warning("worker %s: claim failed (%s: %s); retrying in %.1fs",
                                self.worker_id, type(exc).__name__, exc, delay)
                    self._stopping.wait(delay)
                    continue
                failures = 0
                self._claimed(jobs, started)
                if jobs:
                    continue
                if self.burst:
                    with self._cond:
                        # Claim again once a running job ends: its failure may
                        # have made it claimable again at once.
                        self._awaiting_end = True
                        while self._finished == finished and self._running and not self._stopping.is_set():
                            self._claims.wait(MAX_WAIT_STEP_SECONDS)
                        self._awaiting_end = False
                        if self._finished == finished and not self._running:
                            log.info("worker %s: nothing left to claim (burst)", self.worker_id)
                            break
                else:
                    # A long poll already waited; guard anyway against a broker
                    # (or a client without long polls) answering at once.
                    idle = self.poll_seconds - (self.monotonic() - started)
                    if idle > 0:
                        self._stopping.wait(idle)
        finally:
            with self._cond:
                self._claimer_done = True
                self._wake_all()

    def _free_slots(self) -> int:
        """How many jobs a claim may ask for now: the free handler threads,
        no more than ``max_jobs`` leaves, and no more than one claim may
        hold (``MAX_CLAIM_JOBS``; a worker with more threads fills them over
        several claims). Call with ``self._cond`` held."""
        free = min(self.concurrency - self._busy, MAX_CLAIM_JOBS)
        if self.max_jobs is not None:
            free = min(free, self.max_jobs - self.stats.claimed)
        return free

    def _quota_used(self) -> bool:
        """Whether the worker claimed its ``max_jobs``. Call with ``self._cond`` held."""
        return self.max_jobs is not None and self.stats.claimed >= self.max_jobs

    def _may_claim(self) -> bool:
        """Whether the claimer should claim now: a slot is free, no claim is in
        flight, and the reporter has no request to send or in flight, which
        would carry the claim (see :mod:`engine.reporter`): every slot that
        frees with a result does so with an acknowledgement to send. Call
        with ``self._cond`` held."""
        if self._free_slots() <= 0 or self._claim_in_flight:
            return False
        return self._reporter is None or not self._reporter.will_send()

    def _claimed(self, jobs: list[ClaimedJob], claimed_at: float) -> None:
        """The claim in flight was answered with ``jobs`` (possibly none, or
        it failed): dispatch them, and let the next claim go."""
        with self._cond:
            if jobs:
                self._dispatch(jobs, claimed_at)  # wakes the lease watch
            self._claim_in_flight = False
            self._wake_claimer()

    def _fatal_claim(self, exc: EngineError) -> None:
        log.error("worker %s: claims refused, stopping: %s", self.worker_id, exc)
        self.fatal = exc
        self.stop()

    def _claim_error(self, exc: BaseException) -> None:
        """A claim an acknowledgement carried failed alone: stop for good on
        what retrying cannot fix, as the claimer does; else count it (the
        next claim, carried or the claimer's own, tries again)."""
        if isinstance(exc, FATAL_ERRORS):
            self._fatal_claim(exc)
            return
        with self._cond:
            self.stats.errors += 1
        log.warning("worker %s: a claim riding the acknowledgements failed (%s: %s)",
                    self.worker_id, type(exc).__name__, exc)

    def _claim(self, free: int) -> list[ClaimedJob]:
        # in_order only when asked for: a client subclass written before it
        # (one that overrides claim) keeps working for every other worker.
        ordered = {"in_order": True} if self.in_order else {}
        return self.client.claim(self.worker_id, self.queues, max_jobs=free, lease_seconds=self.lease_seconds,
                                 wait_seconds=self.wait_seconds, **ordered)

    def _dispatch(self, jobs: list[ClaimedJob], claimed_at: float) -> None:
        with self._cond:
            if self._exit.is_set():
                log.warning("worker %s: %d job(s) claimed after the worker stopped; their leases will expire",
                            self.worker_id, len(jobs))
                return
            for job in jobs:
                # The lease started no earlier than our request did.
                record = _Running(job, next_beat=claimed_at + self.heartbeat_interval,
                                  lease_until=claimed_at + self.lease_seconds)
                self._running[job.lease] = record
                self._inbox.put(record)
            self.stats.claimed += len(jobs)
            self._busy += len(jobs)
            self._cond.notify_all()

    # -- handling --------------------------------------------------------------

    def _handle_loop(self) -> None:
        while (record := self._inbox.get()) is not None:
            ack: tuple[Complete | Fail, float] | None = None
            try:
                ack = self._handle(record)
            except Exception:  # a bug here must not cost a handler slot
                log.exception("worker %s: job %s: unexpected error", self.worker_id, record.job.id)
            finally:
                with self._cond:
                    self._busy -= 1
                    if ack is not None and not self._exit.is_set():
                        # Handed to the reporter, which releases it once its ack is
                        # settled. In the same hold as the slot it frees, so that the
                        # reporter (put wakes it; it sends once no handler is busy)
                        # wakes once.
                        assert self._reporter is not None
                        self._reporter.put(record, *ack)
                        self._wake_claimer()  # a slot is free
                    else:  # reported, or past the grace period (abandoned: nothing is sent)
                        self._job_ended(record)  # wakes the claimer if it may claim
                        self._cond.notify_all()  # the reporter sends once no handler is busy

    def _handle(self, record: _Running) -> tuple[Complete | Fail, float] | None:
        """Run the handler on ``record``'s job and report the outcome: itself
        (then None), or (batching) return the operation for the reporter and
        how long the handler ran, which the caller hands over."""
        job = record.job
        started = self.monotonic()
        with self._cond:
            record.started = started  # the heartbeat thread times it out from here
        error: str | None = None
        give_up = False
        stopped = False  # the handler stopped on its job's own cancellation
        try:
            with handling(record.cancellation):
                self.handler(job if self.pass_job else job.payload)
        except PermanentFailure:
            error = traceback.format_exc()
            give_up = True
        except JobCancelled:
            stopped = record.cancellation.cancelled
            error = traceback.format_exc()  # raised with no cancellation: an ordinary failure
        except BaseException:  # SystemExit too: a handler must never end its thread
            error = traceback.format_exc()
        took = self.monotonic() - started
        with self._cond:
            record.started = None  # returned: the heartbeat thread times it out no more
            timed_out = record.timed_out
        if stopped:  # cancelled: lost, abandoned (then nothing below sends either) or timed out
            with self._cond:
                self.stats.cancelled += 1
        if record.lost:
            how = "stopped on its cancellation" if stopped else "finished"
            self._count_lost(record, f"{how} after its lease was lost ({took:.3f}s); result not sent")
            return None
        if timed_out:  # a failure, whatever the handler did once it was told
            error = self._timeout_error(error if not stopped else None)
            give_up = False
        if self._reporter is not None:
            op = complete_op(job.id, job.lease) if error is None else fail_op(
                job.id, job.lease, error=error, retry_in_seconds=None, policy=self.client.policy, give_up=give_up)
            return op, took
        failures = 0
        while True:
            with self._cond:
                if self._exit.is_set():
                    return None  # past the grace period: counted as abandoned, nothing is sent
                record.reporting = True
            try:
                if error is None:
                    self.client.complete(job.id, job.lease)
                    with self._cond:
                        self._settle(record, "completed")
                    log.info("job %s (%s, attempt %d) completed in %.3fs", job.id, job.queue, job.attempt, took)
                else:
                    outcome = self.client.fail(job.id, job.lease, error=error, give_up=give_up)
                    with self._cond:
                        if self._settle(record, "failed") and outcome.status == "dead":
                            self.stats.dead += 1
                    last_line = error.rstrip().splitlines()[-1]
                    then = "dead" if outcome.status == "dead" else "will retry"
                    log.info("job %s (%s, attempt %d) failed in %.3fs, %s: %s",
                             job.id, job.queue, job.attempt, took, then, last_line)
                return None
            except QueueError as exc:  # LeaseLost, JobNotFound, ...: retrying won't help
                self._count_lost(record, f"its result was refused: {exc}")
                return None
            except Exception as exc:  # transient: retry while the lease may still hold
                failures += 1
                delay = self._backoff(failures)
                with self._cond:
                    self.stats.errors += 1
                    record.reporting = False  # keep the lease alive meanwhile
                    deadline = record.lease_until
                    if self._deadline is not None:
                        deadline = min(deadline, self._deadline)
                if self.monotonic() + delay >= deadline:
                    self._count_lost(record, f"its result could not be reported before its lease ran out: {exc}")
                    return None
                log.warning("job %s: reporting failed (%s); retrying in %.1fs", job.id, exc, delay)
                self._exit.wait(delay)

    def _timeout_error(self, raised: str | None) -> str:
        """The error a timed-out attempt fails with; ``raised`` is the
        traceback of what its handler raised after the timeout, if anything
        but its cancellation."""
        error = (f"JobTimeout: the handler ran longer than the worker's timeout ({self.timeout_seconds:g} s); "
                 "it was cancelled")
        # Last, so that the dead letters group a timeout by it whatever came before.
        return error if raised is None else f"{raised.rstrip()}\n{error}"

    def _release(self, record: _Running, outcome: Literal["completed", "failed", "lost"], why: str = "", *,
                 dead: bool = False) -> None:
        """Settle a handed-off ``record`` (batching) and free it: its job is no
        longer running here. ``why`` is logged for a lost one."""
        with self._cond:
            counted = self._settle(record, outcome)
            if counted and dead:
                self.stats.dead += 1
            self._job_ended(record)
        if counted and outcome == "lost":
            job = record.job
            log.warning("job %s (%s, attempt %d) lost: %s", job.id, job.queue, job.attempt, why)

    def _count_lost(self, record: _Running, why: str) -> None:
        with self._cond:
            counted = self._settle(record, "lost")
        if counted:
            job = record.job
            log.warning("job %s (%s, attempt %d) lost: %s", job.id, job.queue, job.attempt, why)
