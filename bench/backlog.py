"""``python -m bench backlog``: the depth runs in format 2 (segments).

For every (queues, depth), a fresh interpreter (:mod:`bench.backlog_run`)
seeds ``depth`` pending jobs spread over ``queues`` queues through the real
push path on a fresh ``file://`` folder, waits until the leader's
LaneKeeper has sealed them into segments, then measures with the store's
latency and bandwidth: pushes by ``--submitters`` closed-loop submitters,
a drain by ``--workers`` claim+complete workers, the document's bytes per
commit, the process's RSS, a standby's bytes read per minute, the
dashboard's overview and its jobs page deep inside the first queue's
segments (first load and cached), and the purge of the first queue's
pending jobs. Prints a Markdown table and the target
checks (issue 13). jqueue is not run here: it keeps every job in one object,
so ``python -m bench --systems jqueue-broker --depths ...`` is its side of
the comparison, at the depths where it finishes.

Defaults: ``--segments 1024,1000,500`` (segment_jobs, head_jobs,
refill_below). A seal takes a queue's whole tail (up to ``merge_jobs``),
so small segments keep up with 2,048 submitters and the document at rest
holds at most ~2,000 jobs (the queues share them), ~0.9 MB at ~420 bytes;
refill_below = 500 leaves 256 workers ~0.4 s of claims before the head
runs dry, enough for one segment read and a refill commit at 50 ms.
Measured against 4096,1000,500 in docs/benchmark.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.facts import machine_facts
from engine import DEFAULT_GC_THRESHOLDS, MAX_DELAY_SECONDS

#: The app's delayed horizon (``queueadmin.config.DEFAULT_QUEUE_DELAYED_HORIZON_SECONDS``;
#: the benchmark does not import Django): what a node runs unless told otherwise.
APP_DELAYED_HORIZON_SECONDS = 60.0

DEFAULT_SEGMENTS = (1024, 1000, 500)
DEFAULT_DEPTHS = (0, 100_000, 1_000_000, 5_000_000)
DEFAULT_QUEUES = (1, 10)
QUICK_DEPTHS = (0, 2_000)
MB = 1e6
COMMIT_TARGET_BYTES = 2 * MB
RSS_TARGET_BYTES = 300 * MB
RELATIVE_TARGET = 0.8
P99_TARGET_LATENCIES = 3
PURGE_TARGET_SECONDS = 1.0
JOBS_PAGE_TARGET_MS = 200.0


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v.replace("_", "")) for v in text.split(",") if v.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a comma list of integers, got {text!r}") from exc
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected non-negative integers, got {text!r}")
    return values


def _segments(text: str) -> tuple[int, int, int]:
    values = _ints(text)
    if len(values) != 3 or values[0] <= 0 or not 0 < values[2] <= values[1]:
        raise argparse.ArgumentTypeError(
            f"--segments is segment_jobs,head_jobs,refill_below with 0 < refill_below <= head_jobs; got {text!r}")
    return values[0], values[1], values[2]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench backlog", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=_segments, default=DEFAULT_SEGMENTS,
                        help="segment_jobs,head_jobs,refill_below (default: %(default)s)")
    parser.add_argument("--depths", type=_ints,
                        help="pending jobs before measuring (default: 0,100000,1000000,5000000)")
    parser.add_argument("--queues", type=_ints, help="the depth spread over this many queues (default: 1,10)")
    parser.add_argument("--submitters", type=int, default=2048, help="closed-loop push submitters (default: 2048)")
    parser.add_argument("--workers", type=int, default=256, help="claim+complete workers (default: 256)")
    parser.add_argument("--duration", type=float, default=3.0, help="measured seconds per phase (default: 3)")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before each (default: 1)")
    parser.add_argument("--latency", type=float, default=50.0, help="ms added to every store call (default: 50)")
    parser.add_argument("--bandwidth", type=float, default=100.0,
                        help="MB/s each get and put also pays for its bytes, 0 for unlimited (default: 100)")
    parser.add_argument("--heartbeat", type=float, default=1.0, help="the leader's heartbeat seconds (default: 1)")
    parser.add_argument("--tmp", help="folder for the file:// stores (default: the system's temporary folder)")
    parser.add_argument("--quick", action="store_true",
                        help="depths 0 and 2000, 1 queue, 64 submitters, 16 workers, 0.5 s phases, tiny segments")
    parser.add_argument("--delayed", type=float, default=0.0, metavar="SECONDS",
                        help="seed the backlog as delayed jobs, due in SECONDS: scheduled jobs, or retries waiting "
                             "for their backoff while a downstream service is down (default: 0, pending now)")
    parser.add_argument("--delayed-horizon", type=float, default=APP_DELAYED_HORIZON_SECONDS,
                        metavar="SECONDS",
                        help="delayed jobs due further ahead go to delayed segments (format 3); 0 keeps them in the "
                             f"document (default: {APP_DELAYED_HORIZON_SECONDS:g}, the app's)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = parser.parse_args(argv)
    if args.quick:
        args.depths = args.depths or QUICK_DEPTHS
        args.queues = args.queues or (1,)
        args.submitters, args.workers = min(args.submitters, 64), min(args.workers, 16)
        args.duration, args.warmup = 0.5, 0.2
        if args.segments == DEFAULT_SEGMENTS:
            args.segments = (256, 200, 100)
    args.depths = args.depths or DEFAULT_DEPTHS
    args.queues = args.queues or DEFAULT_QUEUES
    if args.submitters < 1 or args.workers < 1 or args.duration <= 0 or args.warmup < 0 or args.latency < 0:
        parser.error("--submitters and --workers must be >= 1, --duration > 0, --warmup and --latency >= 0")
    if not 0 <= args.delayed <= MAX_DELAY_SECONDS:
        parser.error(f"--delayed must be between 0 and {MAX_DELAY_SECONDS:g} seconds")
    if not 0 <= args.delayed_horizon <= MAX_DELAY_SECONDS:
        parser.error(f"--delayed-horizon must be between 0 and {MAX_DELAY_SECONDS:g} seconds")
    return args


#: The leader's process gets this unless the environment sets it (see run_child).
MALLOC_ARENA_MAX = "2"


def run_child(cfg: dict[str, Any], *, timeout: float = 3600.0) -> dict[str, Any]:
    """One run in a fresh interpreter; ``{"error": ...}`` if it failed."""
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    # As the README advises for nodes: two glibc arenas, or the lane keeper's
    # threads each keep one and the RSS measures the allocator, not the queue.
    env.setdefault("MALLOC_ARENA_MAX", MALLOC_ARENA_MAX)
    cmd = [sys.executable, "-m", "bench.backlog_run", json.dumps(cfg)]
    try:
        done = subprocess.run(cmd, cwd=root, env=env, stdout=subprocess.PIPE, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {**cfg, "error": f"timed out after {timeout:g} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {**cfg, "error": f"exit {done.returncode}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _depth(r: dict[str, Any]) -> str:
    """A run's depth as the table and the targets show it: delayed, if seeded so."""
    return f"{r['depth']:,} delayed" if r.get("delayed") and r["depth"] else f"{r['depth']:,}"


