"""One chaos run, start to finish: start the cluster and the clients, let the
nemesis loose, heal, drain, measure the idle cost, and check the history."""

from __future__ import annotations

import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from prometheus_client.parser import text_string_to_metric_families

from chaos import clients
from chaos.checker import Limits, Verdict, check, recovered_after
from chaos.cluster import (
    HEARTBEAT_SECONDS,
    LEASE_SECONDS,
    SCHEDULE_QUEUE,
    SCHEDULE_SECONDS,
    TAKEOVER_SECONDS,
    TOKEN,
    Cluster,
    cpu_seconds,
)
from chaos.history import History, Idle
from chaos.nemesis import KINDS, LONG_PAUSE_SECONDS, RECOVERY_CAP_SECONDS, Nemesis
from chaos.pauser import QueueLimiter, QueueRateLimiter, SchedulePauser
from chaos.purger import Purger
from chaos.reclaimer import Reclaimer
from chaos.requeuer import Requeuer
from chaos.watcher import HealthWatcher, StoreWatcher
from engine import DOCUMENT_KEY, EngineError
from engine.stores import ObjectStore

# The drain ends as soon as nothing is left; the bound is for a backlog the
# run's operators grew: a limit of 1 held by a stalled worker for a lease
# (chaos.pauser) left seed 91 with 252 jobs after 90 s, still draining.
DRAIN_TIMEOUT_SECONDS = 180.0
LIMITS = Limits(heartbeat_seconds=HEARTBEAT_SECONDS, takeover_seconds=TAKEOVER_SECONDS,
                long_pause_seconds=LONG_PAUSE_SECONDS,
                recovery_cap_seconds=RECOVERY_CAP_SECONDS, schedule_seconds=SCHEDULE_SECONDS,
                lease_seconds=LEASE_SECONDS)
IDLE_SECONDS = 3.0  # twelve heartbeats
SETTLE_TIMEOUT_SECONDS = 30.0


@dataclass(kw_only=True)
class Options:
    """What a run does (the command line's options)."""

    seed: int = 1
    duration: float = 60.0
    store: str = "file"
    nodes: int = 3
    producers: int = 2
    workers: int = 4
    pace: float = 0.08  # mean seconds between one producer's pushes
    kinds: list[str] = field(default_factory=lambda: list(KINDS))
    faults: int | None = None  # stop after this many faults (default: when the duration is up)
    each: bool = False  # every fault kind in turn rather than drawn by weight
    odd_strings: float = 0.005
    deep_payloads: float = 0.005
    drop_answer: float = 0.02
    delayed: float = 0.05  # chance that a push is delayed (chaos.clients.DELAY_SECONDS)
    watches: float = 0.03  # chance that a worker works a job with a lease watch open (chaos.clients.WATCH_SECONDS)
    purges: bool = True  # an operator purges waiting jobs by id (chaos.purger)
    requeues: bool = True  # an operator requeues running and dead jobs, some paced (chaos.requeuer)
    schedule_pauses: bool = True  # an operator pauses and resumes the nodes' schedule (chaos.pauser)
    limits: bool = True  # an operator sets and removes the chaos queue's concurrency limit (chaos.pauser)
    rates: bool = True  # an operator sets and removes the chaos queue's rate limit (chaos.pauser)
    # Format 2: (segment_jobs, head_jobs, refill_below) for every node; None: format 1.
    segments: tuple[int, int, int] | None = None
    # Format 3, with ``segments``: delayed jobs due more than this many seconds
    # ahead go to delayed segments (QUEUE_DELAYED_HORIZON_SECONDS). Short, so
    # that the producers' delays of 0.5-4 s are sealed and come back.
    delayed_horizon: float = 0.3
    workdir: Path | None = None
    keep: bool = False
    command: str = ""  # the command line that asked for this run, for the report


