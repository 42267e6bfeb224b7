"""A batching worker's acknowledgements: :class:`AckReporter`.

With ``WorkerOptions(batch=True)`` a handler thread does not report its own
job: it hands the Complete or Fail operation to the reporter and takes the
next job at once. The reporter's one thread sends what has accumulated in one
``client.execute_many`` call (a ``POST /api/v1/ack`` through a BrokerClient),
the way group commit batches:

* while one request is in flight, new results accumulate for the next;
* a result that arrives when nothing is in flight lingers up to
  ``linger_seconds`` for others to join it, unless no other handler is busy
  (nothing else could come) or the worker is stopping (flush at once);
* at most :data:`~engine.wire.MAX_BATCH_ITEMS` go in one call.

**The next claim rides along.** A worker that acknowledges jobs has free
slots, and a claim sent on its own would cost a commit of its own (one more
store write per cycle on a store with 50 ms writes). So each request the
reporter sends also carries a claim for the slots free at that moment, if
there are any and no claim is in flight (``execute_many(acks + [claim])``:
the ack request's ``claim`` over HTTP, one commit in a GroupCommitter),
without a long poll. The jobs it claims are dispatched as the claimer's
are. The claimer meanwhile claims only when the reporter has nothing to
send (:meth:`Worker._may_claim`): idle, or when a carried claim found
nothing; then it long-polls as before. Never two claims in flight at once.

Each job is settled from its own outcome exactly as a single call is: its
result counts it completed or failed (dead), a QueueError (LeaseLost,
JobNotFound, ...) counts it lost, and anything else (the broker unreachable,
not leading, its store failing) is retried with backoff while the job's lease
may still hold and the grace period lasts, after which it is counted lost.
A job is counted completed only once the broker confirmed its commit (I1);
what is still unconfirmed when ``run()`` returns is abandoned, never counted
completed, and its lease expires (at-least-once).

Internal to :mod:`engine.worker`: it works on the worker's records under the
worker's lock.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.errors import QueueError
from engine.model import FailOutcome
from engine.ops import Claim, Complete, Fail, Operation, claim_op
from engine.wire import MAX_BATCH_ITEMS

if TYPE_CHECKING:
    from engine.worker import Worker, _Running

log = logging.getLogger("engine.worker")


@dataclass(slots=True, eq=False)
class Ack:
    """One finished job's acknowledgement, waiting to be sent or retried."""

    record: _Running
    op: Complete | Fail
    took: float  # how long the handler ran (seconds), for the log
    failures: int = 0  # transient failures so far
    not_before: float = 0.0  # monotonic time before which it is not retried