def _ratio(value: float, base: float | None) -> str:
    return f"{value / base:.0%}" if base else "—"


def table(results: list[dict[str, Any]]) -> str:
    rows = ["| queues | depth | push ops/s | p50 ms | p99 ms | push vs 0 | drain jobs/s | drain vs 0 "
            "| bytes/commit mean | p90 | max | leader RSS MB | standby MB read/min | overview ms "
            "| jobs page cold ms | cached ms | job by id cold / cold, a recent job / warm / unknown ms "
            "| new leader's index warm-up s / then by id ms | job page ms: by range / whole segment / again "
            "| purge of queue 1 | seeded in |",
            "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|"]
    base: dict[int, dict[str, Any]] = {}
    for r in results:
        if "error" in r:
            rows.append(f"| {r['queues']} | {_depth(r)} | failed: {r['error']} |" + " |" * 18)
            continue
        if r["depth"] == 0:
            base[r["queues"]] = r
        b = base.get(r["queues"])
        push, drain = r["push"], r["drain"]
        purge = r.get("purge")
        ms = r.get("overview_ms")
        overview = f"{ms:,.1f}" if isinstance(ms, float) else "—"
        cold, cached = (f"{r[k]:,.1f}" if k in r else "—" for k in ("jobs_page_cold_ms", "jobs_page_cached_ms"))
        purge_text = (f"{purge['pending']:,} jobs: {purge['commits']} commit(s), {purge['seconds'] * 1000:,.0f} ms"
                      if purge else "—")
        by_id = r.get("job_by_id") or {}
        by_id_text = (f"{by_id['cold_ms']:,.0f} / {by_id.get('cold_recent_ms', 0):,.0f} / {by_id['warm_ms']:,.1f} / "
                      f"{by_id['unknown_ms']:,.1f}" if "cold_ms" in by_id else by_id.get("error", "—"))
        warm_up_text = (f"{by_id['warm_up_s']:,.2f} s ({by_id['warmed']:,} indexes) / {by_id['after_warm_up_ms']:,.1f}"
                        if "warm_up_s" in by_id else "—")
        page = r.get("job_page") or {}
        page_text = (f"{page['range_ms']:,.1f} / {page['whole_ms']:,.0f} / {page['again_ms']:,.2f}"
                     if "range_ms" in page else page.get("error", "—"))
        rows.append(
            f"| {r['queues']} | {_depth(r)} | {push['ops_per_s']:,.0f} "
            f"| {push['p50_ms']:.0f} | {push['p99_ms']:.0f} "
            f"| {_ratio(push['ops_per_s'], b['push']['ops_per_s'] if b else None)} | {drain['jobs_per_s']:,.0f} "
            f"| {_ratio(drain['jobs_per_s'], b['drain']['jobs_per_s'] if b else None)} "
            f"| {r['mean_commit_bytes'] / MB:.2f} MB | {r.get('p90_commit_bytes', 0) / MB:.2f} MB "
            f"| {r['max_commit_bytes'] / MB:.2f} MB "
            f"| {r['rss_bytes'] / MB:,.0f} | {r['standby_bytes_per_min'] / MB:,.0f} | {overview} "
            f"| {cold} | {cached} | {by_id_text} | {warm_up_text} | {page_text} | {purge_text} "
            f"| {r['seed_push_s'] + r['seed_settle_s']:,.0f} s |")
    return "\n".join(rows)


