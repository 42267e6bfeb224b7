"""``python -m bench network``: the broker over HTTP, end to end, as
clients and workers in other processes use it.

One real daphne process on 127.0.0.1 serves ``queueadmin.asgi:application``
on a ``file://`` store in a fresh temporary folder (``--store-url`` names
another store; ``memory://`` cannot be shared between processes). This
process then runs two phases against it, both through
:class:`engine.BrokerClient`:

1. **push** — ``--producers`` threads share one client and push ``--jobs``
   jobs (about 200-byte payloads, :func:`bench.config.payload`) in batches of
   ``--batch`` per call.
2. **drain** — ``--workers`` :class:`engine.Worker` instances (concurrency 1,
   a no-op handler, 1 s long polls), each with its own client, as separate
   worker processes would have, run until every pushed job is completed.

What is measured (:class:`PhaseResult`):

* ``jobs/s`` — jobs acknowledged (pushed, or completed) ÷ the phase's
  seconds, from its start to the last acknowledgement.
* ``p50/p99`` — push: per push call, call to 201. Drain: per job, from the
  moment its claim's answer arrived to the moment its complete's answer
  arrived (the handler, the worker's hand-off and one complete round trip,
  which waits for the commit).
* ``HTTP req/s`` — every request the clients sent during the phase (health
  checks, long polls that found nothing and retries included) ÷ its seconds.
* ``commits`` — the document's ``seq`` delta over the phase, as the leader's
  ``/api/v1/health`` reports it (the leader's idle heartbeat commits included;
  there are few while it is busy). ``ops/commit`` — acknowledged writes
  (pushes; claims that got a job, completes, heartbeats, fails) ÷ commits.
* ``broker CPU`` / ``client CPU`` — CPU seconds of the daphne process
  (``/proc/<pid>/stat``) and of this process over the phase, in % of one core:
  on a small machine the two compete for the same cores.

After the drain the document must show ``completed`` equal to the jobs pushed
and no job left; any shortfall is reported and the exit status is 1. Every
wait is bounded (``--timeout`` per phase, a stall timeout while draining, a
start-up timeout): a stuck run aborts with a message, never hangs. The daphne
process is killed on every way out, Ctrl-C and SIGTERM included (and by the
kernel, should this process itself be killed).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import logging
import os
import queue
import resource
import secrets
import shlex
import signal
import socket
import string
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from bench import report
from bench.config import QUEUE, BenchConfig, payload
from bench.results import percentile
from engine import BrokerClient, ClaimedJob, EngineError, FailOutcome, Worker, WorkerOptions, WorkerStats

ROOT = Path(__file__).resolve().parent.parent
# On a 2-core machine one daphne node drains ~110 jobs/s (its event loop is
# the bottleneck): 5,000 jobs keep the default run under a minute; 20,000
# take a little over three.
DEFAULT_JOBS = 5_000
DEFAULT_WORKERS = 16
DEFAULT_PRODUCERS = 8
DEFAULT_BATCH = 100
# Per phase: the larger of this and jobs ÷ MIN_JOBS_PER_SECOND, so a bigger
# --jobs does not need a --timeout of its own.
MIN_TIMEOUT_SECONDS = 120.0
MIN_JOBS_PER_SECOND = 40.0
STARTUP_TIMEOUT_SECONDS = 60.0
# A drain with no completion for this long is stuck (a lease is 30 s, so a
# lost job would come back only after that): abort rather than wait it out.
STALL_TIMEOUT_SECONDS = 45.0
WORKER_WAIT_SECONDS = 1.0  # long poll per claim: idle workers hold one, none spin
WORKER_GRACE_SECONDS = 5.0
PROGRESS_SECONDS = 5.0
STOP_TIMEOUT_SECONDS = 10.0
LOG_TAIL_CHARS = 4000
HEALTH_TIMEOUT_SECONDS = 2.0
CLK_TCK = os.sysconf("SC_CLK_TCK")
PR_SET_PDEATHSIG = 1

perf_counter = time.perf_counter


class NetworkAbort(Exception):
    """The run cannot go on (the node did not start, a phase timed out or stalled)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkConfig:
    """One invocation of ``python -m bench network``. Times are in seconds."""

    jobs: int = DEFAULT_JOBS
    workers: int = DEFAULT_WORKERS
    producers: int = DEFAULT_PRODUCERS
    batch: int = DEFAULT_BATCH
    store_url: str | None = None  # None: file://<tmpdir>/store
    timeout: float = MIN_TIMEOUT_SECONDS
    command: str = "python -m bench network"


