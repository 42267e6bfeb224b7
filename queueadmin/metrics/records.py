"""The metrics history behind the charts: one table, downsampled as it ages.

Every :data:`~queueadmin.config.metrics_sample_seconds` (10 s by default) the
leader records one :class:`MetricPoint` per queue, and one for the node
itself (``queue=""``: its commit latency), at three resolutions at once:

============  ======================  ==================  ===================
``step``      one point per            kept for            the 1 h / 24 h / 7 d
============  ======================  ==================  ===================
0 (raw)       sample                   :data:`RAW_KEEP`    1 h chart
60            minute                   :data:`MINUTE_KEEP` 24 h chart
600           ten minutes              :data:`TEN_KEEP`    7 d chart
============  ======================  ==================  ===================

A rollup point is updated in place while its minute (or ten minutes) lasts,
so nothing has to be recomputed later and a crash loses at most the current
sample. Merging keeps the *largest* depth, running count, dead-letter count
and oldest pending age seen in the period (a spike does not average away),
the *latest* value of the counters (pushed, completed, failed, dead; the
charts derive rates from successive points), and the commit count and mean
commit latency of the period. :func:`prune` drops what is past its keep.

Why the database: it is the one thing every node already shares
(``DATABASE_URL``: PostgreSQL across machines, or one SQLite file for nodes
started from one checkout), so a standby draws the same charts as the
leader; and it keeps the history out of ``queue.json``, whose every commit
rewrites the whole document (DESIGN, "Size"). The leader writes at most a few
rows per queue per interval, on its own thread, never on the commit's path.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import ClassVar

from django.db import models

RAW = 0
MINUTE = 60
TEN_MINUTES = 600
#: How long each resolution is kept (the raw one: whatever the interval).
RAW_KEEP = timedelta(hours=2)
MINUTE_KEEP = timedelta(hours=48)
TEN_KEEP = timedelta(days=8)

#: The per-queue fields that a rollup keeps the largest of.
PEAKS = ("pending", "ready", "running", "dead")
#: The counters (from the document), whose latest value a rollup keeps.
COUNTERS = ("pushed", "completed", "failed", "dead_total")


class MetricPoint(models.Model):
    """One queue's numbers (or, with ``queue=""``, the node's) over one period."""

    #: Seconds the point covers: 60 or 600 for a rollup, 0 for one raw sample.
    step = models.PositiveIntegerField()
    #: The period's start (a raw point: its sample time).
    at = models.DateTimeField()
    #: The queue; "" for the leader's own numbers (commit latency).
    queue = models.CharField(max_length=100, blank=True)
    pending = models.PositiveIntegerField(default=0)
    ready = models.PositiveIntegerField(default=0)
    running = models.PositiveIntegerField(default=0)
    #: Dead letters held now (a gauge); ``dead_total`` counts jobs ever moved there.
    dead = models.PositiveIntegerField(default=0)
    #: Age of the oldest pending job, in seconds; None when none is pending.
    oldest_age = models.FloatField(null=True)
    pushed = models.BigIntegerField(default=0)
    completed = models.BigIntegerField(default=0)
    failed = models.BigIntegerField(default=0)
    dead_total = models.BigIntegerField(default=0)
    #: The node row: writes that landed in the period, and their mean latency in seconds.
    commits = models.PositiveIntegerField(default=0)
    commit_seconds = models.FloatField(null=True)
    #: How many samples were merged into this point.
    samples = models.PositiveIntegerField(default=1)

    class Meta:
        constraints: ClassVar = [models.UniqueConstraint(fields=["step", "queue", "at"], name="metric_point_once")]
        indexes: ClassVar = [models.Index(fields=["step", "at"], name="metric_point_age")]

    def __str__(self) -> str:
        return f"{self.queue or '(node)'} @ {self.at:%Y-%m-%d %H:%M:%S} / {self.step} s"

    def merge(self, other: MetricPoint) -> None:
        """Fold a later sample into this rollup point (see the module docstring)."""
        for name in PEAKS:
            setattr(self, name, max(getattr(self, name), getattr(other, name)))
        if other.oldest_age is not None:
            self.oldest_age = max(self.oldest_age or 0.0, other.oldest_age)
        for name in COUNTERS:
            setattr(self, name, getattr(other, name))
        if other.commits:
            total = (self.commit_seconds or 0.0) * self.commits + (other.commit_seconds or 0.0) * other.commits
            self.commits += other.commits
            self.commit_seconds = total / self.commits
        self.samples += other.samples


def floor_time(when: datetime, step: float) -> datetime:
    """``when`` rounded down to a multiple of ``step`` seconds (since the epoch)."""
    stamp = when.timestamp()
    return datetime.fromtimestamp(stamp - stamp % step, tz=when.tzinfo)
