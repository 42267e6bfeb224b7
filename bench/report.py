"""Output: machine facts, the Markdown results table, target checks and JSON.

Everything printed here goes to stdout and is meant to be pasted into the
README as is; progress lines go to stderr (see :mod:`bench.__main__`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from bench.config import BenchConfig
from bench.facts import num
from bench.results import RunResult

# The group committer's performance targets, at 50 ms store latency (no
# charge for bytes) with 2,048 asyncio submitters: what it must sustain with
# a queue this deep.
TARGETS = ((0, 20_000.0, 150.0), (50_000, 12_000.0, 200.0))  # (depth, min ops/s, max p99 ms)
TARGET_SUBMITTERS = 2048
# Below this many commits in the window, ops/s is coarse (whole batches land
# in or out of it); the notes then add the Little's-law figure.
FEW_COMMITS = 5


def header(cfg: BenchConfig, facts: dict[str, Any], *, runs: bool = True) -> str:
    """The lines above the table: command, machine and (with ``runs``) the run conditions."""
    lines = [
        f"command: `{cfg.command}`",
        f"machine: nproc={facts['nproc']}, {facts['cpu'] or 'unknown CPU'}, {facts['memory_gib']} GiB RAM, "
        f"{facts['os']}",
        f"python: {facts['python']}; jqueue {facts['jqueue']}, orjson {facts['orjson']}, "
        f"pydantic {facts['pydantic']}; code at git {facts['git']}",
    ]
    if runs:
        lines.append(
            f"conditions: engine.MemoryStore + {cfg.latency * 1000:g} ms per get and put + "
            f"{f'its bytes at {cfg.bandwidth / 1e6:g} MB/s' if cfg.bandwidth else 'no bandwidth charge'} "
            f"(every system alike); ~200-byte JSON payloads; "
            f"closed-loop submitters; warm-up {cfg.warmup:g} s, then a {cfg.duration:g} s window per run; "
            f"fresh store per run; op timeout {cfg.op_timeout:g} s"
        )
    return "\n".join(lines)


def add_ratios(results: list[RunResult]) -> None:
    """Fill ``vs_jqueue_broker``: ops/s over jqueue-broker's at the same depth and submitters."""
    broker = {
        (r.depth, r.submitters): r.ops_per_s
        for r in results
        if r.system == "jqueue-broker" and not r.skipped and not r.failed
    }
    for r in results:
        base = broker.get((r.depth, r.submitters))
        if base and not r.skipped and not r.failed:
            r.vs_jqueue_broker = r.ops_per_s / base


def _notes(r: RunResult) -> str:
    parts = []
    if r.skipped:
        parts.append(r.skipped)
    if r.failed:
        parts.append(f"failed: {r.failed}")
    if r.aborted:
        parts.append(r.aborted)
    if r.lost:
        parts.append(f"LOST {r.lost:,} acknowledged pushes")
    if r.timed_out:
        parts.append(f"timed out: {r.timed_out}")
    if r.errors:
        parts.append("errors: " + ", ".join(f"{n} {name}" for name, n in sorted(r.errors.items())))
    if r.conflicts:
        parts.append(f"{r.conflicts:,} CAS conflicts")
    little = r.little_ops_per_s
    if r.writes < FEW_COMMITS and little is not None and r.ops and abs(little - r.ops_per_s) > 0.1 * r.ops_per_s:
        commits = f"{r.writes} commit{'' if r.writes == 1 else 's'}"
        parts.append(f"{commits} in the window; submitters ÷ mean latency = {little:,.0f} ops/s")
    return "; ".join(parts)


def table(results: list[RunResult]) -> str:
    """The Markdown table, one row per run, in run order."""
    rows = [
        "| system | depth | submitters | ops/s | p50 ms | p99 ms | writes | mean batch | vs jqueue-broker "
        "| vs limit | notes |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for r in results:
        if r.skipped or (r.failed and not r.ops):
            rows.append(f"| {r.system} | {r.depth:,} | {r.submitters:,} | — | — | — | — | — | — | — | {_notes(r)} |")
            continue
        rows.append(
            f"| {r.system} | {r.depth:,} | {r.submitters:,} | {r.ops_per_s:,.0f} | {num(r.p50_ms, '.1f')} "
            f"| {num(r.p99_ms, '.1f')} | {r.writes:,} | {num(r.mean_batch, ',.1f')} "
            f"| {num(r.vs_jqueue_broker, '.2f')}{'x' if r.vs_jqueue_broker is not None else ''} "
            f"| {num(r.vs_limit, '.2f')} | {_notes(r)} |"
        )
    return "\n".join(rows)


def legend(cfg: BenchConfig) -> str:
    """What the columns mean (printed under the table)."""
    limit = f"submitters ÷ {cfg.latency * 1000:g} ms" if cfg.latency > 0 else "n/a at zero latency"
    return (
        "ops/s: pushes acknowledged in the window ÷ window. p50/p99: per push, call to acknowledgement, over "
        "the pushes started in the window that succeeded (failed pushes are counted under errors). writes: puts "
        "that landed in the window; CAS conflicts: puts refused by their condition. mean batch: acknowledged "
        f"pushes per landed write over the whole run. vs limit: ops/s ÷ ({limit}), the closed-loop ceiling if "
        f"every push cost exactly one store round trip. timed out: pushes unanswered {cfg.op_timeout:g} s after "
        "the window closed; the run is then aborted. LOST: acknowledged pushes missing from the final document. "
        f"With fewer than {FEW_COMMITS} commits in the window, ops/s moves in whole batches, so the notes add "
        "submitters ÷ mean latency (Little's law), which does not."
    )


def target_lines(cfg: BenchConfig, results: list[RunResult]) -> list[str]:
    """PASS/FAIL lines for the :data:`TARGETS`, where this run measured them."""
    if abs(cfg.latency - 0.050) > 1e-9:
        return ["targets: only defined at 50 ms latency"]
    if cfg.bandwidth:
        # They were set before the store charged for bytes: a deep queue's
        # commit then also moves the whole document at the bandwidth.
        return ["targets: defined at 50 ms latency with no bandwidth charge (run with --bandwidth 0 to check them)"]
    lines = []
    for depth, min_ops, max_p99 in TARGETS:
        run = next(
            (
                r
                for r in results
                if r.system == "group" and r.depth == depth and r.submitters == TARGET_SUBMITTERS and not r.skipped
            ),
            None,
        )
        goal = (
            f"group, {TARGET_SUBMITTERS:,} submitters, depth {depth:,}: >= {min_ops:,.0f} ops/s, p99 <= {max_p99:g} ms"
        )
        if run is None:
            lines.append(f"- {goal}: not measured in this run")
            continue
        p99 = run.p99_ms if run.p99_ms is not None else math.inf
        ok = run.ops_per_s >= min_ops and p99 <= max_p99 and not run.timed_out and not run.failed and not run.lost
        lines.append(
            f"- {goal}: {run.ops_per_s:,.0f} ops/s, p99 {num(run.p99_ms, '.1f')} ms — {'PASS' if ok else 'FAIL'}"
        )
    return lines


def dump_json(
    path: str, cfg: BenchConfig, facts: dict[str, Any], results: list[RunResult], memory: dict[str, Any] | None
) -> None:
    """Write everything measured to ``path`` as JSON."""
    doc = {
        "command": cfg.command,
        "machine": facts,
        "config": {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("command", "extra")},
        "results": [dataclasses.asdict(r) for r in results],
        "memory": memory,
    }
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
