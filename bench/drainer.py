"""A drain worker process: ``--workers`` :class:`engine.Worker` instances,
each with its own :class:`engine.BrokerClient` and ``--concurrency``
handler slots, running a no-op handler on ``--queue``.

Run by :mod:`bench.network` (``python -m bench.drainer …``), never by hand.
Protocol (:mod:`bench.children`): it builds its workers and says ``ready``;
on ``go`` it starts them and says ``progress <completed> <requests>
<last completion, monotonic>`` every :data:`PROGRESS_SECONDS` (time.monotonic
is CLOCK_MONOTONIC, one clock for every process on the machine); on
``stop`` (or stdin closing) it stops them and says ``result {json}``: every
job id it claimed (with its attempt) and completed, the results the broker
refused, claim-to-complete latencies, request and operation counts, the
workers' stats and its own CPU seconds. ``fatal <error>`` means a worker
stopped itself (claims refused for good).

``--batch`` is passed as ``WorkerOptions(batch=…)`` when WorkerOptions has
that field (the batching worker protocol); without it every worker claims up
to its free slots per request and completes each job with its own request.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import orjson

from bench.children import own_cpu_seconds, say, wait_for
from engine import BrokerClient, ClaimedJob, EngineError, FailOutcome, QueueError, Worker, WorkerOptions, WorkerStats
from engine.ops import Claim, Complete, Fail, Heartbeat, Operation

PROGRESS_SECONDS = 0.2
GO_TIMEOUT_SECONDS = 120.0
STOP_JOIN_SECONDS = 10.0
GRACE_SECONDS = 5.0
OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(WorkerOptions))


class Tally:
    """What this process's clients saw; one lock for all of them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.claimed: list[tuple[str, int]] = []  # (job id, attempt), in claim order
        self.claimed_at: dict[str, float] = {}
        self.completed: list[str] = []
        self.refused: dict[str, str] = {}  # job id -> why its complete was refused
        self.latencies: list[float] = []
        self.claims = self.empty_claims = self.heartbeats = self.fails = 0
        self.last_completion = 0.0


class TimedBrokerClient(BrokerClient):
    """A BrokerClient that records each claimed job's claim and complete answers in a shared :class:`Tally`."""

    def __init__(self, url: str, *, token: str, tally: Tally) -> None:
        super().__init__([url], token=token)
        self.tally = tally

    def claim(
        self,
        worker: str,
        queues: Iterable[str],
        *,
        max_jobs: int = 1,
        lease_seconds: float | None = None,
        wait_seconds: float = 0,
        in_order: bool = False,
    ) -> list[ClaimedJob]:
        """Claim as usual, noting when the answer arrived for each job."""
        jobs = super().claim(worker, queues, max_jobs=max_jobs, lease_seconds=lease_seconds, wait_seconds=wait_seconds,
                             in_order=in_order)
        self._record_claim(jobs)
        return jobs

    def _record_claim(self, jobs: list[ClaimedJob]) -> None:
        now = time.monotonic()
        with self.tally.lock:
            self.tally.claims += 1
            self.tally.empty_claims += not jobs
            for job in jobs:
                self.tally.claimed.append((job.id, job.attempt))
                self.tally.claimed_at[job.id] = now

    def complete(self, job_id: str, lease: str) -> None:
        """Complete as usual, then record the job's claim-to-complete time (or why it was refused)."""
        try:
            super().complete(job_id, lease)
        except QueueError as exc:  # lease_lost, job_not_found: the job is someone else's now
            self._record_complete(job_id, exc)
            raise
        self._record_complete(job_id, None)

    def execute_many(self, ops: Sequence[Operation]) -> list[Any]:
        """The batching worker's acknowledgements and heartbeats (``POST /ack``,
        ``POST /heartbeat``, where BrokerClient has ``execute_many``), and the
        claim an acknowledgement carries: sent as usual, then each outcome
        recorded like :meth:`complete`'s, :meth:`heartbeat`'s and
        :meth:`claim`'s. Only a worker with ``WorkerOptions(batch=True)`` calls it."""
        ops = list(ops)
        outcomes: list[Any] = super().execute_many(ops)
        for op, outcome in zip(ops, outcomes, strict=True):
            error = outcome if isinstance(outcome, EngineError) else None
            if isinstance(op, Complete):
                self._record_complete(op.job_id, error)
            elif isinstance(op, Claim) and error is None:
                self._record_claim(outcome)
            elif error is None and isinstance(op, Heartbeat | Fail):
                with self.tally.lock:
                    self.tally.heartbeats += isinstance(op, Heartbeat)
                    self.tally.fails += isinstance(op, Fail)
        return outcomes

    def _record_complete(self, job_id: str, error: EngineError | None) -> None:
        now = time.monotonic()
        with self.tally.lock:
            if error is not None:
                self.tally.refused[job_id] = f"{type(error).__name__}: {error}"
                return
            claimed = self.tally.claimed_at.pop(job_id, None)
            if claimed is not None:
                self.tally.latencies.append(now - claimed)
            self.tally.completed.append(job_id)
            self.tally.last_completion = now

    def heartbeat(self, job_id: str, lease: str, *, lease_seconds: float | None = None) -> datetime:
        """Heartbeat as usual, counting it."""
        answer = super().heartbeat(job_id, lease, lease_seconds=lease_seconds)
        with self.tally.lock:
            self.tally.heartbeats += 1
        return answer

    def fail(
        self,
        job_id: str,
        lease: str,
        *,
        error: str,
        retry_in_seconds: float | None = None,
        give_up: bool = False,
    ) -> FailOutcome:
        """Fail as usual (the no-op handler never fails), counting it."""
        answer = super().fail(job_id, lease, error=error, retry_in_seconds=retry_in_seconds, give_up=give_up)
        with self.tally.lock:
            self.tally.fails += 1
        return answer


