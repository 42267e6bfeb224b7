"""Bulk triage in a real browser (issue 12, section 4), on a real daphne node.

An operator follows a dead-letter group to the list of its jobs, selects
every row of the page from the header, sorts and filters the list, then
requeues all of the jobs matching the filter (more than one page, so the
dry run counts them all and asks for a typed confirmation). On the dead
letters page they requeue every dead job of one queue; on the overview
they forget a drained queue, and see a forget refused when a job arrives
after its dry run. Each run must do exactly what its dry run showed.

The fixtures (``browser``, ``node``) and helpers are in tests/e2e/browser.py.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.e2e.browser import push, shot, signed_in
from tests.e2e.harness import Cluster, Node, api

pytestmark = pytest.mark.e2e


def fail_all(server: Node, queue: str, worker: str, errors: list[str]) -> list[str]:
    """Claim ``len(errors)`` jobs of ``queue`` as ``worker`` and fail each with its error (one attempt: dead)."""
    failed: list[str] = []
    while len(failed) < len(errors):
        want = min(50, len(errors) - len(failed))
        claim = {"worker": worker, "queues": [queue], "max_jobs": want}
        jobs = api(server, "POST", "/api/v1/claim", claim).json()["jobs"]
        assert jobs, f"nothing left to claim in {queue}"
        for job in jobs:
            error = errors[len(failed)]
            answer = api(server, "POST", f"/api/v1/jobs/{job['id']}/fail", {"lease": job["lease"], "error": error})
            assert answer.status_code == 200, answer.text
            failed.append(job["id"])
    return failed


def statuses(cluster: Cluster) -> dict[str, str]:
    doc: dict[str, Any] = cluster.document()
    found = {j["id"]: j["status"] for j in doc["jobs"]}
    found.update({d["id"]: "dead" for d in doc["dead"]})
    return found


def run_action(page: Page, reason: str, confirm: str | None = None) -> None:
    page.get_by_test_id("reason").fill(reason)
    if confirm is not None:
        page.get_by_test_id("confirm-text").fill(confirm)
    page.get_by_test_id("run-action").click()


def test_an_operator_requeues_every_job_of_an_error_group(browser: Browser, node: tuple[Cluster, Node]) -> None:
    cluster, server = node
    push(server, "orders", [{"n": n} for n in range(115)], max_attempts=1)
    key_errors = fail_all(server, "orders", "w-bulk", [f"KeyError: 'order {n}'" for n in range(110)])
    timeouts = fail_all(server, "orders", "w-slow", ["TimeoutError: after 30 s"] * 5)

    with signed_in(browser, server) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))

        # The dead letters' group links to the list of exactly its jobs.
        page.goto(f"{server.url}/dead/")
        page.get_by_test_id("group-jobs").filter(has_text="110 jobs").click()
        expect(page.get_by_test_id("jobs-total")).to_contain_text("110 jobs · page 1 of 3")
        expect(page.locator("#live-jobs tbody tr[data-job-id]")).to_have_count(50)
        expect(page.get_by_role("combobox", name="Error", exact=True)).to_have_value("KeyError: '…'")

        # Select all on the page, from the header; unselect one; clear.
        select_all = page.get_by_label("Select all on this page")
        select_all.check()
        expect(page.get_by_text("50 selected")).to_be_visible()
        page.locator("input[data-select]").first.uncheck()
        expect(page.get_by_text("49 selected")).to_be_visible()
        assert select_all.evaluate("box => box.indeterminate") is True
        select_all.check()
        expect(page.get_by_text("50 selected")).to_be_visible()
        shot(page, "jobs-select-all")
        select_all.uncheck()
        expect(page.get_by_text("0 selected")).to_be_visible()

        # Sort by attempts and by age, both ways, from the headers.
        page.get_by_role("link", name="Enqueued").click()
        expect(page).to_have_url(re.compile(r"sort=-age"))
        expect(page.get_by_role("link", name="Enqueued ▼")).to_be_visible()
        page.get_by_role("link", name="Enqueued ▼").click()
        expect(page.get_by_role("link", name="Enqueued ▲")).to_be_visible()
        expect(page.get_by_test_id("jobs-total")).to_contain_text("110 jobs")  # the filter stays

        group_list = page.url

        # Filter by worker, from the form: the other worker's jobs are another set.
        page.goto(f"{server.url}/jobs/?status=dead")
        page.get_by_label("Worker").fill("w-slow")
        page.get_by_role("button", name="Filter").click()
        expect(page.locator("#live-jobs tbody tr[data-job-id]")).to_have_count(5)

        # All 110 matching, not just the page: the dry run counts them all.
        page.goto(group_list)
        page.get_by_role("button", name="Requeue all 110 matching").click()
        expect(page.get_by_test_id("plan-count")).to_have_text("110 jobs would be moved back to pending.")
        expect(page.get_by_text("… and 100 more.")).to_be_visible()
        shot(page, "jobs-bulk-plan")
        push(server, "orders", [{"late": True}], max_attempts=1)  # arrives after the dry run
        [late] = fail_all(server, "orders", "w-bulk", ["KeyError: 'order 999'"])
        run_action(page, "the orders service is fixed", confirm="requeue 110")
        message = page.locator(".msg")
        expect(message).to_contain_text("Requeued 110 jobs; 1 more job matching the filter arrived after the dry run")

        now = statuses(cluster)
        assert [now[i] for i in key_errors] == ["pending"] * 110
        assert [now[i] for i in timeouts] == ["dead"] * 5 and now[late] == "dead"
        page.goto(f"{server.url}/audit/")
        entry = page.locator("tr[data-entry]").filter(has_text="the orders service is fixed")
        expect(entry).to_contain_text("filter: queue=orders status=dead error=KeyError: '…'")
        assert errors == []


def test_requeue_a_queues_dead_letters_and_forget_a_drained_queue(browser: Browser, node: tuple[Cluster, Node]) -> None:
    cluster, server = node
    push(server, "redo", [1, 2, 3], max_attempts=1)
    redo = fail_all(server, "redo", "w", ["ValueError: a", "OSError: b", "OSError: c"])
    push(server, "keep", [1], max_attempts=1)
    [keep] = fail_all(server, "keep", "w", ["OSError: b"])
    push(server, "gone", [1])
    [job] = api(server, "POST", "/api/v1/claim", {"worker": "w", "queues": ["gone"]}).json()["jobs"]
    api(server, "POST", f"/api/v1/jobs/{job['id']}/complete", {"lease": job["lease"]})
    push(server, "racy", [1])
    [job] = api(server, "POST", "/api/v1/claim", {"worker": "w", "queues": ["racy"]}).json()["jobs"]
    api(server, "POST", f"/api/v1/jobs/{job['id']}/complete", {"lease": job["lease"]})
    # Two jobs failing and retrying (in ten minutes): "Failing now", not dead.
    push(server, "flaky", [1, 2], max_attempts=3)
    for job in api(server, "POST", "/api/v1/claim", {"worker": "w", "queues": ["flaky"], "max_jobs": 2}).json()["jobs"]:
        api(server, "POST", f"/api/v1/jobs/{job['id']}/fail",
            {"lease": job["lease"], "error": "ConnectionError: reset by 10.0.0.7", "retry_in_seconds": 600})

    with signed_in(browser, server) as page:
        # The queue is paused first: the dry run says where the jobs would wait.
        page.goto(f"{server.url}/")
        page.locator('tr[data-row="redo"]').get_by_role("button", name="Pause").click()
        run_action(page, "hold redo while it is fixed")
        expect(page.locator(".msg")).to_have_text("Paused redo.")
        page.goto(f"{server.url}/queues/redo/")
        expect(page.get_by_test_id("paused-by")).to_contain_text("“hold redo while it is fixed”")

        # Every dead job of one queue, across its error groups.
        page.goto(f"{server.url}/dead/")
        retrying = page.get_by_test_id("retrying")
        expect(retrying).to_contain_text("2 jobs retrying")
        expect(retrying.locator("article")).to_contain_text("flaky: ConnectionError: reset by N.N")
        shot(page, "dead-letters-bulk")
        page.get_by_role("button", name="Redrive every dead job of redo").click()
        expect(page.get_by_test_id("plan-count")).to_have_text("3 jobs would be moved back to pending.")
        expect(page.get_by_test_id("plan-effect")).to_have_text(
            "Queue redo is paused: the 3 jobs go back to it and wait there until it is resumed.")
        shot(page, "dead-letters-redrive-paused")
        run_action(page, "redo after the fix")
        expect(page.locator(".msg")).to_have_text("Redrove 3 dead letters back to pending.")
        now = statuses(cluster)
        assert [now[i] for i in redo] == ["pending"] * 3 and now[keep] == "dead"
        assert cluster.document()["queues"]["redo"]["paused"] is True

        # Forget: offered only for queues with no jobs.
        page.goto(f"{server.url}/")
        forget_buttons = page.locator("tr[data-row] button", has_text="Forget")
        expect(forget_buttons).to_have_count(2)
        page.locator('tr[data-row="gone"]').get_by_role("button", name="Forget").click()
        expect(page.get_by_test_id("plan-forget")).to_contain_text("has no jobs")
        shot(page, "overview-forget")
        run_action(page, "the gone queue was renamed")
        expect(page.locator(".msg")).to_have_text("Forgot queue gone.")
        expect(page.locator('tr[data-row="gone"]')).to_have_count(0)
        assert "gone" not in cluster.document()["queues"]

        # A job that arrives between the dry run and the run: refused, nothing changes.
        page.locator('tr[data-row="racy"]').get_by_role("button", name="Forget").click()
        expect(page.get_by_test_id("plan-forget")).to_contain_text("has no jobs")
        push(server, "racy", [{"late": True}])
        run_action(page, "cleanup")
        expect(page.locator(".msg")).to_contain_text("Forget failed")
        expect(page.locator(".msg")).to_contain_text("queue 'racy' is not empty")
        expect(page.locator('tr[data-row="racy"]')).to_contain_text("1")
        assert "racy" in cluster.document()["queues"]

        page.goto(f"{server.url}/audit/")
        expect(page.locator("tr[data-entry]").filter(has_text="the gone queue was renamed")).to_contain_text("forget")

        # The export, streamed by daphne: every entry the page lists, each with every job id.
        with page.expect_download() as download:
            page.get_by_test_id("audit-export").get_by_role("link", name="CSV").click()
        assert re.fullmatch(r"queueadmin-audit-\d{8}T\d{6}Z\.csv", download.value.suggested_filename)
        rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
        assert [(r["action"], r["reason"], r["outcome"]) for r in rows] == [
            ("forget", "cleanup", "failed"), ("forget", "the gone queue was renamed", "ok"),
            ("redrive", "redo after the fix", "ok"), ("pause", "hold redo while it is fixed", "ok")]
        assert sorted(rows[2]["job_ids"].split(" ")) == sorted(redo)
        page.goto(f"{server.url}/audit/?action=redrive")
        with page.expect_download() as download:
            page.get_by_test_id("audit-export").get_by_role("link", name="JSON").click()
        [redrive] = json.loads(Path(download.value.path()).read_text())
        assert redrive["reason"] == "redo after the fix" and sorted(redrive["job_ids"]) == sorted(redo)


def test_bulk_controls_fit_a_phone(browser: Browser, node: tuple[Cluster, Node]) -> None:
    _, server = node
    push(server, "phone", [1, 2], max_attempts=1)
    fail_all(server, "phone", "w", ["KeyError: 'x'", "KeyError: 'y'"])
    with signed_in(browser, server, viewport={"width": 390, "height": 844}, is_mobile=True) as page:
        for path in ("/jobs/?queue=phone&status=dead", "/dead/"):
            page.goto(f"{server.url}{path}")
            expect(page.locator("main")).to_be_visible()
            assert page.evaluate("document.documentElement.scrollWidth") <= 390, path
        page.goto(f"{server.url}/jobs/?queue=phone&status=dead")
        page.get_by_role("button", name="Purge all 2 matching").click()
        expect(page.get_by_test_id("plan-count")).to_have_text("2 jobs would be removed for good.")
        shot(page, "jobs-bulk-phone")
