"""The table of workers seen asking for work, which every node's dashboard reads.

A worker idle in a long-poll claim holds no lease, so ``queue.json`` does not
show it; the node it asks notes it in memory
(:data:`queueadmin.runtime.seen_workers`). Workers ask the leader only, so
that memory is the leader's alone: a standby's pages, or the new leader's
after a failover, would not list them. The leader's metrics sampler saves
what it noted here every sample (:mod:`queueadmin.metrics.sampler`), and
the dashboard reads both (:mod:`.seen`).
"""

from __future__ import annotations

from typing import ClassVar

from django.db import models


class SeenWorker(models.Model):
    """A worker that asked a node for work: when it last did, and from which queues."""

    name = models.CharField(max_length=200, unique=True)  # engine.ops.MAX_WORKER_CHARS
    last_seen = models.DateTimeField(db_index=True)
    queues = models.JSONField(default=list)

    class Meta:
        app_label = "queueadmin"
        ordering: ClassVar[list[str]] = ["name"]

    def __str__(self) -> str:
        return f"{self.name} (last seen {self.last_seen:%Y-%m-%d %H:%M:%S})"