@dataclass(slots=True, kw_only=True)
class PhaseResult:
    """What one phase measured (see the module docstring for each figure)."""

    phase: str
    threads: int
    jobs: int = 0
    seconds: float = 0.0
    requests: int = 0
    commits: int = 0
    operations: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    broker_cpu: float | None = None  # fraction of one core
    client_cpu: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.seconds if self.seconds > 0 else 0.0

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0

    @property
    def ops_per_commit(self) -> float | None:
        return self.operations / self.commits if self.commits > 0 else None


# -- the node -----------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """In the child before exec: the kernel kills it if this process dies (even by SIGKILL)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _random_secret(length: int) -> str:
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(length))


class Node:
    """One daphne process serving the broker API, in its own temporary folder.

    A context manager: entering starts it and waits until it leads; leaving
    kills it (SIGTERM, then SIGKILL) and removes the folder.
    """

    def __init__(self, store_url: str | None) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="bench-network-")
        self.tmp = Path(self._tmp.name)
        self.store_url = store_url or (self.tmp / "store").as_uri()
        self.token = secrets.token_urlsafe(24)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.tmp / "daphne.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.final_log = ""  # the log's tail, kept when stop() removes the folder
        self._http = httpx.Client(timeout=HEALTH_TIMEOUT_SECONDS)

    def env(self) -> dict[str, str]:
        """The node's environment: this one without QUEUE_*/DJANGO_* settings, plus the run's."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUE_", "DJANGO_"))}
        env.update(
            QUEUE_STORE_URL=self.store_url,
            QUEUE_API_TOKEN=self.token,
            QUEUE_ADVERTISE_URL=self.url,
            QUEUE_BROKER_AUTOSTART="true",
            DJANGO_DEBUG="false",
            DJANGO_SECRET_KEY=_random_secret(50),
            ALLOWED_HOSTS="127.0.0.1",
            DATABASE_URL=f"sqlite:///{self.tmp / 'db.sqlite3'}",
            PYTHONPATH=str(ROOT),
        )
        return env

    def __enter__(self) -> Node:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> float:
        """Start daphne and wait until it leads; returns the seconds that took."""
        argv = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "queueadmin.asgi:application"]
        started = perf_counter()
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C is ours to handle; we kill it ourselves
                preexec_fn=_die_with_parent,  # safe: called before this process starts any thread
            )
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
        while True:
            if self.proc.poll() is not None:
                raise NetworkAbort(f"daphne exited with status {self.proc.returncode} before leading")
            health = self.health()
            if health is not None and health.get("role") == "leader":
                return perf_counter() - started
            if time.monotonic() > deadline:
                raise NetworkAbort(
                    f"daphne did not lead within {STARTUP_TIMEOUT_SECONDS:g} s (last health answer: {health!r})"
                )
            time.sleep(0.1)

    def health(self) -> dict[str, Any] | None:
        """``GET /api/v1/health`` (not counted as a client request), or None if it failed."""
        try:
            response = self._http.get(f"{self.url}/api/v1/health")
            data = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def seq(self) -> int:
        """The leader's last committed seq; aborts if the node does not answer as leader."""
        for _ in range(3):
            health = self.health()
            if health is not None and health.get("role") == "leader" and isinstance(health.get("seq"), int):
                return int(health["seq"])
            time.sleep(0.2)
        raise NetworkAbort(f"the node stopped answering health as leader (last answer: {health!r})")

    def cpu_seconds(self) -> float | None:
        """User + system CPU seconds of the daphne process so far, from /proc/<pid>/stat."""
        if self.proc is None:
            return None
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)

    def log_tail(self) -> str:
        """The end of daphne's output (also after :meth:`stop`)."""
        try:
            return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return self.final_log

    def stop(self) -> None:
        """Kill daphne (if running) and remove the temporary folder. Idempotent."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_SECONDS / 2)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(STOP_TIMEOUT_SECONDS / 2)
        self._http.close()
        self.final_log = self.log_tail() or self.final_log
        self._tmp.cleanup()


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class CpuMeter:
    """CPU used by the node and by this process between :meth:`start` and :meth:`stop`."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self._node0: float | None = None
        self._own0 = 0.0

    def start(self) -> None:
        self._node0, self._own0 = self.node.cpu_seconds(), _own_cpu_seconds()

    def stop(self, result: PhaseResult) -> None:
        node1, own1 = self.node.cpu_seconds(), _own_cpu_seconds()
        if result.seconds > 0:
            if self._node0 is not None and node1 is not None:
                result.broker_cpu = (node1 - self._node0) / result.seconds
            result.client_cpu = (own1 - self._own0) / result.seconds


