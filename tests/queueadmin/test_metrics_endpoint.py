"""``/metrics`` (queueadmin.metrics.exporter), scraped through the ASGI
application daphne serves, with the token, after real API traffic."""

from __future__ import annotations

import gc
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine import Broker, pause_schedule_op
from queueadmin import runtime
from queueadmin.dashboard.source import source
from queueadmin.metrics import exporter
from tests.helpers import wait_for
from tests.queueadmin.api_client import Client

if TYPE_CHECKING:
    from pytest_django.fixtures import Settings as SettingsWrapper

pytestmark = pytest.mark.django_db

TOKEN = "metrics-test-api-token-0123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
METRICS_TOKEN = "scrape-only-token-4567"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def node(broker: Broker, settings: SettingsWrapper) -> Broker:
    settings.QUEUE_API_TOKEN = TOKEN
    settings.QUEUE_METRICS_TOKEN = METRICS_TOKEN
    return broker


def scrape(token: str = TOKEN) -> Samples:
    response = Client().get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_metrics_need_a_token(node: Broker) -> None:
    assert Client().get("/metrics").status_code == 401
    wrong = Client().get("/metrics", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json()["error"] == "unauthorized"
    assert "queueadmin_" not in wrong.content.decode()


def test_the_api_token_and_the_metrics_token_both_read_metrics(node: Broker) -> None:
    assert value(scrape(TOKEN), "queueadmin_node_role", role="leader") == 1
    assert value(scrape(METRICS_TOKEN), "queueadmin_node_role", role="leader") == 1


def test_the_metrics_token_is_not_an_api_token(node: Broker) -> None:
    response = Client().post(
        "/api/v1/jobs",
        b'{"queue": "q", "payload": 1}',
        content_type="application/json",
        headers={"Authorization": f"Bearer {METRICS_TOKEN}"},
    )
    assert response.status_code == 401


def test_the_process_and_its_garbage_collector_are_reported(node: Broker) -> None:
    """The standard collectors every Python exporter has: the node's memory
    and CPU, and the collector's work per generation (QUEUE_GC_THRESHOLDS)."""
    before = scrape()
    gc.collect(0)
    after = scrape()

    assert value(after, "process_resident_memory_bytes") > 10 * 1024 * 1024
    assert value(after, "process_cpu_seconds_total") > 0
    assert ("python_info", ()) not in after  # it has labels: the implementation and version
    assert any(name == "python_info" for name, _ in after)
    young = value(after, "python_gc_collections_total", generation="0")
    assert young >= value(before, "python_gc_collections_total", generation="0") + 1


def test_only_get_and_head(node: Broker) -> None:
    assert Client(headers=AUTH).post("/metrics", b"").status_code == 405
    head = Client(headers=AUTH).generic("HEAD", "/metrics")
    assert head.status_code == 200 and head.content == b""


def test_queue_gauges_and_counters_follow_pushes_claims_and_completes(node: Broker) -> None:
    api = Client(headers=AUTH)
    before = scrape()
    assert (
        api.post(
            "/api/v1/jobs", {"queue": "mail", "jobs": [{"payload": 1}, {"payload": 2}, {"payload": 3}]}
        ).status_code
        == 201
    )
    assert api.post("/api/v1/jobs", {"queue": "sms", "payload": "x"}).status_code == 201
    jobs = api.post("/api/v1/claim", {"worker": "w-1", "queues": ["mail"], "max_jobs": 2}).json()["jobs"]
    assert len(jobs) == 2
    done = api.post(f"/api/v1/jobs/{jobs[0]['id']}/complete", {"lease": jobs[0]["lease"]})
    assert done.status_code == 200
    failed = api.post(f"/api/v1/jobs/{jobs[1]['id']}/fail", {"lease": jobs[1]["lease"], "error": "boom"})
    assert failed.status_code == 200
    source.reset()  # the dashboard's cache would serve a version up to 0.2 s old
    after = scrape()

    for name, expected in (
        ("queueadmin_queue_pending", 2),
        ("queueadmin_queue_ready", 1),
        ("queueadmin_queue_running", 0),
        ("queueadmin_queue_dead_letters", 0),
        ("queueadmin_queue_pushed_total", 3),
        ("queueadmin_queue_completed_total", 1),
        ("queueadmin_queue_failed_total", 1),
        ("queueadmin_queue_dead_total", 0),
    ):
        assert value(after, name, queue="mail") == expected, name
    assert value(after, "queueadmin_queue_pushed_total", queue="sms") == 1
    assert value(after, "queueadmin_queue_oldest_pending_age_seconds", queue="sms") >= 0
    assert value(after, "queueadmin_workers_seen") == 1
    assert value(after, "queueadmin_long_poll_waiters") == 0
    assert value(after, "queueadmin_lease_watches") == 0

    commits = value(after, "queueadmin_commit_duration_seconds_count")
    assert commits >= 5 + value(before, "queueadmin_commit_duration_seconds_count")
    assert value(after, "queueadmin_commit_duration_seconds_bucket", le="+Inf") == commits
    assert value(after, "queueadmin_commit_bytes_count") == commits
    assert value(after, "queueadmin_commit_bytes_sum") > 0
    assert value(after, "queueadmin_commit_batch_operations_sum") >= 5
    assert value(after, "queueadmin_cas_conflicts_total") == 0
    assert value(after, "queueadmin_ambiguous_writes_total") == 0
    assert value(after, "queueadmin_hedged_writes_total") == 0
    assert value(after, "queueadmin_hedged_writes_landed_total") == 0
    assert value(after, "queueadmin_takeovers_total") == 1
    assert value(after, "queueadmin_epoch") == node.leader.epoch >= 1
    assert value(after, "queueadmin_document_seq") == node.seq
    assert value(after, "queueadmin_last_commit_timestamp_seconds") > 0
    assert value(after, "queueadmin_document_readable") == 1
    assert value(after, "queueadmin_node_role", role="standby") == 0


def test_api_requests_are_counted_by_route_name_and_status(node: Broker) -> None:
    def count(samples: Samples, endpoint: str, status: str) -> float:
        return samples.get(
            ("queueadmin_api_request_duration_seconds_count", (("endpoint", endpoint), ("status", status))), 0.0
        )

    api = Client(headers=AUTH)
    before = scrape()
    api.post("/api/v1/jobs", {"queue": "q", "payload": 1})
    api.post("/api/v1/jobs", {"queue": "q", "payload": 2})
    api.get("/api/v1/jobs/no-such-job")
    api.get("/api/v1/nowhere/at/all")
    Client().post("/api/v1/jobs", {"queue": "q", "payload": 3})  # no token
    after = scrape()
    assert count(after, "push", "201") - count(before, "push", "201") == 2
    assert count(after, "push", "401") - count(before, "push", "401") == 1
    assert count(after, "job", "404") - count(before, "job", "404") == 1
    # An unknown path is one label, whatever the path: label values stay bounded.
    assert count(after, "not_found", "404") - count(before, "not_found", "404") == 1
    assert not any("no-such-job" in str(labels) or "nowhere" in str(labels) for _, labels in after)


def test_a_standby_reports_its_role_and_what_it_reads_from_the_document(
    node: Broker, monkeypatch: pytest.MonkeyPatch, settings: SettingsWrapper
) -> None:
    api = Client(headers=AUTH)
    assert api.post("/api/v1/jobs", {"queue": "mail", "jobs": [{"payload": 1}, {"payload": 2}]}).status_code == 201
    # Same store, another address (a node on the leader's own address would take over at once, as a restart).
    settings.QUEUE_ADVERTISE_URL = "http://node-b.test:8000"
    standby = runtime.build_broker().start()
    try:
        wait_for(lambda: standby.leader.id == node.id)
        monkeypatch.setattr(runtime, "get_broker", lambda: standby)
        source.reset()
        samples = scrape()
    finally:
        standby.stop()
    assert value(samples, "queueadmin_node_role", role="standby") == 1
    assert value(samples, "queueadmin_node_role", role="leader") == 0
    assert value(samples, "queueadmin_epoch") == node.leader.epoch
    assert value(samples, "queueadmin_queue_pending", queue="mail") == 2
    assert value(samples, "queueadmin_queue_pushed_total", queue="mail") == 2
    assert value(samples, "queueadmin_commit_duration_seconds_count") == 0  # it has committed nothing
    assert node.role == "leader"


def test_the_oldest_pending_age_keeps_growing_while_the_document_does_not_change(
    node: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import UTC, datetime, timedelta

    from queueadmin.metrics import exporter

    assert Client(headers=AUTH).post("/api/v1/jobs", {"queue": "mail", "payload": 1}).status_code == 201
    source.reset()
    assert value(scrape(), "queueadmin_queue_oldest_pending_age_seconds", queue="mail") < 60
    later = datetime.now(UTC) + timedelta(hours=1)

    class Later(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
            return later

    monkeypatch.setattr(exporter, "datetime", Later)
    # The same version, served from the dashboard's cache: the job is an hour older all the same.
    assert value(scrape(), "queueadmin_queue_oldest_pending_age_seconds", queue="mail") >= 3600


def test_each_schedules_last_tick_and_how_late_it_is(settings: SettingsWrapper, request: pytest.FixtureRequest,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # Nightly, twelve hours from now: never due within the ten minutes the
    # clock is moved on below (at 03:00 it failed when run from 02:50 on).
    nightly_hour = (datetime.now(UTC).hour + 12) % 24
    settings.QUEUE_SCHEDULES = {
        "tick": {"every_seconds": 1, "queue": "ticks", "payload": 1},
        "nightly": {"cron": f"0 {nightly_hour} * * *", "queue": "reports", "payload": 1},
    }
    broker: Broker = request.getfixturevalue("node")
    wait_for(lambda: broker.committer is not None and broker.committer.state is not None
             and broker.committer.state.schedules.get("tick", None) is not None
             and broker.committer.state.schedules["tick"].outcome == "fired", timeout=10)
    source.reset()
    samples = scrape()
    mark = broker.committer.state.schedules["nightly"]  # type: ignore[union-attr]
    assert value(samples, "queueadmin_schedule_last_tick_timestamp_seconds", schedule="nightly",
                 outcome="registered") == mark.tick.timestamp()
    assert value(samples, "queueadmin_schedule_overdue_seconds", schedule="nightly") == 0
    assert value(samples, "queueadmin_schedule_overdue_seconds", schedule="tick") == 0
    assert value(samples, "queueadmin_schedule_paused", schedule="tick") == 0
    broker.execute(pause_schedule_op("tick"))
    source.reset()
    assert value(scrape(), "queueadmin_schedule_paused", schedule="tick") == 1
    assert value(scrape(), "queueadmin_schedule_paused", schedule="nightly") == 0
    # The leader stops, its ticks with it. Ten minutes on (more than this
    # test's two-minute heartbeat and the grace), the tick after the mark is late.
    broker.stop()
    ahead = timedelta(minutes=10)

    class Later(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
            return datetime.now(tz) + ahead

    monkeypatch.setattr(exporter, "datetime", Later)
    late = value(scrape(), "queueadmin_schedule_overdue_seconds", schedule="tick")
    assert 590 < late < 610
    assert value(scrape(), "queueadmin_schedule_overdue_seconds", schedule="nightly") == 0
