"""The schedules page: each recurring job with its next tick and the last one
the document handled (fired with its job, missed, registered), a tick past
due that no commit handled, and a mark no definition on this node explains."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import orjson
import pytest
from django.test import Client

from engine import Broker, schedule
from engine.ops import FireSchedules
from queueadmin.dashboard.source import source
from tests.helpers import wait_for
from tests.queueadmin.dashboard_fixtures import clock_ahead

if TYPE_CHECKING:
    from pytest_django.fixtures import SettingsWrapper


@pytest.fixture
def scheduled(settings: SettingsWrapper, request: pytest.FixtureRequest) -> Broker:
    """The dashboard's leading broker, with a schedule every second and one at 03:00 Paris time."""
    settings.QUEUE_SCHEDULES = {
        "tick": {"every_seconds": 1, "queue": "ticks", "payload": {"n": 1}},
        "nightly": {"cron": "0 3 * * *", "timezone": "Europe/Paris", "queue": "reports", "payload": {}},
    }
    broker: Broker = request.getfixturevalue("broker")
    return broker


def marks(broker: Broker) -> dict[str, dict[str, str]]:
    blob = broker.store.get(broker.key)
    assert blob is not None
    return orjson.loads(blob.data).get("schedules", {})  # type: ignore[no-any-return]


def test_the_page_lists_each_schedule_with_its_next_tick_and_the_job_its_last_tick_pushed(
    scheduled: Broker, viewer: Client,
) -> None:
    # Heartbeats are two minutes apart here; the leader wakes for each tick.
    wait_for(lambda: marks(scheduled).get("tick", {}).get("outcome") == "fired", timeout=10)
    source.reset()
    page = viewer.get("/schedules/")
    assert page.status_code == 200
    rows = {r.name: r for r in page.context["rows"]}
    assert list(rows) == ["tick", "nightly"]
    tick = rows["tick"]
    assert tick.description == "Every 1 s" and tick.mark_outcome == "fired"
    assert tick.mark_job is not None and tick.mark_job.startswith("schedule:tick:")
    assert tick.next_tick is not None and tick.next_tick > page.context["snapshot"].taken_at
    assert rows["nightly"].description == "At 03:00 every day (Europe/Paris)"
    assert rows["nightly"].mark_outcome == "registered"  # its last 03:00 came before this leader
    html = page.content.decode()
    assert f'href="/jobs/{tick.mark_job}/"' in html and "0 3 * * *" in html
    assert page.context["overdue"] == 0 and "past due" not in html
    assert not [a for a in viewer.get("/").context["alerts"] if a.text.startswith("Schedule ")]
    # The job it links to says which schedule pushed it, and for which tick.
    job_page = viewer.get(f"/jobs/{tick.mark_job}/")
    assert job_page.status_code == 200
    assert f"enqueued on ticks by schedule tick, its tick of {tick.mark_tick:%Y-%m-%d %H:%M:%S} UTC" in (
        job_page.content.decode())


def test_a_tick_past_due_that_no_commit_handled_is_flagged(
    scheduled: Broker, viewer: Client, monkeypatch: pytest.MonkeyPatch,
) -> None:
    wait_for(lambda: "nightly" in marks(scheduled), timeout=10)
    # A day later by the dashboard's clock, the leader (real time) has not fired 03:00.
    clock_ahead(monkeypatch, timedelta(days=1))
    page = viewer.get("/schedules/")
    rows = {r.name: r for r in page.context["rows"]}
    assert rows["nightly"].overdue is not None and rows["nightly"].overdue.hour == 2  # 03:00 in Paris, in UTC
    # Every second: its first tick after the mark, a day ago, is the one late.
    assert rows["tick"].overdue is not None and rows["tick"].overdue <= rows["tick"].mark_tick + timedelta(seconds=1)
    assert page.context["overdue"] == 2 and "2 schedules have a tick past due" in page.content.decode()
    # The overview warns too, naming the tick.
    alerts = [a.text for a in viewer.get("/").context["alerts"]]
    night = rows["nightly"].overdue
    assert f"Schedule nightly: its tick of {night:%Y-%m-%d %H:%M:%S} UTC has not been pushed" in " ".join(alerts)
    assert sum(text.startswith("Schedule ") for text in alerts) == 2


