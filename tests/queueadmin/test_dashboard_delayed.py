"""The dashboard in format 3: counts, lists, job pages, the status command and
purges with delayed jobs in delayed segment objects (``docs/dashboard.md``,
"Segments").

A real broker with tiny segments (10 jobs, 20 kept at the front) and a
delayed horizon of a second seals delayed jobs due in an hour into delayed
segments of a memory store; the pages are read as a user reads them.
"""

from __future__ import annotations

from io import StringIO
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from django.core.management import call_command
from django.test import Client

from engine import Broker, Policy, parse_document
from queueadmin.dashboard.snapshot import moment
from queueadmin.models import AuditEntry
from tests.queueadmin.dashboard_fixtures import clock_ahead, confirm, preview, push
from tests.queueadmin.test_dashboard_segments import document, every_pending, settle, small_segments

if TYPE_CHECKING:
    from pytest_django.fixtures import Settings as SettingsWrapper

__all__ = ["small_segments"]  # a fixture this module's own builds on
HOUR = 3600


@pytest.fixture
def delayed_segments(small_segments: None, settings: SettingsWrapper) -> None:
    """Format 2 with segments of 10 jobs, 20 at the front, and delayed jobs
    due more than a second ahead (in practice, two refill leads) sealed past
    the share (set before the broker starts)."""
    settings.QUEUE_DELAYED_HORIZON_SECONDS = 1.0


def delayed_refs(doc: dict[str, Any], queue: str = "q") -> list[dict[str, Any]]:
    return doc.get("lanes", {}).get(queue, {}).get("delayed", [])  # type: ignore[no-any-return]


def delayed_backlog(broker: Broker, n: int = 100) -> list[str]:
    """Push ``n`` jobs due in an hour (payloads 0..n-1) and wait until all but 20 are sealed."""
    ids = push(broker, "q", list(range(n)), delay_seconds=HOUR)
    settle(broker, lambda doc: sum(ref["total"] for ref in delayed_refs(doc)) == n - 20,
           what="the delayed jobs sealed")
    return ids


def test_counts_include_the_delayed_jobs_in_delayed_segments_as_pending_not_ready(
        delayed_segments: None, broker: Broker, viewer: Client) -> None:
    delayed_backlog(broker)
    doc = document(broker.store)
    assert doc["format"] == 3 and len(doc["jobs"]) == 20
    response = viewer.get("/")
    row = next(r for r in response.context["rows"] if r["q"].name == "q")
    assert row["q"].pending == 100 and row["q"].ready == 0
    assert row["q"].in_segments == 80 and row["q"].segments == len(delayed_refs(doc))
    assert row["q"].segment_bytes == sum(ref["size"] for ref in delayed_refs(doc)) > 0
    assert row["q"].oldest_sealed_at == min(moment(ref["sealed_at"]) for ref in delayed_refs(doc))
    assert response.context["totals"]["pending"] == 100

    out = StringIO()
    call_command("queuestatus", "--json", stdout=out)
    q = orjson.loads(out.getvalue())["queues"]["q"]
    assert q["delayed"] == 20 and q["in_segments"] == 80 and q["ready"] == 0


def test_a_queues_pending_list_ends_with_its_delayed_segments_in_due_order(
        delayed_segments: None, broker: Broker, viewer: Client) -> None:
    delayed_backlog(broker, 40)
    push(broker, "q", ["now"])
    # The document's jobs in FIFO order (the soonest-due share of the delayed
    # ones, then the one pushed now), then the delayed segments' jobs, due later.
    listed = every_pending(viewer)
    assert listed[:21] == [*range(20), "now"] and sorted(listed[21:]) == list(range(20, 40))
    rows = viewer.get("/jobs/", {"queue": "q", "status": "pending", "page": 1}).context["rows"]
    sealed = {ref["key"] for ref in delayed_refs(document(broker.store))}
    assert {row["segment"] for row in rows if row["segment"]} == sealed


