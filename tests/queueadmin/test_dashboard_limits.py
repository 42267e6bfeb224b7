"""A queue's concurrency limit, set from its page and from ``manage.py
queueaction``: a dry run saying what it changes, a run through the leading
broker, an audit entry, and claims that start no more of the queue's jobs
than the limit allows."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from engine import Broker
from engine.ops import claim_op
from queueadmin.dashboard.source import source
from queueadmin.models import AuditEntry
from tests.queueadmin.dashboard_fixtures import (
    act,
    claim_ids,
    client_for,
    confirm,
    make_user,
    preview,
    push,
    queue_counters,
    queueaction,
)


def test_a_limit_set_from_the_queue_page_caps_claims_and_is_audited(broker: Broker, operator: Client) -> None:
    push(broker, "q", [1, 2, 3, 4])
    page = operator.get("/queues/q/").content.decode()
    assert 'data-testid="limit-form"' in page and 'name="action" value="limit"' in page

    dry = preview(operator, action="limit", queue="q", max_running=2, next="/queues/q/")
    plan = dry.context["plan"]
    assert plan.runnable and plan.target == "queue=q max_running=2"
    assert plan.notes == ["Queue q (now no limit; 0 running now) starts a job only while fewer than 2 of its jobs "
                          "run, across every worker."]
    assert "At most <strong>2</strong> jobs of <strong>q</strong> will run at once" in dry.content.decode()
    confirm(operator, plan.token, reason="the SMTP relay is struggling", next="/queues/q/")
    assert queue_counters(broker)["max_running"] == 2
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.queue, entry.target, entry.outcome) == ("limit", "q", "queue=q max_running=2", "ok")
    assert entry.detail.startswith("limited q to 2 running jobs (was no limit)")

    assert len(claim_ids(broker)) == 2 and claim_ids(broker) == []
    source.reset()
    page = operator.get("/queues/q/").content.decode()
    assert 'data-testid="limit"' in page and "(at most 2)</span>" in page and 'value="2"' in page
    assert '<span class="muted" title="its concurrency limit"> / 2</span>' in operator.get("/").content.decode()


def test_a_lower_limit_says_the_running_jobs_carry_on_and_removing_it_lets_claims_through(
    broker: Broker, operator: Client,
) -> None:
    push(broker, "q", [1, 2, 3, 4, 5])
    assert len(claim_ids(broker, 3)) == 3
    dry = preview(operator, action="limit", queue="q", max_running=1)
    assert dry.context["plan"].notes[0].startswith("Queue q (now no limit) has 3 jobs running: more than the new "
                                                   "limit. They carry on; no job of the queue starts until fewer "
                                                   "than 1 run.")
    confirm(operator, dry.context["plan"].token)
    assert claim_ids(broker) == []

    dry = preview(operator, action="limit", queue="q")  # blank: no limit
    assert "hands out its jobs as fast as workers claim them" in dry.context["plan"].notes[0]
    assert "<strong>q</strong> will have no concurrency limit" in dry.content.decode()
    confirm(operator, dry.context["plan"].token)
    assert "max_running" not in queue_counters(broker)
    assert len(claim_ids(broker)) == 2
    last = AuditEntry.objects.order_by("id").last()
    assert last is not None and last.detail.startswith("removed the limit of q (was at most 1)")


def test_the_same_limit_again_offers_nothing_and_an_overtaken_one_says_so(broker: Broker, operator: Client) -> None:
    push(broker, "q", [1])
    dry = preview(operator, action="limit", queue="q")
    assert dry.context["plan"].problems == ["Queue q has no limit."] and not dry.context["plan"].token
    first = preview(operator, action="limit", queue="q", max_running=3).context["plan"]
    act(operator, action="limit", queue="q", max_running=3)
    assert preview(operator, action="limit", queue="q", max_running=3).context["plan"].problems == [
        "Queue q already has this limit."]
    confirm(operator, first.token)
    last = AuditEntry.objects.order_by("id").last()
    assert last is not None and last.detail.startswith("q already had this limit (set since the dry run)")


@pytest.mark.parametrize(("fields", "message"), [
    ({"action": "limit", "queue": "q", "max_running": 0}, "Ensure this value is greater than or equal to 1."),
    ({"action": "limit", "queue": "q", "max_running": 100_001}, "less than or equal to 100000"),
    ({"action": "limit", "queue": "q", "max_running": "two"}, "Enter a whole number."),
    ({"action": "pause", "queue": "q", "max_running": 2}, "A concurrency limit goes with the limit action only."),
    ({"action": "limit", "max_running": 2}, "Limit takes one queue (and its limit), and nothing else."),
])
def test_a_bad_limit_is_refused_and_changes_nothing(broker: Broker, operator: Client, fields: dict[str, Any],
                                                    message: str) -> None:
    push(broker, "q", [1])
    dry = preview(operator, **fields)
    assert dry.status_code == 422 and message in dry.content.decode()
    assert "max_running" not in queue_counters(broker) and not queue_counters(broker)["paused"]
    assert not AuditEntry.objects.exists()


def test_setting_a_limit_needs_pause_queue_and_read_only_staff_see_no_form(broker: Broker, viewer: Client) -> None:
    push(broker, "q", [1])
    assert b'data-testid="limit-form"' not in viewer.get("/queues/q/").content
    assert preview(viewer, action="limit", queue="q", max_running=1).status_code == 403
    scheduler = client_for(make_user("scheduler", "view_dashboard", "pause_schedule"))
    assert preview(scheduler, action="limit", queue="q", max_running=1).status_code == 403
    assert "max_running" not in queue_counters(broker)


# -- manage.py queueaction, queuestatus and /metrics -----------------------------------------------



def test_queueaction_sets_and_removes_a_limit_and_never_lifts_one_by_omission(broker: Broker, db: None) -> None:
    make_user("ops", "view_dashboard", "pause_queue")
    push(broker, "q", [1])
    out = queueaction("limit", "--queue", "q", "--max-running", "3", "--user", "ops", "--reason", "r", "--yes")
    assert out.startswith("Limit · q: dry run against seq ") and out.endswith(
        "Limited q to 3 running jobs (was no limit).\n")
    assert "would be" not in out  # an action on a queue: no job count
    again = queueaction("limit", "--queue", "q", "--max-running", "3", "--user", "ops", "--reason", "r", "--yes")
    assert "! Queue q already has this limit." in again  # exit 0: a deploy script may set it twice
    with pytest.raises(CommandError, match="limit needs --max-running N"):
        queueaction("limit", "--queue", "q", "--user", "ops", "--reason", "r", "--yes")
    with pytest.raises(CommandError, match="--max-running: Ensure this value is greater than or equal to 1"):
        queueaction("limit", "--queue", "q", "--max-running", "0", "--user", "ops", "--reason", "r", "--yes")
    assert queue_counters(broker)["max_running"] == 3
    assert queueaction("limit", "--queue", "q", "--max-running", "none", "--user", "ops", "--reason", "r",
               "--yes").endswith("Removed the limit of q (was at most 3).\n")
    assert "max_running" not in queue_counters(broker)


def test_queuestatus_and_metrics_show_the_limit(broker: Broker, settings: Any) -> None:
    from tests.queueadmin.test_metrics_endpoint import TOKEN, scrape, value

    settings.QUEUE_API_TOKEN = TOKEN
    push(broker, "q", [1])
    push(broker, "other", [1])
    broker.execute(claim_op("w", ["q"], policy=broker.policy))
    from engine.ops import limit_op

    broker.execute(limit_op("q", 4))
    out = io.StringIO()
    call_command("queuestatus", stdout=out)
    lines = out.getvalue().splitlines()
    header = next(line for line in lines if line.startswith("queue "))
    column = header.split().index("limit")
    rows = {line.split()[0]: line.split() for line in lines[lines.index(header) + 1:] if line.split()
            and line.split()[0] in ("q", "other")}
    assert rows["q"][column] == "4" and rows["other"][column] == "-"
    source.reset()
    samples = scrape()
    assert value(samples, "queueadmin_queue_max_running", queue="q") == 4
    assert ("queueadmin_queue_max_running", (("queue", "other"),)) not in samples
