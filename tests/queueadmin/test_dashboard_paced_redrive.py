"""A requeue or redrive at a pace (a redrive's velocity): the dry run's pace
form, what the dry run says, the run's due times, the audit entry, and
``manage.py queueaction --pace``. The engine's side is
``tests/engine/transitions/test_requeue_purge.py``."""

from __future__ import annotations

import itertools
import re
from datetime import datetime, timedelta

import pytest
from django.test import Client

from engine import Broker
from queueadmin.dashboard import actions
from queueadmin.dashboard.snapshot import error_signature, group_key
from queueadmin.models import AuditEntry
from tests.queueadmin.dashboard_fixtures import claim_ids, confirm, kill, make_user, preview, push, queueaction


def due_times(broker: Broker, ids: list[str]) -> list[datetime | None]:
    jobs = {job_id: broker.get_job(job_id) for job_id in ids}
    assert all(job["status"] == "pending" for job in jobs.values())
    return [None if jobs[j]["not_before"] is None else datetime.fromisoformat(jobs[j]["not_before"]) for j in ids]


def assert_paced(due: list[datetime | None], every: float) -> None:
    """The first due at once (no due time), each next one ``every`` seconds after the one before."""
    assert due[0] is None and all(d is not None for d in due[1:]), due
    times = [d for d in due[1:] if d is not None]
    for before, after in itertools.pairwise(times):
        assert after - before == timedelta(seconds=every)


def form_fields(html: str, testid: str) -> dict[str, str]:
    """The named fields of the form marked ``data-testid=testid``, as the page would post them."""
    form = re.search(rf'<form[^>]*data-testid="{testid}".*?</form>', html, re.S)
    assert form is not None, f"no {testid} form"
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form.group(0)))
    selected = re.search(r'<select name="pace_seconds"[^>]*>.*?<option value="([^"]+)"', form.group(0), re.S)
    assert selected is not None
    return {**fields, "pace_seconds": selected.group(1)}


def test_a_group_redriven_at_a_pace_comes_back_one_job_at_a_time(broker: Broker, operator: Client) -> None:
    bad = [kill(broker, error=f"ValueError: bad row {n}") for n in range(4)]
    key = group_key("q", error_signature("ValueError: bad row 1"))

    dry = preview(operator, action="redrive", group=key, next="/dead/")
    html = dry.content.decode()
    assert dry.context["plan"].per_second is None
    # The dry run's pace form plans the same group again, with the pace typed in.
    fields = form_fields(html, "pace-form")
    assert fields["action"] == "redrive" and fields["group"] == key and fields["step"] == "preview"
    paced = operator.post("/actions/", {**fields, "pace_jobs": "2", "pace_seconds": "60"})
    plan = paced.context["plan"]
    assert plan.count == 4 and plan.ids == dry.context["plan"].ids and plan.per_second == 2 / 60
    assert plan.target.endswith(", paced at 2 per 60 s")
    assert plan.effects[0] == (
        "Paced at 2 per 60 s: the jobs are due one after another, in the order of the list, one every 30 s; the "
        "first at once, the last 1.5 min after you confirm (fewer, and sooner, if some of them change before then). "
        "Each waits as a delayed job, so it never holds back the jobs behind it; the queue's own limits still apply.")
    assert 'name="pace_jobs" min="1" step="1" value="2"' in paced.content.decode()

    confirm(operator, plan.token, reason="the parser is fixed; the partner API is still fragile", next="/dead/")

    assert_paced(due_times(broker, plan.ids), every=30)
    assert claim_ids(broker) == plan.ids[:1]  # the rest are not due yet
    entry = AuditEntry.objects.get()
    assert entry.action == "redrive" and entry.target.endswith(", paced at 2 per 60 s")
    assert sorted(entry.jobs.values_list("job_id", flat=True)) == sorted(bad)


