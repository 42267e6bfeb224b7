"""One backlog run, in a fresh interpreter: ``python -m bench.backlog_run JSON``.

Run by :mod:`bench.backlog`, never by hand. The JSON names the depth, the
number of queues, the format-2 policy and the load; the last line printed
is one JSON object of measurements (progress goes to stderr).

A run, on a fresh ``file://`` folder (a memory store would hold every
segment in this process, and the RSS would mean nothing):

1. a leading :class:`engine.Broker` seeds ``depth`` pending jobs through the
   real push path, in batches, with no latency added (seeding is not
   measured); with segments on it is throttled so the LaneKeeper's sealing
   keeps up, and it ends once every queue is sealed down to the document's
   budget (``head_jobs + segment_jobs`` pending jobs in the document);
2. the store gets its latency and bandwidth, and a standby broker starts on
   its own counted view of the same folder;
3. **push**: ``submitters`` closed-loop asyncio tasks push one job each
   through ``GroupCommitter.apush`` (round robin over the queues);
4. the backlog is let settle again (sealed to the budget);
5. **drain**: ``workers`` asyncio tasks each claim one job and complete it,
   both through the committer;
6. the dashboard (after the RSS, so Django's imports are not counted): the
   overview, and the first queue's pending jobs page deep inside the
   segments, first load and cached (:func:`_jobs_page`);
7. **purge** (depth > 0): ``Purge(queue=q, status="pending")`` of the first
   queue, timed, with the commits it took.

Throughout, a thread samples this process's RSS every 0.1 s; the counted
store records every document put (its size) and every byte the standby reads.

The dashboard and lookup probes (:func:`_overview_ms`, :func:`_jobs_page`,
:func:`_job_by_id`) are in :mod:`bench.backlog_probes`; waiting for the lane
keeper to settle (:func:`_settle`) is in :mod:`bench.backlog_settle`.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import orjson

from bench.backlog_probes import _job_by_id, _job_page, _jobs_page, _overview_ms
from bench.backlog_settle import SETTLE_TIMEOUT_SECONDS, _keeper_idle, _settle
from bench.config import payload
from bench.requests import CountingStore as CallCountingStore
from engine import Blob, Broker, EngineError, FileStore, LatencyStore, ObjectStore, Policy, tune_collector
from engine.ops import Tick, claim_op, complete_op, purge_op, push_op

KEY = "queue.json"
SEED_OPS = 8  # push operations per seeding commit
SEED_OP_JOBS = 1_000  # jobs per seeding push operation
RSS_SAMPLE_SECONDS = 0.1


class CountingStore(CallCountingStore):
    """Counts calls by kind (:class:`bench.requests.CountingStore`), and
    records document puts (time and bytes), segment bytes put and bytes read."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.lock = threading.Lock()
        self.document_puts: list[tuple[float, int]] = []  # (monotonic, bytes)
        self.segment_put_bytes = 0
        self.bytes_read = 0
        # The largest document put since reset_largest() (None: not recording).
        self.largest: bytes | None = None

    def reset_largest(self) -> None:
        with self.lock:
            self.largest = b""

    def _put(self, key: str, parts: Sequence[bytes]) -> None:
        size = sum(map(len, parts))
        with self.lock:
            if key == KEY:
                self.document_puts.append((time.monotonic(), size))
                if self.largest is not None and size > len(self.largest):
                    self.largest = b"".join(parts)
            else:
                self.segment_put_bytes += size

    def get(self, key: str) -> Blob | None:
        blob = super().get(key)
        if blob is not None:
            with self.lock:
                self.bytes_read += len(blob.data)
        return blob

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        data = super().get_range(key, start, length)
        if data is not None:
            with self.lock:
                self.bytes_read += len(data)
        return data

    def put(self, key: str, data: bytes, *, if_match: str | None = None, if_none_match: bool = False) -> str:
        etag = super().put(key, data, if_match=if_match, if_none_match=if_none_match)
        self._put(key, (data,))
        return etag

    def put_parts(
        self, key: str, parts: Sequence[bytes], *, if_match: str | None = None, if_none_match: bool = False
    ) -> str:
        etag = super().put_parts(key, parts, if_match=if_match, if_none_match=if_none_match)
        self._put(key, parts)
        return etag


