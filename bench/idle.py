"""``python -m bench idle``: the idle cost of one broker node (the idle
target: "one node with 100 long-polling workers and no jobs uses less than
5 % CPU and commits at most once per heartbeat interval").

Processes (all on this machine):

* **this measuring process**: starts the others, samples the daphne process's
  CPU from ``/proc/<pid>/stat`` and its ``seq`` from ``/api/v1/health`` at
  both ends of the window; it sends no load;
* **daphne**: one broker node (``queueadmin.asgi:application``,
  ``QUEUE_BROKER_AUTOSTART``, DEBUG off) on a ``file://`` store in a temp
  folder, with ``QUEUE_HEARTBEAT_SECONDS`` = ``--heartbeat``
  (:class:`bench.node.Node`);
* **idle workers**: one process (:mod:`bench.idlers`), ``--workers``
  concurrent loops each long-polling ``POST /api/v1/claim`` with
  ``wait_seconds`` = ``--wait`` on a queue that never gets a job.

After ``--warmup`` seconds (every worker is waiting by then) the window runs
for ``--seconds``. Every wait is bounded; every child is killed on every way
out, Ctrl-C and SIGTERM included, and by the kernel should this process
itself be killed. Exit status 0 once the window was measured (PASS or
MISS); 1 if the node or the workers failed.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench import facts
from bench.children import Child, ChildError, run_interruptibly
from bench.node import ROOT, Node, NodeError

CPU_TARGET_PERCENT = 5.0
MAX_WAIT_SECONDS = 30.0  # engine.wire.MAX_WAIT_SECONDS
READY_TIMEOUT_SECONDS = 60.0
RESULT_TIMEOUT_SECONDS = 30.0
SELF_STOP_MARGIN_SECONDS = 60.0


@dataclass(slots=True, frozen=True)
class IdleConfig:
    workers: int
    seconds: float
    warmup: float
    wait: float
    heartbeat: float
    command: str


@dataclass(slots=True)
class Measured:
    """One window: what the node did and what the workers saw."""

    seconds: float
    cpu: float
    commits: int
    claims: int
    jobs: int
    errors: dict[str, int]
    load_cpu: float

    def cpu_percent(self) -> float:
        return 100 * self.cpu / self.seconds

    def heartbeats(self, heartbeat: float) -> float:
        return self.seconds / heartbeat

    def allowed_commits(self, heartbeat: float) -> int:
        """One commit per whole heartbeat interval in the window, +1 for its edge."""
        return math.floor(self.seconds / heartbeat + 1e-9) + 1


class IdleNode(Node):
    """A broker :class:`Node` with its own heartbeat (and takeover 5 heartbeats, as by default)."""

    def __init__(self, tmp: Path, *, heartbeat: float) -> None:
        self.heartbeat = heartbeat
        super().__init__(tmp, name="node")

    def env(self) -> dict[str, str]:
        env = super().env()
        env.update(QUEUE_HEARTBEAT_SECONDS=f"{self.heartbeat:g}", QUEUE_TAKEOVER_SECONDS=f"{self.heartbeat * 5:g}")
        return env


def _progress(message: str) -> None:
    print(f"[idle] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str], description: str | None = None) -> IdleConfig:
    parser = argparse.ArgumentParser(
        prog="python -m bench idle", description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, default=100, help="long-polling workers (default: 100)")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds (default: 20)")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds before the window (default: 2)")
    parser.add_argument("--wait", type=float, default=30.0, help="wait_seconds of each claim (default: 30)")
    parser.add_argument("--heartbeat", type=float, default=2.0, help="the node's QUEUE_HEARTBEAT_SECONDS (default: 2)")
    args = parser.parse_args(argv)
    if args.workers < 1 or args.seconds <= 0 or args.warmup < 0 or args.heartbeat <= 0:
        parser.error("--workers must be >= 1, --seconds and --heartbeat > 0, --warmup >= 0")
    if not 0 <= args.wait <= MAX_WAIT_SECONDS:
        parser.error(f"--wait must be between 0 and {MAX_WAIT_SECONDS:g}")
    return IdleConfig(
        workers=args.workers,
        seconds=args.seconds,
        warmup=args.warmup,
        wait=args.wait,
        heartbeat=args.heartbeat,
        command=shlex.join(["python", "-m", "bench", "idle", *argv]),
    )


def header(cfg: IdleConfig, machine: dict[str, Any]) -> str:
    """Command, machine facts, the processes and the run's conditions."""
    return "\n".join(
        [
            f"command: `{cfg.command}`",
            f"machine: nproc={machine['nproc']}, {machine['cpu'] or 'unknown CPU'}, {machine['memory_gib']} GiB RAM, "
            f"{machine['os']}",
            f"python: {machine['python']}; orjson {machine['orjson']}; code at git {machine['git']}",
            "processes: this measuring process (samples daphne's CPU from /proc and its seq from /api/v1/health; "
            "sends no load); one daphne broker node (queueadmin.asgi:application) on a file:// store; one idle "
            f"worker process (bench.idlers: {cfg.workers} asyncio + httpx loops, one keep-alive connection each)",
            f"conditions: no jobs; each worker long-polls POST /api/v1/claim with wait_seconds={cfg.wait:g}; "
            f"heartbeat {cfg.heartbeat:g} s; {cfg.warmup:g} s warm-up then {cfg.seconds:g} s measured",
        ]
    )


