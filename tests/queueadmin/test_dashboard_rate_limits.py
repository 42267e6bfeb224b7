"""A queue's rate limit, set from its page and from ``manage.py
queueaction``: a dry run saying what it changes and how long the ready jobs
would take to start, a run through the leading broker, an audit entry, and
claims that start no more of the queue's jobs in a window than the rate
allows."""

from __future__ import annotations

import io
from typing import Any

import orjson
import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from engine import Broker
from engine.ops import claim_op, limit_op, rate_limit_op
from queueadmin.dashboard.source import source
from queueadmin.management.commands.queueaction import parse_rate
from queueadmin.models import AuditEntry
from tests.queueadmin.dashboard_fixtures import (
    act,
    claim_ids,
    client_for,
    confirm,
    kill,
    make_user,
    preview,
    push,
    queue_counters,
    queueaction,
)


def test_a_rate_set_from_the_queue_page_caps_starts_and_is_audited(broker: Broker, operator: Client) -> None:
    push(broker, "q", list(range(25)))
    page = operator.get("/queues/q/").content.decode()
    assert 'data-testid="rate-form"' in page and 'name="action" value="rate_limit"' in page

    dry = preview(operator, action="rate_limit", queue="q", rate_jobs=10, rate_seconds=60, next="/queues/q/")
    plan = dry.context["plan"]
    assert plan.runnable and plan.target == "queue=q rate=10/60s"
    assert plan.notes == [
        "Queue q (now no rate limit) starts at most 10 of its jobs in each window of 60 s, across every worker; a "
        "window opens at the first start after the last one closed.",
        "At this rate its 25 ready jobs take at least 2 min to start."]
    assert ("At most <strong>10</strong> jobs of <strong>q</strong> will start in each window of <strong>60 s"
            "</strong>") in dry.content.decode()
    confirm(operator, plan.token, reason="the partner API allows 10 calls a minute", next="/queues/q/")
    assert queue_counters(broker)["rate_limit"] == {"jobs": 10, "seconds": 60.0}
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.queue, entry.target, entry.outcome) == ("rate_limit", "q", "queue=q rate=10/60s",
                                                                        "ok")
    assert entry.detail.startswith("limited q to 10 per 60 s (was no rate limit)")

    assert len(claim_ids(broker, 4)) == 4 and len(claim_ids(broker)) == 6 and claim_ids(broker) == []
    source.reset()
    page = operator.get("/queues/q/").content.decode()
    assert '<span data-testid="rate">at most 10 per 60 s</span>' in page
    assert 'data-testid="rate-used-up"' in page and 'value="10"' in page and 'value="60"' in page
    assert "≤ 10 per 60 s</span>" in operator.get("/").content.decode()


def test_a_new_rate_keeps_the_window_and_removing_it_lets_claims_through(broker: Broker, operator: Client) -> None:
    push(broker, "q", list(range(8)))
    act(operator, action="rate_limit", queue="q", rate_jobs=2, rate_seconds=3600)
    assert len(claim_ids(broker)) == 2 and claim_ids(broker) == []
    dry = preview(operator, action="rate_limit", queue="q", rate_jobs=3, rate_seconds=3600)
    assert dry.context["plan"].notes[0].endswith("The window open now keeps the starts it has counted.")
    confirm(operator, dry.context["plan"].token)
    assert len(claim_ids(broker)) == 1  # three in the window

    dry = preview(operator, action="rate_limit", queue="q")  # both blank: no rate limit
    assert dry.context["plan"].notes == ["Queue q (now 3 per 3600 s) starts its jobs as fast as workers claim them."]
    assert "<strong>q</strong> will have no rate limit" in dry.content.decode()
    confirm(operator, dry.context["plan"].token)
    assert "rate_limit" not in queue_counters(broker)
    assert len(claim_ids(broker)) == 5
    last = AuditEntry.objects.order_by("id").last()
    assert last is not None and last.detail.startswith("removed the rate limit of q (was 3 per 3600 s)")


def test_the_same_rate_again_offers_nothing_and_an_overtaken_one_says_so(broker: Broker, operator: Client) -> None:
    push(broker, "q", [1])
    dry = preview(operator, action="rate_limit", queue="q")
    assert dry.context["plan"].problems == ["Queue q has no rate limit."] and not dry.context["plan"].token
    first = preview(operator, action="rate_limit", queue="q", rate_jobs=5, rate_seconds=1).context["plan"]
    act(operator, action="rate_limit", queue="q", rate_jobs=5, rate_seconds=1)
    assert preview(operator, action="rate_limit", queue="q", rate_jobs=5, rate_seconds=1).context["plan"].problems \
        == ["Queue q already has this rate limit."]
    confirm(operator, first.token)
    last = AuditEntry.objects.order_by("id").last()
    assert last is not None and last.detail.startswith("q already had this rate limit (set since the dry run)")


