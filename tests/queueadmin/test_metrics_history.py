"""The metrics history (queueadmin.metrics.records and .sampler): what a
sample holds, how rollups merge, what is pruned, and that only the leader
records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from engine import Broker, MemoryStore
from engine.ops import claim_op, complete_op
from queueadmin.dashboard.source import source
from queueadmin.metrics.exporter import render
from queueadmin.metrics.records import MINUTE, RAW, TEN_MINUTES, MetricPoint, floor_time
from queueadmin.metrics.sampler import Sampler, points_of, prune, record
from tests.queueadmin.dashboard_fixtures import push

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 1, 10, 0, 5, tzinfo=UTC)


def point(at: datetime, queue: str = "q", **fields: Any) -> MetricPoint:
    return MetricPoint(step=RAW, at=at, queue=queue, **fields)


def test_a_sample_holds_each_queue_and_the_node(broker: Broker) -> None:
    push(broker, "mail", [1, 2, 3])
    [job] = broker.execute(claim_op("w", ["mail"], policy=broker.policy))
    broker.execute(complete_op(job.id, job.lease))
    source.reset()
    snapshot = source.current()
    at = snapshot.taken_at + timedelta(seconds=30)
    points = {p.queue: p for p in points_of(snapshot, at=at, commits=4, commit_seconds=0.01)}
    mail = points["mail"]
    assert (mail.pending, mail.ready, mail.running, mail.dead) == (2, 2, 0, 0)
    assert (mail.pushed, mail.completed, mail.failed, mail.dead_total) == (3, 1, 0, 0)
    assert mail.oldest_age is not None and 30 <= mail.oldest_age < 40
    assert (points[""].commits, points[""].commit_seconds) == (4, 0.01)


def test_rollups_keep_peaks_and_latest_counters() -> None:
    record([point(T0, pending=5, pushed=10, oldest_age=3.0), point(T0, "", commits=2, commit_seconds=0.01)])
    record(
        [
            point(T0 + timedelta(seconds=10), pending=2, pushed=14, oldest_age=None),
            point(T0 + timedelta(seconds=10), "", commits=6, commit_seconds=0.03),
        ]
    )
    assert MetricPoint.objects.filter(step=RAW).count() == 4
    for step in (MINUTE, TEN_MINUTES):
        q = MetricPoint.objects.get(step=step, queue="q")
        assert q.at == floor_time(T0, step)
        assert (q.pending, q.pushed, q.oldest_age, q.samples) == (5, 14, 3.0, 2)
        node = MetricPoint.objects.get(step=step, queue="")
        assert node.commits == 8 and node.commit_seconds == pytest.approx((2 * 0.01 + 6 * 0.03) / 8)


def test_a_new_minute_starts_a_new_rollup() -> None:
    record([point(T0, pending=5)])
    record([point(T0 + timedelta(minutes=1), pending=1)])
    assert list(MetricPoint.objects.filter(step=MINUTE).order_by("at").values_list("pending", flat=True)) == [5, 1]
    assert MetricPoint.objects.filter(step=TEN_MINUTES).count() == 1


def test_prune_keeps_each_resolution_for_its_own_time() -> None:
    now = T0 + timedelta(days=9)
    for age in (
        timedelta(hours=1),
        timedelta(hours=3),
        timedelta(days=1),
        timedelta(days=3),
        timedelta(days=7),
        timedelta(days=8, hours=1),
    ):
        record([point(now - age)])
    prune(now)
    left = {(p.step, now - p.at) for p in MetricPoint.objects.all()}
    raw = {age for step, age in left if step == RAW}
    minutes = {age for step, age in left if step == MINUTE}
    tens = {age for step, age in left if step == TEN_MINUTES}
    assert raw == {timedelta(hours=1)}
    assert max(minutes) <= timedelta(hours=48) and len(minutes) == 3
    assert max(tens) <= timedelta(days=8) and len(tens) == 5


def test_only_the_leader_records(broker: Broker) -> None:
    standby = SimpleNamespace(role="standby")
    sampler = Sampler(interval=10, broker=lambda: standby, snapshot=source.current)  # type: ignore[arg-type, return-value]
    assert sampler.step() is False
    assert not MetricPoint.objects.exists()
    leader = Sampler(interval=10, broker=lambda: broker, snapshot=source.current)
    push(broker, "q", [1])
    assert leader.step() is True
    assert MetricPoint.objects.filter(step=RAW, queue="q", pending=1).exists()


def test_commit_latency_is_the_mean_of_the_commits_since_the_last_sample(broker: Broker) -> None:
    sampler = Sampler(interval=10, broker=lambda: broker, snapshot=source.current)
    sampler.step()  # the first sample only sets the baseline
    push(broker, "q", [1])
    push(broker, "q", [2])  # two writes: the idle heartbeat is far away
    sampler.step()
    node = MetricPoint.objects.filter(step=RAW, queue="").order_by("at").last()
    assert node is not None and node.commits == 2
    assert node.commit_seconds is not None and node.commit_seconds > 0


@pytest.mark.django_db(transaction=True)
def test_the_thread_samples_every_interval(broker: Broker) -> None:
    push(broker, "q", [1, 2])
    sampler = Sampler(interval=0.05, broker=lambda: broker).start()
    try:
        assert sampler.sampled.wait(10)
        sampler.sampled.clear()
        assert sampler.sampled.wait(10)
    finally:
        sampler.stop()
        sampler.stop()  # idempotent
    assert MetricPoint.objects.filter(step=RAW, queue="q", pending=2).count() >= 2


def test_sampling_and_scraping_on_the_leader_touch_neither_the_store_nor_the_commits(broker: Broker) -> None:
    store = broker.store
    assert isinstance(store, MemoryStore)
    push(broker, "q", [1, 2])
    sampler = Sampler(interval=10, broker=lambda: broker)
    source.reset()
    reads, writes, seq = store.reads, store.writes, broker.seq
    assert sampler.step()
    source.reset()
    assert b'queueadmin_queue_pending{queue="q"} 2.0' in render()
    # Both read the committed document from the committer's memory: no store
    # request, and no operation submitted to the committer.
    assert (store.reads, store.writes, broker.seq) == (reads, writes, seq)
