"""The leader records the metrics history (:mod:`.records`) on its own thread.

:class:`Sampler` wakes every ``interval`` seconds. On the leader it reads
what the node already holds, with no store I/O and nothing added to the
commit's path: the latest committed document from the committer's memory
(through the dashboard's :data:`~queueadmin.dashboard.source.source`, which
decodes only what changed) and the committer's statistics
(:attr:`engine.Broker.stats`). It writes one raw point per queue and one for
the node, merges them into the minute and ten-minute rollups, and once a
minute prunes what has aged out. A standby records nothing: it reads what
the leader wrote, from the shared database. The leader also saves the
workers it saw ask for work (:mod:`queueadmin.workers`).

A failed step (the database is down, the document is unreadable) is logged
and skipped; the next one tries again. ``stop()`` is idempotent and waits
for the thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from django.db import close_old_connections, transaction

from engine import Broker, CommitStats
from queueadmin import config, runtime
from queueadmin.dashboard.snapshot import Snapshot
from queueadmin.dashboard.source import source
from queueadmin.metrics.records import (
    MINUTE,
    MINUTE_KEEP,
    RAW,
    RAW_KEEP,
    TEN_KEEP,
    TEN_MINUTES,
    MetricPoint,
    floor_time,
)
from queueadmin.workers import seen

log = logging.getLogger(__name__)

#: Prune at most this often (seconds).
PRUNE_SECONDS = 60.0


def points_of(snapshot: Snapshot, *, at: datetime, commits: int, commit_seconds: float | None) -> list[MetricPoint]:
    """The raw points for one sample: one per queue in ``snapshot``, and the
    node's (``queue=""``) with ``commits`` landed since the last sample and
    their mean latency. Pure; nothing is saved."""
    counters: dict[str, Any] = snapshot.header.get("queues") or {}
    points = []
    for name, q in snapshot.queues.items():
        kept = counters.get(name) or {}
        points.append(
            MetricPoint(
                step=RAW,
                at=at,
                queue=name,
                pending=q.pending,
                ready=q.ready,
                running=q.running,
                dead=q.dead,
                oldest_age=max((at - q.oldest_pending_at).total_seconds(), 0.0) if q.oldest_pending_at else None,
                pushed=kept.get("pushed", 0),
                completed=kept.get("completed", 0),
                failed=kept.get("failed", 0),
                dead_total=kept.get("dead", 0),
            )
        )
    points.append(MetricPoint(step=RAW, at=at, queue="", commits=commits, commit_seconds=commit_seconds))
    return points


def record(points: Iterable[MetricPoint]) -> None:
    """Save raw points and fold them into their minute and ten-minute rollups.
    Database I/O, in one transaction."""
    points = list(points)
    if not points:
        return
    with transaction.atomic():
        MetricPoint.objects.bulk_create(points, ignore_conflicts=True)
        for step in (MINUTE, TEN_MINUTES):
            _roll_up(points, step)


def _roll_up(points: list[MetricPoint], step: int) -> None:
    by_start: dict[datetime, list[MetricPoint]] = {}
    for point in points:
        by_start.setdefault(floor_time(point.at, step), []).append(point)
    for start, group in by_start.items():
        existing = {
            p.queue: p for p in MetricPoint.objects.filter(step=step, at=start, queue__in=[p.queue for p in group])
        }
        changed, new = [], []
        for point in group:
            rollup = existing.get(point.queue)
            if rollup is None:
                new.append(_copy(point, step=step, at=start))
            else:
                rollup.merge(point)
                changed.append(rollup)
        if changed:
            MetricPoint.objects.bulk_update(
                changed, [f.name for f in MetricPoint._meta.concrete_fields if not f.primary_key]
            )
        if new:
            MetricPoint.objects.bulk_create(new, ignore_conflicts=True)


def _copy(point: MetricPoint, *, step: int, at: datetime) -> MetricPoint:
    fields = {f.name: getattr(point, f.name) for f in MetricPoint._meta.concrete_fields if not f.primary_key}
    fields.update(step=step, at=at)
    return MetricPoint(**fields)


def prune(now: datetime) -> int:
    """Delete points past their keep (:mod:`.records`). Returns how many. Database I/O."""
    deleted = 0
    for step, keep in ((RAW, RAW_KEEP), (MINUTE, MINUTE_KEEP), (TEN_MINUTES, TEN_KEEP)):
        deleted += MetricPoint.objects.filter(step=step, at__lt=now - keep).delete()[0]
    return deleted


class Sampler:
    """The thread that records the history while this node leads.

    ``broker`` and ``snapshot`` default to this process's broker and the
    dashboard's latest snapshot; ``clock`` gives the sample time. Tests call
    :meth:`step` directly, or start the thread with a short interval and
    wait on :attr:`sampled`.
    """

    def __init__(
        self,
        *,
        interval: float,
        broker: Callable[[], Broker] = lambda: runtime.get_broker(),
        snapshot: Callable[[], Snapshot] = lambda: source.current(),
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.interval = interval
        self._broker = broker
        self._snapshot = snapshot
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_stats: tuple[int, float] | None = None  # (commits, latency sum) at the last sample
        self._stats: CommitStats | None = None
        self._pruned = float("-inf")
        self._workers_saved: datetime | None = None  # the latest sighting saved
        #: Set after each step that recorded a sample (tests wait on it).
        self.sampled = threading.Event()

    def start(self) -> Sampler:
        """Start the thread (idempotent)."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="metrics-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop the thread and wait for it (idempotent)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            close_old_connections()
            try:
                self.step()
            except Exception:  # never let one bad step end the history
                log.exception("metrics: recording a sample failed; trying again in %g s", self.interval)
            finally:
                close_old_connections()

    def step(self) -> bool:
        """Record one sample if this node leads; prune when due. Returns
        whether a sample was recorded. Raises what reading the document or
        the database raises."""
        broker = self._broker()
        if broker.role != "leader":
            self._last_stats = None
            return False
        snapshot = self._snapshot()
        now = self._clock()
        stats = broker.stats
        landed, total = stats.latency.count, stats.latency.sum
        previous = self._last_stats if self._stats is stats else None
        self._stats, self._last_stats = stats, (landed, total)
        commits = landed - previous[0] if previous is not None else 0
        mean = (total - previous[1]) / commits if previous is not None and commits > 0 else None
        record(points_of(snapshot, at=now, commits=commits, commit_seconds=mean))
        # The workers this node saw ask for work since the last save, for
        # every node's dashboard (queueadmin.workers: they ask the leader only).
        noted = runtime.seen_workers.items(since=self._workers_saved)
        seen.save(noted)
        self._workers_saved = max((when for when, _ in noted.values()), default=self._workers_saved)
        if time.monotonic() - self._pruned >= PRUNE_SECONDS:
            self._pruned = time.monotonic()
            prune(now)
            seen.prune(now)
        self.sampled.set()
        return True


_lock = threading.Lock()
_sampler: Sampler | None = None


def start_sampler() -> Sampler:
    """Start this process's sampler (idempotent), every ``QUEUE_METRICS_SAMPLE_SECONDS``."""
    global _sampler
    with _lock:
        if _sampler is None:
            _sampler = Sampler(interval=config.metrics_sample_seconds()).start()
        return _sampler


def stop_sampler(timeout: float | None = None) -> None:
    """Stop this process's sampler, if any (idempotent)."""
    global _sampler
    with _lock:
        sampler, _sampler = _sampler, None
    if sampler is not None:
        sampler.stop(timeout)
