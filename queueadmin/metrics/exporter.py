"""``/metrics``: the node and its queues in Prometheus text format.

Every node serves it (leader and standbys alike). Nothing is counted twice
by hand: :class:`QueueCollector` reads, at scrape time,

* the latest committed document (:data:`queueadmin.dashboard.source.source`:
  the leader's memory, or on a standby the store, checked by ETag first):
  per queue the pending, ready, running and dead-letter gauges, the oldest
  pending job's age, and the document's own counters (pushed, completed,
  failed, dead, purged), which survive restarts and failovers because they
  live in the document; its seq, epoch and last write time;
* this node's broker: its role, its takeovers, and the commit statistics its
  committers kept (:class:`engine.CommitStats`: the latency, size and batch
  histograms, CAS conflicts, ambiguous writes), plus the long-poll claims
  waiting on it and the workers seen;

and :mod:`.requests` adds the API's requests by endpoint and status.

:func:`application` is the ASGI endpoint (``queueadmin/asgi.py`` routes
``/metrics`` to it before Django). It answers ``GET`` and ``HEAD`` with a
bearer token: ``QUEUE_METRICS_TOKEN`` or any token the broker API accepts
(:func:`queueadmin.api.auth.check_token`) that is not limited to some queues
or calls: the metrics name every queue (:mod:`queueadmin.api.grants`).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, GCCollector, PlatformCollector, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from engine import Broker, Buckets, EngineError
from queueadmin import config, runtime
from queueadmin.api.auth import check_token
from queueadmin.api.errors import ApiError
from queueadmin.api.http import ClientGone, Receive, Request, Scope, Send
from queueadmin.dashboard.schedules import marks_of, overdue_tick, pauses_of
from queueadmin.dashboard.snapshot import Snapshot, moment
from queueadmin.dashboard.source import source
from queueadmin.metrics.requests import bound_label, registry

log = logging.getLogger(__name__)

#: Where asgi.py serves the endpoint.
PATH = "/metrics"
ROLES = ("leader", "standby", "stopped")


class QueueCollector(Collector):
    """Reads the node and the document when scraped (see the module docstring).

    ``collect`` may do store I/O on a standby (an ETag check, and a read when
    the document changed): call it off the event loop.
    """

    def collect(self) -> Iterator[Metric]:
        broker = runtime.get_broker()
        yield from self._node(broker)
        try:
            snapshot = source.current()
        except EngineError as exc:
            log.warning("/metrics: the document cannot be read: %s", exc)
            snapshot = None
        readable = GaugeMetricFamily(
            "queueadmin_document_readable", "1 if this node could read the queue document at this scrape, else 0."
        )
        readable.add_metric([], 1.0 if snapshot is not None else 0.0)
        yield readable
        if snapshot is not None:
            yield from self._document(snapshot)
            yield from self._queues(snapshot)
            yield from self._schedules(broker, snapshot)
            workers = GaugeMetricFamily(
                "queueadmin_workers_seen",
                "Workers seen in the last 15 minutes: holding leases, ending attempts, or asking this node for work.",
            )
            asked = {name: when for name, (when, _) in runtime.seen_workers.items().items()}
            workers.add_metric([], float(len(snapshot.workers(extra=asked))))
            yield workers

    def _node(self, broker: Broker) -> Iterator[Metric]:
        role = GaugeMetricFamily("queueadmin_node_role", "This node's role: 1 for the current one.", labels=["role"])
        for name in ROLES:
            role.add_metric([name], 1.0 if broker.role == name else 0.0)
        yield role
        epoch = GaugeMetricFamily(
            "queueadmin_epoch", "The fencing epoch of the leader this node knows (its own when it leads)."
        )
        epoch.add_metric([], float(broker.leader.epoch))
        yield epoch
        heartbeat = GaugeMetricFamily(
            "queueadmin_heartbeat_seconds",
            "The most time between two of the leader's commits (QUEUE_HEARTBEAT_SECONDS).",
        )
        heartbeat.add_metric([], config.heartbeat_seconds())
        yield heartbeat
        takeovers = CounterMetricFamily("queueadmin_takeovers", "Takeovers this node won since it started.")
        takeovers.add_metric([], float(broker.takeovers))
        yield takeovers
        stats = broker.stats
        for name, value, text in (
            (
                "queueadmin_cas_conflicts",
                stats.lost_races,
                "Conditional writes by this node that lost to another writer (412/409) and were re-applied.",
            ),
            (
                "queueadmin_ambiguous_writes",
                stats.ambiguous,
                "Writes by this node whose outcome was unknown (timeout, 5xx) until a re-read settled it.",
            ),
            (
                "queueadmin_hedged_writes",
                stats.hedged,
                "Writes by this node sent again because the first attempt was slow (QUEUE_STORE_HEDGE_SECONDS).",
            ),
            (
                "queueadmin_hedged_writes_landed",
                stats.hedges_landed,
                "Hedged writes by this node that landed by their second attempt.",
            ),
            ("queueadmin_commit_operations", stats.operations, "Operations this node answered through its committer."),
            ("queueadmin_document_reads", stats.reads, "Whole-document reads by this node's committers."),
        ):
            counter = CounterMetricFamily(name, text)
            counter.add_metric([], float(value))
            yield counter
        yield _histogram(
            "queueadmin_commit_duration_seconds",
            "Time from starting a conditional write to its landing, per landed write by this node.",
            stats.latency,
        )
        yield _histogram("queueadmin_commit_bytes", "Size of each document this node wrote.", stats.sizes)
        yield _histogram(
            "queueadmin_commit_batch_operations", "Operations carried by each write this node landed.", stats.batches
        )
        waiting = GaugeMetricFamily("queueadmin_long_poll_waiters", "Long-poll claims waiting on this node now.")
        waiting.add_metric([], float(broker.waiters.waiting()))
        yield waiting
        watches = GaugeMetricFamily("queueadmin_lease_watches",
                                    "Lease watches of workers parked on this node now (engine.leasewatch).")
        watches.add_metric([], float(broker.lease_watches.watching()))
        yield watches

    def _document(self, snapshot: Snapshot) -> Iterator[Metric]:
        seq = GaugeMetricFamily("queueadmin_document_seq", "The commit sequence number of the latest document read.")
        seq.add_metric([], float(snapshot.seq))
        yield seq
        size = GaugeMetricFamily("queueadmin_document_bytes", "Size of the latest document read, in bytes.")
        size.add_metric([], float(snapshot.size))
        yield size
        if snapshot.written_at is not None:
            last = GaugeMetricFamily(
                "queueadmin_last_commit_timestamp_seconds",
                "When the latest document was written (the leader's clock, Unix time). The "
                "leader writes at least every heartbeat, even when idle.",
            )
            last.add_metric([], snapshot.written_at.timestamp())
            yield last

    def _queues(self, snapshot: Snapshot) -> Iterator[Metric]:
        gauges = {
            "pending": GaugeMetricFamily(
                "queueadmin_queue_pending", "Pending jobs (ready or delayed).", labels=["queue"]
            ),
            "ready": GaugeMetricFamily(
                "queueadmin_queue_ready",
                "Pending jobs that are due: claimable now, or due together and waiting in a delayed segment "
                "for claims to make room.",
                labels=["queue"],
            ),
            "running": GaugeMetricFamily("queueadmin_queue_running", "Jobs leased to a worker.", labels=["queue"]),
            "dead": GaugeMetricFamily("queueadmin_queue_dead_letters", "Jobs in the dead letters.", labels=["queue"]),
            # Format 2: how much of the backlog sits outside queue.json (counted in pending too).
            "in_segments": GaugeMetricFamily(
                "queueadmin_queue_in_segments",
                "Pending jobs (counted in queueadmin_queue_pending) held in segment objects, not in queue.json.",
                labels=["queue"],
            ),
            "segments": GaugeMetricFamily(
                "queueadmin_queue_segments", "Segment objects holding the queue's pending jobs.", labels=["queue"]
            ),
        }
        paused = GaugeMetricFamily("queueadmin_queue_paused", "1 if the queue is paused.", labels=["queue"])
        limits = GaugeMetricFamily("queueadmin_queue_max_running",
                                   "The queue's concurrency limit (at most this many of its jobs run at once); "
                                   "only queues with one.", labels=["queue"])
        rate_jobs = GaugeMetricFamily("queueadmin_queue_rate_limit_jobs",
                                      "The queue's rate limit: at most this many of its jobs start in each window; "
                                      "only queues with one.", labels=["queue"])
        rate_seconds = GaugeMetricFamily("queueadmin_queue_rate_limit_window_seconds",
                                         "The length of the queue's rate-limit window; only queues with one.",
                                         labels=["queue"])
        oldest = GaugeMetricFamily(
            "queueadmin_queue_oldest_pending_age_seconds",
            "Age of the oldest pending job (0 when none is pending).",
            labels=["queue"],
        )
        counters = {
            key: CounterMetricFamily(f"queueadmin_queue_{key}", text, labels=["queue"])
            for key, text in (
                ("pushed", "Jobs pushed (from the document's counters)."),
                ("completed", "Jobs completed (from the document's counters)."),
                ("failed", "Attempts that failed or whose lease expired (from the document's counters)."),
                ("dead", "Jobs moved to the dead letters (from the document's counters)."),
                ("purged", "Jobs removed by operators (from the document's counters)."),
            )
        }
        written: dict[str, Any] = snapshot.header.get("queues") or {}
        # Now, not when the snapshot was decoded: an unchanged document (no
        # leader writing) is served from cache, and its jobs keep ageing.
        now = datetime.now(UTC)
        for name, q in snapshot.queues.items():
            for key, family in gauges.items():
                family.add_metric([name], float(getattr(q, key)))
            paused.add_metric([name], 1.0 if q.paused else 0.0)
            if q.max_running is not None:
                limits.add_metric([name], float(q.max_running))
            if q.rate is not None:
                rate_jobs.add_metric([name], float(q.rate.jobs))
                rate_seconds.add_metric([name], q.rate.seconds)
            age = (now - q.oldest_pending_at).total_seconds() if q.oldest_pending_at else 0.0
            oldest.add_metric([name], max(age, 0.0))
            kept = written.get(name) or {}
            for key, counter in counters.items():
                counter.add_metric([name], float(kept.get(key, 0)))
        yield from gauges.values()
        yield paused
        yield limits
        yield rate_jobs
        yield rate_seconds
        yield oldest
        yield from counters.values()


    def _schedules(self, broker: Broker, snapshot: Snapshot) -> Iterator[Metric]:
        """Recurring jobs: each mark's tick, and how late this node's
        schedules are (the Schedules page's rule, dashboard.schedules)."""
        marks = marks_of(snapshot)
        last = GaugeMetricFamily(
            "queueadmin_schedule_last_tick_timestamp_seconds",
            "The latest tick of the schedule that a commit handled (Unix time), fired, missed, registered or "
            "skipped (paused).",
            labels=["schedule", "outcome"],
        )
        for name, mark in sorted(marks.items()):
            tick = moment(mark.get("tick"))
            if tick is not None:
                last.add_metric([name, str(mark.get("outcome"))], tick.timestamp())
        yield last
        overdue = GaugeMetricFamily(
            "queueadmin_schedule_overdue_seconds",
            "How long ago the first tick of this node's schedule that no commit handled came due, once later "
            "than a heartbeat and 5 s; 0 when none is late.",
            labels=["schedule"],
        )
        now = datetime.now(UTC)
        for item in broker.schedules:
            late = overdue_tick(item, moment((marks.get(item.name) or {}).get("tick")), now)
            overdue.add_metric([item.name], (now - late).total_seconds() if late is not None else 0.0)
        yield overdue
        pauses = pauses_of(snapshot)
        paused = GaugeMetricFamily(
            "queueadmin_schedule_paused",
            "1 while the schedule is paused (its ticks are skipped), 0 otherwise: this node's schedules and any "
            "other paused one.",
            labels=["schedule"],
        )
        for name in sorted({item.name for item in broker.schedules} | set(pauses)):
            paused.add_metric([name], 1.0 if name in pauses else 0.0)
        yield paused


def _histogram(name: str, text: str, buckets: Buckets) -> HistogramMetricFamily:
    cumulative = buckets.cumulative()
    # Read the total once, from the +Inf bucket, so that the family stays
    # consistent while the writer thread observes meanwhile.
    family = HistogramMetricFamily(name, text)
    family.add_metric([], [(bound_label(b), float(n)) for b, n in cumulative], buckets.sum)
    return family


collector = QueueCollector()
registry.register(collector)
# What every prometheus_client exporter serves, and operators look for: the
# process's memory, CPU time and open files (process_*), the interpreter
# (python_info), and its garbage collector's work per generation
# (python_gc_*: what QUEUE_GC_THRESHOLDS changes). Our registry is our own,
# so they are registered on it explicitly.
ProcessCollector(registry=registry)
PlatformCollector(registry=registry)
GCCollector(registry=registry)


def render() -> bytes:
    """The whole exposition (may do store I/O on a standby: off the event loop)."""
    return generate_latest(registry)


def _metrics_token_matches(header: str) -> bool:
    expected = config.metrics_token()
    scheme, _, token = header.partition(" ")
    token = token.strip()
    return (
        bool(expected)
        and scheme.lower() == "bearer"
        and bool(token)
        and hmac.compare_digest(token.encode(), str(expected).encode())
    )


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    """The ASGI endpoint for ``GET /metrics``."""
    try:
        request = Request(scope, receive)
        if request.method not in ("GET", "HEAD"):
            raise ApiError(
                "method_not_allowed",
                f"{request.method} is not allowed on {PATH}; use GET",
                headers={"Allow": "GET, HEAD"},
            )
        if not _metrics_token_matches(request.headers.get("authorization", "")):
            (await check_token(request)).require_full("the metrics")
        body = await asyncio.to_thread(render)
    except ClientGone:
        return
    except ApiError as exc:
        await exc.response().send(send)
        return
    except Exception:
        log.exception("/metrics failed")
        await ApiError("internal_error", "the metrics could not be collected; see the log").response().send(send)
        return
    headers = [
        (b"content-type", CONTENT_TYPE_LATEST.encode("latin-1")),
        (b"content-length", str(len(body)).encode("ascii")),
        (b"cache-control", b"no-store"),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if request.method == "HEAD" else body})
