"""The history read back for the charts: series per queue over 1 h, 24 h or 7 d.

Each range reads the resolution kept for it (:mod:`.records`): raw samples
for the last hour, minute rollups for a day, ten-minute rollups for a week.
Rates (arrivals, completions, failures per second) are the counters'
differences between successive points over the time between them; a gap
longer than three steps (no leader, or no sampler) breaks the line instead
of being drawn as a slope.

Drawn charts are cached per process until a newer sample is in the
database, so live pages that redraw on every commit query one index per
redraw, not the whole range.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils.safestring import SafeString

from queueadmin import config
from queueadmin.metrics.charts import Point, Series, line_chart, sparkline
from queueadmin.metrics.records import MINUTE, RAW, TEN_MINUTES, MetricPoint

#: A gap longer than this many steps between two points breaks the line.
GAP_STEPS = 3.0
#: How many drawn charts each process keeps.
CACHE_SIZE = 128
SPARK_SPAN = timedelta(hours=1)

__all__ = ["DEFAULT_RANGE", "RANGES", "RAW", "Range", "charts", "counters_before", "gauge", "rate", "seconds_per_step",
           "sparklines"]


@dataclass(frozen=True, slots=True)
class Range:
    key: str
    label: str
    span: timedelta
    step: int  # which resolution it reads (records.RAW, MINUTE or TEN_MINUTES)


RANGES = {
    r.key: r
    for r in (
        Range("1h", "1 hour", timedelta(hours=1), RAW),
        Range("24h", "24 hours", timedelta(hours=24), MINUTE),
        Range("7d", "7 days", timedelta(days=7), TEN_MINUTES),
    )
}
DEFAULT_RANGE = "1h"


def seconds_per_step(step: int) -> float:
    """How far apart the points of a resolution are: the sample interval for raw points."""
    return float(step) if step != RAW else config.metrics_sample_seconds()


def gauge(points: Sequence[MetricPoint], field: str, *, step: float, scale: float = 1.0) -> list[Point]:
    """``field`` of each point, with a break (None) across each gap."""
    out: list[Point] = []
    previous: float | None = None
    for p in points:
        t = p.at.timestamp()
        if previous is not None and t - previous > GAP_STEPS * step:
            out.append((previous + step, None))
        value = getattr(p, field)
        out.append((t, None if value is None else value * scale))
        previous = t
    return out


def rate(points: Sequence[MetricPoint], field: str, *, step: float) -> list[Point]:
    """Per second, the growth of counter ``field`` since the point before.
    A counter that went down (the store was re-initialised) counts as 0."""
    out: list[Point] = []
    for before, after in itertools.pairwise(points):
        t0, t1 = before.at.timestamp(), after.at.timestamp()
        if t1 - t0 > GAP_STEPS * step:
            out.append((t0 + step, None))
            continue
        if t1 > t0:
            out.append((t1, max(getattr(after, field) - getattr(before, field), 0) / (t1 - t0)))
    return out


def points(queue: str, span: Range, now: datetime) -> list[MetricPoint]:
    """The points of ``queue`` ("" for the node) in the range ending ``now``, oldest first. Database I/O."""
    return list(
        MetricPoint.objects.filter(step=span.step, queue=queue, at__gte=now - span.span, at__lte=now).order_by("at")
    )


def counters_before(queues: Sequence[str], when: datetime, *,
                    within: timedelta) -> dict[str, tuple[datetime, int, int]]:
    """Per queue of ``queues``: its newest raw point recorded at or before
    ``when`` and not before ``when - within``, as (at, pushed, completed).
    A queue with no such point is left out. One query. Database I/O."""
    rows = MetricPoint.objects.filter(step=RAW, queue__in=list(queues), at__lte=when, at__gte=when - within)
    found: dict[str, tuple[datetime, int, int]] = {}
    # Oldest first, so each queue ends with its newest point.
    for at, queue, pushed, completed in rows.order_by("at").values_list("at", "queue", "pushed", "completed"):
        found[queue] = (at, pushed, completed)
    return found


def latest_sample() -> datetime | None:
    """When the newest raw point was recorded (one index lookup). Database I/O."""
    return MetricPoint.objects.filter(step=RAW).order_by("-at").values_list("at", flat=True).first()


class _Cache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[Any, ...], Any] = OrderedDict()

    def get(self, key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = make()
        with self._lock:
            self._items[key] = value
            while len(self._items) > CACHE_SIZE:
                self._items.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


cache = _Cache()


def charts(queue: str, range_key: str, now: datetime) -> dict[str, SafeString]:
    """The queue page's charts, by name: throughput, depth, oldest, failures
    and commit latency, over ``range_key`` ending ``now``. Database I/O
    (cached until a newer sample lands)."""
    span = RANGES.get(range_key) or RANGES[DEFAULT_RANGE]
    newest = latest_sample()
    return cache.get(("charts", queue, span.key, newest), lambda: _draw(queue, span, newest or now))  # type: ignore[no-any-return]


def _draw(queue: str, span: Range, now: datetime) -> dict[str, SafeString]:
    step = seconds_per_step(span.step)
    mine = points(queue, span, now)
    node = points("", span, now)
    start, end = (now - span.span).timestamp(), now.timestamp()

    def chart(title: str, series: list[Series], unit: str) -> SafeString:
        return line_chart(title, series, start=start, end=end, unit=unit)

    return {
        "throughput": chart(
            "Throughput",
            [
                Series("completed", rate(mine, "completed", step=step), "s0"),
                Series("arrived", rate(mine, "pushed", step=step), "s1"),
            ],
            "jobs/s",
        ),
        "depth": chart(
            "Depth",
            [
                Series("pending", gauge(mine, "pending", step=step), "s0"),
                Series("running", gauge(mine, "running", step=step), "s1"),
                Series("dead letters", gauge(mine, "dead", step=step), "s2"),
            ],
            "jobs",
        ),
        "oldest": chart("Oldest pending job", [Series("age", gauge(mine, "oldest_age", step=step), "s0")], "seconds"),
        "failures": chart(
            "Failures",
            [
                # Dead letters in the Depth chart's red; failed attempts (most
                # retried) in amber, drawn first so that neither hides the other.
                Series("failed attempts", rate(mine, "failed", step=step), "s3"),
                Series("moved to dead letters", rate(mine, "dead_total", step=step), "s2"),
            ],
            "per s",
        ),
        "latency": chart(
            "Commit latency (all queues)",
            [Series("mean", gauge(node, "commit_seconds", step=step, scale=1000.0), "s0")],
            "ms",
        ),
    }


def sparklines(queues: Sequence[str], now: datetime) -> dict[str, SafeString]:
    """Per queue, its pending depth over the last hour as a sparkline. One
    query for all queues (cached until a newer sample lands). Database I/O."""
    newest = latest_sample()
    key = ("spark", tuple(queues), newest)
    return cache.get(key, lambda: _sparks(queues, newest or now))  # type: ignore[no-any-return]


def _sparks(queues: Sequence[str], now: datetime) -> dict[str, SafeString]:
    step = seconds_per_step(RAW)
    rows: dict[str, list[MetricPoint]] = {name: [] for name in queues}
    for p in MetricPoint.objects.filter(step=RAW, queue__in=list(queues), at__gte=now - SPARK_SPAN).order_by("at"):
        rows[p.queue].append(p)
    return {
        name: sparkline(gauge(found, "pending", step=step), title=f"{name}: pending jobs over the last hour")
        for name, found in rows.items()
    }