def _noop(payload: Any) -> None:
    """The handler: does nothing, so the run measures the queue."""


def worker_options(*, concurrency: int, batch: bool, wait_seconds: float, lease_watch: bool = True) -> WorkerOptions:
    """The drain's WorkerOptions; ``batch`` and ``watch_leases`` only if WorkerOptions has the field."""
    extra: dict[str, Any] = {"batch": batch} if "batch" in OPTION_NAMES else {}
    if "watch_leases" in OPTION_NAMES:
        extra["watch_leases"] = lease_watch
    return WorkerOptions(concurrency=concurrency, wait_seconds=wait_seconds, grace_seconds=GRACE_SECONDS, **extra)


def _progress_loop(
    workers: list[Worker], clients: list[TimedBrokerClient], tally: Tally, done: threading.Event
) -> None:
    while not done.wait(PROGRESS_SECONDS):
        fatal = next((w.fatal for w in workers if w.fatal is not None), None)
        if fatal is not None:
            say(f"fatal {type(fatal).__name__}: {fatal}")
            return
        completed = sum(w.stats.completed for w in workers)  # the workers' own count: every way of acknowledging
        requests = sum(c.requests for c in clients)
        with tally.lock:
            last = tally.last_completion
        say(f"progress {completed} {requests} {last!r}")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Build, start, stop the workers as the protocol says; the result to report."""
    tally = Tally()
    clients = [TimedBrokerClient(args.url, token=args.token, tally=tally) for _ in range(args.workers)]
    options = worker_options(concurrency=args.concurrency, batch=args.batch, wait_seconds=args.wait_seconds,
                             lease_watch=args.lease_watch)
    workers = [
        Worker(client, queues=[args.queue], handler=_noop, worker_id=f"{args.name}-{i}", options=options)
        for i, client in enumerate(clients)
    ]
    say("ready")
    if not wait_for("go", GO_TIMEOUT_SECONDS):
        return {"aborted": "no go"}
    cpu0 = own_cpu_seconds()
    threads = [threading.Thread(target=w.run, name=f"worker-{i}", daemon=True) for i, w in enumerate(workers)]
    for thread in threads:
        thread.start()
    done = threading.Event()
    threading.Thread(target=_progress_loop, args=(workers, clients, tally, done), daemon=True).start()
    wait_for("stop", args.max_seconds)  # EOF or the time limit stop it too
    done.set()
    for worker in workers:
        worker.stop()
    stop_by = time.monotonic() + STOP_JOIN_SECONDS
    for thread in threads:
        thread.join(max(0.0, stop_by - time.monotonic()))
    cpu = own_cpu_seconds() - cpu0
    for client in clients:
        client.close()
    stats = {f.name: sum(getattr(w.stats, f.name) for w in workers) for f in dataclasses.fields(WorkerStats)}
    with tally.lock:
        return {
            "claimed": tally.claimed,
            "completed": tally.completed,
            "refused": tally.refused,
            "latencies": tally.latencies,
            "claims": tally.claims,
            "empty_claims": tally.empty_claims,
            "heartbeats": tally.heartbeats,
            "fails": tally.fails,
            "requests": sum(c.requests for c in clients),
            "stats": stats,
            "batch_option": "batch" in OPTION_NAMES,
            "cpu": cpu,
        }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.drainer", description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--name", required=True, help="worker id prefix")
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--batch", action="store_true")
    parser.add_argument("--wait-seconds", type=float, default=1.0)
    parser.add_argument("--no-lease-watch", dest="lease_watch", action="store_false")
    parser.add_argument("--max-seconds", type=float, default=600.0, help="stop by itself after this long")
    args = parser.parse_args()
    # A lost job or a refused result is worth seeing in the run's log; one line per job is not.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    say("result " + orjson.dumps(run(args)).decode())


if __name__ == "__main__":
    main()