def measure(cfg: IdleConfig, tmp: Path) -> Measured:
    """One window; raises NodeError or ChildError if the node or the workers fail."""
    with IdleNode(tmp, heartbeat=cfg.heartbeat) as node:
        _progress(f"daphne pid {node.child.pid if node.child else '?'} leads at {node.url}")
        argv = [
            sys.executable,
            "-m",
            "bench.idlers",
            "--",  # a random token may start with "-", which argparse would take for an option
            node.url,
            node.token,
            str(cfg.workers),
            f"{cfg.wait:g}",
            f"{cfg.warmup + cfg.seconds + SELF_STOP_MARGIN_SECONDS:g}",
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        idlers = Child("idlers", argv, log_path=tmp / "idlers.log", env=env)
        try:
            idlers.expect("ready", time.monotonic() + READY_TIMEOUT_SECONDS)
            time.sleep(cfg.warmup)
            seq0, cpu0, t0 = node.seq(), node.cpu(), time.monotonic()
            idlers.send("mark")
            _progress(f"{cfg.workers} workers waiting; measuring {cfg.seconds:g} s")
            time.sleep(cfg.seconds)
            seq1, cpu1, t1 = node.seq(), node.cpu(), time.monotonic()
            idlers.send("stop")
            result = orjson.loads(idlers.expect("result", time.monotonic() + RESULT_TIMEOUT_SECONDS))
        finally:
            idlers.kill()
    if not result.get("marked"):
        raise ChildError("the idle workers never got the mark")
    return Measured(
        seconds=t1 - t0,
        cpu=cpu1 - cpu0,
        commits=seq1 - seq0,
        claims=int(result["claims"]),
        jobs=int(result["jobs"]),
        errors={str(k): int(v) for k, v in result["errors"].items()},
        load_cpu=float(result["cpu"]),
    )


def table(cfg: IdleConfig, m: Measured) -> str:
    return "\n".join(
        [
            "| workers | seconds | node CPU (% of one core) | commits | heartbeats in window | claims answered |",
            "|--:|--:|--:|--:|--:|--:|",
            f"| {cfg.workers:,} | {m.seconds:.1f} | {m.cpu_percent():.2f} | {m.commits:,} "
            f"| {m.heartbeats(cfg.heartbeat):.1f} | {m.claims:,} |",
        ]
    )


def target_lines(cfg: IdleConfig, m: Measured) -> list[str]:
    cpu = m.cpu_percent()
    allowed = m.allowed_commits(cfg.heartbeat)
    return [
        f"CPU < {CPU_TARGET_PERCENT:g} %: {cpu:.2f} % — {'PASS' if cpu < CPU_TARGET_PERCENT else 'MISS'}",
        f"commits <= 1 per heartbeat (+1 for the window edge): {m.commits} of {allowed} — "
        f"{'PASS' if m.commits <= allowed else 'MISS'}",
    ]


def notes(m: Measured) -> list[str]:
    lines = [
        f"node CPU: {m.cpu:.2f} s of daphne CPU time (/proc/<pid>/stat) over {m.seconds:.1f} s; commits: the "
        f"document's seq delta; claims answered: long polls the workers saw answered in the window (200, empty); "
        f"workers' own CPU: {100 * m.load_cpu / m.seconds:.1f} % of one core",
    ]
    if m.jobs:
        lines.append(f"warning: the workers received {m.jobs} jobs (the queue should stay empty)")
    if m.errors:
        lines.append("warning: worker errors: " + ", ".join(f"{k}: {v}" for k, v in sorted(m.errors.items())))
    return lines



def run(cfg: IdleConfig, out: Callable[[str], None] = print) -> int:
    """Run, print the report; 0 once the window was measured."""
    out(header(cfg, facts.machine_facts()))
    out("")
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as name:
        try:
            m = measure(cfg, Path(name))
        except (NodeError, ChildError) as exc:
            print(f"aborted: {type(exc).__name__}: {exc}", file=sys.stderr)
            out(f"aborted: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            return 1
    out(table(cfg, m))
    out("")
    out("\n".join(notes(m)))
    out("")
    out("targets (idle):")
    out("\n".join(target_lines(cfg, m)))
    return 0


def main(argv: list[str]) -> int:
    """``python -m bench idle [options]``."""
    cfg = parse_args(argv, description=__doc__)
    return run_interruptibly(lambda out: run(cfg, out))


__all__ = ["main", "measure", "run"]
