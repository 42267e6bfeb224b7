"""Stop: an operator stops running jobs from the dashboard (``stop_job``).

A stopped job goes to the dead letters at once, kept with its payload and
history to inspect, redrive or purge; its lease is revoked, so its worker
is told (its lease watch, or its next heartbeat) and its late result is
refused. Each run goes through a real broker (memory store) as an operator
takes it: the dry run, then its confirmation.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from engine import STOPPED_ERROR, Broker, LeaseLost, ObjectStore
from engine.ops import claim_op, complete_op
from queueadmin.dashboard.source import source
from queueadmin.models import AuditEntry
from tests.helpers import document, stored
from tests.queueadmin.dashboard_fixtures import act, client_for, confirm, kill, make_user, preview, push
from tests.queueadmin.test_api_forward import as_a_standby


@pytest.fixture
def stopper(db: None) -> Client:
    """May view and stop, and nothing else."""
    return client_for(make_user("stopper", "view_dashboard", "stop_job"))


def running(broker: Broker, n: int = 1) -> list[tuple[str, str]]:
    """Push ``n`` jobs to q and claim them: their ids and leases."""
    push(broker, "q", list(range(n)))
    claimed = broker.execute(claim_op("w1", ["q"], policy=broker.policy, max_jobs=n))
    return [(job.id, job.lease) for job in claimed]


def test_a_running_job_stopped_from_its_page_goes_to_the_dead_letters_and_its_worker_loses_it(
    broker: Broker, stopper: Client, store: ObjectStore,
) -> None:
    [(job_id, lease)] = running(broker)
    page = stopper.get(f"/jobs/{job_id}/").content.decode()
    assert 'name="action" value="stop"' in page and ">Stop</button>" in page

    dry = preview(stopper, action="stop", ids=job_id)
    plan = dry.context["plan"]
    assert (plan.ids, plan.expect) == ([job_id], ["running"])
    text = dry.content.decode()
    assert "would be stopped, and kept in the dead letters." in text
    assert "goes to the dead letters at once" in text and "is running now" in text
    response = confirm(stopper, plan.token, reason="runaway export")

    assert response.status_code == 302
    doc = document(store)
    assert not doc["jobs"] and [d["id"] for d in doc["dead"]] == [job_id]
    assert doc["dead"][0]["error"] == STOPPED_ERROR
    with pytest.raises(LeaseLost):  # the worker's late result is refused
        broker.execute(complete_op(job_id, lease))
    entry = AuditEntry.objects.get()
    assert (entry.username, entry.action, entry.reason, entry.outcome, entry.count) == (
        "stopper", "stop", "runaway export", "ok", 1)
    assert "stopped 1 running job, kept in the dead letters" in entry.detail
    # Kept: its page says so (read afresh: a page within a second of the last reads the same
    # snapshot, which the live updates then replace), and offers no Stop any more.
    source.reset()
    response = stopper.get(f"/jobs/{job_id}/")
    page = response.content.decode()
    assert "JobStopped" in page and 'value="stop"' not in page
    # The stop reads before what it did (its audit entry is written just after its commit).
    assert [e.text for e in response.context["events"]][-3:] == [
        "stopped by stopper", "attempt failed", "moved to the dead letters"]


def test_a_selection_stops_only_its_running_jobs_and_says_what_it_left_out(
    broker: Broker, stopper: Client, store: ObjectStore,
) -> None:
    dead = kill(broker)
    [(first, _), (second, _)] = running(broker, 2)
    [pending] = push(broker, "q", ["later"])

    dry = preview(stopper, action="stop", ids=f"{first} {pending} {dead} {second} gone")
    plan = dry.context["plan"]
    assert (plan.ids, plan.expect) == ([first, second], ["running", "running"])
    text = dry.content.decode()
    assert f"Job {pending} is pending, not running: it is left out." in text
    assert f"Job {dead} is already dead" not in text and f"Job {dead} is dead, not running: it is left out." in text
    assert "not in the document any more" in text

    # One of them finishes between the dry run and the run: it is left alone, and the result says so.
    broker.execute(complete_op(second, running_lease(store, second)))
    assert confirm(stopper, plan.token).status_code == 302
    assert {d["id"] for d in document(store)["dead"]} == {dead, first}
    entry = AuditEntry.objects.get()
    assert list(entry.jobs.values_list("job_id", flat=True)) == [first]
    assert "1 of 2 jobs was no longer running and was left alone" in entry.detail


def running_lease(store: ObjectStore, job_id: str) -> str:
    [job] = [j for j in document(store)["jobs"] if j["id"] == job_id]
    return str(job["lease"]["token"])


def test_every_running_job_a_filter_matches_is_stopped_and_no_other(
    broker: Broker, stopper: Client, store: ObjectStore,
) -> None:
    ids = [job_id for job_id, _ in running(broker, 3)]
    [pending] = push(broker, "q", ["waits"])
    listed = stopper.get("/jobs/?status=running").content.decode()
    assert "Stop all 3 matching" in listed
    assert "Stop all" not in stopper.get("/jobs/?status=pending").content.decode()

    dry = preview(stopper, action="stop", filter="queue=q")
    plan = dry.context["plan"]
    assert sorted(plan.ids) == sorted(ids)
    assert "1 matching job is not running: it is left out." in dry.content.decode()
    assert confirm(stopper, plan.token).status_code == 302
    doc = document(store)
    assert [j["id"] for j in doc["jobs"]] == [pending] and sorted(d["id"] for d in doc["dead"]) == sorted(ids)


def test_stopping_needs_its_own_permission_and_a_refusal_changes_nothing(
    broker: Broker, operator: Client, store: ObjectStore,
) -> None:
    """The operator may requeue and purge, not stop: no button, and a
    posted stop is refused without touching the document or the audit log."""
    [(job_id, _)] = running(broker)
    assert 'value="stop"' not in operator.get(f"/jobs/{job_id}/").content.decode()
    assert 'value="stop"' not in operator.get("/jobs/").content.decode()
    before = stored(store)
    assert act(operator, action="stop", ids=job_id, reason="r").status_code == 403
    assert stored(store) == before and not AuditEntry.objects.exists()
    both = client_for(make_user("both", "view_dashboard", "stop_job", "requeue_job"))
    assert act(both, action="stop", ids=job_id, reason="r").status_code == 302
    # Redriven, it runs again from the start.
    assert act(both, action="requeue", ids=job_id, reason="fixed").status_code == 302
    [job] = document(store)["jobs"]
    assert (job["id"], job["status"], job["attempts"]) == (job_id, "pending", 0)


def test_a_stop_on_a_standby_runs_on_the_leader_and_is_audited_there_as_here(
    broker: Broker, store: ObjectStore, monkeypatch: pytest.MonkeyPatch, settings: Any, db: None,
) -> None:
    """A standby's dashboard forwards the stop, signed, to the leader's
    operator endpoint (kind ``stop``), as it does every action."""
    settings.SECRET_KEY = "test-cluster-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz"  # never the dev key
    stopper = client_for(make_user("stopper", "view_dashboard", "stop_job"))  # signed in under that key
    [(job_id, _)] = running(broker)
    as_a_standby(broker, monkeypatch)
    assert act(stopper, action="stop", ids=job_id, reason="from b").status_code == 302
    entry = AuditEntry.objects.get()
    assert entry.outcome == "ok" and "on the leader http://leader.test:8000" in entry.detail
    assert [d["id"] for d in document(store)["dead"]] == [job_id]