def test_a_mark_without_a_definition_here_is_listed(scheduled: Broker, viewer: Client) -> None:
    gone = schedule("gone", queue="q", payload=1, policy=scheduled.policy, every_seconds=60)
    tick = gone.latest_due(datetime.now(UTC))
    assert tick is not None
    scheduled.execute(FireSchedules(fires=(gone.fire(tick),), since=tick))
    source.reset()
    rows = {r.name: r for r in viewer.get("/schedules/").context["rows"]}
    assert rows["gone"].schedule is None and rows["gone"].description == "Not configured on this node"
    assert rows["gone"].mark_outcome == "fired" and rows["gone"].mark_job == gone.job_id(tick)


def test_no_schedules_says_how_to_add_one(broker: Broker, viewer: Client) -> None:
    page = viewer.get("/schedules/")
    assert page.context["rows"] == [] and b"QUEUE_SCHEDULES" in page.content


def test_the_page_needs_a_login_and_the_view_permission(broker: Broker, client: Client, db: None) -> None:
    assert client.get("/schedules/").status_code == 302
    from tests.queueadmin.dashboard_fixtures import client_for, make_user

    assert client_for(make_user("nobody")).get("/schedules/").status_code == 403


def test_the_navigation_links_the_page_with_its_key(broker: Broker, viewer: Client) -> None:
    html = viewer.get("/").content.decode()
    assert '<a href="/schedules/" data-go="c"' in html


def test_run_now_opens_the_submit_form_with_the_schedules_job_and_pushes_it_once(
    scheduled: Broker, operator: Client, viewer: Client,
) -> None:
    assert b'data-testid="run-now"' not in viewer.get("/schedules/").content  # read-only staff
    page = operator.get("/schedules/").content.decode()
    assert 'href="/submit/?schedule=nightly" data-testid="run-now"' in page

    form = operator.get("/submit/?schedule=nightly")
    assert b'data-testid="run-now-note"' in form.content
    initial = form.context["form"].initial
    assert (initial["queue"], orjson.loads(initial["payload"]), initial["reason"]) == (
        "reports", {}, "schedule nightly, run now")
    fields = {name: form.context["form"][name].value() for name in form.context["form"].fields}
    done = operator.post("/submit/", {k: v for k, v in fields.items() if v is not None})
    assert done.status_code == 200 and done.context["created"]
    created = done.context["created"]
    assert not created.startswith("schedule:")  # its own id: the ticks go on as before
    from queueadmin.models import AuditEntry

    entry = AuditEntry.objects.get(action=AuditEntry.Action.SUBMIT)
    assert entry.queue == "reports" and entry.reason == "schedule nightly, run now"
    assert created in {j["id"] for j in orjson.loads(scheduled.store.get(scheduled.key).data)["jobs"]}  # type: ignore[union-attr]


def test_run_now_of_a_schedule_this_node_lacks_says_so(scheduled: Broker, operator: Client) -> None:
    page = operator.get("/submit/?schedule=gone")
    assert page.status_code == 200 and b"This node has no schedule named gone." in page.content


def test_malformed_marks_are_left_out_of_the_page() -> None:
    """The engine refuses such a document (I6); the dashboard reads it leniently."""
    from queueadmin.dashboard.schedules import marks_of
    from queueadmin.dashboard.snapshot import Snapshot

    good = {"tick": "2026-12-04T02:10:00Z", "outcome": "fired", "job": "j1", "at": "2026-12-04T02:10:00Z"}
    header = {"format": 1, "seq": 1, "queues": {}, "schedules": {
        "good": good, "list": [1], "no-tick": {"outcome": "missed"}, "bad-time": {**good, "tick": "yesterday"},
        "bad-at": {**good, "at": 7}, "slash": {**good, "job": "a/b"}}}
    snapshot = Snapshot(header, [], [], etag=None, size=0, taken_at=datetime.now(UTC))
    assert list(marks_of(snapshot)) == ["good"]
    assert marks_of(Snapshot({**header, "schedules": [1, 2]}, [], [], etag=None, size=0,
                             taken_at=datetime.now(UTC))) == {}


@pytest.mark.parametrize(("job_id", "said"), [
    ("schedule:nightly-report:20261204T020000Z", " by schedule nightly-report, its tick of 2026-12-04 02:00:00 UTC"),
    ("schedule:a.b:20261204T020000Z", " by schedule a.b, its tick of 2026-12-04 02:00:00 UTC"),
    ("schedule::20261204T020000Z", ""), ("schedule:x:2026", ""), ("job-1", ""), ("schedule", ""),
])
def test_a_ticks_job_names_its_schedule(job_id: str, said: str) -> None:
    from queueadmin.dashboard.schedules import pushed_by

    assert pushed_by(job_id) == said
