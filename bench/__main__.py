"""Command line: ``python -m bench [memory | network | idle | requests | backlog | hedge | failover | worker]
[options]``.

Without a command, runs every (depth, submitters, system) combination, prints
the machine facts, a Markdown table and the target checks to stdout (progress
goes to stderr), then the memory check unless ``--no-memory``.
``python -m bench memory`` runs only the memory check.
``python -m bench network [options]`` runs the broker over HTTP instead (the
trivial-app limit, single-job pushes, unbatched, single and batched drains, on a
``file://`` and a 50 ms store, load from separate processes; it needs no
jqueue): see :mod:`bench.network`.
``python -m bench idle [options]`` measures one broker node's idle cost: its
CPU and commits while ``--workers`` long-polling workers wait on an empty
queue (the idle target; it needs no jqueue either): see :mod:`bench.idle`.
``python -m bench requests [options]`` counts the store requests of an idle
leader and standby per hour and of 1,000 jobs (what a cloud bills): see
:mod:`bench.requests`.
``python -m bench backlog [options]`` runs the depth runs in format 2
(segments): 0 to 5M pending jobs in one queue and in ten, on ``file://``,
with push, drain, bytes per commit, RSS, a standby's reads and a purge:
see :mod:`bench.backlog`.
``python -m bench hedge [options]`` pushes through a store whose writes now
and then stall, with hedged writes off and on: see :mod:`bench.hedging`.
``python -m bench failover [options]`` stops the leader of two nodes,
gracefully and by a crash, and times the pause a producer sees: see
:mod:`bench.failover`.
``python -m bench worker [options]`` measures an ``engine.Worker``'s own CPU
and context switches a job, against a client that answers at once: see
:mod:`bench.workerloop`.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import TYPE_CHECKING

from bench import backlog, failover, hedging, idle, memory, network, requests, workerloop
from bench.config import QUICK_DEPTHS, QUICK_SUBMITTERS, SYSTEMS, BenchConfig
from bench.facts import machine_facts

if TYPE_CHECKING:
    from bench.results import RunResult


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v.replace("_", "")) for v in text.split(",") if v.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a comma list of integers, got {text!r}") from exc
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected non-negative integers, got {text!r}")
    return values


def _systems(text: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in text.split(",") if v.strip())
    unknown = [n for n in names if n not in SYSTEMS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"systems are a comma list of {', '.join(SYSTEMS)}; got {text!r}")
    return names


def parse_args(argv: list[str]) -> tuple[str, BenchConfig, argparse.Namespace]:
    """Return the command ("run" or "memory"), the run's config and the raw args."""
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "command",
        nargs="?",
        choices=("run", "memory"),
        default="run",
        help="run (default) or memory; `network` and `idle` take options of their own "
        "(python -m bench network --help, python -m bench idle --help)",
    )
    parser.add_argument("--systems", type=_systems, help=f"comma list (default: {','.join(SYSTEMS)})")
    parser.add_argument("--submitters", type=_ints, help="concurrent submitters (default: 1,16,256,2048)")
    parser.add_argument("--depths", type=_ints, help="pending jobs before measuring (default: 0,10000,50000,100000)")
    parser.add_argument("--duration", type=float, help="measured seconds per run (default: 3)")
    parser.add_argument("--warmup", type=float, help="unmeasured seconds before each window (default: 1)")
    parser.add_argument("--latency", type=float, default=50.0, help="ms added to every get and put (default: 50)")
    parser.add_argument("--bandwidth", type=float, default=100.0,
                        help="MB/s each get and put also pays for its bytes, 0 for unlimited (default: 100)")
    parser.add_argument("--op-timeout", type=float, default=30.0, help="seconds before a push counts as timed out")
    parser.add_argument("--quick", action="store_true", help="1 and 256 submitters, depths 0 and 10000, 1 s runs")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory check after the runs")
    parser.add_argument("--memory-jobs", type=int, default=memory.DEFAULT_JOBS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.latency < 0 or (args.duration is not None and args.duration <= 0) or args.op_timeout <= 0:
        parser.error("--latency must be >= 0; --duration and --op-timeout must be > 0")
    if not 0 <= args.bandwidth < float("inf"):
        parser.error("--bandwidth must be MB/s >= 0 (0: unlimited)")

    def pick(value: object, quick: object, default: object) -> object:
        return value if value is not None else quick if args.quick else default

    base = BenchConfig()
    cfg = BenchConfig(
        systems=args.systems or base.systems,
        submitters=pick(args.submitters, QUICK_SUBMITTERS, base.submitters),  # type: ignore[arg-type]
        depths=pick(args.depths, QUICK_DEPTHS, base.depths),  # type: ignore[arg-type]
        duration=pick(args.duration, 1.0, base.duration),  # type: ignore[arg-type]
        warmup=pick(args.warmup, 0.5, base.warmup),  # type: ignore[arg-type]
        latency=args.latency / 1000,
        bandwidth=args.bandwidth * 1e6,
        op_timeout=args.op_timeout,
        memory=not args.no_memory,
        json_path=args.json,
        command=shlex.join(["python", "-m", "bench", *argv]),
    )
    return args.command, cfg, args


def _progress(index: int, total: int, r: RunResult) -> None:
    if r.skipped:
        line = r.skipped
    elif r.failed and not r.ops:
        line = f"failed: {r.failed}"
    else:
        p99 = f"{r.p99_ms:.1f}" if r.p99_ms is not None else "—"
        line = f"{r.ops_per_s:,.0f} ops/s, p99 {p99} ms, {r.writes} writes, setup {r.setup_s:.1f} s"
        if r.timed_out:
            line += f", {r.timed_out} timed out"
    print(
        f"[{index}/{total}] {r.system} depth={r.depth:,} submitters={r.submitters:,}: {line}",
        file=sys.stderr,
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["network"]:
        return network.main(argv[1:])
    if argv[:1] == ["idle"]:
        return idle.main(argv[1:])
    if argv[:1] == ["requests"]:
        return requests.main(argv[1:])
    if argv[:1] == ["backlog"]:
        return backlog.main(argv[1:])
    if argv[:1] == ["worker"]:
        return workerloop.main(argv[1:])
    if argv[:1] == ["hedge"]:
        return hedging.main(argv[1:])
    if argv[:1] == ["failover"]:
        return failover.main(argv[1:])
    command, cfg, args = parse_args(argv)
    # Imported here: they need jqueue (the bench extra), which the network and idle benchmarks do not.
    from bench import report
    from bench.runner import run_matrix

    facts = machine_facts()
    print(report.header(cfg, facts, runs=command == "run"))
    print(flush=True)
    results: list[RunResult] = []
    if command == "run":
        results = run_matrix(cfg, _progress)
        report.add_ratios(results)
        print(report.table(results))
        print()
        print(report.legend(cfg))
        print()
        print("targets (group commit at 50 ms store latency):")
        print("\n".join(report.target_lines(cfg, results)))
        print(flush=True)
    measured = None
    if command == "memory" or cfg.memory:
        measured = memory.measure(args.memory_jobs)
        print(memory.describe(measured))
    if cfg.json_path:
        report.dump_json(cfg.json_path, cfg, facts, results, measured)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
