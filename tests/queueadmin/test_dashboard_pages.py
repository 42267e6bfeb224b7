"""Dashboard pages: access control, what each page shows, and safe rendering.

Every page reads a real broker's committed document (memory store). Pages
never change the document, so most tests also check its bytes are unchanged.
"""

from __future__ import annotations

import html
import re
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from django.contrib.auth.models import User
from django.test import Client

from engine import Broker, ObjectStore
from engine.ops import claim_op, fail_op, heartbeat_op, pause_op
from queueadmin import runtime
from queueadmin.dashboard import joblist, pages
from queueadmin.dashboard.source import Rates, source
from tests.helpers import stored
from tests.queueadmin.dashboard_fixtures import client_for, clock_ahead, kill, make_user, push

if TYPE_CHECKING:
    from pytest_django.fixtures import Settings as SettingsWrapper

PAGES = ["/", "/jobs/", "/workers/", "/dead/", "/document/", "/submit/", "/audit/"]


@pytest.mark.django_db
@pytest.mark.parametrize("path", [*PAGES, "/jobs/abc/"])
def test_anonymous_users_are_sent_to_login(client: Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith(f"/login/?next={path}")


@pytest.mark.django_db
@pytest.mark.parametrize("path", PAGES)
def test_a_user_without_view_permission_is_refused(broker: Broker, path: str) -> None:
    nobody = client_for(make_user("nobody"))
    assert nobody.get(path).status_code == 403


def test_login_page_signs_in_and_returns_to_the_page(broker: Broker, db: None) -> None:
    make_user("ada", "view_dashboard")
    client = Client()
    response = client.post("/login/", {"username": "ada", "password": "correct horse battery staple",
                                       "next": "/workers/"})
    assert response.status_code == 302 and response["Location"] == "/workers/"
    assert client.get("/workers/").status_code == 200
    bad = Client().post("/login/", {"username": "ada", "password": "wrong"})
    assert bad.status_code == 200 and b"Please enter a correct username" in bad.content


@pytest.mark.parametrize("path", PAGES)
def test_read_only_staff_see_every_page_and_no_action_buttons(broker: Broker, viewer: Client, path: str) -> None:
    kill(broker)
    response = viewer.get(path)
    assert response.status_code == 200
    assert b'name="step"' not in response.content  # no action forms at all


def test_overview_counts_each_queue_and_shows_broker_health(broker: Broker, viewer: Client,
                                                            store: ObjectStore) -> None:
    kill(broker, "emails")
    push(broker, "emails", [1, 2, 3])
    push(broker, "reports", ["r"], delay_seconds=3600)
    broker.execute(claim_op("w1", ["emails"], policy=broker.policy))
    before = stored(store)

    response = viewer.get("/")

    body = response.content.decode()
    queues = response.context["rows"]
    emails = next(r["q"] for r in queues if r["q"].name == "emails")
    reports = next(r["q"] for r in queues if r["q"].name == "reports")
    assert (emails.pending, emails.running, emails.dead, emails.pushed) == (2, 1, 1, 4)
    assert (reports.pending, reports.ready) == (1, 0)
    assert "node-a.test" in body and "leader" in body
    assert f'data-testid="seq">{broker.seq}<' in body
    assert stored(store) == before


def test_overview_says_when_the_last_leader_handed_over(broker: Broker, viewer: Client) -> None:
    push(broker, "emails", [1])
    assert 'data-testid="handed-over"' not in viewer.get("/").content.decode()
    broker.stop()  # a graceful stop: its last commit names no leader
    source.changed()  # past the page's cache of the last read (FRESH_SECONDS)
    body = viewer.get("/").content.decode()
    assert 'data-testid="handed-over"' in body and "none: the last leader handed over (epoch 1)" in body


def test_overview_says_how_many_writes_were_hedged_once_any_was(broker: Broker, viewer: Client) -> None:
    push(broker, "emails", [1])
    assert 'data-testid="hedged"' not in viewer.get("/").content.decode()
    broker.stats.hedged, broker.stats.hedges_landed = 1234, 1200
    body = viewer.get("/").content.decode()
    assert "1,234 hedged, 1,200 landed by the hedge" in body


def test_overview_warns_when_jobs_wait_and_no_worker_is_seen(broker: Broker, viewer: Client,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    push(broker, "q", [1])
    monkeypatch.setattr(pages, "WAITING_WARN_SECONDS", 0.0)
    assert b"Jobs are waiting in q and no worker has been seen" in viewer.get("/").content

    runtime.seen_workers.note("w-idle", ["q"])
    source.reset()
    assert b"no worker has been seen" not in viewer.get("/").content


def test_the_no_worker_warning_is_per_queue(broker: Broker, viewer: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pages, "WAITING_WARN_SECONDS", 0.0)
    push(broker, "emails", [1, 2])
    push(broker, "reports", [1, 2])
    # A worker of emails: it asks for emails' work and holds a lease on one of its jobs.
    runtime.seen_workers.note("w-emails", ["emails"])
    broker.execute(claim_op("w-emails", ["emails"], policy=broker.policy))

    body = viewer.get("/").content.decode()
    assert "Jobs are waiting in reports and no worker has been seen on it" in body
    assert "Jobs are waiting in emails" not in body

    # A worker of reports that has not been seen for longer than the quiet time counts as gone.
    runtime.seen_workers.note("w-reports", ["reports"])
    source.reset()
    assert "Jobs are waiting in reports" not in viewer.get("/").content.decode()
    monkeypatch.setattr(pages, "WORKERS_QUIET_SECONDS", -1.0)
    source.reset()
    body = viewer.get("/").content.decode()
    assert "Jobs are waiting in reports and no worker has been seen on it for" in body


def test_overview_says_when_a_queue_is_paused(broker: Broker, viewer: Client) -> None:
    push(broker, "q", [1])
    broker.execute(pause_op("q"))
    body = viewer.get("/").content.decode()
    assert "paused" in body and "Queue q is paused" in body


def test_jobs_page_filters_by_queue_and_status_and_pages_through_many(broker: Broker, viewer: Client) -> None:
    ids = push(broker, "big", list(range(120)))
    push(broker, "other", ["x"])
    broker.execute(claim_op("w1", ["big"], policy=broker.policy))

    first = viewer.get("/jobs/", {"queue": "big", "status": "pending"}).context
    assert first["total"] == 119 and first["pages"] == 3
    assert [r["job"]["id"] for r in first["rows"]] == ids[1:51]
    third = viewer.get("/jobs/", {"queue": "big", "status": "pending", "page": "3"}).context
    assert [r["job"]["id"] for r in third["rows"]] == ids[101:]
    running = viewer.get("/jobs/", {"status": "running"}).context
    assert [r["job"]["id"] for r in running["rows"]] == [ids[0]]
    assert viewer.get("/jobs/", {"page": "nonsense"}).status_code == 200


def test_jobs_page_finds_an_exact_id_and_searches_payloads(broker: Broker, viewer: Client) -> None:
    [a, b] = push(broker, "q", [{"to": "ada@example.com"}, {"to": "bob@example.com"}])
    dead = kill(broker, "q", {"to": "cy@example.com"})

    assert [r["job"]["id"] for r in viewer.get("/jobs/", {"id": b}).context["rows"]] == [b]
    assert [r["job"]["id"] for r in viewer.get("/jobs/", {"q": "ada@"}).context["rows"]] == [a]
    assert [r["job"]["id"] for r in viewer.get("/jobs/", {"q": "cy@"}).context["rows"]] == [dead]
    missing = viewer.get("/jobs/", {"id": "no-such-job"})
    assert missing.context["rows"] == [] and b"No job with id" in missing.content
    # An id cut short, as lists show it: the jobs whose ids start with it, and a notice saying so.
    started = viewer.get("/jobs/", {"id": dead[:8]})
    assert [r["job"]["id"] for r in started.context["rows"]] == [dead]
    assert f"No job has the id &#x27;{dead[:8]}&#x27;: listing the 1 in the document" in started.content.decode()
    held = viewer.get("/jobs/", {"id": dead[:8], "status": "running"})
    assert held.context["rows"] == []  # held to the other filters, and it says so
    assert "whose ids start with it, 0 of them kept by the other filters." in held.content.decode()


def test_payload_search_is_bounded_and_says_so(broker: Broker, viewer: Client,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(joblist, "SEARCH_LIMIT", 5)
    push(broker, "q", [f"n{i}" for i in range(8)])
    context = viewer.get("/jobs/", {"q": "n"}).context
    assert context["total"] == 5
    assert "Searched the first 5 of 8 jobs" in context["notice"]


def test_payloads_are_escaped_and_truncated_in_lists(broker: Broker, viewer: Client) -> None:
    push(broker, "q", [{"html": "<script>alert(1)</script>", "blob": "z" * 100_000}])
    body = viewer.get("/jobs/").content.decode()
    assert "<script>alert(1)</script>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "z" * 200 not in body  # a preview, not the whole payload


def test_job_page_shows_the_timeline_and_the_payload_safely(broker: Broker, viewer: Client) -> None:
    [job_id] = push(broker, "q", [{"html": "<b>hi</b>"}], max_attempts=3)
    [claim] = broker.execute(claim_op("worker-7", ["q"], policy=broker.policy))
    broker.execute(heartbeat_op(claim.id, claim.lease))
    broker.execute(fail_op(claim.id, claim.lease, error="ValueError: bad row", retry_in_seconds=0,
                           policy=broker.policy))
    broker.execute(claim_op("worker-8", ["q"], policy=broker.policy))

    response = viewer.get(f"/jobs/{job_id}/")

    kinds = [e.kind for e in response.context["events"]]
    assert kinds[0] == "enqueued" and "failed" in kinds and kinds.count("claimed") == 2
    body = response.content.decode()
    assert "claimed by worker-7" in body and "claimed by worker-8" in body and "ValueError: bad row" in body
    assert "&lt;b&gt;hi&lt;/b&gt;" in body and "<b>hi</b>" not in body


def test_job_page_of_a_large_payload_shows_a_truncation_notice(broker: Broker, viewer: Client) -> None:
    [job_id] = push(broker, "q", [["x" * 100] * 2500])
    body = viewer.get(f"/jobs/{job_id}/").content.decode()
    assert "The payload is large" in body


def test_job_page_of_a_job_no_longer_in_the_document_says_so(broker: Broker, viewer: Client) -> None:
    # Nothing at all is known of it: the page explains, under a 404.
    response = viewer.get("/jobs/finished-long-ago/")
    assert response.status_code == 404 and b"not in the queue document" in response.content
    # A job in the document is a 200, as is one of the dead letters.
    for job_id in (push(broker, "q", [1])[0], kill(broker)):
        source.reset()  # read afresh
        assert viewer.get(f"/jobs/{job_id}/").status_code == 200


def test_workers_page_lists_orphaned_leases_first(broker: Broker, viewer: Client,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    push(broker, "q", [1, 2])
    broker.execute(claim_op("fresh", ["q"], policy=broker.policy, lease_seconds=3600))
    broker.execute(claim_op("ghost", ["q"], policy=broker.policy, lease_seconds=3))
    # Look at the document 2 s later: the 3 s lease is past its 1 s heartbeat interval.
    real = source.current

    def later() -> object:
        snap = real()
        snap.taken_at = snap.taken_at + timedelta(seconds=2)
        return snap

    monkeypatch.setattr(source, "current", later)
    response = viewer.get("/workers/")
    leases = response.context["leases"]
    assert [row["worker"] for row in leases] == ["ghost", "fresh"]
    assert leases[0]["orphaned"] and not leases[1]["orphaned"]
    assert {w["w"].name for w in response.context["workers"]} == {"fresh", "ghost"}
    states = {w["w"].name: w["state"][0] for w in response.context["workers"]}
    assert states == {"fresh": "working", "ghost": "silent"}
    # The overview says so too: a running count alone would look healthy.
    overview = re.sub(r"\s+", " ", viewer.get("/").content.decode())
    assert re.search(r"1 running job of q has an orphaned lease: ghost stopped heartbeating\. It goes back to "
                     r"pending when its lease expires \((now|in \d+ s)\); see the Workers page", overview)


def test_orphaned_leases_of_several_jobs_are_counted_once_per_queue(broker: Broker) -> None:
    push(broker, "q", [1, 2, 3])
    broker.execute(claim_op("ghost", ["q"], policy=broker.policy, max_jobs=2, lease_seconds=3))
    broker.execute(claim_op("shade", ["q"], policy=broker.policy, lease_seconds=3))
    snapshot = source.current()
    snapshot.taken_at = snapshot.taken_at + timedelta(seconds=2)
    [alert] = pages.orphan_alerts(snapshot)
    assert re.fullmatch(r"3 running jobs of q have orphaned leases: ghost, shade stopped heartbeating\. They go back "
                        r"to pending as their leases expire \(the first in 1 s\); see the Workers page\.",
                        alert.text), alert.text


def test_the_workers_page_says_which_workers_are_idle_or_quiet_and_their_queues(
        broker: Broker, viewer: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import UTC, datetime

    from queueadmin.workers import seen

    runtime.seen_workers.note("waiting", ["emails", "reports"])
    seen.save({"gone": (datetime.now(UTC) - timedelta(seconds=90), ("emails",))})  # as another node saw it
    rows = {w["w"].name: w for w in viewer.get("/workers/").context["workers"]}
    assert (rows["waiting"]["state"][0], rows["waiting"]["queues"]) == ("idle", ("emails", "reports"))
    assert rows["gone"]["state"][0] == "quiet"
    page = viewer.get("/workers/").content.decode()
    assert '<a href="/jobs/?worker=waiting">waiting</a>' in page


def test_dead_letters_are_grouped_by_error_signature(broker: Broker, viewer: Client) -> None:
    for row in (17, 23, 99):
        kill(broker, "imports", error=f"Traceback...\nValueError: bad row {row}")
    kill(broker, "imports", error="TimeoutError: upstream took 30 s")
    kill(broker, "emails", error="ValueError: bad row 5")

    groups = viewer.get("/dead/").context["groups"]

    assert [(g.queue, g.signature, g.count) for g in groups] == [
        ("imports", "ValueError: bad row N", 3),
        ("emails", "ValueError: bad row N", 1),
        ("imports", "TimeoutError: upstream took N s", 1),
    ]


def test_raw_document_hides_lease_tokens_and_truncates_large_documents(broker: Broker, viewer: Client,
                                                                       store: ObjectStore,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    push(broker, "q", [1])
    [claim] = broker.execute(claim_op("w", ["q"], policy=broker.policy))
    body = viewer.get("/document/").content.decode()
    assert claim.lease not in body and "…" in body
    assert f"{len(stored(store))} bytes" in body

    monkeypatch.setattr(pages, "RAW_LIMIT_BYTES", 300)
    assert b"longer than this page shows" in viewer.get("/document/").content
    # All of it, as a download: every job, the lease token hidden, the file named by its seq.
    pushed = push(broker, "q", list(range(50)))
    source.reset()
    download = viewer.get("/document/queue.json")
    assert download.status_code == 200 and download["Content-Type"] == "application/json"
    whole = orjson.loads(download.content)
    assert download["Content-Disposition"] == f'attachment; filename="queue-seq-{whole["seq"]}.json"'
    assert {j["id"] for j in whole["jobs"]} == {claim.id, *pushed}
    assert claim.lease.encode() not in download.content and whole["jobs"][0]["lease"]["token"] == "…"
    assert 'href="/document/queue.json" download' in viewer.get("/document/").content.decode()


def test_an_unreadable_document_is_shown_as_an_error_and_left_alone(broker: Broker, viewer: Client,
                                                                    store: ObjectStore) -> None:
    broker.stop()  # nobody leads: the page reads the store itself
    store.put("queue.json", b'{"format": 1, "seq": "not a number"')
    response = viewer.get("/")
    assert response.status_code == 503
    assert b"cannot be read" in response.content and b"not valid JSON" in response.content
    assert stored(store) == b'{"format": 1, "seq": "not a number"'


def test_a_standby_node_reads_the_document_from_the_store(broker: Broker, viewer: Client,
                                                          store: ObjectStore) -> None:
    push(broker, "q", [1, 2])
    broker.stop()
    response = viewer.get("/")
    assert response.status_code == 200
    assert next(r["q"] for r in response.context["rows"]).pending == 2


def test_users_are_kept_apart_in_the_fixture(db: None) -> None:
    assert not User.objects.exists()


@pytest.mark.parametrize(
    ("pending", "arrivals", "completions", "expected"),
    [(0, 5.0, 0.0, 0.0), (120, 10.0, 70.0, 120.0), (50, 30.0, 30.0, None), (50, 40.0, 10.0, None)],
)
def test_drain_time_follows_the_last_minute_rates(pending: int, arrivals: float, completions: float,
                                                 expected: float | None) -> None:
    rate = Rates(arrivals=arrivals, completions=completions, seconds=60.0)
    assert pages.drain_seconds(pending, rate) == expected
    assert pages.drain_seconds(5, None) is None


def test_the_overview_rates_cover_the_recorded_minute_from_the_first_view(
        broker: Broker, viewer: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """A burst seen by a page open for a few seconds is not extrapolated to a
    minute: where the sampler recorded the counters a minute ago, the rates
    are over that minute."""
    from queueadmin.metrics.records import RAW, MetricPoint
    from queueadmin.metrics.sampler import record

    push(broker, "q", list(range(30)))
    monkeypatch.setattr(source, "rates", lambda: {"q": Rates(arrivals=600.0, completions=0.0, seconds=6.0)})
    taken = source.current().taken_at
    # Pushed 0 jobs by 80 s ago, 10 by 70 s ago, 25 by 30 s ago: the base is the newest a minute old.
    record([MetricPoint(step=RAW, at=taken - timedelta(seconds=s), queue="q", pushed=n)
            for s, n in ((80, 0), (70, 10), (30, 25))])
    [row] = viewer.get("/").context["rows"]
    assert row["rate"].arrivals == pytest.approx(20 * 60 / row["rate"].seconds)
    assert 70 <= row["rate"].seconds < 71
    # No point between one and 1.5 minutes old (three samples): the process's own samples stand.
    MetricPoint.objects.filter(at__lt=taken - timedelta(seconds=60)).delete()
    [row] = viewer.get("/").context["rows"]
    assert row["rate"] == Rates(arrivals=600.0, completions=0.0, seconds=6.0)


def test_the_overview_keeps_its_own_rates_when_the_metrics_history_cannot_be_read(
        broker: Broker, viewer: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    from django.db import DatabaseError

    from queueadmin.metrics import history

    def unreadable(*args: object, **kwargs: object) -> None:
        raise DatabaseError("database is locked")

    push(broker, "q", [1])
    monkeypatch.setattr(history, "counters_before", unreadable)
    monkeypatch.setattr(source, "rates", lambda: {"q": Rates(arrivals=6.0, completions=3.0, seconds=61.0)})
    response = viewer.get("/")
    assert response.status_code == 200
    [row] = response.context["rows"]
    assert row["rate"] == Rates(arrivals=6.0, completions=3.0, seconds=61.0)


def test_a_queue_of_delayed_jobs_only_does_not_drain_and_says_why(broker: Broker, viewer: Client,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.ops import push_op

    broker.execute(push_op("q", [1, 2, 3], policy=broker.policy, delay_seconds=600))
    push(broker, "q", [4, 5])
    monkeypatch.setattr(source, "rates", lambda: {"q": Rates(arrivals=0.0, completions=4.0, seconds=60.0)})
    [row] = viewer.get("/").context["rows"]
    assert row["drain"] == 2 / 4 * 60  # the two ready jobs, not the five pending
    claim = claim_op("w", ["q"], policy=broker.policy, max_jobs=2)
    broker.execute(claim)
    source.reset()  # not the snapshot of a moment ago
    response = viewer.get("/")
    [row] = response.context["rows"]
    assert row["drain"] == 0.0
    assert 'title="none ready: every pending job is delayed or backing off">—' in response.content.decode()


def test_the_overview_counts_purged_jobs_once_any_were_purged(broker: Broker, viewer: Client) -> None:
    from engine.ops import purge_op

    ids = push(broker, "q", [1, 2, 3])
    assert "<th class=\"num\">Purged</th>" not in viewer.get("/").content.decode()
    broker.execute(purge_op(ids[:2]))
    source.reset()  # not the snapshot of a moment ago
    page = re.sub(r"\s+", " ", viewer.get("/").content.decode())
    assert "<th class=\"num\">Purged</th>" in page
    # Pushed 3, pending 1, purged 2: the row adds up.
    row = re.search(r'<tr data-row="q">(.*?)</tr>', page)
    assert row is not None
    cells = re.findall(r'<td class="num">(?:<a [^>]*>)?([\d,]+)', row.group(1))
    assert cells[:7] == ["1", "0", "0", "3", "0", "0", "2"], cells


def test_the_broker_panel_shows_the_intervals_as_configured(broker: Broker, viewer: Client, settings: object) -> None:
    settings.QUEUE_HEARTBEAT_SECONDS = 0.25  # type: ignore[attr-defined]
    settings.QUEUE_TAKEOVER_SECONDS = 2.0  # type: ignore[attr-defined]
    page = viewer.get("/").content.decode()
    # Not rounded to one decimal ("0.3 s" while the warning above says 0.25 s).
    assert "expected every 0.25 s; takeover after 2 s" in page


def test_overview_warns_of_a_large_document_and_says_what_holds_it(
        broker: Broker, viewer: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every commit writes the whole document: past LARGE_DOCUMENT_BYTES the
    overview says so, and what it holds, largest queues first."""
    from engine.ops import push_op

    broker.execute(push_op("later", list(range(30)), policy=broker.policy, delay_seconds=3600))
    broker.execute(push_op("soon", list(range(5)), policy=broker.policy, delay_seconds=60))
    push(broker, "now", list(range(7)))
    broker.execute(claim_op("w1", ["now"], policy=broker.policy, max_jobs=2))
    assert "every commit writes all of it" not in viewer.get("/").content.decode()

    monkeypatch.setattr(pages, "LARGE_DOCUMENT_BYTES", len(stored(broker.store)))
    source.reset()
    [alert] = [a.text for a in viewer.get("/").context["alerts"] if "every commit writes all of it" in a.text]
    assert alert.startswith(f"queue.json is {len(stored(broker.store)) / 1024:,.1f} KB,")  # as on the Broker card
    assert "35 delayed jobs (later 30, soon 5)" in alert and "5 ready pending jobs (now 5)" in alert
    assert "2 running jobs (now 2)" in alert and "dead letters" not in alert
    # Format 2 already, with delayed segments on: the delayed ones here are few, or due soon.
    assert "within 60 s (QUEUE_DELAYED_HORIZON_SECONDS)" in alert and "QUEUE_SEGMENT_JOBS" not in alert


@pytest.fixture
def format_one(settings: SettingsWrapper) -> None:
    settings.QUEUE_SEGMENT_JOBS = 0  # before the broker starts


def test_the_large_document_alert_of_format_1_points_to_segments_and_to_the_dead_letters(
        format_one: None, broker: Broker, viewer: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    kill(broker, "backlog")
    push(broker, "backlog", list(range(11)))
    monkeypatch.setattr(pages, "LARGE_DOCUMENT_BYTES", len(stored(broker.store)))
    source.reset()
    [alert] = [a.text for a in viewer.get("/").context["alerts"] if "every commit writes all of it" in a.text]
    assert "11 ready pending jobs (backlog 11); 1 dead letter (backlog 1)" in alert
    assert "set QUEUE_SEGMENT_JOBS" in alert and "purge the dead letters" in alert and "delayed" not in alert


def test_a_standby_with_the_development_key_warns_that_its_actions_cannot_be_forwarded(
        broker: Broker, viewer: Client, settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # The key the node signs with, as queueadmin.api.forward judges it (the
    # session's key stays as it is: changing SECRET_KEY would sign us out).
    monkeypatch.setattr(pages, "insecure_key", lambda: True)

    def overview() -> str:
        response = viewer.get("/")
        assert response.status_code == 200
        return re.sub(r"\s+", " ", response.content.decode())

    assert "cannot be forwarded" not in overview()  # this node leads: it runs them itself
    as_it_is = source.node
    monkeypatch.setattr(source, "node", lambda: replace(as_it_is(), role="standby"))
    assert ("the actions tried here cannot be forwarded to the leader and fail: act on the leader&#x27;s dashboard "
            "(http://node-a.test:8000), or set DJANGO_SECRET_KEY") in overview()
    monkeypatch.setattr(pages, "insecure_key", lambda: False)
    assert "cannot be forwarded" not in overview()


@pytest.mark.parametrize(("arrivals", "completions", "why"), [
    (40.0, 10.0, "as many jobs arrive as complete, or more, and 2 ready wait"),
    (0.0, 0.0, "none of its jobs completed in the last 60 s"),  # nothing arrives either: no worker takes them
])
def test_not_draining_says_why(broker: Broker, viewer: Client, monkeypatch: pytest.MonkeyPatch,
                               arrivals: float, completions: float, why: str) -> None:
    push(broker, "q", [1, 2])
    monkeypatch.setattr(source, "rates", lambda: {"q": Rates(arrivals=arrivals, completions=completions,
                                                             seconds=60.0)})
    cell = re.search(r'<span class="warn" title="([^"]*)">not draining</span>', viewer.get("/").content.decode())
    assert cell is not None and cell.group(1) == why


@pytest.mark.parametrize(("ready", "arrivals", "completions", "shown"), [
    (1, 22.6, 20.8, "keeping up"),  # a healthy queue: one job waits, arrivals about match completions
    (30, 22.6, 20.8, "not draining"),  # more waits than a minute's completions
    (1, 40.0, 20.8, "not draining"),  # arrivals well above completions
])
def test_a_queue_that_keeps_up_is_not_an_alarm(broker: Broker, viewer: Client, monkeypatch: pytest.MonkeyPatch,
                                               ready: int, arrivals: float, completions: float, shown: str) -> None:
    push(broker, "q", list(range(ready)))
    monkeypatch.setattr(source, "rates", lambda: {"q": Rates(arrivals=arrivals, completions=completions,
                                                             seconds=60.0)})
    row = re.search(r'<tr data-row="q">.*?</tr>', viewer.get("/").content.decode(), re.S)
    assert row is not None and re.search(rf">{shown}</span></td>", row.group(0)), row.group(0)


def test_the_queue_page_gives_the_overviews_pace_and_links_its_pending_jobs(
        broker: Broker, viewer: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    push(broker, "q", list(range(6)))
    page = re.sub(r"\s+", " ", viewer.get("/queues/q/").content.decode())
    assert '<a href="/jobs/?queue=q&amp;status=pending">6</a>' in page
    assert re.search(r'data-testid="pace"><span class="muted" title="measuring[^"]*">…</span> · drains in '
                     r'<span class="muted" title="measuring', page)
    monkeypatch.setattr(source, "rates", lambda: {"q": Rates(arrivals=2.0, completions=5.0, seconds=60.0)})
    page = re.sub(r"\s+", " ", viewer.get("/queues/q/").content.decode())
    assert 'data-testid="pace"><span title="over the last 60 s">2.0 in · 5.0 done</span> · drains in 2 min</dd>' in page


def test_a_paused_queue_says_paused_rather_than_not_draining(broker: Broker, viewer: Client,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    push(broker, "q", [1, 2])
    broker.execute(pause_op("q"))
    monkeypatch.setattr(source, "rates", lambda: {"q": Rates(arrivals=0.0, completions=0.0, seconds=60.0)})
    page = viewer.get("/").content.decode()
    assert 'title="paused: none of its jobs start until it is resumed">paused</span>' in page
    assert "not draining" not in page


def test_a_rate_limited_queue_never_drains_sooner_than_its_limit_allows(broker: Broker, viewer: Client,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.ops import rate_limit_op

    push(broker, "q", list(range(86)))
    broker.execute(rate_limit_op("q", 5, 60))
    # The last minute still holds a burst from before the limit was set.
    monkeypatch.setattr(source, "rates", lambda: {"q": Rates(arrivals=0.0, completions=25.3, seconds=60.0)})
    [row] = viewer.get("/").context["rows"]
    assert row["drain"] == pytest.approx(86 / 5 * 60)  # 17 min, not 3


def test_a_dead_jobs_page_says_when_it_died(broker: Broker, viewer: Client) -> None:
    job_id = kill(broker)
    response = viewer.get(f"/jobs/{job_id}/")
    assert response.context["died_at"] is not None
    text = re.sub(r"\s+", " ", response.content.decode())
    assert re.search(r'<dt>Died</dt><dd data-testid="died-at"><time [^>]*>[^<]*</time> \([0-9.]+ s ago\), moved to the '
                     r"dead letters</dd>", text), text


def test_a_due_jobs_page_says_what_holds_it_back(broker: Broker, viewer: Client) -> None:
    from engine.ops import limit_op, rate_limit_op

    [first, second] = push(broker, "q", [1, 2])
    assert viewer.get(f"/jobs/{second}/").context["held_back"] == []  # due, nothing in its way: waits for a worker
    broker.execute(limit_op("q", 1))
    broker.execute(rate_limit_op("q", 1, 3600))
    broker.execute(claim_op("w", ["q"], policy=broker.policy))  # the one start of this hour, and the one place
    broker.execute(pause_op("q"))
    source.reset()
    response = viewer.get(f"/jobs/{second}/")
    reasons = [text for text, _ in response.context["held_back"]]
    assert reasons == ["its queue is paused: none of its jobs start until it is resumed",
                       "its queue runs 1 job, its concurrency limit: it starts as places free up",
                       "its queue's rate limit (1 per 3600 s) is used up until"], reasons
    assert response.context["held_back"][2][1] is not None
    assert 'data-testid="held-back"' in response.content.decode()
    assert viewer.get(f"/jobs/{first}/").context["held_back"] == []  # running: nothing holds it back


def test_a_delayed_jobs_page_says_when_it_comes_due_and_once_due_since_when(
        broker: Broker, viewer: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.ops import push_op

    [job_id] = broker.execute(push_op("q", [1], policy=broker.policy, delay_seconds=600))
    text = re.sub(r"\s+", " ", viewer.get(f"/jobs/{job_id}/").content.decode())
    assert re.search(r"<dt>Not before</dt><dd>.*? \(in (9|10) min\)</dd>", text)
    clock_ahead(monkeypatch, timedelta(minutes=13))
    text = re.sub(r"\s+", " ", viewer.get(f"/jobs/{job_id}/").content.decode())
    assert re.search(r"<dt>Not before</dt><dd>.*? \(due (2|3) min ago\)</dd>", text)


def _standby_that_saw_the_last_commit(monkeypatch: pytest.MonkeyPatch, quiet_seconds: float) -> None:
    """This node's broker as a standby whose watch saw the shown version land ``quiet_seconds`` ago on its
    own monotonic clock (engine.Broker.quiet), looking every half second."""
    as_it_is = source.node
    monkeypatch.setattr(source, "node", lambda: replace(
        as_it_is(), role="standby", quiet=(source.current(fresh_seconds=3600).seq, quiet_seconds), poll_seconds=0.5))


@pytest.mark.parametrize(("ahead", "warning"), [
    (30, r"This node's clock reads at least (29|30|31|32) s ahead of the leader's"),
    (-30, r"This node's clock reads at least (27|28|29|30) s behind the leader's"),
    (0, None),  # within the poll and the margin: nothing to say
])
def test_a_standby_shows_the_leaders_quiet_time_on_its_own_clock_and_says_when_the_clocks_differ(
        broker: Broker, viewer: Client, monkeypatch: pytest.MonkeyPatch, ahead: int, warning: str | None) -> None:
    push(broker, "q", [1])  # a commit just now, on the leader's clock
    clock_ahead(monkeypatch, timedelta(seconds=ahead))  # this node's wall clock
    _standby_that_saw_the_last_commit(monkeypatch, 0.1)

    response = viewer.get("/")
    page = html.unescape(re.sub(r"\s+", " ", response.content.decode()))

    assert response.context["commit_age"] == 0.1  # not the two wall clocks' 30 s, or -30 s
    assert "No commit for" not in page
    found = re.search(r"This node's clock reads at least \d+ s (ahead of|behind) the leader's", page)
    if warning is None:
        assert found is None
    else:
        assert found is not None and re.fullmatch(warning, found.group(0))
        assert "keep the nodes on NTP" in page


def test_a_standby_whose_clock_runs_behind_still_warns_of_a_quiet_leader(
        broker: Broker, viewer: Client, monkeypatch: pytest.MonkeyPatch, settings: SettingsWrapper) -> None:
    """By the two wall clocks, the last commit lies in this node's future and the leader never looks late."""
    settings.QUEUE_HEARTBEAT_SECONDS = 2  # what the page expects of the leader
    push(broker, "q", [1])
    clock_ahead(monkeypatch, timedelta(seconds=-60))
    _standby_that_saw_the_last_commit(monkeypatch, 40.0)  # nothing landed for 40 s of its own clock

    page = html.unescape(re.sub(r"\s+", " ", viewer.get("/").content.decode()))

    assert "No commit for 40 s; the leader commits at least every 2 s. Is the leader down?" in page
    assert re.search(r"reads at least (97|98|99|100) s behind the leader's", page)  # -60 - 40 by the clocks
