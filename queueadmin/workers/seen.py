"""Workers seen asking for work: this node's memory and the shared table.

:func:`save` and :func:`prune` are the leader's sampler's (database I/O);
:func:`known` is what the dashboard and ``/metrics`` list: every worker seen
within :data:`~queueadmin.dashboard.snapshot.WORKER_SEEN_SECONDS`, by this
node (up to the moment) or by any leader (up to its last sample), the later
sighting kept.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta

from django.db import DatabaseError

from queueadmin import runtime
from queueadmin.dashboard.snapshot import WORKER_SEEN_SECONDS
from queueadmin.workers.records import SeenWorker

log = logging.getLogger(__name__)

#: A worker's last sighting and the queues it asked for.
Sighting = tuple[datetime, tuple[str, ...]]


def save(seen: Mapping[str, Sighting]) -> int:
    """Write ``seen`` to the table, each worker's row replaced (one query).
    Returns how many. Database I/O."""
    rows = [SeenWorker(name=name, last_seen=when, queues=list(queues)) for name, (when, queues) in seen.items()]
    if rows:
        SeenWorker.objects.bulk_create(rows, update_conflicts=True, unique_fields=["name"],
                                       update_fields=["last_seen", "queues"])
    return len(rows)


def prune(now: datetime) -> int:
    """Delete the rows of workers not seen within the horizon. Returns how many. Database I/O."""
    return SeenWorker.objects.filter(last_seen__lt=now - timedelta(seconds=WORKER_SEEN_SECONDS)).delete()[0]


def known(now: datetime) -> dict[str, Sighting]:
    """Every worker seen within the horizon before ``now``: the table's rows
    and this node's memory, the later sighting of each. Database I/O (one
    indexed query); a database that cannot be read leaves this node's
    memory alone (logged)."""
    horizon = now - timedelta(seconds=WORKER_SEEN_SECONDS)
    try:
        found: dict[str, Sighting] = {
            row.name: (row.last_seen, tuple(row.queues))
            for row in SeenWorker.objects.filter(last_seen__gte=horizon).only("name", "last_seen", "queues")
        }
    except DatabaseError as exc:  # the pages and /metrics still show what this node saw
        log.warning("workers seen: the database cannot be read, listing this node's only: %s", exc)
        found = {}
    for name, (when, queues) in runtime.seen_workers.items().items():
        if when >= horizon and (name not in found or when > found[name][0]):
            found[name] = (when, queues)
    return found


def last_seen(now: datetime) -> dict[str, datetime]:
    """Worker name to when it last asked for work (see :func:`known`)."""
    return {name: when for name, (when, _) in known(now).items()}


def by_queue(now: datetime) -> dict[str, datetime]:
    """Queue name to when any worker last asked for work from it (see :func:`known`)."""
    latest: dict[str, datetime] = {}
    for when, queues in known(now).values():
        for queue in queues:
            if queue not in latest or when > latest[queue]:
                latest[queue] = when
    return latest
