"""One push run and one drain run of ``python -m bench network``, measured from
the measuring process: it starts the load processes (:mod:`bench.pushgen`,
:mod:`bench.drainer`), opens and closes their window, and samples the daphne
process around it. Every wait is bounded; every child is killed on every way out."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from bench.children import Child, ChildError, cpu_seconds
from bench.config import payload
from bench.facts import percentile
from bench.netargs import NetworkConfig
from bench.netreport import Row
from bench.node import ROOT, Node
from engine import BrokerClient

START_TIMEOUT_SECONDS = 60.0  # a child's imports and connections, on a busy machine
ANSWER_TIMEOUT_SECONDS = 30.0  # one push's answer; also how long a push window may overrun
RESULT_TIMEOUT_SECONDS = 30.0
# A drain with no completion for this long is stuck (a lease is 30 s, so a
# lost job would come back only after that): abort rather than wait it out.
STALL_TIMEOUT_SECONDS = 45.0
POLL_SECONDS = 0.05
PREFILL_BATCH = 500
WAIT_SECONDS = 1.0  # the drain workers' long poll


class RunAbort(Exception):
    """A run cannot finish (timed out, stalled, or a worker stopped itself)."""


def child_env() -> dict[str, str]:
    """The load processes' environment: this one, with the project importable."""
    return {**os.environ, "PYTHONPATH": str(ROOT)}


