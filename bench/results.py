"""What one run measured, and how each figure is computed.

* ``ops_per_s`` — pushes acknowledged inside the window, divided by its length.
* ``p50_ms`` / ``p99_ms`` — over every push *started* inside the window that
  succeeded, timed with ``perf_counter`` from call to acknowledgement,
  including those that finish after the window (slow ones are not dropped).
* ``writes`` / ``conflicts`` — puts the MemoryStore accepted / refused inside
  the window. ``mean_batch`` — all acknowledged pushes of the run (warm-up to
  drain) per put accepted over the same span, so a batch straddling the
  window's edge does not skew it.
* ``little_ops_per_s`` — submitters ÷ mean latency (Little's law for a closed
  loop). It does not depend on how many commits fall inside the window, so
  it is the better figure when a system commits only every second or so;
  ``None`` when some pushes failed or timed out (the law would overstate).
* ``errors`` — pushes started in the window that raised, by exception type.
* ``lost`` — acknowledged pushes (warm-up and drain included) missing from
  the final document: ``depth + acknowledged - jobs in the document`` when
  positive. Any value above zero is a correctness failure of the system.
* ``timed_out`` — pushes still unanswered ``op_timeout`` (30 s) after the
  window closed, plus any push that took longer than that; ``aborted`` — the
  run was stopped because the process grew past the memory ceiling.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from bench.config import BenchConfig
from bench.facts import percentile
from bench.submitters import Clock, Tally
from bench.systems import System
from bench.watchdog import Watchdog


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
    little_ops_per_s: float | None = None
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


class Window:
    """The measured window's bounds and the store counters inside it."""

    def __init__(self, system: System, clock: Clock) -> None:
        self.system, self.clock = system, clock
        self.seconds = 0.0
        self.writes = self.conflicts = 0
        self.writes_at_start = system.writes  # made before the submitters start

    def open(self) -> None:
        self.writes, self.conflicts = self.system.writes, self.system.conflicts
        self.clock.measuring = True
        self._t0 = time.perf_counter()

    def close(self) -> None:
        self.clock.measuring = self.clock.running = False
        self.seconds = time.perf_counter() - self._t0
        self.writes = self.system.writes - self.writes
        self.conflicts = self.system.conflicts - self.conflicts


def fill(result: RunResult, tally: Tally, window: Window, dog: Watchdog, cfg: BenchConfig) -> None:
    """Compute ``result``'s figures (see the module docstring) once every submitter has stopped."""
    ordered = sorted(tally.latencies)
    result.window_s = window.seconds
    result.ops = tally.completed
    result.ops_per_s = tally.completed / window.seconds if window.seconds > 0 else 0.0
    result.p50_ms = percentile(ordered, 0.50)
    result.p99_ms = percentile(ordered, 0.99)
    result.writes = window.writes
    result.conflicts = window.conflicts
    run_writes = window.system.writes - window.writes_at_start
    result.mean_batch = tally.acked / run_writes if run_writes else None
    if ordered and not tally.errors and not dog.fired:
        result.little_ops_per_s = result.submitters / (sum(ordered) / len(ordered))
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