def test_a_pace_on_a_requeue_of_selected_jobs_keeps_the_selection(broker: Broker, operator: Client) -> None:
    ids = [kill(broker, payload=n) for n in range(3)]
    kill(broker, payload="not selected")
    dry = preview(operator, action="requeue", ids=" ".join(ids))
    fields = form_fields(dry.content.decode(), "pace-form")
    assert fields["ids"] == " ".join(ids) and "queue" not in fields

    plan = operator.post("/actions/", {**fields, "pace_jobs": "1", "pace_seconds": "1"}).context["plan"]
    assert plan.ids == ids
    confirm(operator, plan.token)
    assert_paced(due_times(broker, ids), every=1)


def test_without_a_pace_every_job_is_due_at_once_and_one_job_has_no_pace_form(broker: Broker,
                                                                                operator: Client) -> None:
    ids = [kill(broker, payload=n) for n in range(3)]
    dry = preview(operator, action="redrive", queue="q")
    # The unit list always posts its seconds: a blank count is no pace, not an error.
    plan = operator.post("/actions/", {**form_fields(dry.content.decode(), "pace-form"), "pace_jobs": ""})
    assert plan.context["plan"].per_second is None and "paced" not in plan.context["plan"].target
    confirm(operator, plan.context["plan"].token)
    assert due_times(broker, ids) == [None, None, None]

    one = kill(broker, payload="alone")
    assert 'data-testid="pace-form"' not in preview(operator, action="requeue", ids=one).content.decode()


@pytest.mark.parametrize(("fields", "field", "message"), [
    ({"action": "purge", "queue": "q", "status": "dead", "pace_jobs": 1, "pace_seconds": 1}, "pace_jobs",
     "A pace goes with requeue and redrive only."),
    ({"action": "redrive", "queue": "q", "pace_jobs": 1}, "pace_seconds",
     "Give a pace's seconds too: so many jobs in so many seconds."),
    ({"action": "redrive", "queue": "q", "pace_jobs": 0, "pace_seconds": 1}, "pace_jobs", None),
    ({"action": "redrive", "queue": "q", "pace_jobs": 1, "pace_seconds": 0}, "pace_seconds", None),
])
def test_a_bad_pace_is_refused_and_plans_nothing(broker: Broker, operator: Client, fields: dict[str, object],
                                                 field: str, message: str | None) -> None:
    kill(broker)
    response = preview(operator, **fields)
    assert response.status_code == 422
    errors = response.context["form"].errors
    assert field in errors and (message is None or errors[field] == [message])
    assert b'name="plan"' not in response.content


def test_a_pace_too_slow_for_the_longest_delay_is_a_problem_of_the_dry_run() -> None:
    """The engine refuses a last job due in more than a year: the dry run says so, and offers no run."""
    plan = actions.Plan(action="redrive", ids=[f"j{n}" for n in range(400)], expect=["dead"] * 400,
                        pace_jobs=1, pace_seconds=86400)
    actions._pace_effect(plan)
    assert plan.problems == ["This pace cannot be run: at 1.15741e-05 a second, the last of 400 jobs would be due "
                             "in more than 366 days: pace them faster."]
    assert not plan.effects and not plan.runnable


def test_queueaction_redrives_at_a_pace(broker: Broker, db: None) -> None:
    make_user("ops", "view_dashboard", "requeue_job")
    ids = [kill(broker, "mail", payload=n) for n in range(3)]
    push(broker, "mail", ["fresh"])

    out = queueaction("redrive", "--queue", "mail", "--pace", "4/s", "--user", "ops", "--reason", "SMTP is back",
                      "--yes")

    assert "mail: dry run against seq" in out and ", paced at 4 per 1 s." in out
    assert "! Paced at 4 per 1 s: the jobs are due one after another" in out
    assert_paced(due_times(broker, ids), every=0.25)
    assert AuditEntry.objects.get().target == "queue=mail status=dead, paced at 4 per 1 s"
