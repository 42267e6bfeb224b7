"""Runs: one system, one queue depth, N closed-loop submitters, a fixed window.

A run: start the system on a fresh store seeded with ``depth`` pending jobs;
run the submitters for ``warmup`` seconds (not measured); measure for
``duration`` seconds; stop submitting and wait for the operations still in
flight. The phases are timed on a thread, so an event loop blocked in
CPU-bound work cannot stretch the window. A :class:`~bench.watchdog.Watchdog`
aborts the run ``op_timeout`` seconds after the window closes if pushes are
still unanswered, or as soon as the process grows past the memory ceiling;
the store then refuses every later call and the system is stopped without
draining. No run can hang. What is measured: :mod:`bench.results`.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Callable

from bench.config import DIRECT_BYTES_PER_JOB, DIRECT_MAX_SUBMITTERS, DIRECT_MEMORY_BUDGET, BenchConfig
from bench.results import RunResult, Window, fill
from bench.seed import Seeds
from bench.submitters import Clock, Tally, async_submitter, thread_submitter
from bench.systems import AsyncSystem, System, ThreadSystem, make_system
from bench.watchdog import Watchdog, memory_limit, release_memory

perf_counter = time.perf_counter
# After the watchdog aborts, how long submitters get to notice (a DirectClient
# thread may be in the middle of parsing a large document).
ABORT_GRACE_SECONDS = 30.0


def _phases(window: Window, dog: Watchdog, cfg: BenchConfig) -> None:
    """Warm up, measure, then arm the watchdog's deadline (blocking; run on a thread)."""
    time.sleep(cfg.warmup)
    window.open()
    time.sleep(cfg.duration)
    window.close()
    dog.set_deadline(time.monotonic() + cfg.op_timeout)


def _abort_run(system: System, clock: Clock) -> Callable[[], None]:
    def abort() -> None:
        clock.aborted = True
        clock.running = False
        system.abort()

    return abort


async def _run_async(system: AsyncSystem, result: RunResult, cfg: BenchConfig) -> None:
    started = perf_counter()
    await asyncio.wait_for(system.start(), timeout=2 * cfg.op_timeout)
    result.setup_s += perf_counter() - started
    clock, tally = Clock(), Tally()
    window = Window(system, clock)
    dog = Watchdog(_abort_run(system, clock), lambda: tally.in_flight, rss_limit=memory_limit()).start()
    tasks = [asyncio.create_task(async_submitter(system.pusher(i), clock, tally)) for i in range(result.submitters)]
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
        fill(result, tally, window, dog, cfg)
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
    clock = Clock()
    tallies = [Tally() for _ in range(result.submitters)]
    window = Window(system, clock)
    dog = Watchdog(
        _abort_run(system, clock), lambda: sum(t.in_flight for t in tallies), rss_limit=memory_limit()
    ).start()
    threads = [
        threading.Thread(
            target=thread_submitter, args=(system.pusher(i), clock, tallies[i]), name=f"bench-{i}", daemon=True
        )
        for i in range(result.submitters)
    ]
    for thread in threads:
        thread.start()
    try:
        _phases(window, dog, cfg)
        if _join(threads, cfg.op_timeout + ABORT_GRACE_SECONDS):
            result.failed = "submitter threads did not stop after the abort"
        tally = Tally()
        for one in tallies:
            tally.merge(one)
        result.path = system.path
        fill(result, tally, window, dog, cfg)
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
        system = make_system(name, latency=cfg.latency, bandwidth=cfg.bandwidth, seeds=seeds)
        result.setup_s = perf_counter() - started
        # As a long-running server would after start-up: move everything that
        # exists now (imports, the seeded document) out of the collector's way,
        # so collections only look at what the run itself allocates. Applies
        # to every system alike.
        gc.collect()
        gc.freeze()
        if isinstance(system, ThreadSystem):
            _run_threads(system, result, cfg)
        else:
            assert isinstance(system, AsyncSystem)
            asyncio.run(_run_async(system, result, cfg))
    except Exception as exc:
        result.failed = f"{type(exc).__name__}: {exc}"
    finally:
        del system
        gc.unfreeze()
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
