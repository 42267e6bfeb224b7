"""Pause, resume and forget a schedule, from the Schedules page and from
``manage.py queueaction``: a dry run, a run through the leading broker, an
audit entry, and ticks that push nothing while the pause holds."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from engine import Broker, schedule
from engine.ops import FireSchedules
from queueadmin.dashboard.source import source
from queueadmin.models import AuditEntry
from tests.helpers import stored, wait_for
from tests.queueadmin.dashboard_fixtures import act, client_for, confirm, make_user, preview

if TYPE_CHECKING:
    from pytest_django.fixtures import SettingsWrapper


@pytest.fixture
def scheduled(settings: SettingsWrapper, request: pytest.FixtureRequest) -> Broker:
    """The dashboard's leading broker, with a schedule every second."""
    settings.QUEUE_SCHEDULES = {"tick": {"every_seconds": 1, "queue": "ticks", "payload": {"n": 1}}}
    broker: Broker = request.getfixturevalue("broker")
    wait_for(lambda: "tick" in doc(broker).get("schedules", {}), timeout=10)
    return broker


@pytest.fixture
def scheduler(db: None) -> Client:
    """May view the dashboard and pause schedules, and nothing else."""
    return client_for(make_user("scheduler", "view_dashboard", "pause_schedule"))


def doc(broker: Broker) -> dict[str, Any]:
    blob = broker.store.get(broker.key)
    assert blob is not None
    return orjson.loads(blob.data)  # type: ignore[no-any-return]


def pushed(broker: Broker) -> int:
    return int(doc(broker)["queues"].get("ticks", {}).get("pushed", 0))


def test_a_pause_skips_every_tick_until_resumed_and_both_are_audited(scheduled: Broker, scheduler: Client) -> None:
    wait_for(lambda: pushed(scheduled) >= 1, timeout=10)
    page = scheduler.get("/schedules/").content.decode()
    assert 'name="action" value="pause_schedule"' in page and 'name="schedule" value="tick"' in page

    dry = preview(scheduler, action="pause_schedule", schedule="tick", next="/schedules/")
    plan = dry.context["plan"]
    assert plan.runnable and plan.queue == "ticks" and plan.target == "schedule=tick"
    assert "Its ticks are skipped from the next one" in " ".join(plan.notes)
    assert "Schedule <strong>tick</strong> will push no jobs until it is resumed" in dry.content.decode()
    done = confirm(scheduler, plan.token, reason="reports service down", next="/schedules/")
    assert done.status_code in (200, 302)
    assert "tick" in doc(scheduled)["schedule_pauses"]
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.queue, entry.target, entry.outcome, entry.reason) == (
        "pause_schedule", "ticks", "schedule=tick", "ok", "reports service down")
    assert entry.detail.startswith("paused schedule tick")

    # Ticks come and are marked skipped; nothing more is pushed.
    wait_for(lambda: doc(scheduled)["schedules"]["tick"]["outcome"] == "skipped", timeout=10)
    before = pushed(scheduled)
    skipped_tick = doc(scheduled)["schedules"]["tick"]["tick"]
    wait_for(lambda: doc(scheduled)["schedules"]["tick"]["tick"] > skipped_tick, timeout=10)
    assert pushed(scheduled) == before and doc(scheduled)["schedules"]["tick"]["outcome"] == "skipped"

    source.reset()
    page = scheduler.get("/schedules/")
    [row] = page.context["rows"]
    assert row.paused_since is not None and row.paused_by == entry
    html = page.content.decode()
    assert 'data-testid="schedule-paused"' in html and "reports service down" in html
    assert "1 schedule is paused" in html and 'value="resume_schedule"' in html
    assert 'value="pause_schedule"' not in html
    # The overview says so too, as it does for a paused queue.
    alerts = [a.text for a in scheduler.get("/").context["alerts"]]
    assert any(text.startswith("Schedule tick is paused (since ") for text in alerts), alerts

    resumed_at = datetime.now(UTC)
    assert act(scheduler, action="resume_schedule", schedule="tick", reason="back").status_code in (200, 302)
    assert "schedule_pauses" not in doc(scheduled)
    wait_for(lambda: doc(scheduled)["schedules"]["tick"]["outcome"] == "fired", timeout=10)
    fired = datetime.fromisoformat(doc(scheduled)["schedules"]["tick"]["tick"])
    # The tick it fires came after the resume: none of the skipped ones is caught up.
    assert fired >= resumed_at.replace(microsecond=0) and pushed(scheduled) > before
    assert [e.action for e in AuditEntry.objects.order_by("id")] == ["pause_schedule", "resume_schedule"]
    source.reset()
    [row] = scheduler.get("/schedules/").context["rows"]
    assert row.paused_since is None and row.paused_by is None
    assert not [a for a in scheduler.get("/").context["alerts"] if "is paused" in a.text]


def test_pausing_a_paused_schedule_or_resuming_a_running_one_offers_nothing(scheduled: Broker,
                                                                            scheduler: Client) -> None:
    dry = preview(scheduler, action="resume_schedule", schedule="tick")
    assert not dry.context["plan"].token and dry.context["plan"].problems == ["Schedule tick is not paused."]
    act(scheduler, action="pause_schedule", schedule="tick")
    dry = preview(scheduler, action="pause_schedule", schedule="tick")
    assert dry.context["plan"].problems == ["Schedule tick is already paused."]
    assert AuditEntry.objects.count() == 1