def composition(document: bytes) -> dict[str, Any]:
    """What a document's bytes are made of: per top-level field its encoded
    size, and its jobs by status, for the report of the largest commit."""
    if not document:
        return {}
    raw = orjson.loads(document)
    sizes = {name: len(orjson.dumps(value)) for name, value in raw.items()}
    statuses = Counter(job.get("status") for job in raw.get("jobs", []))
    refs = sum(len(lane.get("segments", [])) for lane in (raw.get("lanes") or {}).values())
    return {"bytes": len(document), "fields": dict(sorted(sizes.items(), key=lambda kv: -kv[1])[:6]),
            "jobs": dict(statuses), "segment_refs": refs}


class RssSampler:
    """Samples this process's RSS on a thread; ``peak_since(t)`` is the
    largest sample taken at or after monotonic time ``t``."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._thread = threading.Thread(target=self._run, name="rss", daemon=True)

    def now(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self._page

    def _run(self) -> None:
        while not self._stop.wait(RSS_SAMPLE_SECONDS):
            self.samples.append((time.monotonic(), self.now()))

    def start(self) -> RssSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def peak_since(self, since: float) -> int:
        return max((rss for at, rss in self.samples if at >= since), default=self.now())


def _log(message: str) -> None:
    print(f"[backlog] {message}", file=sys.stderr, flush=True)


def _doc_pending(broker: Broker) -> int:
    """Pending jobs held in the leader's document (all queues)."""
    committer = broker.committer
    state = committer.state if committer is not None else None
    return sum(state.pending_here.values()) if state is not None else 0