def test_a_job_page_finds_a_job_in_a_delayed_segment(
        delayed_segments: None, broker: Broker, viewer: Client) -> None:
    ids = delayed_backlog(broker)
    response = viewer.get(f"/jobs/{ids[-1]}/")
    assert response.status_code == 200 and response.context["found"]
    assert response.context["in_segment"] and response.context["status"] == "pending"
    assert "/q/delayed/" in response.context["in_segment"]
    assert response.context["job"]["payload"] == 99 and response.context["job"]["not_before"]


def test_a_purge_of_a_queues_pending_jobs_counts_and_drops_its_delayed_segments(
        delayed_segments: None, broker: Broker, operator: Client) -> None:
    delayed_backlog(broker)
    dry = preview(operator, action="purge", queue="q", status="pending")
    plan = dry.context["plan"]
    assert plan.count == 100 and plan.segment_jobs == 80
    seq = document(broker.store)["seq"]
    done = confirm(operator, plan.token, reason="stale schedule", confirm_text="purge 100")
    assert done.status_code == 302
    doc = document(broker.store)
    assert doc["seq"] == seq + 1 and "q" not in doc["lanes"] and doc["jobs"] == []
    assert doc["queues"]["q"]["purged"] == 100
    assert AuditEntry.objects.get(action="purge").count == 100