class AckReporter:
    """Sends a :class:`~engine.worker.Worker`'s acknowledgements in batches
    (see the module). ``put`` is called by handler threads; :meth:`run` is
    the reporter thread's body and returns once the worker exits."""

    def __init__(self, worker: Worker, *, linger_seconds: float) -> None:
        self.worker = worker
        self.linger_seconds = linger_seconds
        self._queue: list[Ack] = []  # guarded by worker._cond
        self._sending = False  # a request is being sent; guarded by worker._cond
        #: execute_many calls made, and claims they carried, for tests and benchmarks.
        self.calls = 0
        self.carried = 0

    def put(self, record: _Running, op: Complete | Fail, took: float) -> None:
        """Queue ``record``'s acknowledgement. Call with ``worker._cond`` held."""
        record.reporting = True  # its ack is on its way: heartbeats hold off
        self._queue.append(Ack(record, op, took))
        self.worker._cond.notify_all()

    def will_send(self) -> bool:
        """Whether a request is being sent, or acknowledgements are due for
        one (which will carry a claim for the free slots). Call with the
        worker's lock held."""
        if self._sending:
            return True
        now = self.worker.monotonic()
        return any(a.not_before <= now for a in self._queue)

    def run(self) -> None:
        w = self.worker
        while not w._exit.is_set():
            batch = self._take()
            if batch:
                self._send(batch)

    def _take(self) -> list[Ack]:
        """Wait for acknowledgements that are due, linger briefly for more,
        and take up to MAX_BATCH_ITEMS of them. [] when the worker exits."""
        w = self.worker
        with w._cond:
            linger_until: float | None = None
            while not w._exit.is_set():
                now = w.monotonic()
                due = [a for a in self._queue if a.not_before <= now]
                if due:
                    if linger_until is None:
                        linger_until = now + self.linger_seconds
                    if (len(due) >= MAX_BATCH_ITEMS or now >= linger_until or w._stopping.is_set()
                            or w._busy == 0):
                        break
                    w._cond.wait(min(linger_until - now, w._wait_step(linger_until)))
                    continue
                retry_at = min((a.not_before for a in self._queue), default=None)
                w._cond.wait(w._wait_step(retry_at))
            else:
                return []
            batch = due[:MAX_BATCH_ITEMS]
            taken = set(map(id, batch))
            self._queue = [a for a in self._queue if id(a) not in taken]
            for ack in batch:
                ack.record.reporting = True
            self._sending = True
            return batch

    def _claim(self) -> Claim | None:
        """The claim to carry: for the slots free now, if there are any, no
        claim is in flight and the worker is not stopping (then it is in
        flight from here on). Call with the worker's lock held."""
        w = self.worker
        free = w._free_slots()
        if free <= 0 or w._claim_in_flight or w._stopping.is_set():
            return None
        w._claim_in_flight = True
        return claim_op(w.worker_id, w.queues, policy=w.client.policy, max_jobs=free, lease_seconds=w.lease_seconds,
                        in_order=w.in_order)

    def _send(self, batch: list[Ack]) -> None:
        w = self.worker
        claim: Claim | None = None
        sent = w.monotonic()
        try:
            live = []
            for ack in batch:
                if ack.record.lost:  # a heartbeat learned the lease is gone: the result would be refused
                    w._release(ack.record, "lost",
                               f"finished after its lease was lost ({ack.took:.3f}s); result not sent")
                else:
                    live.append(ack)
            if not live:
                return
            with w._cond:
                claim = self._claim()
            ops: list[Operation] = [ack.op for ack in live]
            if claim is not None:
                ops.append(claim)
            self.calls += 1
            sent = w.monotonic()
            try:
                outcomes: list[Any] = w.client.execute_many(ops)
            except Exception as exc:  # the whole call failed: every ack is retried
                for ack in live:
                    self._retry(ack, exc)
                return
            if claim is not None:
                claimed = outcomes.pop()
                if isinstance(claimed, list):
                    self.carried += 1
                    w._claimed(claimed, sent)
                    claim = None
                else:
                    w._claim_error(claimed)
            for ack, outcome in zip(live, outcomes, strict=True):
                self._settle(ack, outcome)
        finally:
            if claim is not None:  # not answered: it leased nothing we know of, and the claimer takes over
                w._claimed([], sent)
            with w._cond:
                self._sending = False
                w._wake_claimer()  # it claims when no request will carry its claim

    def _settle(self, ack: Ack, outcome: Any) -> None:
        w = self.worker
        job = ack.record.job
        if isinstance(outcome, QueueError):  # LeaseLost, JobNotFound, ...: retrying won't help
            w._release(ack.record, "lost", f"its result was refused: {outcome}")
        elif isinstance(outcome, BaseException):  # transient: the broker, its leadership or its store
            self._retry(ack, outcome)
        elif isinstance(ack.op, Complete):
            w._release(ack.record, "completed")
            log.info("job %s (%s, attempt %d) completed in %.3fs", job.id, job.queue, job.attempt, ack.took)
        else:
            dead = isinstance(outcome, FailOutcome) and outcome.status == "dead"
            w._release(ack.record, "failed", dead=dead)
            last_line = ack.op.error.rstrip().splitlines()[-1] if ack.op.error.strip() else ""
            log.info("job %s (%s, attempt %d) failed in %.3fs, %s: %s", job.id, job.queue, job.attempt, ack.took,
                     "dead" if dead else "will retry", last_line)

    def _retry(self, ack: Ack, exc: BaseException) -> None:
        """Queue ``ack`` again after a backoff, or count it lost if its lease
        (or the grace period) would run out first."""
        w = self.worker
        ack.failures += 1
        delay = w._backoff(ack.failures)
        with w._cond:
            w.stats.errors += 1
            ack.record.reporting = False  # keep the lease alive meanwhile
            deadline = ack.record.lease_until
            if w._deadline is not None:
                deadline = min(deadline, w._deadline)
            give_up = w.monotonic() + delay >= deadline
            if not give_up:
                ack.not_before = w.monotonic() + delay
                self._queue.append(ack)
                w._cond.notify_all()
        if give_up:
            w._release(ack.record, "lost", f"its result could not be reported before its lease ran out: {exc}")
        else:
            log.warning("job %s: reporting failed (%s); retrying in %.1fs", ack.record.job.id, exc, delay)