def test_a_rate_that_differs_only_past_the_shown_digits_is_still_a_change(broker: Broker, operator: Client) -> None:
    """Needless means the same numbers, not the same words: 60 s and 60.0000001 s print alike."""
    push(broker, "q", [1])
    broker.execute(rate_limit_op("q", 10, 60))
    dry = preview(operator, action="rate_limit", queue="q", rate_jobs=10, rate_seconds=60.0000001)
    assert dry.context["plan"].runnable and not dry.context["plan"].needless
    confirm(operator, dry.context["plan"].token)
    assert queue_counters(broker)["rate_limit"]["seconds"] == 60.0000001


@pytest.mark.parametrize(("fields", "message"), [
    ({"rate_jobs": 0, "rate_seconds": 1}, "Ensure this value is greater than or equal to 1."),
    ({"rate_jobs": 1_000_001, "rate_seconds": 1}, "less than or equal to 1000000"),
    ({"rate_jobs": 5, "rate_seconds": 0.001}, "greater than or equal to 0.01"),
    ({"rate_jobs": 5, "rate_seconds": 86_401}, "less than or equal to 86400"),
    ({"rate_jobs": 5, "rate_seconds": "nan"}, "Enter a number."),
    ({"rate_jobs": 5, "rate_seconds": "inf"}, "Enter a number."),
    ({"rate_jobs": 5}, "Give a rate&#x27;s jobs and its seconds both, or neither"),
    ({"rate_seconds": 5}, "Give a rate&#x27;s jobs and its seconds both, or neither"),
    ({"action": "limit", "max_running": 2, "rate_jobs": 5, "rate_seconds": 1},
     "A rate goes with the rate_limit action only."),
    ({"queue": "", "rate_jobs": 5, "rate_seconds": 1}, "Rate limit takes one queue (and its rate), and nothing else."),
])
def test_a_bad_rate_is_refused_and_changes_nothing(broker: Broker, operator: Client, fields: dict[str, Any],
                                                   message: str) -> None:
    push(broker, "q", [1])
    dry = preview(operator, **{"action": "rate_limit", "queue": "q", **fields})
    assert dry.status_code == 422 and message in dry.content.decode()
    assert "rate_limit" not in queue_counters(broker) and "max_running" not in queue_counters(broker)
    assert not AuditEntry.objects.exists()


def test_setting_a_rate_needs_pause_queue_and_read_only_staff_see_no_form(broker: Broker, viewer: Client) -> None:
    push(broker, "q", [1])
    broker.execute(rate_limit_op("q", 7, 2))
    page = viewer.get("/queues/q/").content.decode()
    assert 'data-testid="rate-form"' not in page and "at most 7 per 2 s" in page  # shown, not offered
    assert preview(viewer, action="rate_limit", queue="q", rate_jobs=1, rate_seconds=1).status_code == 403
    scheduler = client_for(make_user("scheduler", "view_dashboard", "pause_schedule"))
    assert preview(scheduler, action="rate_limit", queue="q", rate_jobs=1, rate_seconds=1).status_code == 403
    assert queue_counters(broker)["rate_limit"] == {"jobs": 7, "seconds": 2.0}


def test_a_redrive_to_a_rate_limited_queue_says_how_the_rate_paces_it(broker: Broker, operator: Client) -> None:
    """Redrive at a set pace: set the queue's rate, and the dry run says when the last job starts."""
    for n in range(4):
        kill(broker, "q", n)
    push(broker, "q", list(range(3)))
    broker.execute(rate_limit_op("q", 2, 60))
    dry = preview(operator, action="redrive", queue="q")
    assert dry.context["plan"].count == 4
    assert dry.context["plan"].effects == [
        "Queue q starts at most 2 per 60 s: the 4 jobs going back to it wait behind its 3 ready, and the last of "
        "them starts 3 min from now at the earliest."]
    # With a concurrency limit too, when they start also depends on how long the running ones take.
    broker.execute(limit_op("q", 2))
    dry = preview(operator, action="redrive", queue="q")
    assert dry.context["plan"].effects[1:] == [
        "Queue q runs at most 2 of its jobs at once: the 4 jobs go back to it behind its 3 ready, and start as "
        "places free up, later than its rate alone allows."]


def test_a_requeue_that_fits_a_queues_free_places_says_nothing_of_its_limit(broker: Broker,
                                                                           operator: Client) -> None:
    dead = [kill(broker, "q", n) for n in range(2)]
    broker.execute(limit_op("q", 5))
    assert preview(operator, action="requeue", ids=" ".join(dead)).context["plan"].effects == []
    broker.execute(limit_op("q", 1))
    assert preview(operator, action="requeue", ids=" ".join(dead)).context["plan"].effects == [
        "Queue q runs at most 1 of its jobs at once: the 2 jobs go back to it, and start as places free up."]