def _seed(broker: Broker, queues: list[str], depth: int, policy: Policy,
          delayed: float = 0.0) -> tuple[float, float]:
    """Push ``depth`` jobs through the committer, each due in ``delayed``
    seconds (0: pending now); return (push seconds, settle seconds)."""
    committer = broker.committer
    assert committer is not None
    ceiling = len(queues) * (policy.head_jobs + policy.segment_jobs) + 2 * policy.segment_jobs
    started = time.monotonic()
    n = 0
    last_log = started
    while n < depth:
        ops = []
        for _ in range(SEED_OPS):
            if n >= depth:
                break
            count = min(SEED_OP_JOBS, depth - n)
            queue = queues[(n // SEED_OP_JOBS) % len(queues)]
            ops.append(push_op(queue, [payload(i) for i in range(n, n + count)], policy=policy,
                               delay_seconds=delayed))
            n += count
        for outcome in committer.execute_many(ops, timeout=SETTLE_TIMEOUT_SECONDS):
            if isinstance(outcome, BaseException):
                raise outcome
        # Let the keeper seal: never let the document grow past a few segments'
        # worth; a Tick makes it plan again when its last seal's own commit could not.
        # (Delayed jobs are sealed only into delayed segments, with a horizon:
        # docs/format.md, "Delayed jobs beyond a window".)
        sealable = not delayed or 0 < policy.delayed_horizon_seconds < delayed
        while policy.segment_jobs > 0 and sealable and _doc_pending(broker) > ceiling:
            if _keeper_idle(broker):
                committer.execute(Tick(), timeout=SETTLE_TIMEOUT_SECONDS)
            else:
                time.sleep(0.002)
        if time.monotonic() - last_log > 10:
            last_log = time.monotonic()
            _log(f"seeded {n:,} of {depth:,} ({n / (last_log - started):,.0f} jobs/s)")
    pushed = time.monotonic() - started
    return pushed, _settle(broker, policy)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def push_phase(
    broker: Broker, queues: list[str], cfg: dict[str, Any], *, acknowledged: list[str] | None = None,
) -> dict[str, Any]:
    """``cfg["submitters"]`` closed-loop coroutines push one job each to
    ``queues`` through ``broker``'s committer, for ``cfg["warmup"]`` and then
    ``cfg["duration"]`` seconds; the window's pushes a second and latencies
    (p50, p99, p99.9, the slowest). ``acknowledged``, if given, gets every id
    a push was answered with, warm-up included (``python -m bench hedge``
    checks them)."""
    committer = broker.committer
    assert committer is not None
    window: dict[str, float] = {}
    latencies: list[float] = []
    errors: dict[str, int] = {}
    done = 0
    running = True

    async def submitter(i: int) -> None:
        nonlocal done
        queue, job = queues[i % len(queues)], payload(i)
        while running:
            started = time.monotonic()
            try:
                ids = await committer.apush(queue, [job])
            except EngineError as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                await asyncio.sleep(0.05)
                continue
            ended = time.monotonic()
            if acknowledged is not None:
                acknowledged.extend(ids)
            if window.get("open", float("inf")) <= started and ended <= window.get("close", float("inf")):
                latencies.append(ended - started)
                done += 1

    tasks = [asyncio.create_task(submitter(i)) for i in range(cfg["submitters"])]
    await asyncio.sleep(cfg["warmup"])
    window["open"] = time.monotonic()
    await asyncio.sleep(cfg["duration"])
    window["close"] = time.monotonic()
    running = False
    await asyncio.wait(tasks, timeout=60)
    return {
        "open": window["open"], "close": window["close"], "ops": done,
        "ops_per_s": done / (window["close"] - window["open"]), "errors": errors,
        "p50_ms": 1000 * (_pct(latencies, 0.50) or 0), "p99_ms": 1000 * (_pct(latencies, 0.99) or 0),
        "p999_ms": 1000 * (_pct(latencies, 0.999) or 0), "max_ms": 1000 * max(latencies, default=0),
    }


async def _drain_phase(broker: Broker, queues: list[str], cfg: dict[str, Any]) -> dict[str, Any]:
    committer = broker.committer
    assert committer is not None
    policy = broker.policy
    window: dict[str, float] = {}
    errors: dict[str, int] = {}
    done = 0
    empty = 0
    running = True

    async def worker(i: int) -> None:
        nonlocal done, empty
        claim = claim_op(f"bench-worker-{i}", queues, policy=policy, max_jobs=1)
        while running:
            try:
                jobs = await committer.aexecute(claim)
                if not jobs:
                    empty += 1
                    await asyncio.sleep(0.05)
                    continue
                for job in jobs:
                    await committer.aexecute(complete_op(job.id, job.lease))
            except EngineError as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                await asyncio.sleep(0.05)
                continue
            ended = time.monotonic()
            if window.get("open", float("inf")) <= ended <= window.get("close", float("inf")):
                done += len(jobs)

    tasks = [asyncio.create_task(worker(i)) for i in range(cfg["workers"])]
    await asyncio.sleep(cfg["warmup"])
    window["open"] = time.monotonic()
    await asyncio.sleep(cfg["duration"])
    window["close"] = time.monotonic()
    running = False
    await asyncio.wait(tasks, timeout=60)
    return {"open": window["open"], "close": window["close"], "jobs": done, "empty_claims": empty, "errors": errors,
            "jobs_per_s": done / (window["close"] - window["open"])}


def _commit_sizes(puts: list[int]) -> dict[str, float]:
    """A phase's commits: how many, their mean, 90th percentile and largest size in bytes."""
    ordered = sorted(puts)
    return {"commits": len(puts), "mean_commit_bytes": statistics.mean(puts) if puts else 0,
            "p90_commit_bytes": ordered[int(0.9 * (len(ordered) - 1))] if ordered else 0,
            "max_commit_bytes": ordered[-1] if ordered else 0}


def _document_puts(store: CountingStore, start: float, end: float) -> list[int]:
    with store.lock:
        return [size for at, size in store.document_puts if start <= at <= end]


def _heap_census(broker: Broker) -> dict[str, Any]:
    """What holds the leader's memory: jobs in its state, jobs in the
    keeper's segment cache, and the most numerous Python objects."""
    import collections
    import gc

    committer = broker.committer
    state = committer.state if committer is not None else None
    keeper = broker._keeper  # the benchmark reads the keeper's cache
    cached = getattr(keeper, "_cache", {}) if keeper is not None else {}
    counts = collections.Counter(type(obj).__name__ for obj in gc.get_objects())
    return {
        "state_jobs": len(state.jobs) if state is not None else 0,
        "cached_segments": len(cached),
        "cached_jobs": sum(len(v) for v in cached.values()),
        "objects": counts.most_common(8),
    }


def run(cfg: dict[str, Any]) -> dict[str, Any]:
    depth, nqueues = cfg["depth"], cfg["queues"]
    queues = [f"bench-{i}" for i in range(nqueues)]
    segment_jobs, head_jobs, refill_below = cfg["segments"]
    policy = Policy(segment_jobs=segment_jobs, head_jobs=head_jobs, refill_below=refill_below,
                    delayed_horizon_seconds=cfg.get("delayed_horizon") or 0.0)
    root = tempfile.mkdtemp(prefix="bench-backlog-", dir=cfg.get("tmp") or None)
    rss = RssSampler().start()
    baseline_rss = rss.now()
    counted = CountingStore(FileStore(root))
    leader_store = LatencyStore(counted, latency=0, bandwidth=0)  # free while seeding
    leader = Broker(leader_store, url="http://leader", key=KEY, policy=policy,
                    heartbeat_seconds=cfg["heartbeat"], takeover_seconds=cfg["takeover"]).start()
    # As the app's server does once it has started the broker (queueadmin/asgi.py):
    # the collector's default thresholds would pause the node every few
    # milliseconds under 2,048 submitters (engine.collector).
    tune_collector()
    standby: Broker | None = None
    result: dict[str, Any] = {"depth": depth, "queues": nqueues, "segments": [segment_jobs, head_jobs, refill_below],
                              "delayed": cfg.get("delayed") or 0.0,
                              "delayed_horizon": cfg.get("delayed_horizon") or 0.0}
    try:
        while leader.role != "leader":
            time.sleep(0.01)
        _log(f"seeding {depth:,} jobs over {nqueues} queue(s), policy {segment_jobs},{head_jobs},{refill_below}")
        result["seed_push_s"], result["seed_settle_s"] = _seed(leader, queues, depth, policy,
                                                               cfg.get("delayed") or 0.0)
        keeper = leader._keeper
        result["segments_sealed"] = keeper.sealed if keeper is not None else 0
        _log(f"seeded in {result['seed_push_s']:.1f} s + settled in {result['seed_settle_s']:.1f} s")

        leader_store.latency, leader_store.bandwidth = cfg["latency"], cfg["bandwidth"] or None
        standby_counted = CountingStore(FileStore(root))
        standby = Broker(LatencyStore(standby_counted, latency=cfg["latency"], bandwidth=cfg["bandwidth"] or None),
                         url="http://standby", key=KEY, policy=policy,
                         heartbeat_seconds=cfg["heartbeat"], takeover_seconds=cfg["takeover"]).start()
        measured_from = time.monotonic()
        read_before = standby_counted.bytes_read

        counted.reset_largest()
        push = asyncio.run(push_phase(leader, queues, cfg))
        puts = _document_puts(counted, push["open"], push["close"])
        result["push"] = push | _commit_sizes(puts) | {"largest_commit": composition(counted.largest or b"")}
        _log(f"push: {push['ops_per_s']:,.0f} ops/s, p50 {push['p50_ms']:.1f} ms, p99 {push['p99_ms']:.1f} ms, "
             f"{len(puts)} commits, p90 {result['push']['p90_commit_bytes'] / 1e6:.2f} MB, "
             f"max commit {result['push']['max_commit_bytes'] / 1e6:.2f} MB; "
             f"the largest (warm-up included): {result['push']['largest_commit']}")
        if keeper is not None:
            _log(f"keeper so far: {keeper.sealed} sealed, {keeper.merged} merged, {keeper.abandoned} abandoned")
        result["settle_after_push_s"] = _settle(leader, policy)

        counted.reset_largest()
        drain = asyncio.run(_drain_phase(leader, queues, cfg))
        puts = _document_puts(counted, drain["open"], drain["close"])
        result["drain"] = drain | _commit_sizes(puts) | {"largest_commit": composition(counted.largest or b"")}
        counted.largest = None
        _log(f"drain: {drain['jobs_per_s']:,.0f} jobs/s, {len(puts)} commits, "
             f"p90 {result['drain']['p90_commit_bytes'] / 1e6:.2f} MB, "
             f"max commit {result['drain']['max_commit_bytes'] / 1e6:.2f} MB; "
             f"the largest (warm-up included): {result['drain']['largest_commit']}")
        measured_to = time.monotonic()
        standby_read = standby_counted.bytes_read - read_before
        result["standby_bytes_per_min"] = standby_read * 60 / (measured_to - measured_from)
        result["rss_bytes"] = rss.peak_since(measured_from)
        all_puts = _document_puts(counted, measured_from, measured_to)
        sizes = _commit_sizes(all_puts)
        for name in ("mean_commit_bytes", "p90_commit_bytes", "max_commit_bytes"):
            result[name] = sizes[name]

        result["heap"] = _heap_census(leader)  # after the RSS: what the leader holds, for the report
        if cfg.get("dashboard", True):
            result["overview_ms"] = _overview_ms(leader)  # after the RSS: Django's imports are not the leader's
            result["jobs_page"] = jobs_page = _jobs_page(leader, queues[0])
            if "error" not in jobs_page:
                result["jobs_page_cold_ms"] = jobs_page["cold_ms"]
                result["jobs_page_cached_ms"] = jobs_page["cached_ms"]
            _log(f"jobs page: {jobs_page}")
        if depth > 0:
            result["job_by_id"] = _job_by_id(leader, counted, queues[0])
            _log(f"job by id: {result['job_by_id']}")
            if cfg.get("dashboard", True):
                result["job_page"] = _job_page(leader, counted, queues[0])
                _log(f"job page: {result['job_page']}")
            committer = leader.committer
            assert committer is not None
            state = committer.state
            pending = state.pending(queues[0]) if state is not None else None
            # Right after a commit landed (the settled leader's heartbeat, once
            # a second): a write already in flight when the purge is staged
            # lands first and was counted as the purge's (run M: "2 commits").
            landed = leader.stats.commits
            deadline = time.monotonic() + 5
            while leader.stats.commits == landed and time.monotonic() < deadline:
                time.sleep(0.001)
            commits_before = leader.stats.commits
            started = time.monotonic()
            committer.execute(purge_op(queue=queues[0], status="pending"), timeout=60)
            # The purge is one operation, so one commit; "commits" counts every
            # commit that landed during the call (a seal may too),
            # and "left" what the queue still holds once it was answered.
            after = committer.state
            result["purge"] = {"seconds": time.monotonic() - started, "commits": leader.stats.commits - commits_before,
                               "pending": pending, "left": after.pending(queues[0]) if after is not None else None}
            _log(f"purge: {result['purge']}")
        if keeper is not None:
            result["keeper"] = {"sealed": keeper.sealed, "refilled": keeper.refilled, "deleted": keeper.deleted,
                                "merged": keeper.merged, "abandoned": keeper.abandoned,
                                "problems": dict(keeper.problems)}
    finally:
        if standby is not None:
            standby.stop(timeout=10)
        leader.stop(timeout=30)
        rss.stop()
        result["baseline_rss_bytes"] = baseline_rss
        with open("/proc/self/status") as f:
            result["peak_rss_bytes"] = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
        shutil.rmtree(root, ignore_errors=True)
    return result


def main(argv: list[str]) -> int:
    cfg = json.loads(argv[0])
    print(json.dumps(run(cfg)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