def test_a_pause_overtaken_between_its_dry_run_and_its_run_says_so(scheduled: Broker, scheduler: Client) -> None:
    first = preview(scheduler, action="pause_schedule", schedule="tick").context["plan"]
    act(scheduler, action="pause_schedule", schedule="tick")
    done = confirm(scheduler, first.token)
    assert done.status_code in (200, 302)
    last = AuditEntry.objects.order_by("id").last()
    assert last is not None and last.detail.startswith("schedule tick was already paused (since the dry run)")


def test_forget_drops_a_removed_schedules_mark_and_is_refused_for_a_configured_one(
    scheduled: Broker, scheduler: Client,
) -> None:
    dry = preview(scheduler, action="forget_schedule", schedule="tick")
    assert not dry.context["plan"].token
    assert "is in this node's QUEUE_SCHEDULES" in dry.context["plan"].problems[0]

    gone = schedule("gone", queue="q", payload=1, policy=scheduled.policy, every_seconds=60)
    tick = gone.latest_due(datetime.now(UTC))
    assert tick is not None
    scheduled.execute(FireSchedules(fires=(gone.fire(tick),), since=tick))
    source.reset()
    page = scheduler.get("/schedules/").content.decode()
    assert 'name="action" value="forget_schedule"' in page and 'name="schedule" value="gone"' in page
    dry = preview(scheduler, action="forget_schedule", schedule="gone")
    assert "The document drops its last tick" in dry.context["plan"].notes[0]
    confirm(scheduler, dry.context["plan"].token, reason="removed in the last deploy")
    assert "gone" not in doc(scheduled)["schedules"] and "tick" in doc(scheduled)["schedules"]
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.target, entry.outcome) == ("forget_schedule", "schedule=gone", "ok")
    dry = preview(scheduler, action="forget_schedule", schedule="gone")
    assert "there is nothing to forget" in dry.context["plan"].problems[0]


@pytest.mark.parametrize(("fields", "message"), [
    ({"schedule": "no spaces"}, "a schedule&#x27;s name must be"),
    ({"schedule": "tick", "queue": "ticks"}, "Pause schedule takes one schedule, and nothing else."),
    ({"queue": "ticks"}, "Pause schedule takes one schedule, and nothing else."),
])
def test_a_bad_request_is_refused_and_changes_nothing(scheduled: Broker, scheduler: Client,
                                                       fields: dict[str, str], message: str) -> None:
    before = doc(scheduled).get("schedule_pauses")
    dry = preview(scheduler, action="pause_schedule", **fields)
    assert dry.status_code == 422 and message in dry.content.decode()
    assert doc(scheduled).get("schedule_pauses") == before and not AuditEntry.objects.exists()


def test_an_unknown_schedule_cannot_be_paused(scheduled: Broker, scheduler: Client) -> None:
    dry = preview(scheduler, action="pause_schedule", schedule="nosuch")
    assert "neither in this node's QUEUE_SCHEDULES nor in the document" in dry.context["plan"].problems[0]


def test_the_actions_need_their_own_permission(scheduled: Broker, operator: Client, viewer: Client) -> None:
    """pause_queue is not enough; read-only staff see no buttons."""
    for client in (operator, viewer):
        assert b'value="pause_schedule"' not in client.get("/schedules/").content
        assert preview(client, action="pause_schedule", schedule="tick").status_code == 403
    assert "schedule_pauses" not in doc(scheduled) and not AuditEntry.objects.exists()


# -- manage.py queueaction ----------------------------------------------------------------


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("queueaction", *args, stdout=out)
    return out.getvalue()


def test_queueaction_pauses_and_resumes_a_schedule(scheduled: Broker, db: None) -> None:
    make_user("ops", "view_dashboard", "pause_schedule")
    out = run("pause_schedule", "--schedule", "tick", "--user", "ops", "--reason", "maintenance", "--yes")
    assert out.startswith("Pause schedule · tick: dry run against seq ")
    assert out.endswith("Paused schedule tick.\n") and "tick" in doc(scheduled)["schedule_pauses"]
    again = run("pause_schedule", "--schedule", "tick", "--user", "ops", "--reason", "maintenance", "--yes")
    assert "! Schedule tick is already paused." in again  # exit 0: a deploy script may pause twice
    assert run("resume_schedule", "--schedule", "tick", "--user", "ops", "--reason", "done", "--yes").endswith(
        "Resumed schedule tick.\n")
    assert "schedule_pauses" not in doc(scheduled)
    assert [e.action for e in AuditEntry.objects.order_by("id")] == ["pause_schedule", "resume_schedule"]


def test_queueaction_refuses_forgetting_a_configured_schedule_and_changes_nothing(scheduled: Broker,
                                                                                  db: None) -> None:
    make_user("ops", "view_dashboard", "pause_schedule")
    make_user("queues-only", "view_dashboard", "pause_queue")
    with pytest.raises(CommandError, match=r"lacks queueadmin\.pause_schedule"):
        run("pause_schedule", "--schedule", "tick", "--user", "queues-only", "--reason", "r", "--yes")
    scheduled.stop()  # no tick may move the document while it is compared
    before = stored(scheduled.store)
    with pytest.raises(CommandError, match="Nothing to run"):
        run("forget_schedule", "--schedule", "tick", "--user", "ops", "--reason", "r", "--yes")
    assert stored(scheduled.store) == before and not AuditEntry.objects.exists()
