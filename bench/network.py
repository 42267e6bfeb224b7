"""``python -m bench network``: the broker over HTTP, side by side with the
server's own limit, in one run.

Processes (all on this machine, sharing its cores):

* **this measuring process**: starts every other process, tells the load
  processes when to start and stop, samples the daphne process's CPU from
  ``/proc/<pid>/stat`` and its ``seq`` from ``/api/v1/health``; it sends no load;
* **daphne**: one serving the trivial app (:mod:`bench.trivial`, ``200 {}``)
  for the limit rows, then one broker node per store
  (``queueadmin.asgi:application``, ``QUEUE_BROKER_AUTOSTART``, DEBUG off);
* **push load generator**: one process per push run (:mod:`bench.pushgen`):
  N closed-loop clients on one asyncio loop, one keep-alive connection each,
  one single-job ``POST /api/v1/jobs`` at a time; the same generator measures
  the trivial app;
* **drain worker processes** (:mod:`bench.drainer`): unbatched, ``--worker-processes``
  processes sharing the slots as :class:`engine.Worker` instances with
  concurrency 1 and ``batch=False`` (the single-job calls: one claim and one
  complete request per job); single, the same with the default
  ``batch=True`` (each acknowledgement carries the next claim: one request
  per job);
  batched, one process with one Worker of concurrency = slots (it claims up
  to its free slots per request, with ``WorkerOptions(batch=True)`` where
  that field exists). A no-op handler; 1 s long polls.

Runs, per store (``file://`` in a fresh folder, and a memory store with 50 ms
added to each get and put, ``latency+memory://``): single-job push with each
``--clients`` count, for ``--duration`` seconds after a warm-up; then each drain
mode with each ``--slots`` count, draining ``--drain-jobs`` jobs pushed
beforehand (unmeasured, in batches) to a queue of its own. The push runs' jobs
are drained afterwards by an unmeasured sweep, so that every pushed job is
accounted for. At the end of each store the exactly-once check compares the
ids every push acknowledged with the ids the workers claimed and completed
(:func:`bench.netreport.check_exactly_once`), and the document's counters.

Every wait is bounded (start-up, each window, ``--timeout`` per drain, a stall
timeout); every child is killed on every way out, Ctrl-C and SIGTERM included,
and by the kernel should this process itself be killed. Exit status 0 only if
every run finished and every check passed. The columns are explained under
the table (:data:`bench.netreport.LEGEND`) and in docs/benchmark.md.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import facts
from bench.children import ChildError, run_interruptibly
from bench.netargs import NetworkConfig, parse_args
from bench.netreport import LEGEND, Row, check_exactly_once, table, target_lines
from bench.netruns import RunAbort, Runner, check_document
from bench.node import BROKER_APP, TRIVIAL_APP, Node, NodeError
from engine import EngineError

FILE_STORE = "file://"


def store_label(store: str, cfg: NetworkConfig) -> str:
    """The table's name for a store choice (``file`` or ``latency``)."""
    return FILE_STORE if store == "file" else f"memory+{cfg.latency * 1000:g}ms"


def store_url(store: str, cfg: NetworkConfig, folder: Path) -> str:
    """The node's QUEUE_STORE_URL for a store choice."""
    if store == "file":
        return (folder / "store").as_uri()
    # Latency only, no charge per byte: these runs measure the HTTP path, and
    # the drains' seeded backlog would otherwise turn them into depth runs
    # (the cost of bytes is what ``python -m bench``'s depth runs measure).
    return f"latency+memory://bench?latency_seconds={cfg.latency:g}&bandwidth_mb_s=0"


def _progress(message: str) -> None:
    print(f"[network] {message}", file=sys.stderr, flush=True)


@dataclass(slots=True)
class Outcome:
    """Everything one invocation produced."""

    rows: list[Row]
    checks: list[str]
    ok: bool


def header(cfg: NetworkConfig, machine: dict[str, Any]) -> str:
    """Command, machine facts, the processes and the run's conditions."""
    lines = [
        f"command: `{cfg.command}`",
        f"machine: nproc={machine['nproc']}, {machine['cpu'] or 'unknown CPU'}, {machine['memory_gib']} GiB RAM, "
        f"{machine['os']}",
        f"python: {machine['python']}; orjson {machine['orjson']}; code at git {machine['git']}",
    ]
    lines.append(
        "processes: this measuring process (starts the others, samples daphne's CPU from /proc and its seq "
        "from /api/v1/health; sends no load); daphne serving bench.trivial:application (the limit) and one "
        "daphne broker node per store (queueadmin.asgi:application); per push run one load generator "
        f"process (bench.pushgen: raw asyncio HTTP/1.1, one keep-alive connection per client); per drain run "
        f"{cfg.worker_processes} worker processes (unbatched: one engine.Worker per slot with concurrency 1 and "
        "batch=False, the single-job calls: a claim and a complete per job; single: the same with the default "
        "batch=True, each acknowledgement carrying the next claim: one request per job; both spread over "
        "them) or one (batched: one engine.Worker with concurrency = slots), engine.BrokerClient each, "
        f"no-op handler, 1 s long polls, lease watches {'on' if cfg.lease_watch else 'off'}. All share this "
        "machine's cores with the node (see the load CPU column)."
    )
    lines.append(
        f"conditions: ~200-byte JSON payloads; push: single-job POST /api/v1/jobs, closed loop, {cfg.warmup:g} s "
        f"warm-up then {cfg.duration:g} s measured; drain: {cfg.drain_jobs:,} jobs pushed beforehand to a queue "
        f"of its own; stores: {', '.join(store_label(s, cfg) for s in cfg.stores)} (latency per get and put, no "
        f"bandwidth charge); drain timeout {cfg.timeout:g} s"
    )
    return "\n".join(lines)