# -- phase 1: push ------------------------------------------------------------


def _batches(jobs: int, batch: int) -> Iterator[list[dict[str, Any]]]:
    for first in range(0, jobs, batch):
        yield [payload(n) for n in range(first, min(first + batch, jobs))]


def _join_all(threads: Sequence[threading.Thread], deadline: float, what: str) -> None:
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            raise NetworkAbort(f"{what} did not finish within the phase timeout")


def run_push(node: Node, cfg: NetworkConfig) -> PhaseResult:
    """Push ``cfg.jobs`` jobs in batches from ``cfg.producers`` threads sharing one client."""
    result = PhaseResult(phase="push", threads=cfg.producers)
    work: queue.SimpleQueue[list[dict[str, Any]]] = queue.SimpleQueue()
    for batch in _batches(cfg.jobs, cfg.batch):  # built before the clock starts
        work.put(batch)
    latencies: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    client = BrokerClient([node.url], token=node.token)
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            try:
                batch = work.get_nowait()
            except queue.Empty:
                return
            t0 = perf_counter()
            try:
                ids = client.push(QUEUE, batch)
            except BaseException as exc:  # any failure makes the run meaningless: stop everyone
                with lock:
                    errors.append(exc)
                stop.set()
                return
            took = perf_counter() - t0
            with lock:
                latencies.append(took)
                result.jobs += len(ids)
                result.operations += 1

    meter = CpuMeter(node)
    seq0 = node.seq()
    threads = [threading.Thread(target=produce, name=f"producer-{i}", daemon=True) for i in range(cfg.producers)]
    try:
        meter.start()
        t0 = perf_counter()
        for thread in threads:
            thread.start()
        _join_all(threads, time.monotonic() + cfg.timeout, f"pushing {cfg.jobs:,} jobs")
        result.seconds = perf_counter() - t0
        meter.stop(result)
        result.requests = client.requests
    finally:
        stop.set()
        client.close()
    if errors:
        exc = errors[0]
        raise NetworkAbort(f"a push failed after the client's retries: {type(exc).__name__}: {exc}")
    result.commits = node.seq() - seq0
    ordered = sorted(latencies)
    result.p50_ms, result.p99_ms = percentile(ordered, 0.50), percentile(ordered, 0.99)
    return result


# -- phase 2: drain -----------------------------------------------------------


class DrainTally:
    """Shared by every worker's client: completions, claim-to-complete times and operation counts."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.claimed_at: dict[str, float] = {}
        self.latencies: list[float] = []
        self.completed = 0
        self.claims = 0
        self.empty_claims = 0
        self.claimed_jobs = 0
        self.heartbeats = 0
        self.fails = 0
        self.last_completion = perf_counter()

    @property
    def operations(self) -> int:
        """Acknowledged writes: claims that leased a job, completes, heartbeats and fails."""
        return self.claims - self.empty_claims + self.completed + self.heartbeats + self.fails


class TimedBrokerClient(BrokerClient):
    """A :class:`BrokerClient` that records, in a shared :class:`DrainTally`,
    when each claimed job's claim and complete answers arrived."""

    def __init__(self, urls: Sequence[str], *, token: str, tally: DrainTally) -> None:
        super().__init__(urls, token=token)
        self.tally = tally

    def claim(
        self,
        worker: str,
        queues: Iterable[str],
        *,
        max_jobs: int = 1,
        lease_seconds: float | None = None,
        wait_seconds: float = 0,
    ) -> list[ClaimedJob]:
        """Claim as usual, noting the time the answer arrived for each job."""
        jobs = super().claim(worker, queues, max_jobs=max_jobs, lease_seconds=lease_seconds, wait_seconds=wait_seconds)
        now = perf_counter()
        with self.tally.cond:
            self.tally.claims += 1
            self.tally.empty_claims += not jobs
            self.tally.claimed_jobs += len(jobs)
            for job in jobs:
                self.tally.claimed_at[job.id] = now
        return jobs

    def complete(self, job_id: str, lease: str) -> None:
        """Complete as usual, then record the job's claim-to-complete time."""
        super().complete(job_id, lease)
        now = perf_counter()
        with self.tally.cond:
            claimed = self.tally.claimed_at.pop(job_id, None)
            if claimed is not None:
                self.tally.latencies.append(now - claimed)
            self.tally.completed += 1
            self.tally.last_completion = now
            self.tally.cond.notify_all()

    def heartbeat(self, job_id: str, lease: str, *, lease_seconds: float | None = None) -> datetime:
        """Heartbeat as usual, counting it."""
        answer = super().heartbeat(job_id, lease, lease_seconds=lease_seconds)
        with self.tally.cond:
            self.tally.heartbeats += 1
        return answer

    def fail(self, job_id: str, lease: str, *, error: str, retry_in_seconds: float | None = None) -> FailOutcome:
        """Fail as usual (the no-op handler never fails), counting it."""
        answer = super().fail(job_id, lease, error=error, retry_in_seconds=retry_in_seconds)
        with self.tally.cond:
            self.tally.fails += 1
        return answer


