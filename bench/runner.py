"""Runs: one system, one queue depth, N closed-loop submitters, a fixed window.

Each submitter pushes one job, waits for the acknowledgement, and pushes the
next. A run is: start the system on a fresh store seeded with ``depth``
pending jobs; run the submitters for ``warmup`` seconds (not measured); then
measure for ``duration`` seconds; then stop submitting and wait for the
operations still in flight.

* ``ops_per_s`` — pushes acknowledged inside the window, divided by its length.
* ``p50_ms`` / ``p99_ms`` — over every push *started* inside the window that
  succeeded, timed with ``perf_counter`` from call to acknowledgement,
  including those that finish after the window (slow ones are not dropped).
* ``writes`` / ``conflicts`` — puts the MemoryStore accepted / refused inside
  the window; ``mean_batch`` is acknowledged pushes per accepted put.
* ``errors`` — pushes started in the window that raised, by exception type.
* ``lost`` — acknowledged pushes (warm-up and drain included) missing from
  the final document: ``depth + acknowledged - jobs in the document`` when
  positive. Any value above zero is a correctness failure of the system.
* ``timed_out`` — pushes still unanswered ``op_timeout`` (30 s) after the
  window closed, plus any push that took longer than that. The
  :class:`~bench.watchdog.Watchdog` then aborts the run: its store refuses
  every later call, and the system is stopped without draining. It also
  aborts a run whose process grows past the memory ceiling (``aborted``).
  No run can hang.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bench.config import DIRECT_BYTES_PER_JOB, DIRECT_MAX_SUBMITTERS, DIRECT_MEMORY_BUDGET, BenchConfig
from bench.seed import Seeds
from bench.stores import RunAborted
from bench.systems import AsyncSystem, System, ThreadSystem, make_system
from bench.watchdog import Watchdog, memory_limit, release_memory

perf_counter = time.perf_counter
# After the watchdog aborts, how long submitters get to notice (a DirectClient
# thread may be in the middle of parsing a large document).
ABORT_GRACE_SECONDS = 30.0


@dataclass(slots=True, kw_only=True)
class RunResult:
    """The outcome of one run. ``skipped`` is set (and nothing measured) when
    the run was not attempted; ``failed`` when it broke unexpectedly."""

    system: str
    depth: int
    submitters: int
    path: str = ""
    window_s: float = 0.0
    ops: int = 0
    ops_per_s: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    writes: int = 0
    conflicts: int = 0
    mean_batch: float | None = None
    errors: dict[str, int] = field(default_factory=dict)
    timed_out: int = 0
    aborted: str | None = None
    acknowledged: int = 0
    lost: int | None = None
    peak_rss_mb: float = 0.0
    setup_s: float = 0.0
    skipped: str | None = None
    failed: str | None = None
    vs_jqueue_broker: float | None = None
    vs_limit: float | None = None


class _Clock:
    """Flags the driver flips and submitters read: keep going / inside the
    window / the run was aborted (errors after that are not the system's)."""

    __slots__ = ("aborted", "measuring", "running")

    def __init__(self) -> None:
        self.running = True
        self.measuring = False
        self.aborted = False


class _Tally:
    """What submitters record. One per thread (no locking), or one per event loop."""

    __slots__ = ("acked", "completed", "errors", "in_flight", "latencies")

    def __init__(self) -> None:
        self.acked = 0
        self.completed = 0
        self.in_flight = 0
        self.latencies: list[float] = []
        self.errors: Counter[str] = Counter()

    def merge(self, other: _Tally) -> None:
        self.acked += other.acked
        self.completed += other.completed
        self.latencies.extend(other.latencies)
        self.errors.update(other.errors)


async def _async_submitter(push: Callable[[], Awaitable[Any]], clock: _Clock, tally: _Tally) -> None:
    while clock.running:
        measured = clock.measuring
        start = perf_counter()
        tally.in_flight += 1
        try:
            await push()
        except RunAborted:
            return
        except Exception as exc:
            if measured and not clock.aborted:
                tally.errors[type(exc).__name__] += 1
            await asyncio.sleep(0)  # never spin on an error without yielding
            continue
        finally:
            tally.in_flight -= 1
        tally.acked += 1
        if measured:
            tally.latencies.append(perf_counter() - start)
        if clock.measuring:
            tally.completed += 1


def _thread_submitter(push: Callable[[], Any], clock: _Clock, tally: _Tally) -> None:
    while clock.running:
        measured = clock.measuring
        start = perf_counter()
        tally.in_flight = 1
        try:
            push()
        except RunAborted:
            return
        except Exception as exc:
            if measured and not clock.aborted:
                tally.errors[type(exc).__name__] += 1
            continue
        finally:
            tally.in_flight = 0
        tally.acked += 1
        if measured:
            tally.latencies.append(perf_counter() - start)
        if clock.measuring:
            tally.completed += 1


def _percentile(ordered: list[float], q: float) -> float | None:
    """Nearest-rank percentile of sorted seconds, in milliseconds."""
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] * 1000


