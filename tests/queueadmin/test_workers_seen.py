"""Workers seen asking for work are listed by every node's dashboard.

Workers ask the leader only, and a node notes them in memory; the leader's
sampler saves them to the shared table (queueadmin.workers), so a standby's
pages, and the new leader's after a failover, list them too. A node with
an empty memory stands for both here.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import DatabaseError
from django.test import Client

from engine import Broker
from queueadmin import runtime
from queueadmin.dashboard import pages
from queueadmin.dashboard.snapshot import WORKER_SEEN_SECONDS
from queueadmin.dashboard.source import source
from queueadmin.metrics.sampler import Sampler
from queueadmin.workers import seen
from queueadmin.workers.records import SeenWorker
from tests.queueadmin.dashboard_fixtures import push


def listed(viewer: Client) -> dict[str, datetime | None]:
    source.reset()  # read afresh
    return {row["w"].name: row["w"].last_seen for row in viewer.get("/workers/").context["workers"]}


def test_workers_the_leader_saw_are_listed_by_a_node_that_did_not(broker: Broker, viewer: Client,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    runtime.seen_workers.note("w-idle", ["q"])
    when = runtime.seen_workers.items()["w-idle"][0]
    assert listed(viewer) == {"w-idle": when}  # this node saw it
    sampler = Sampler(interval=10, broker=lambda: broker)
    assert sampler.step()
    assert [(w.name, w.last_seen, w.queues) for w in SeenWorker.objects.all()] == [("w-idle", when, ["q"])]

    runtime.seen_workers.clear()  # a standby, or the new leader after a failover
    assert listed(viewer) == {"w-idle": when}
    # The overview's "no worker seen" warning counts it too.
    push(broker, "q", [1])
    monkeypatch.setattr(pages, "WAITING_WARN_SECONDS", 0.0)
    source.reset()
    assert b"no worker has been seen" not in viewer.get("/").content

    # Seen again by this node: the later sighting wins; saved by the next sample.
    runtime.seen_workers.note("w-idle", ["q", "other"])
    later = runtime.seen_workers.items()["w-idle"][0]
    assert listed(viewer) == {"w-idle": later}
    sampler.step()
    assert SeenWorker.objects.get(name="w-idle").queues == ["q", "other"]
    # A sample saves only what was seen since the last one.
    SeenWorker.objects.all().delete()
    sampler.step()
    assert not SeenWorker.objects.exists()


def test_a_worker_not_seen_within_the_horizon_is_not_listed_and_its_row_is_pruned(
        broker: Broker, viewer: Client) -> None:
    now = datetime.now(UTC)
    SeenWorker.objects.create(name="w-gone", last_seen=now - timedelta(seconds=WORKER_SEEN_SECONDS + 60))
    SeenWorker.objects.create(name="w-here", last_seen=now - timedelta(seconds=60), queues=["q"])
    assert set(listed(viewer)) == {"w-here"}
    Sampler(interval=10, broker=lambda: broker).step()  # its first step prunes
    assert list(SeenWorker.objects.values_list("name", flat=True)) == ["w-here"]


def test_a_database_that_cannot_be_read_leaves_this_nodes_workers(broker: Broker, viewer: Client,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    runtime.seen_workers.note("w-idle", ["q"])

    def broken(*args: object, **kwargs: object) -> None:
        raise DatabaseError("database is locked")

    monkeypatch.setattr(SeenWorker.objects, "filter", broken)
    assert set(seen.last_seen(datetime.now(UTC))) == {"w-idle"}
    assert seen.by_queue(datetime.now(UTC)).keys() == {"q"}
