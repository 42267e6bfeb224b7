"""Finished jobs stay findable, in a real browser against a real daphne node
and a real worker process: a job completes, leaves queue.json, and its page
still shows how it finished, on which worker, after how many attempts; a job
purged from its page shows who purged it and why; an id that never existed
says so and names the retention.

The fixtures (``browser``, ``node``) and helpers are in tests/e2e/browser.py.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

from tests.e2e.browser import shot, signed_in, submit
from tests.e2e.harness import Cluster, Node, api
from tests.helpers import wait_for

pytestmark = pytest.mark.e2e


def test_a_completed_job_keeps_its_page(browser: Browser, node: tuple[Cluster, Node]) -> None:
    cluster, server = node
    with signed_in(browser, server) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        job_id = submit(page, server.url, "finished", '{"seconds": 0.3, "fail_rate": 0, "to": "ada@example.com"}')
        worker = cluster.worker(
            "--queue", "finished", "--handler", "queueadmin.demo:work", "--worker-id", "finished-worker"
        )
        try:
            wait_for(lambda: cluster.document()["queues"]["finished"]["completed"] == 1, timeout=30)
        finally:
            worker.terminate()
            worker.wait(15)
        assert job_id not in {j["id"] for j in cluster.document()["jobs"]}

        page.goto(f"{server.url}/jobs/{job_id}/")
        # The record is written just after the commit: a reload at most shows it a moment later.
        expect(page.get_by_test_id("job-status")).to_have_text("completed", timeout=10_000)
        expect(page.get_by_test_id("finished-how")).to_contain_text("completed at")
        expect(page.get_by_test_id("finished-worker")).to_have_text("finished-worker")
        expect(page.get_by_test_id("finished-duration")).to_contain_text("the last attempt ran")
        expect(page.get_by_text("completed by finished-worker")).to_be_visible()
        expect(page.get_by_test_id("finished-payload")).to_contain_text("ada@example.com")
        shot(page, "job-finished")

        # Purged from its own page: the page then says by whom and why.
        [pending_id] = api(server, "POST", "/api/v1/jobs", {"queue": "finished", "jobs": [{"payload": 1}]}).json()[
            "ids"
        ]
        page.goto(f"{server.url}/jobs/{pending_id}/")
        expect(page.get_by_test_id("job-status")).to_have_text("pending")
        page.get_by_role("button", name="Purge", exact=True).click()
        page.get_by_test_id("reason").fill("pushed by mistake")
        page.get_by_test_id("run-action").click()
        expect(page.get_by_test_id("job-status")).to_have_text("purged", timeout=10_000)
        expect(page.get_by_test_id("finished-purge")).to_contain_text("“pushed by mistake”")

        page.goto(f"{server.url}/jobs/never-was-a-job/")
        expect(page.get_by_test_id("job-status")).to_have_text("not in the document")
        expect(page.get_by_test_id("job-unknown")).to_contain_text("in the last 7.0 d")

        # A page opened for an id before its push: once the job is there, the page has it whole, payload too.
        page.goto(f"{server.url}/jobs/pushed-while-watched/")
        expect(page.get_by_test_id("job-status")).to_have_text("not in the document")
        expect(page.locator("#live-state")).to_have_attribute("data-state", "live")
        job = {"id": "pushed-while-watched", "payload": {"to": "bo@example.com"}}
        pushed = api(server, "POST", "/api/v1/jobs", {"queue": "finished", "jobs": [job]})
        assert pushed.status_code == 201, pushed.text
        expect(page.get_by_test_id("job-status")).to_have_text("pending", timeout=10_000)
        expect(page.locator("pre.viewer")).to_contain_text("bo@example.com")
        assert errors == []