def _noop(payload: Any) -> None:
    """The drain's handler: does nothing, so the run measures the queue."""


def _progress(message: str) -> None:
    print(f"[network] {message}", file=sys.stderr, flush=True)


def _wait_for_drain(tally: DrainTally, target: int, deadline: float, workers: list[Worker]) -> None:
    """Block until ``target`` completions; abort on the deadline, a stall, or a worker that stopped itself."""
    next_report = time.monotonic() + PROGRESS_SECONDS
    started = perf_counter()
    with tally.cond:
        while tally.completed < target:
            now = time.monotonic()
            if now >= deadline:
                raise NetworkAbort(
                    f"drain timed out: {tally.completed:,} of {target:,} jobs completed within the phase timeout "
                    f"({tally.completed / max(1e-9, perf_counter() - started):,.0f} jobs/s)"
                )
            if perf_counter() - tally.last_completion > STALL_TIMEOUT_SECONDS:
                raise NetworkAbort(
                    f"drain stalled: no job completed for {STALL_TIMEOUT_SECONDS:g} s "
                    f"({tally.completed:,} of {target:,} done)"
                )
            fatal = [w.fatal for w in workers if w.fatal is not None]
            if fatal:
                raise NetworkAbort(f"a worker stopped: {type(fatal[0]).__name__}: {fatal[0]}")
            if now >= next_report:
                _progress(f"drain: {tally.completed:,}/{target:,} completed")
                next_report = now + PROGRESS_SECONDS
            tally.cond.wait(min(0.5, max(0.0, deadline - now)))


def run_drain(node: Node, cfg: NetworkConfig, target: int) -> tuple[PhaseResult, DrainTally, WorkerStats]:
    """Run ``cfg.workers`` Workers (one client each) until ``target`` jobs are completed."""
    result = PhaseResult(phase="drain", threads=cfg.workers)
    tally = DrainTally()
    clients = [TimedBrokerClient([node.url], token=node.token, tally=tally) for _ in range(cfg.workers)]
    workers = [
        Worker(
            client,
            queues=[QUEUE],
            handler=_noop,
            worker_id=f"bench-{i}",
            options=WorkerOptions(concurrency=1, wait_seconds=WORKER_WAIT_SECONDS, grace_seconds=WORKER_GRACE_SECONDS),
        )
        for i, client in enumerate(clients)
    ]
    threads = [threading.Thread(target=w.run, name=f"worker-{i}", daemon=True) for i, w in enumerate(workers)]
    meter = CpuMeter(node)
    seq0 = node.seq()
    drained = False
    try:
        meter.start()
        t0 = perf_counter()
        tally.last_completion = t0
        for thread in threads:
            thread.start()
        _wait_for_drain(tally, target, time.monotonic() + cfg.timeout, workers)
        drained = True
        with tally.cond:
            result.seconds = tally.last_completion - t0
            result.requests = sum(c.requests for c in clients)
            result.operations = tally.operations
        meter.stop(result)
        result.commits = node.seq() - seq0
    finally:
        worker_log = logging.getLogger("engine.worker")
        level = worker_log.level
        if not drained:  # aborted or interrupted: nothing is worth waiting for, and the log would only be noise
            worker_log.setLevel(logging.CRITICAL)
        for worker in workers:
            worker.stop(None if drained else 0)
        stop_by = time.monotonic() + WORKER_GRACE_SECONDS + WORKER_WAIT_SECONDS + STOP_TIMEOUT_SECONDS
        for thread in threads:
            thread.join(max(0.0, stop_by - time.monotonic()))
        for client in clients:
            client.close()
        if drained:
            worker_log.setLevel(level)
    result.jobs = tally.completed
    ordered = sorted(tally.latencies)
    result.p50_ms, result.p99_ms = percentile(ordered, 0.50), percentile(ordered, 0.99)
    stats = WorkerStats()
    for worker in workers:
        for f in dataclasses.fields(WorkerStats):
            setattr(stats, f.name, getattr(stats, f.name) + getattr(worker.stats, f.name))
    if stats.errors or stats.lost or stats.failed:
        result.notes.append(f"worker errors {stats.errors:,}, lost {stats.lost:,}, failed {stats.failed:,}")
    result.notes.append(
        f"{tally.claims:,} claims ({tally.empty_claims:,} empty), {tally.heartbeats:,} heartbeats; "
        f"{result.requests / max(1, result.jobs):.2f} requests per job"
    )
    return result, tally, stats