def _measure_store(runner: Runner, node: Node, store: str, cfg: NetworkConfig, limits: dict[int, float]) -> Outcome:
    rows: list[Row] = []
    pushed: list[str] = []
    push_ids = 0
    results: list[dict[str, Any]] = []
    label = store_label(store, cfg)
    push_queue = "push"
    if "push" in cfg.runs:
        for clients in cfg.clients:
            row, ids = runner.push(node, label=label, kind="push", clients=clients, queue=push_queue)
            limit = limits.get(clients)
            row.limit_ratio = row.requests_per_s / limit if limit and row.requests_per_s is not None else None
            rows.append(row)
            pushed += ids
            push_ids += len(ids)
            _progress(f"{label} push, {clients} clients: {row.requests_per_s or 0:,.0f} req/s")
    for mode in ("unbatched", "single", "batched"):
        if mode not in cfg.runs:
            continue
        for slots in cfg.slots if mode != "batched" else sorted({*cfg.slots, *cfg.batched_slots}):
            row, ids, got = runner.drain(node, label=label, mode=mode, slots=slots, queue=f"drain-{mode}-{slots}")
            rows.append(row)
            pushed += ids
            results += got
            _progress(f"{label} drain {mode}, {slots} slots: {row.jobs_per_s or 0:,.0f} jobs/s")
    checks = []
    if push_ids:
        # The push runs' jobs: drained unmeasured, so that every pushed job is checked.
        sweep, _, got = runner.drain(
            node, label=label, mode="batched", slots=max(cfg.slots), queue=push_queue, prefill=False, target=push_ids
        )
        results += got
        checks.append(f"{label}: the push runs' {push_ids:,} jobs were drained afterwards, unmeasured "
                      f"({sweep.jobs_per_s or 0:,.0f} jobs/s, batched, {max(cfg.slots)} slots)")
    verdict = check_exactly_once(pushed, results)
    problems = check_document(node, len(pushed))
    checks += [f"{label}: {line}" for line in verdict.lines]
    checks.append(f"{label}: document: " + ("; ".join(problems) if problems else
                  f"PASS — completed counters sum to {len(pushed):,}, no job left, no dead letter"))
    return Outcome(rows=rows, checks=checks, ok=verdict.ok and not problems)


def measure(cfg: NetworkConfig, tmp: Path) -> Outcome:
    """Every selected run; raises RunAbort, NodeError, ChildError or EngineError if one cannot finish."""
    runner = Runner(cfg, tmp)
    total = Outcome(rows=[], checks=[], ok=True)
    limits: dict[int, float] = {}
    if "limit" in cfg.runs:
        with Node(tmp, app=TRIVIAL_APP, name="trivial") as node:
            _progress(f"trivial app: daphne pid {node.child.pid if node.child else '?'} at {node.url}")
            for clients in cfg.clients:
                row, _ = runner.push(node, label="—", kind="limit", clients=clients, queue="-")
                total.rows.append(row)
                if row.requests_per_s:
                    limits[clients] = row.requests_per_s
                _progress(f"trivial app, {clients} clients: {row.requests_per_s or 0:,.0f} req/s")
    for store in cfg.stores:
        if not {"push", "unbatched", "single", "batched"} & set(cfg.runs):
            break
        folder = tmp / store
        folder.mkdir()
        with Node(folder, app=BROKER_APP, store_url=store_url(store, cfg, folder), name=f"node-{store}") as node:
            _progress(f"{store_label(store, cfg)}: daphne pid {node.child.pid if node.child else '?'} leads")
            outcome = _measure_store(runner, node, store, cfg, limits)
        total.rows += outcome.rows
        total.checks += outcome.checks
        total.ok = total.ok and outcome.ok
    return total



def run(cfg: NetworkConfig, out: Callable[[str], None] = print) -> int:
    """Run, print the report; 0 if every run finished and every check passed."""
    out(header(cfg, facts.machine_facts()))
    out("")
    with tempfile.TemporaryDirectory(prefix="bench-network-") as name:
        try:
            outcome = measure(cfg, Path(name))
        except (RunAbort, NodeError, ChildError, EngineError) as exc:
            print(f"aborted: {type(exc).__name__}: {exc}", file=sys.stderr)
            out(f"aborted: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            return 1
    out(table(outcome.rows))
    out("")
    out(LEGEND)
    out("")
    out("targets (this 2-core machine):")
    out("\n".join(target_lines(outcome.rows, file_store=FILE_STORE, latency_store=store_label("latency", cfg),
                                latency_ms=cfg.latency * 1000)))
    out("")
    out("checks:")
    out("\n".join(outcome.checks) if outcome.checks else "(no drain runs: nothing to check)")
    return 0 if outcome.ok else 1


def main(argv: list[str]) -> int:
    """``python -m bench network [options]``."""
    cfg = parse_args(argv, description=__doc__)
    return run_interruptibly(lambda out: run(cfg, out))


__all__ = ["main", "measure", "run"]