# -- manage.py queueaction, queuestatus and /metrics -----------------------------------------------



@pytest.mark.parametrize(("text", "fields"), [
    ("10/s", ("10", "1")), ("100/m", ("100", "60")), ("1000/h", ("1000", "3600")), ("5/30s", ("5", "30")),
    ("3/2.5m", ("3", "150")), (" 2 / 10 S ", ("2", "10")), ("1/1.2345678s", ("1", "1.2345678")),
    ("none", ("", "")), ("", ("", "")),
])
def test_queueaction_reads_a_rate_as_jobs_per_period(text: str, fields: tuple[str, str]) -> None:
    assert parse_rate(text) == fields


@pytest.mark.parametrize("text", ["10", "10/", "/s", "10/d", "ten/s", "-1/s", "10/0x10s", "10 per s"])
def test_queueaction_refuses_a_rate_it_cannot_read(text: str) -> None:
    with pytest.raises(CommandError, match="--rate: expected N/PERIOD"):
        parse_rate(text)


def test_queueaction_sets_and_removes_a_rate_and_never_lifts_one_by_omission(broker: Broker, db: None) -> None:
    make_user("ops", "view_dashboard", "pause_queue")
    push(broker, "q", [1])
    out = queueaction("rate_limit", "--queue", "q", "--rate", "100/m", "--user", "ops", "--reason", "r", "--yes")
    assert out.startswith("Rate limit · q: dry run against seq ") and out.endswith(
        "Limited q to 100 per 60 s (was no rate limit).\n")
    assert "would be" not in out  # an action on a queue: no job count
    again = queueaction("rate_limit", "--queue", "q", "--rate", "100/60s", "--user", "ops", "--reason", "r", "--yes")
    assert "! Queue q already has this rate limit." in again  # exit 0: a deploy script may set it twice
    with pytest.raises(CommandError, match="rate_limit needs --rate N/PERIOD"):
        queueaction("rate_limit", "--queue", "q", "--user", "ops", "--reason", "r", "--yes")
    with pytest.raises(CommandError, match="--rate-seconds: Ensure this value is less than or equal to 86400"):
        queueaction("rate_limit", "--queue", "q", "--rate", "1/25h", "--user", "ops", "--reason", "r", "--yes")
    with pytest.raises(CommandError, match="--rate-jobs: A rate goes with the rate_limit action only"):
        queueaction("limit", "--queue", "q", "--max-running", "2", "--rate", "1/s", "--user", "ops", "--reason",
                    "r", "--yes")
    assert queue_counters(broker)["rate_limit"] == {"jobs": 100, "seconds": 60.0}
    assert "max_running" not in queue_counters(broker)
    assert queueaction("rate_limit", "--queue", "q", "--rate", "none", "--user", "ops", "--reason", "r",
               "--yes").endswith("Removed the rate limit of q (was 100 per 60 s).\n")
    assert "rate_limit" not in queue_counters(broker)


def test_queuestatus_and_metrics_show_the_rate(broker: Broker, settings: Any) -> None:
    from tests.queueadmin.test_metrics_endpoint import TOKEN, scrape, value

    settings.QUEUE_API_TOKEN = TOKEN
    push(broker, "q", [1, 2])
    push(broker, "other", [1])
    broker.execute(rate_limit_op("q", 1, 90))
    broker.execute(claim_op("w", ["q"], policy=broker.policy, max_jobs=2))
    out = io.StringIO()
    call_command("queuestatus", stdout=out)
    lines = out.getvalue().splitlines()
    header = next(line for line in lines if line.startswith("queue "))
    column = header.split().index("rate")
    rows = {line.split()[0]: line.split() for line in lines[lines.index(header) + 1:] if line.split()
            and line.split()[0] in ("q", "other")}
    assert rows["q"][column] == "1/90s" and rows["other"][column] == "-"
    out = io.StringIO()
    call_command("queuestatus", "--json", stdout=out)
    rate = next(q for name, q in orjson.loads(out.getvalue())["queues"].items() if name == "q")["counters"]
    assert rate["rate_limit"]["jobs"] == 1 and rate["rate_limit"]["window_started"] == 1
    assert rate["rate_limit"]["window_start"].endswith("Z")
    source.reset()
    samples = scrape()
    assert value(samples, "queueadmin_queue_rate_limit_jobs", queue="q") == 1
    assert value(samples, "queueadmin_queue_rate_limit_window_seconds", queue="q") == 90
    assert ("queueadmin_queue_rate_limit_jobs", (("queue", "other"),)) not in samples