class _Window:
    """The measured window's bounds and the store counters inside it."""

    def __init__(self, system: System, clock: _Clock) -> None:
        self.system, self.clock = system, clock
        self.seconds = 0.0
        self.writes = self.conflicts = 0

    def open(self) -> None:
        self.writes, self.conflicts = self.system.writes, self.system.conflicts
        self.clock.measuring = True
        self._t0 = perf_counter()

    def close(self) -> None:
        self.clock.measuring = self.clock.running = False
        self.seconds = perf_counter() - self._t0
        self.writes = self.system.writes - self.writes
        self.conflicts = self.system.conflicts - self.conflicts


def _fill(result: RunResult, tally: _Tally, window: _Window, dog: Watchdog, cfg: BenchConfig) -> None:
    ordered = sorted(tally.latencies)
    result.window_s = window.seconds
    result.ops = tally.completed
    result.ops_per_s = tally.completed / window.seconds if window.seconds > 0 else 0.0
    result.p50_ms = _percentile(ordered, 0.50)
    result.p99_ms = _percentile(ordered, 0.99)
    result.writes = window.writes
    result.conflicts = window.conflicts
    result.mean_batch = tally.completed / window.writes if window.writes else None
    result.errors = dict(tally.errors)
    result.acknowledged = tally.acked
    result.timed_out += sum(1 for s in ordered if s > cfg.op_timeout)
    if dog.reason == "timeout":
        result.timed_out += dog.in_flight_at_fire
    elif dog.reason == "memory":
        result.aborted = (
            f"aborted: the process grew by {(dog.rss_limit - dog.start_rss) / 1024**3:.1f} GiB "
            f"with {dog.in_flight_at_fire:,} pushes in flight"
        )
    result.peak_rss_mb = dog.peak_rss / 1e6
    limit = cfg.limit(result.submitters)
    result.vs_limit = result.ops_per_s / limit if limit else None


def _phases(window: _Window, dog: Watchdog, cfg: BenchConfig) -> None:
    """Warm up, measure, then arm the watchdog's deadline (blocking; run on a thread)."""
    time.sleep(cfg.warmup)
    window.open()
    time.sleep(cfg.duration)
    window.close()
    dog.set_deadline(time.monotonic() + cfg.op_timeout)


def _abort_run(system: System, clock: _Clock) -> Callable[[], None]:
    def abort() -> None:
        clock.aborted = True
        clock.running = False
        system.abort()

    return abort


async def _run_async(system: AsyncSystem, result: RunResult, cfg: BenchConfig) -> None:
    started = perf_counter()
    await asyncio.wait_for(system.start(), timeout=2 * cfg.op_timeout)
    result.setup_s += perf_counter() - started
    clock, tally = _Clock(), _Tally()
    window = _Window(system, clock)
    dog = Watchdog(_abort_run(system, clock), lambda: tally.in_flight, rss_limit=memory_limit()).start()
    tasks = [asyncio.create_task(_async_submitter(system.pusher(i), clock, tally)) for i in range(result.submitters)]
    try:
        # Timed on a thread: a blocked event loop must not stretch the window.
        await asyncio.to_thread(_phases, window, dog, cfg)
        _, pending = await asyncio.wait(tasks, timeout=cfg.op_timeout + ABORT_GRACE_SECONDS)
        if pending:  # did not even notice the abort: cancel them
            result.timed_out += max(0, len(pending) - dog.in_flight_at_fire)
            for task in pending:
                task.cancel()
            await asyncio.wait(pending, timeout=ABORT_GRACE_SECONDS)
        result.path = system.path
        _fill(result, tally, window, dog, cfg)
    finally:
        dog.stop()
        clock.running = False
        for task in tasks:
            task.cancel()
        await system.stop(clean=not dog.fired)
    _check_lost(system, result)