def recheck(workdir: Path) -> Outcome:
    """Check the history a finished run left in ``workdir`` again (no processes started)."""
    history = History.load(workdir / "history.json")
    saved = orjson.loads((workdir / "run.json").read_bytes())
    options = Options(**{**saved["options"], "workdir": workdir})
    return Outcome(options, check(history, LIMITS), history, workdir, seconds=float(saved["seconds"]))


@dataclass
class Outcome:
    options: Options
    verdict: Verdict
    history: History
    workdir: Path
    seconds: float


def run(options: Options, *, log: bool = True) -> Outcome:
    """Run once; returns the verdict (never raises for a failed check)."""
    workdir = options.workdir or Path(tempfile.mkdtemp(prefix=f"chaos-{options.store}-{options.seed}-"))
    history = History()
    cluster = Cluster(workdir=workdir, store=options.store, size=options.nodes,
                      env=segment_env(options.segments, options.delayed_horizon))
    say: Callable[..., None] = print if log else (lambda *a, **k: None)
    started = time.monotonic()
    try:
        say(f"chaos: seed {options.seed}, {options.store} store, {options.nodes} nodes"
            + (f", segments {options.segments}, delayed horizon {options.delayed_horizon:g} s"
               if options.segments else "") + f", in {workdir}")
        cluster.start()
        _wait_for_leader(cluster)
        _measure_idle(cluster, history, "before")
        _run_load(cluster, history, options, say)
        _measure_idle(cluster, history, "after")
        history.store_faults = _store_fault_totals(cluster)
    finally:
        cluster.stop()
    verdict = check(history, LIMITS)
    outcome = Outcome(options, verdict, history, workdir, time.monotonic() - started)
    history.dump(workdir / "history.json")
    (workdir / "run.json").write_bytes(orjson.dumps({"options": options, "seconds": outcome.seconds}, default=str))
    if verdict.ok and not options.keep and options.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return outcome


def _run_load(cluster: Cluster, history: History, options: Options, say: Callable[..., None]) -> None:
    rng = random.Random(options.seed)
    stop_producers, stop_workers, stop_watch, stop_nemesis = (threading.Event() for _ in range(4))
    urls = [n.url for n in cluster.nodes]
    behaviour = clients.Behaviour(drop_answer=options.drop_answer, odd_strings=options.odd_strings,
                                  deep_payloads=options.deep_payloads, delayed=options.delayed,
                                  watch=options.watches)
    producers = [clients.Producer(i, options.pace, urls, history, random.Random(rng.random()), stop_producers,
                                  behaviour) for i in range(options.producers)]
    workers = [clients.Worker(i, urls, history, random.Random(rng.random()), stop_workers, behaviour)
               for i in range(options.workers)]
    # The operator stops with the producers, so the drain at the end is the workers' alone.
    operators: list[clients.Client] = []
    if options.purges:
        operators.append(Purger(urls, history, random.Random(rng.random()), stop_producers, behaviour))
    if options.requeues:
        operators.append(Requeuer(urls, history, random.Random(rng.random()), stop_producers, behaviour))
    if options.schedule_pauses:
        operators.append(SchedulePauser(urls, history, random.Random(rng.random()), stop_producers, behaviour))
    if options.limits:
        operators.append(QueueLimiter(urls, history, random.Random(rng.random()), stop_producers, behaviour))
    if options.rates:
        operators.append(QueueRateLimiter(urls, history, random.Random(rng.random()), stop_producers, behaviour))
    watchers: list[threading.Thread] = [StoreWatcher(cluster.store_url, history, stop_watch,
                                                     azure_connection_string=cluster.azure_connection_string),
                                        HealthWatcher(cluster, history, stop_watch)]
    reclaimer = Reclaimer(cluster.workdir / "store", history, stop_watch) if options.store == "file" else None
    if reclaimer is not None:
        watchers.append(reclaimer)
    nemesis = Nemesis(cluster, history, seed=options.seed, kinds=options.kinds, count=options.faults,
                      deadline=time.monotonic() + options.duration, stop=stop_nemesis,
                      recovered=lambda since: recovered_after(history.calls, since), each=options.each,
                      progress=lambda line: say(line, flush=True))
    threads = [*watchers, *producers, *operators, *workers]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)  # some load first
        nemesis.start()
        nemesis.join(options.duration + 120)
        stop_nemesis.set()
        nemesis.join()
        if nemesis.error is not None:
            history.event(f"harness: the nemesis failed: {nemesis.error!r}")
        history.event("nemesis stopped; healing")
        try:
            cluster.heal()
        except RuntimeError as exc:  # a node that cannot start again is a finding, not a harness crash
            history.event(f"harness: could not heal the cluster: {exc}")
        time.sleep(1.0)  # a little load on the healed cluster
        stop_producers.set()
        for producer in [*producers, *operators]:
            producer.join()
        history.event("producers stopped; draining")
        _drain(cluster)
    finally:
        stop_producers.set()
        stop_workers.set()
        for worker in workers:
            worker.join(clients.RETRY_BUDGET_SECONDS + 30)
        stop_watch.set()
        for watcher in watchers:
            watcher.join(10)
    if reclaimer is not None:
        say(f"chaos: a reclaimer an hour ahead took {reclaimer.reclaimed} deleted objects' folders in "
            f"{reclaimer.listings} listings")
    hedged, landed = _hedges(cluster)
    say(f"chaos: the nodes hedged {hedged} writes since their last start, {landed} landed by the hedge")
    history.final_document = _read_document(cluster, segments=True)
    history.event("drained")