def target_lines(results: list[dict[str, Any]], latency: float) -> list[str]:
    """One line per target of issue 13 that this benchmark measures, with PASS/FAIL."""
    ok = [r for r in results if "error" not in r]

    def verdict(good: bool) -> str:
        return "PASS" if good else "FAIL"

    lines = []
    worst_commit = max(ok, key=lambda r: r["max_commit_bytes"], default=None)
    if worst_commit:
        largest = worst_commit["max_commit_bytes"] / MB
        lines.append(f"- bytes per commit <= 2 MB at every depth: largest {largest:.2f} MB "
                     f"({worst_commit['queues']} queue(s), depth {_depth(worst_commit)}) — "
                     f"{verdict(worst_commit['max_commit_bytes'] <= COMMIT_TARGET_BYTES)}")
    worst_rss = max(ok, key=lambda r: r["rss_bytes"], default=None)
    if worst_rss:
        lines.append(f"- leader RSS <= 300 MB at every depth: largest {worst_rss['rss_bytes'] / MB:,.0f} MB "
                     f"({worst_rss['queues']} queue(s), depth {_depth(worst_rss)}) — "
                     f"{verdict(worst_rss['rss_bytes'] <= RSS_TARGET_BYTES)}")
    for r in ok:
        base = next((b for b in ok if b["queues"] == r["queues"] and b["depth"] == 0), None)
        if base is None or r["depth"] < 1_000_000:
            continue
        push = r["push"]["ops_per_s"] / base["push"]["ops_per_s"]
        drain = r["drain"]["jobs_per_s"] / base["drain"]["jobs_per_s"]
        lines.append(f"- {r['queues']} queue(s), depth {_depth(r)}: push {push:.1%}, drain {drain:.1%} of depth 0 "
                     f"(>= 80 %) — {verdict(push >= RELATIVE_TARGET and drain >= RELATIVE_TARGET)}")
    limit_ms = P99_TARGET_LATENCIES * latency * 1000
    worst_p99 = max(ok, key=lambda r: r["push"]["p99_ms"], default=None)
    if worst_p99:
        lines.append(f"- push p99 <= 3 x latency ({limit_ms:.0f} ms): largest {worst_p99['push']['p99_ms']:.0f} ms "
                     f"({worst_p99['queues']} queue(s), depth {_depth(worst_p99)}) — "
                     f"{verdict(worst_p99['push']['p99_ms'] <= limit_ms)}")
    deep = [r for r in ok if "jobs_page_cached_ms" in r and r["jobs_page"].get("in_segments")]
    worst_page = max(deep, key=lambda r: r["jobs_page_cached_ms"], default=None)
    if worst_page:
        cached_ms = worst_page["jobs_page_cached_ms"]
        lines.append(f"- jobs page deep in segments, cached <= 200 ms: largest {cached_ms:,.1f} ms "
                     f"({worst_page['queues']} queue(s), depth {_depth(worst_page)}; "
                     f"first load {worst_page['jobs_page_cold_ms']:,.0f} ms) — "
                     f"{verdict(cached_ms <= JOBS_PAGE_TARGET_MS)}")
    for r in ok:
        purge = r.get("purge")
        if purge and purge["pending"] >= 1_000_000:
            where = f"{r['queues']} queue(s), depth {_depth(r)}"
            lines.append(f"- purge of {purge['pending']:,} pending jobs ({where}): "
                         f"{purge['commits']} commit(s), {purge['seconds'] * 1000:,.0f} ms — "
                         f"{verdict(purge['commits'] == 1 and purge['seconds'] < PURGE_TARGET_SECONDS)}")
    return lines


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    facts = machine_facts()
    segment_jobs, head_jobs, refill_below = args.segments
    print(f"command: `{shlex.join(['python', '-m', 'bench', 'backlog', *argv])}`")
    print(f"machine: nproc={facts['nproc']}, {facts['cpu']}, {facts['memory_gib']} GiB RAM, {facts['os']}; "
          f"load average {os.getloadavg()[0]:.2f} at the start")
    print(f"python: {facts['python']}; orjson {facts['orjson']}; code at git {facts['git']}")
    print(f"conditions: file:// store in a fresh folder per run + {args.latency:g} ms per call and "
          f"{args.bandwidth:g} MB/s for each get's and put's bytes (none while seeding); "
          f"Policy(segment_jobs={segment_jobs}, head_jobs={head_jobs}, refill_below={refill_below}); "
          f"{args.submitters:,} push submitters, {args.workers:,} claim+complete workers; "
          f"warm-up {args.warmup:g} s then {args.duration:g} s per phase; heartbeat {args.heartbeat:g} s; "
          f"MALLOC_ARENA_MAX={os.environ.get('MALLOC_ARENA_MAX', MALLOC_ARENA_MAX)}; "
          f"collector thresholds {','.join(map(str, DEFAULT_GC_THRESHOLDS))} as the server sets them"
          + (f"; the backlog seeded as delayed jobs, due in {args.delayed:g} s, delayed horizon "
             f"{args.delayed_horizon:g} s" + (" (off: format 2)" if not args.delayed_horizon else "")
             if args.delayed else ""))
    print(flush=True)
    results = []
    for queues in args.queues:
        for depth in args.depths:
            cfg = {"depth": depth, "queues": queues, "segments": list(args.segments), "latency": args.latency / 1000,
                   "bandwidth": args.bandwidth * 1e6, "submitters": args.submitters, "workers": args.workers,
                   "warmup": args.warmup, "duration": args.duration, "heartbeat": args.heartbeat,
                   "takeover": max(10.0, 10 * args.heartbeat), "tmp": args.tmp, "delayed": args.delayed,
                   "delayed_horizon": args.delayed_horizon}
            print(f"[backlog] {queues} queue(s), depth {depth:,} ...", file=sys.stderr, flush=True)
            results.append(run_child(cfg))
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    print()
    print(table(results))
    print()
    print("targets (issue 13):")
    print("\n".join(target_lines(results, args.latency / 1000)))
    if args.json:
        Path(args.json).write_text(json.dumps({"argv": argv, "facts": facts, "results": results}, indent=1))
    return 0 if all("error" not in r for r in results) else 1