def check_document(node: Node, pushed: int) -> list[str]:
    """Problems with the final document: every pushed job must be completed and none left."""
    with BrokerClient([node.url], token=node.token) as client:
        doc = client.document()
    counters = (doc.get("queues") or {}).get(QUEUE) or {}
    completed = int(counters.get("completed", 0))
    left = len(doc.get("jobs") or [])
    dead = len(doc.get("dead") or [])
    problems = []
    if completed != pushed:
        problems.append(
            f"queues.{QUEUE}.completed is {completed:,}, expected {pushed:,} (shortfall {pushed - completed:,})"
        )
    if left:
        problems.append(f"{left:,} jobs still in the document")
    if dead:
        problems.append(f"{dead:,} dead letters")
    return problems


# -- output -------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


def table(results: Sequence[PhaseResult]) -> str:
    """The Markdown table, one row per phase."""
    rows = [
        "| phase | threads | jobs | seconds | jobs/s | p50 ms | p99 ms | HTTP req/s | requests | commits "
        "| ops/commit | broker CPU | client CPU | notes |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for r in results:
        rows.append(
            f"| {r.phase} | {r.threads:,} | {r.jobs:,} | {r.seconds:.2f} | {r.jobs_per_s:,.0f} "
            f"| {report.num(r.p50_ms, '.1f')} | {report.num(r.p99_ms, '.1f')} "
            f"| {r.requests_per_s:,.0f} | {r.requests:,} "
            f"| {r.commits:,} | {report.num(r.ops_per_commit, ',.1f')} | {_pct(r.broker_cpu)} | {_pct(r.client_cpu)} "
            f"| {'; '.join(r.notes)} |"
        )
    return "\n".join(rows)


def legend(cfg: NetworkConfig) -> str:
    """What the columns mean (printed under the table)."""
    return (
        f"threads: producer threads sharing one BrokerClient (push), or Workers with concurrency 1, a no-op handler "
        f"and {WORKER_WAIT_SECONDS:g} s long polls, one BrokerClient each (drain). jobs/s: jobs acknowledged ÷ "
        "seconds from the phase's start to its last acknowledgement. p50/p99: push — per push call of "
        f"{cfg.batch:,} jobs, call to 201; drain — per job, claim answer received to complete answer received. "
        "HTTP req/s: every request the clients sent (health checks, empty long polls, retries included) ÷ seconds. "
        "commits: the document's seq delta over the phase (the leader's idle heartbeats included). ops/commit: "
        "acknowledged writes (push calls; claims that leased a job, completes, heartbeats, fails) ÷ commits. "
        "broker CPU / client CPU: CPU time of the daphne process / of the benchmark process ÷ seconds "
        "(100% = one core)."
    )


def header(cfg: NetworkConfig, facts: dict[str, Any], store: str) -> str:
    """Command, machine facts and the run's conditions."""
    lines = [report.header(BenchConfig(command=cfg.command), facts, runs=False)]
    lines.append(
        f"conditions: one daphne node on 127.0.0.1 (queueadmin.asgi:application, QUEUE_BROKER_AUTOSTART, "
        f"DEBUG off), store {store}; engine.BrokerClient over HTTP/1.1 keep-alive; ~200-byte JSON payloads; "
        f"{cfg.jobs:,} jobs pushed by {cfg.producers} threads in batches of {cfg.batch:,}, then drained by "
        f"{cfg.workers} engine.Worker threads in this process; phase timeout {cfg.timeout:g} s"
    )
    return "\n".join(lines)


# -- command line -------------------------------------------------------------


def _positive(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from exc
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def parse_args(argv: list[str]) -> NetworkConfig:
    """The run's config from the arguments after ``network``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench network",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--jobs", type=_positive, default=DEFAULT_JOBS, help=f"jobs to push and drain ({DEFAULT_JOBS:,})"
    )
    parser.add_argument(
        "--workers", type=_positive, default=DEFAULT_WORKERS, help=f"worker threads ({DEFAULT_WORKERS})"
    )
    parser.add_argument(
        "--producers", type=_positive, default=DEFAULT_PRODUCERS, help=f"push threads ({DEFAULT_PRODUCERS})"
    )
    parser.add_argument("--batch", type=_positive, default=DEFAULT_BATCH, help=f"jobs per push call ({DEFAULT_BATCH})")
    parser.add_argument(
        "--store-url", help="the node's QUEUE_STORE_URL (default: file://<tmpdir>/store; memory:// cannot be shared)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        help="seconds each phase may take before the run is aborted "
        f"(default: {MIN_TIMEOUT_SECONDS:g}, or one second per {MIN_JOBS_PER_SECOND:g} jobs if longer)",
    )
    args = parser.parse_args(argv)
    if args.store_url is not None and not args.store_url.startswith(("file:///", "s3://")):
        parser.error("--store-url must be file:///abs/dir or s3://...: the node is another process")
    if args.timeout is not None and args.timeout <= 0:
        parser.error("--timeout must be > 0")
    timeout = args.timeout or max(MIN_TIMEOUT_SECONDS, args.jobs / MIN_JOBS_PER_SECOND)
    return NetworkConfig(
        jobs=args.jobs,
        workers=args.workers,
        producers=args.producers,
        batch=args.batch,
        store_url=args.store_url,
        timeout=timeout,
        command=shlex.join(["python", "-m", "bench", "network", *argv]),
    )


def _sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run(cfg: NetworkConfig, out: Callable[[str], None] = print) -> int:
    """Start the node, run both phases, print the report; 0 if every job was completed."""
    facts = report.machine_facts()
    node = Node(cfg.store_url)
    store = "file://<tmpdir>/store" if cfg.store_url is None else cfg.store_url
    out(header(cfg, facts, store))
    out("")
    try:
        with node:
            _progress(f"daphne pid {node.proc.pid if node.proc else '?'} leads at {node.url}")
            push = run_push(node, cfg)
            _progress(f"push: {push.jobs:,} jobs in {push.seconds:.2f} s, {push.jobs_per_s:,.0f} jobs/s")
            drain, _, _ = run_drain(node, cfg, push.jobs)
            _progress(f"drain: {drain.jobs:,} jobs in {drain.seconds:.2f} s, {drain.jobs_per_s:,.0f} jobs/s")
            problems = check_document(node, push.jobs)
    except NetworkAbort as exc:
        tail = node.log_tail()
        print(f"aborted: {exc}", file=sys.stderr)
        if tail:
            print(f"---- daphne log (last {LOG_TAIL_CHARS} characters)\n{tail}", file=sys.stderr)
        out(f"aborted: {exc}")
        return 1
    except EngineError as exc:
        out(f"aborted: {type(exc).__name__}: {exc}")
        return 1
    out(table([push, drain]))
    out("")
    out(legend(cfg))
    out("")
    if problems:
        out("check: FAIL — " + "; ".join(problems))
        return 1
    out(f"check: all {push.jobs:,} pushed jobs completed (queues.{QUEUE}.completed = {push.jobs:,}, no job left)")
    return 0


def main(argv: list[str]) -> int:
    """``python -m bench network [options]``."""
    cfg = parse_args(argv)
    previous = signal.signal(signal.SIGTERM, _sigterm)
    try:
        return run(cfg, lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        print("interrupted; the daphne node was stopped", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


__all__ = ["NetworkConfig", "PhaseResult", "main", "run"]
