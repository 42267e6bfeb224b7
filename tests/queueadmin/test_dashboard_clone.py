""""Clone as new job": the submit form filled in from a job, in the queue or
finished, that submits a new job with its own id after the operator's edits."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import orjson
from django.test import Client

from engine import Broker, ObjectStore
from queueadmin.history.records import FinishedJob
from queueadmin.models import AuditEntry
from tests.helpers import document
from tests.queueadmin.dashboard_fixtures import push


def field(html: str, name: str) -> str:
    found = re.search(rf'<textarea name="{name}"[^>]*>\s*(.*?)</textarea>', html, re.S) or \
        re.search(rf'<input type="[a-z]+" name="{name}" value="([^"]*)"', html)
    assert found is not None, name
    return found[1].replace("&quot;", '"')


def test_a_job_in_the_queue_is_cloned_into_a_new_job(broker: Broker, operator: Client, store: ObjectStore) -> None:
    [original] = push(broker, "emails", [{"to": "ada@example.com", "n": 1}], max_attempts=7)
    page = operator.get(f"/jobs/{original}/").content.decode()
    assert f'href="/submit/?from={original}" data-testid="clone-job"' in page

    form = operator.get(f"/submit/?from={original}").content.decode()
    assert f"A copy of job <a href=\"/jobs/{original}/\"" in form
    assert field(form, "queue") == "emails" and field(form, "max_attempts") == "7"
    assert orjson.loads(field(form, "payload")) == {"to": "ada@example.com", "n": 1}
    assert field(form, "reason") == f"clone of job {original}"
    push_id = field(form, "push_id")
    assert push_id != original

    # Edited, then submitted: a new job beside the original.
    sent = operator.post("/submit/", {"queue": "emails", "payload": '{"to": "ada@example.com", "n": 2}',
                                      "max_attempts": "7", "delay_seconds": "0", "reason": field(form, "reason"),
                                      "push_id": push_id})
    assert sent.status_code == 200 and sent.context["created"] == push_id
    jobs = {j["id"]: j for j in document(store)["jobs"]}
    assert jobs[push_id]["payload"] == {"to": "ada@example.com", "n": 2} and jobs[push_id]["max_attempts"] == 7
    assert jobs[original]["payload"] == {"to": "ada@example.com", "n": 1}
    entry = AuditEntry.objects.get(action="submit")
    assert entry.reason == f"clone of job {original}"


def test_a_finished_job_is_cloned_from_its_record_while_it_keeps_the_whole_payload(
        broker: Broker, operator: Client) -> None:
    now = datetime.now(UTC)
    common = {"queue": "reports", "how": "completed", "finished_at": now, "was": "running",
              "enqueued_at": now - timedelta(seconds=5), "attempts": 1, "max_attempts": 3}
    FinishedJob.objects.create(job_id="done-1", payload='{"month": 11}', payload_bytes=13, **common)
    FinishedJob.objects.create(job_id="cut-1", payload='{"rows": [1, 2', payload_bytes=90_000, **common)

    page = operator.get("/jobs/done-1/").content.decode()
    assert 'href="/submit/?from=done-1" data-testid="clone-job"' in page
    form = operator.get("/submit/?from=done-1").content.decode()
    assert field(form, "queue") == "reports" and orjson.loads(field(form, "payload")) == {"month": 11}

    assert 'data-testid="clone-job"' not in operator.get("/jobs/cut-1/").content.decode()
    cut = operator.get("/submit/?from=cut-1").content.decode()
    assert "Job cut-1 cannot be cloned: its record keeps only the start of its payload." in cut
    unknown = operator.get("/submit/?from=nope").content.decode()
    assert "Job nope cannot be cloned: it is neither in the queue nor among the jobs that finished" in unknown


def test_no_clone_button_without_the_submit_permission(broker: Broker, viewer: Client) -> None:
    [job_id] = push(broker, "q", [1])
    assert 'data-testid="clone-job"' not in viewer.get(f"/jobs/{job_id}/").content.decode()