def test_the_large_document_alert_leaves_out_the_delayed_jobs_in_delayed_segments(
        delayed_segments: None, broker: Broker, viewer: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    from queueadmin.dashboard import pages
    from queueadmin.dashboard.source import source
    from tests.helpers import stored

    delayed_backlog(broker)
    monkeypatch.setattr(pages, "LARGE_DOCUMENT_BYTES", len(stored(broker.store)))
    source.reset()
    [alert] = [a.text for a in viewer.get("/").context["alerts"] if "every commit writes all of it" in a.text]
    assert "20 delayed jobs (q 20)" in alert  # the 80 in delayed segments cost a commit nothing
    assert "within 1 s (QUEUE_DELAYED_HORIZON_SECONDS)" in alert


def test_jobs_due_in_delayed_segments_count_as_ready_and_not_in_the_document(
        delayed_segments: None, broker: Broker, viewer: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs due together past a share of the front wait in their delayed
    segment until claims make room (docs/format.md, "Refill (delayed)"): once
    due they are ready, and the large-document alert still counts only what
    the document holds. The page is read two hours on, the jobs due in one."""
    from datetime import timedelta

    from queueadmin.dashboard import pages
    from tests.helpers import stored


    delayed_backlog(broker)
    monkeypatch.setattr(pages, "LARGE_DOCUMENT_BYTES", len(stored(broker.store)))
    clock_ahead(monkeypatch, timedelta(hours=2))
    response = viewer.get("/")
    row = next(r for r in response.context["rows"] if r["q"].name == "q")
    assert row["q"].pending == 100 and row["q"].ready == 100 and row["q"].due_away == 80
    [alert] = [a.text for a in response.context["alerts"] if "every commit writes all of it" in a.text]
    assert "20 ready pending jobs (q 20)" in alert and "delayed job" not in alert


def test_the_queue_page_says_when_the_next_job_comes_due_from_the_document_or_a_delayed_segment(
        delayed_segments: None, broker: Broker, viewer: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """An operator whose queue holds jobs that are not due yet (scheduled, or
    retries waiting out their backoff) sees when the next one comes due: 20
    due in ten minutes stay in the document (the front share), 80 due in an
    hour go to delayed segments. Read now, the next is in the document; read
    half an hour on, when those 20 are due, it is the first delayed segment's."""
    from datetime import datetime, timedelta


    push(broker, "q", list(range(20)), delay_seconds=600)
    push(broker, "q", list(range(20, 100)), delay_seconds=HOUR)
    settle(broker, lambda doc: sum(ref["total"] for ref in delayed_refs(doc)) == 80, what="the later 80 sealed")
    doc = document(broker.store)
    soonest_here = min(datetime.fromisoformat(job["not_before"]) for job in doc["jobs"])
    soonest_away = min(datetime.fromisoformat(ref["first_due"]) for ref in delayed_refs(doc))
    assert soonest_here + timedelta(minutes=49) < soonest_away  # the 20 due soon stayed in the document

    page = viewer.get("/queues/q/")
    assert page.context["q"].next_due_at == soonest_here
    assert b'data-testid="next-due"' in page.content and b"(in 10 min)" in page.content


    clock_ahead(monkeypatch, timedelta(minutes=30))
    page = viewer.get("/queues/q/")
    assert page.context["q"].ready == 20 and page.context["q"].next_due_at == soonest_away
    assert b"(in 30 min)" in page.content


    # Everything due: a delayed segment due in the past names no time, and the page says none.
    clock_ahead(monkeypatch, timedelta(hours=2))
    page = viewer.get("/queues/q/")
    assert page.context["q"].ready == 100 and page.context["q"].next_due_at is None
    assert b'data-testid="next-due"' not in page.content
    # manage.py queuestatus says the same, from the same document.
    from queueadmin.management.commands.queuestatus import summarize
    from tests.helpers import stored

    state = parse_document("queue.json", stored(broker.store), policy=Policy())
    assert summarize(state, now=soonest_here - timedelta(minutes=1))["queues"]["q"]["next_due"] == soonest_here
    assert summarize(state, now=soonest_here + timedelta(minutes=1))["queues"]["q"]["next_due"] == soonest_away
    assert summarize(state, now=soonest_away + timedelta(hours=1))["queues"]["q"]["next_due"] is None


def test_the_queue_page_says_nothing_comes_due_when_every_job_is_due(
        delayed_segments: None, broker: Broker, viewer: Client) -> None:
    push(broker, "q", list(range(5)))
    page = viewer.get("/queues/q/")
    assert page.context["q"].pending == 5 and page.context["q"].next_due_at is None
    assert b"Next due" not in page.content


def test_run_now_of_a_job_in_a_delayed_segment_brings_it_back_due_in_its_place(
        delayed_segments: None, broker: Broker, operator: Client) -> None:
    ids = delayed_backlog(broker)
    sealed = ids[-1]
    assert sealed not in {job["id"] for job in document(broker.store)["jobs"]}
    page = operator.get(f"/jobs/{sealed}/").content.decode()
    assert 'value="run_now"' in page  # found in its delayed segment, not due: offered
    assert "waits in delayed segment object" in page and "Running it now or purging it writes" in page
    # The queue's pending list pages into its segments; "all N delayed" counts the document's, as its dry run takes.
    listed = operator.get("/jobs/", {"queue": "q", "status": "pending"}).content.decode()
    assert "Run all 20 delayed now" in listed
    assert len(preview(operator, action="run_now", filter="queue=q&status=pending").context["plan"].ids) == 20

    plan = preview(operator, action="run_now", ids=sealed).context["plan"]
    assert (plan.ids, plan.expect) == ([sealed], ["pending"])
    assert confirm(operator, plan.token, reason="now").status_code == 302

    doc = document(broker.store)
    [job] = [j for j in doc["jobs"] if j["id"] == sealed]
    assert job.get("not_before") is None and job["pos"] == ids.index(sealed)
    assert sum(ref["total"] for ref in delayed_refs(doc)) == 79  # written out of its segment, nothing else
    assert AuditEntry.objects.get().count == 1


def test_the_delayed_filter_lists_the_documents_delayed_jobs_and_says_how_many_wait_in_delayed_segments(
        delayed_segments: None, broker: Broker, viewer: Client) -> None:
    ids = delayed_backlog(broker)
    response = viewer.get("/jobs/", {"queue": "q", "status": "delayed"})
    assert [row["job"]["id"] for row in response.context["rows"]] == ids[:20]
    assert response.context["notice"].startswith("80 delayed jobs wait in delayed segment objects and are not "
                                                 "listed here: filter by one queue and status pending")