class Runner:
    """Runs push and drain windows against a node; ``tmp`` holds the children's logs."""

    def __init__(self, cfg: NetworkConfig, tmp: Path) -> None:
        self.cfg = cfg
        self.tmp = tmp
        self.count = 0

    def _child(self, name: str, module: str, args: list[str]) -> Child:
        self.count += 1
        name = f"{self.count:02d}-{name}"
        return Child(name, [sys.executable, "-m", module, *args], log_path=self.tmp / f"{name}.log", env=child_env())

    # -- push -------------------------------------------------------------------

    def push(self, node: Node, *, label: str, kind: str, clients: int, queue: str) -> tuple[Row, list[str]]:
        """One push window with ``clients`` closed-loop clients; the row and every id acknowledged."""
        cfg = self.cfg
        # --token=...: a random token may start with "-", which argparse would take for an option.
        args = ["--port", str(node.port), f"--token={node.token}", "--queue", queue, "--prefix", f"p{self.count + 1}",
                "--clients", str(clients), "--duration", str(cfg.duration), "--warmup", str(cfg.warmup),
                "--timeout", str(ANSWER_TIMEOUT_SECONDS)]
        child = self._child(f"pushgen-{clients}", "bench.pushgen", args + (["--expect-ids"] if node.is_broker else []))
        try:
            child.expect("ready", time.monotonic() + START_TIMEOUT_SECONDS + cfg.warmup + ANSWER_TIMEOUT_SECONDS)
            seq0, cpu0, load0 = node.seq(), node.cpu(), cpu_seconds(child.pid)
            child.send("go")
            text = child.expect("result", time.monotonic() + cfg.duration + ANSWER_TIMEOUT_SECONDS + 10)
            cpu1, load1, seq1 = node.cpu(), cpu_seconds(child.pid), node.seq()
        finally:
            child.kill()
        result = orjson.loads(text)
        if "aborted" in result:
            raise RunAbort(f"push generator: {result['aborted']}")
        latencies = sorted(result["latencies"])
        row = Row(store=label, kind=kind, width=clients, requests=result["requests"], seconds=result["seconds"],
                  p50_ms=percentile(latencies, 0.50), p99_ms=percentile(latencies, 0.99), broker_cpu=cpu1 - cpu0,
                  load_cpu=None if load0 is None or load1 is None else load1 - load0)
        if kind == "push":
            row.jobs = row.requests
            row.commits, row.operations = seq1 - seq0, row.requests
        if result["errors"]:
            row.notes.append("errors: " + ", ".join(f"{k}: {v}" for k, v in sorted(result["errors"].items())))
        return row, list(result["ids"])

    # -- drain ------------------------------------------------------------------

    def _prefill(self, node: Node, queue: str, count: int) -> list[str]:
        ids: list[str] = []
        with BrokerClient([node.url], token=node.token) as client:
            for first in range(0, count, PREFILL_BATCH):
                ids += client.push(queue, [payload(n) for n in range(first, min(first + PREFILL_BATCH, count))])
        return ids

    def _drainers(self, node: Node, *, mode: str, slots: int, queue: str) -> list[Child]:
        """Unbatched and single: the slots as Workers of concurrency 1 over the worker processes (single: with
        the default protocol, each acknowledgement carrying the next claim; unbatched: the single-job calls);
        batched: one Worker."""
        common = ["--url", node.url, f"--token={node.token}", "--queue", queue, "--wait-seconds", str(WAIT_SECONDS),
                  "--max-seconds", str(self.cfg.timeout + RESULT_TIMEOUT_SECONDS),
                  *([] if self.cfg.lease_watch else ["--no-lease-watch"])]
        if mode == "batched":
            name = f"drain-b{slots}"
            return [self._child(name, "bench.drainer", [*common, "--name", name, "--workers", "1",
                                                          "--concurrency", str(slots), "--batch"])]
        processes = min(self.cfg.worker_processes, slots)
        children = []
        for p in range(processes):
            workers = slots // processes + (p < slots % processes)
            name = f"drain-{mode[0]}{slots}-{p}"
            batch = ["--batch"] if mode == "single" else []
            children.append(self._child(name, "bench.drainer", [*common, "--name", name, "--workers", str(workers),
                                                                 "--concurrency", "1", *batch]))
        return children

    def drain(
        self, node: Node, *, label: str, mode: str, slots: int, queue: str, prefill: bool = True,
        target: int | None = None,
    ) -> tuple[Row, list[str], list[dict[str, Any]]]:
        """Drain ``queue``: first push ``cfg.drain_jobs`` jobs to it (with ``prefill``), else expect
        ``target`` jobs there. Returns the row, the ids pushed, and each worker process's result."""
        ids = self._prefill(node, queue, self.cfg.drain_jobs) if prefill else []
        goal = len(ids) if prefill else int(target or 0)
        children = self._drainers(node, mode=mode, slots=slots, queue=queue)
        try:
            ready_by = time.monotonic() + START_TIMEOUT_SECONDS
            for child in children:
                child.expect("ready", ready_by)
            seq0, cpu0 = node.seq(), node.cpu()
            load0 = [cpu_seconds(c.pid) or 0.0 for c in children]
            started = time.monotonic()
            for child in children:
                child.send("go")
            progress = self._wait(children, goal, started)
            cpu1, seq1 = node.cpu(), node.seq()
            load1 = [cpu_seconds(c.pid) or 0.0 for c in children]
            for child in children:
                child.send("stop")
            results_by = time.monotonic() + RESULT_TIMEOUT_SECONDS + WAIT_SECONDS
            results = [orjson.loads(child.expect("result", results_by)) for child in children]
        finally:
            for child in children:
                child.kill()
        requests = sum(p[1] for p in progress.values())
        last = max(p[2] for p in progress.values())
        # No completion time reported (acknowledged by a call the timing client does not see): now, an upper bound.
        ended = last if last > started else time.monotonic()
        row = Row(store=label, kind="drain", mode=mode, width=slots, requests=requests, jobs=goal,
                  seconds=ended - started, broker_cpu=cpu1 - cpu0, load_cpu=sum(load1) - sum(load0),
                  commits=seq1 - seq0)
        self._describe(row, results)
        return row, ids, results

    def _wait(self, children: list[Child], goal: int, started: float) -> dict[str, tuple[int, int, float]]:
        """Read progress until the workers completed ``goal`` jobs; per child (completed, requests, last)."""
        progress = {c.name: (0, 0, 0.0) for c in children}
        deadline = started + self.cfg.timeout
        moved = started
        done = 0
        while done < goal:
            for child in children:
                while (line := child.poll_line()) is not None:
                    word, _, rest = line.partition(" ")
                    if word == "fatal":
                        raise RunAbort(f"{child.name}: a worker stopped: {rest}")
                    if word == "progress":
                        completed, requests, last = rest.split()
                        progress[child.name] = (int(completed), int(requests), float(last))
            now = time.monotonic()
            total = sum(p[0] for p in progress.values())
            if total > done:
                done, moved = total, now
                if done >= goal:
                    break
            if now >= deadline:
                raise RunAbort(f"drain timed out: {done:,} of {goal:,} jobs completed in {self.cfg.timeout:g} s")
            if now - moved > STALL_TIMEOUT_SECONDS:
                raise RunAbort(f"drain stalled: no job completed for {STALL_TIMEOUT_SECONDS:g} s ({done:,}/{goal:,})")
            time.sleep(POLL_SECONDS)
        return progress

    @staticmethod
    def _describe(row: Row, results: list[dict[str, Any]]) -> None:
        latencies = sorted(v for r in results for v in r["latencies"])
        row.p50_ms, row.p99_ms = percentile(latencies, 0.50), percentile(latencies, 0.99)
        claimed = sum(len(r["claimed"]) for r in results)
        completed = sum(len(r["completed"]) for r in results)
        stats = {k: sum(r["stats"][k] for r in results) for k in results[0]["stats"]} if results else {}
        row.operations = claimed + stats.get("completed", 0) + sum(r["heartbeats"] + r["fails"] for r in results)
        claims = sum(r["claims"] for r in results)
        empty = sum(r["empty_claims"] for r in results)
        row.notes.append(f"{claims:,} claims ({empty:,} empty), {claimed / max(1, claims - empty):.1f} jobs/claim; "
                         f"{row.requests / max(1, row.jobs):.2f} requests/job")
        bad = {k: stats.get(k, 0) for k in ("errors", "lost", "failed", "abandoned") if stats.get(k, 0)}
        if bad:
            row.notes.append("worker " + ", ".join(f"{k} {v:,}" for k, v in bad.items()))
        if len(latencies) < stats.get("completed", 0):
            row.notes.append(f"claim-to-complete timed for {len(latencies):,} of {stats['completed']:,} jobs "
                             "(the others were acknowledged by a call the timing client does not see)")
        if completed < stats.get("completed", 0):
            row.notes.append(f"ids seen completing: {completed:,} of {stats['completed']:,}")
        if row.mode == "batched" and results and not results[0]["batch_option"]:
            row.notes.append("WorkerOptions has no batch field yet: one complete request per job")


def check_document(node: Node, pushed: int) -> list[str]:
    """Problems with the final document: every queue's completed counters must sum to ``pushed``, no job left."""
    with BrokerClient([node.url], token=node.token) as client:
        doc = client.document()
    queues = doc.get("queues") or {}
    completed = sum(int((counters or {}).get("completed", 0)) for counters in queues.values())
    left, dead = len(doc.get("jobs") or []), len(doc.get("dead") or [])
    problems = []
    if completed != pushed:
        problems.append(f"FAIL — completed counters sum to {completed:,}, expected {pushed:,}")
    if left:
        problems.append(f"FAIL — {left:,} jobs still in the document")
    if dead:
        problems.append(f"FAIL — {dead:,} dead letters")
    return problems


__all__ = ["ChildError", "RunAbort", "Runner", "check_document"]
