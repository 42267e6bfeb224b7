"""Run now: an operator makes delayed jobs due at once from the dashboard
(``requeue_job``): a retry waiting out its backoff, or a job pushed with a
delay. Each keeps its place in its queue and is claimed in its turn, as if
its delay had run out now; its attempts and last error stay. Each run goes
through a real broker (memory store) as an operator takes it: the dry run,
then its confirmation, audited.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from engine import Broker, ObjectStore
from engine.ops import claim_op, fail_op, purge_op
from queueadmin.dashboard.source import source
from queueadmin.models import AuditEntry
from tests.helpers import document, stored
from tests.queueadmin.dashboard_fixtures import act, claim_ids, client_for, confirm, make_user, preview, push
from tests.queueadmin.test_api_forward import as_a_standby


def in_backoff(broker: Broker, *, seconds: float = 3600, error: str = "ConnectionError: upstream down") -> str:
    """Push a job to q, claim it and fail it with a retry in ``seconds``: its id."""
    [job_id] = push(broker, "q", [{"order": 7}], max_attempts=5)
    [job] = broker.execute(claim_op("w1", ["q"], policy=broker.policy))
    broker.execute(fail_op(job.id, job.lease, error=error, retry_in_seconds=seconds, policy=broker.policy))
    return job_id


def job_of(store: ObjectStore, job_id: str) -> dict[str, object]:
    [job] = [j for j in document(store)["jobs"] if j["id"] == job_id]
    return job


def test_a_retry_in_its_backoff_run_now_from_its_page_is_claimed_next_and_audited(
    broker: Broker, operator: Client, store: ObjectStore,
) -> None:
    retry = in_backoff(broker)
    [later] = push(broker, "q", ["pushed after it failed"])
    page = operator.get(f"/jobs/{retry}/").content.decode()
    assert 'name="action" value="run_now"' in page and ">Run now</button>" in page
    assert claim_ids(broker, 10) == [later]  # only the job pushed after it is due

    dry = preview(operator, action="run_now", ids=retry)
    plan = dry.context["plan"]
    assert (plan.ids, plan.expect) == ([retry], ["pending"])
    text = dry.content.decode()
    assert "</strong> job would be made due now." in text
    assert "keeps its place in its queue and is claimed in its turn" in text
    response = confirm(operator, plan.token, reason="upstream is back")

    assert response.status_code == 302
    job = job_of(store, retry)
    assert (job["status"], job.get("not_before"), job["attempts"]) == ("pending", None, 1)
    assert job["last_error"] == "ConnectionError: upstream down"
    assert claim_ids(broker, 10) == [retry]
    entry = AuditEntry.objects.get()
    assert (entry.username, entry.action, entry.reason, entry.outcome, entry.count) == (
        "operator", "run_now", "upstream is back", "ok", 1)
    assert "made 1 delayed job due now" in entry.detail
    source.reset()
    events = [e.text for e in operator.get(f"/jobs/{retry}/").context["events"]]
    assert "made due now by operator" in events


def test_a_selection_makes_only_its_delayed_jobs_due_and_says_what_it_left_out(
    broker: Broker, operator: Client, store: ObjectStore,
) -> None:
    retry = in_backoff(broker)
    [due] = push(broker, "q", ["due now"])
    [scheduled] = push(broker, "q", ["tomorrow"], delay_seconds=86_400)
    [running] = push(broker, "r", ["runs"])
    claim_ids(broker, 1, queue="r")

    dry = preview(operator, action="run_now", ids=f"{retry} {due} {scheduled} {running} gone")
    plan = dry.context["plan"]
    assert (plan.ids, plan.expect) == ([retry, scheduled], ["pending", "pending"])
    text = dry.content.decode()
    assert f"Job {due} is due already: it is left out." in text
    assert f"Job {running} is running, not pending: it is left out." in text
    assert "not in the document any more" in text

    # One of them is purged between the dry run and the run: it is left alone, and the result says so.
    broker.execute(purge_op([scheduled]))
    assert confirm(operator, plan.token).status_code == 302
    assert job_of(store, retry).get("not_before") is None
    entry = AuditEntry.objects.get()
    assert list(entry.jobs.values_list("job_id", flat=True)) == [retry]
    assert "1 of 2 jobs was due by then, or no longer pending, and was left alone" in entry.detail


def test_every_delayed_job_a_filter_matches_is_made_due_and_no_other(
    broker: Broker, operator: Client, store: ObjectStore,
) -> None:
    retries = [in_backoff(broker, seconds=600 + i) for i in range(3)]
    [due] = push(broker, "q", ["due"])
    listed = operator.get("/jobs/?queue=q&status=pending").content.decode()
    assert "Run all 3 delayed now" in listed
    assert "Run all" not in operator.get("/jobs/?queue=q&status=dead").content.decode()

    dry = preview(operator, action="run_now", filter="queue=q&status=pending")
    plan = dry.context["plan"]
    assert sorted(plan.ids) == sorted(retries)
    assert "1 matching pending job is due already: it is left out." in dry.content.decode()
    assert confirm(operator, plan.token).status_code == 302
    assert all(job_of(store, job_id).get("not_before") is None for job_id in retries)
    # Each in its place: the retries went to the back when they failed, before the due job was pushed.
    assert claim_ids(broker, 10) == [*retries, due]


def test_run_now_needs_requeue_permission_and_a_refusal_changes_nothing(
    broker: Broker, viewer: Client, store: ObjectStore,
) -> None:
    retry = in_backoff(broker)
    assert 'value="run_now"' not in viewer.get(f"/jobs/{retry}/").content.decode()
    before = stored(store)
    assert act(viewer, action="run_now", ids=retry, reason="r").status_code == 403
    assert stored(store) == before and not AuditEntry.objects.exists()


def test_a_job_that_is_due_offers_no_run_now(broker: Broker, operator: Client) -> None:
    [job_id] = push(broker, "q", ["due"])
    assert 'value="run_now"' not in operator.get(f"/jobs/{job_id}/").content.decode()


def test_run_now_on_a_standby_runs_on_the_leader_and_is_audited_there_as_here(
    broker: Broker, store: ObjectStore, monkeypatch: pytest.MonkeyPatch, settings: Any, db: None,
) -> None:
    """A standby's dashboard forwards the run now, signed, to the leader's
    operator endpoint (kind ``make_due``), as it does every action."""
    settings.SECRET_KEY = "test-cluster-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz"  # never the dev key
    client = client_for(make_user("op2", "view_dashboard", "requeue_job"))  # signed in under that key
    retry = in_backoff(broker)
    as_a_standby(broker, monkeypatch)
    assert act(client, action="run_now", ids=retry, reason="from b").status_code == 302
    entry = AuditEntry.objects.get()
    assert entry.outcome == "ok" and "on the leader http://leader.test:8000" in entry.detail
    assert job_of(store, retry).get("not_before") is None


def test_the_queue_page_offers_to_run_its_delayed_jobs_now_beside_when_the_next_comes_due(
    broker: Broker, operator: Client, viewer: Client, store: ObjectStore,
) -> None:
    retry = in_backoff(broker)
    [due] = push(broker, "q", ["due"])
    page = operator.get("/queues/q/").content.decode()
    assert "Run them now" in page and 'name="filter" value="queue=q&amp;status=delayed"' in page
    assert "Run them now" not in viewer.get("/queues/q/").content.decode()
    assert 'href="/jobs/?queue=q&amp;status=delayed"' in page  # "list them"

    plan = preview(operator, action="run_now", filter="queue=q&status=delayed").context["plan"]
    assert plan.ids == [retry]
    assert confirm(operator, plan.token).status_code == 302
    assert job_of(store, retry).get("not_before") is None and job_of(store, due).get("not_before") is None
    source.reset()
    assert "Run them now" not in operator.get("/queues/q/").content.decode()  # nothing comes due any more


def test_the_delayed_filter_lists_pending_jobs_not_yet_due_soonest_first_and_its_actions_take_only_those(
    broker: Broker, operator: Client, store: ObjectStore,
) -> None:
    late = in_backoff(broker, seconds=3000)
    [due] = push(broker, "q", ["due"])
    [soon] = push(broker, "q", ["soon"], delay_seconds=60)
    [other] = push(broker, "r", ["other queue"], delay_seconds=30)
    response = operator.get("/jobs/", {"status": "delayed"})
    assert [row["job"]["id"] for row in response.context["rows"]] == [other, soon, late]  # by due time
    assert '<option selected>delayed</option>' in response.content.decode()
    listed = operator.get("/jobs/", {"queue": "q", "status": "delayed"})
    assert [row["job"]["id"] for row in listed.context["rows"]] == [soon, late]
    page = listed.content.decode()
    assert "Run all 2 delayed now" in page and "Purge all 2 matching" in page

    plan = preview(operator, action="purge", filter="queue=q&status=delayed").context["plan"]
    assert sorted(plan.ids) == sorted([soon, late])
    assert confirm(operator, plan.token, reason="not wanted after all").status_code == 302
    assert sorted(j["id"] for j in document(store)["jobs"]) == sorted([due, other])