def segment_env(segments: tuple[int, int, int] | list[int] | None, delayed_horizon: float = 0.3) -> dict[str, str]:
    """The nodes' environment for formats 2 and 3 (empty for format 1).
    Merges of up to 8 segments' worth of jobs: seals of a few shares are
    then small enough to be merged (with their id indexes) within a run,
    not only past 16,384 jobs. Delayed jobs due more than
    ``delayed_horizon`` seconds ahead go to delayed segments (0: never)."""
    if not segments:
        return {}
    segment_jobs, head_jobs, refill_below = segments
    return {"QUEUE_SEGMENT_JOBS": str(segment_jobs), "QUEUE_HEAD_JOBS": str(head_jobs),
            "QUEUE_REFILL_BELOW": str(refill_below), "QUEUE_MERGE_JOBS": str(8 * segment_jobs),
            "QUEUE_DELAYED_HORIZON_SECONDS": str(delayed_horizon)}


def _read_document(cluster: Cluster, *, segments: bool = False) -> dict[str, Any] | None:
    """The document as stored, or None. With ``segments``, format 2's jobs
    still in segment objects are added as ``"segment_jobs"`` (read from the
    objects the document references, past their consumed ones), a segment
    that cannot be read as an entry of ``"segment_problems"``, and objects
    under the segment prefix that the document does not reference as
    ``"unreferenced_segments"``: the checker counts every job, wherever it is."""
    store = cluster.open_store()
    try:
        blob = store.get(DOCUMENT_KEY)
        if blob is None:
            return None
        try:
            doc = orjson.loads(blob.data)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(doc, dict):
            return None
        if segments:
            _add_segment_jobs(store, doc)
        return doc
    finally:
        store.close()


