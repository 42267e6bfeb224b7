"""``python -m bench worker``: what an :class:`engine.Worker` itself costs a job.

Runs ``--workers`` Workers in this process against a client that answers
every call after ``--round-trip-ms`` (no HTTP, no broker), with a no-op
handler, until ``--jobs`` jobs are completed, and prints the jobs a second,
the process's CPU time a job (user and system) and its context switches a
job. What it measures is the worker's own machinery: its threads, their
hand-offs and their locks, which a real worker pays on top of its HTTP
client and its handler. The defaults are the one-job-per-request drain of
``python -m bench network`` (``single``): one-slot batching Workers, each
acknowledgement carrying the next claim, sixteen in a process.

A number is a median of ``--repeat`` runs; this machine's spread between
runs is large, so compare two versions by alternating them.
"""

from __future__ import annotations

import argparse
import itertools
import resource
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from engine import ClaimedJob, Policy, Worker, WorkerOptions
from engine.ops import Claim, Operation


class InstantClient:
    """A client whose every call answers after ``round_trip`` seconds:
    claims hand out jobs until ``jobs`` were handed out, completions
    succeed. Thread-safe."""

    policy = Policy()

    def __init__(self, jobs: int, round_trip: float) -> None:
        self._left = jobs
        self._round_trip = round_trip
        self._lock = threading.Lock()
        self._ids = itertools.count()

    def _take(self, wanted: int) -> list[ClaimedJob]:
        with self._lock:
            count = min(wanted, self._left)
            self._left -= count
            numbers = [next(self._ids) for _ in range(count)]
        expires = datetime.now(UTC) + timedelta(seconds=30)
        return [ClaimedJob(id=f"job-{n}", queue="q", payload={"n": n}, attempt=1, lease=f"lease-{n}",
                           lease_expires_at=expires) for n in numbers]

    def claim(self, worker: str, queues: Sequence[str], *, max_jobs: int = 1, **_: Any) -> list[ClaimedJob]:
        time.sleep(self._round_trip)
        return self._take(max_jobs)

    def execute_many(self, ops: Sequence[Operation]) -> list[Any]:
        time.sleep(self._round_trip)
        return [self._take(op.max_jobs) if isinstance(op, Claim) else None for op in ops]

    def complete(self, job_id: str, lease: str) -> None:
        time.sleep(self._round_trip)

    def heartbeat(self, job_id: str, lease: str, **_: Any) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=30)


def run_once(jobs: int, workers: int, concurrency: int, batch: bool, round_trip: float) -> dict[str, float]:
    """One run: its jobs a second, CPU microseconds and context switches a job."""
    client = InstantClient(jobs, round_trip)
    options = WorkerOptions(concurrency=concurrency, batch=batch, burst=True, watch_leases=False)
    pool = [Worker(client, queues=["q"], handler=lambda _: None, options=options)  # type: ignore[arg-type]
            for _ in range(workers)]
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    threads = [threading.Thread(target=w.run) for w in pool]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF)
    done = sum(w.stats.completed for w in pool)
    if done != jobs:
        raise SystemExit(f"only {done} of {jobs} jobs completed")
    switches = (after.ru_nvcsw - before.ru_nvcsw) + (after.ru_nivcsw - before.ru_nivcsw)
    return {"jobs_per_s": done / seconds,
            "cpu_us": 1e6 * ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) / done,
            "user_us": 1e6 * (after.ru_utime - before.ru_utime) / done,
            "switches": switches / done}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench worker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per run (default: 20000)")
    parser.add_argument("--workers", type=int, default=16, help="Workers in the process (default: 16)")
    parser.add_argument("--concurrency", type=int, default=1, help="slots per Worker (default: 1)")
    parser.add_argument("--no-batch", action="store_true", help="each handler reports its own job, one call each")
    parser.add_argument("--round-trip-ms", type=float, default=0.5, help="each call's answer time (default: 0.5)")
    parser.add_argument("--repeat", type=int, default=3, help="runs; the medians are printed (default: 3)")
    args = parser.parse_args(argv)
    if min(args.jobs, args.workers, args.concurrency, args.repeat) < 1 or args.round_trip_ms < 0:
        parser.error("--jobs, --workers, --concurrency and --repeat must be >= 1, --round-trip-ms >= 0")
    runs = [run_once(args.jobs, args.workers, args.concurrency, not args.no_batch, args.round_trip_ms / 1000)
            for _ in range(args.repeat)]
    for run in runs:
        print(f"[worker] {run['jobs_per_s']:,.0f} jobs/s, {run['cpu_us']:.0f} us CPU a job "
              f"({run['user_us']:.0f} user), {run['switches']:.1f} context switches a job", file=sys.stderr)
    median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    print(f"command: `{' '.join(['python -m bench worker', *argv])}`")
    print(f"{args.workers} Workers x {args.concurrency} slot(s), batch={not args.no_batch}, "
          f"{args.round_trip_ms:g} ms a call, {args.jobs:,} no-op jobs a run, median of {args.repeat}:")
    print(f"{median['jobs_per_s']:,.0f} jobs/s, {median['cpu_us']:.0f} us of CPU a job "
          f"({median['user_us']:.0f} user), {median['switches']:.1f} context switches a job")
    return 0