def _run_threads(system: ThreadSystem, result: RunResult, cfg: BenchConfig) -> None:
    started = perf_counter()
    system.start()
    result.setup_s += perf_counter() - started
    clock = _Clock()
    tallies = [_Tally() for _ in range(result.submitters)]
    window = _Window(system, clock)
    dog = Watchdog(
        _abort_run(system, clock), lambda: sum(t.in_flight for t in tallies), rss_limit=memory_limit()
    ).start()
    threads = [
        threading.Thread(
            target=_thread_submitter, args=(system.pusher(i), clock, tallies[i]), name=f"bench-{i}", daemon=True
        )
        for i in range(result.submitters)
    ]
    for thread in threads:
        thread.start()
    try:
        _phases(window, dog, cfg)
        if _join(threads, cfg.op_timeout + ABORT_GRACE_SECONDS):
            result.failed = "submitter threads did not stop after the abort"
        tally = _Tally()
        for one in tallies:
            tally.merge(one)
        result.path = system.path
        _fill(result, tally, window, dog, cfg)
    finally:
        dog.stop()
        clock.running = False
        system.stop(clean=not dog.fired)
    _check_lost(system, result)


def _check_lost(system: System, result: RunResult) -> None:
    """Count acknowledged pushes missing from the final document (pushes only
    add jobs, so the document must hold at least depth + acknowledged)."""
    result.lost = max(0, result.depth + result.acknowledged - system.count_jobs())


def _join(threads: list[threading.Thread], timeout: float) -> list[threading.Thread]:
    """Join ``threads`` within one shared deadline; return those still alive."""
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t for t in threads if t.is_alive()]


def skip_reason(name: str, depth: int, submitters: int) -> str | None:
    """Why a run is not attempted, or None."""
    if name == "direct" and submitters > DIRECT_MAX_SUBMITTERS:
        return f"skipped (baseline capped at {DIRECT_MAX_SUBMITTERS} submitters)"
    if name == "direct" and submitters * depth * DIRECT_BYTES_PER_JOB > DIRECT_MEMORY_BUDGET:
        need = submitters * depth * DIRECT_BYTES_PER_JOB / 1024**3
        return f"skipped (baseline: {submitters} threads parsing {depth:,} jobs at once need ~{need:.0f} GiB)"
    return None


def run_one(name: str, depth: int, submitters: int, cfg: BenchConfig, seeds: Seeds) -> RunResult:
    """Run one system at one depth and submitter count. Never raises for a
    failing system: the failure is recorded in the result."""
    result = RunResult(system=name, depth=depth, submitters=submitters)
    result.skipped = skip_reason(name, depth, submitters)
    if result.skipped:
        return result
    started = perf_counter()
    system: System | None = None
    try:
        system = make_system(name, latency=cfg.latency, seeds=seeds)
        result.setup_s = perf_counter() - started
        if isinstance(system, ThreadSystem):
            _run_threads(system, result, cfg)
        else:
            assert isinstance(system, AsyncSystem)
            asyncio.run(_run_async(system, result, cfg))
    except Exception as exc:
        result.failed = f"{type(exc).__name__}: {exc}"
    finally:
        del system
        release_memory()
    return result


def run_matrix(cfg: BenchConfig, progress: Callable[[int, int, RunResult], None]) -> list[RunResult]:
    """Every (depth, submitters, system) of ``cfg``, depth-major; calls
    ``progress(index, total, result)`` after each run."""
    total = len(cfg.depths) * len(cfg.submitters) * len(cfg.systems)
    results: list[RunResult] = []
    for depth in cfg.depths:
        seeds = Seeds(depth)
        for submitters in cfg.submitters:
            for name in cfg.systems:
                result = run_one(name, depth, submitters, cfg, seeds)
                results.append(result)
                progress(len(results), total, result)
        del seeds
        release_memory()
    return results