def _add_segment_jobs(store: ObjectStore, doc: dict[str, Any]) -> None:
    jobs: list[Any] = []
    problems: list[str] = []
    referenced: set[str] = set()
    for queue, lane in (doc.get("lanes") or {}).items():
        # Delayed segments (format 3) hold every job they were written with.
        for ref in [*lane.get("segments", []), *({**r, "consumed": 0} for r in lane.get("delayed", []))]:
            referenced.add(ref["key"])
            try:
                segment = store.get(ref["key"])
            except EngineError as exc:
                problems.append(f"segment {ref['key']} of {queue}: {exc}")
                continue
            if segment is None:
                problems.append(f"segment {ref['key']} of {queue} is missing")
                continue
            jobs.extend(orjson.loads(segment.data)["jobs"][ref["consumed"]:])
    doc["segment_jobs"] = jobs
    doc["segment_problems"] = problems
    try:
        # Where segments live is part of the storage format (docs/format.md).
        listed = set(store.list(f"{DOCUMENT_KEY}.seg/"))
        doc["unreferenced_segments"] = sorted(listed - referenced)
        # An id index (engine.idindex) whose segment is gone: a leak, not a loss.
        doc["orphan_indexes"] = sorted(
            key for key in store.list(f"{DOCUMENT_KEY}.idx/")
            if f"{DOCUMENT_KEY}.seg/{key.removeprefix(f'{DOCUMENT_KEY}.idx/').removesuffix('.ids')}.json" not in listed)
    except EngineError as exc:
        problems.append(f"listing the segments: {exc}")


def _drain(cluster: Cluster) -> None:
    """Wait until no job is pending or running (the workers finish them),
    in the document or in segments; the schedule's queue, which no client
    claims from, aside."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        doc = _read_document(cluster)
        if doc is not None and not any(j.get("queue") != SCHEDULE_QUEUE for j in doc.get("jobs", ())) and not any(
                lane.get("segments") or lane.get("delayed")
                for queue, lane in (doc.get("lanes") or {}).items() if queue != SCHEDULE_QUEUE):
            return
        time.sleep(0.5)


def _hedges(cluster: Cluster) -> tuple[int, int]:
    """Hedged writes, and those the hedge landed, summed over the nodes'
    ``/metrics`` (each node's counts since it last started; a node that
    does not answer counts nothing)."""
    totals = {"queueadmin_hedged_writes_total": 0, "queueadmin_hedged_writes_landed_total": 0}
    for node in cluster.nodes:
        try:
            text = httpx.get(f"{node.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5).text
        except httpx.HTTPError:
            continue
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in totals:
                    totals[sample.name] += int(sample.value)
    return totals["queueadmin_hedged_writes_total"], totals["queueadmin_hedged_writes_landed_total"]


def _wait_for_leader(cluster: Cluster) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT_SECONDS
    while cluster.leader() is None:
        if time.monotonic() > deadline:
            raise RuntimeError("no node took the lead")
        time.sleep(0.1)


def _measure_idle(cluster: Cluster, history: History, phase: str) -> None:
    """CPU time and store requests of each node over IDLE_SECONDS with no clients."""
    try:
        _wait_for_leader(cluster)
    except RuntimeError:
        history.event(f"harness: no node led before the idle measurement ({phase})")
    time.sleep(2 * HEARTBEAT_SECONDS)
    before = {n.name: (n.pid, cpu_seconds(n.pid) if n.pid else None, n.store_requests()) for n in cluster.nodes}
    t0 = time.monotonic()
    time.sleep(IDLE_SECONDS)
    seconds = time.monotonic() - t0
    for node in cluster.nodes:
        pid, cpu0, requests0 = before[node.name]
        cpu1 = cpu_seconds(pid) if pid else None
        if pid is None or pid != node.pid or cpu0 is None or cpu1 is None:
            continue
        history.idle.append(Idle(node=node.url, phase=phase, seconds=seconds, cpu_seconds=cpu1 - cpu0,
                                 store_requests=node.store_requests() - requests0,
                                 heartbeat_seconds=HEARTBEAT_SECONDS))


def _store_fault_totals(cluster: Cluster) -> dict[str, int]:
    totals: dict[str, int] = {}
    for node in cluster.nodes:
        for history in (*node.fault_history, node.store_stats().get("faults", {})):
            for kind, n in history.items():
                totals[kind] = totals.get(kind, 0) + int(n)
    return totals
