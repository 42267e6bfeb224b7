"""Run now through real processes: jobs pushed over the API to run in an
hour wait while a ``queueworker`` process long-polls their queue; an
operator makes one due from its page in Chromium, and another with
``manage.py queueaction run_now``. The worker runs each within moments of
its commit (a run now wakes the claims waiting on its queue), and the job
left alone keeps waiting."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from tests.e2e.browser import USER, signed_in, with_operator
from tests.e2e.harness import Cluster, api
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_an_operator_runs_scheduled_jobs_now_from_the_page_and_the_shell_and_a_worker_runs_just_those(
        browser: Browser, cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    record = tmp_path / "runs.txt"
    cluster, node = with_operator(cluster_factory(E2E_RECORD=str(record)))
    wait_for(lambda: node.role() == "leader", 30, "the node to lead")
    jobs = [{"payload": {"n": n}, "delay_seconds": 3600} for n in (1, 2, 3)]
    answer = api(node, "POST", "/api/v1/jobs", {"queue": "later", "jobs": jobs})
    assert answer.status_code == 201, answer.text
    first, second, third = answer.json()["ids"]
    worker = cluster.worker("--queue", "later", "--handler", "tests.e2e.handlers:record", "--broker", node.url)
    try:
        with signed_in(browser, node) as page:
            page.goto(f"{node.url}/jobs/{first}/")
            expect(page.get_by_test_id("job-status")).to_have_text("pending")
            page.get_by_role("button", name="Run now", exact=True).click()
            expect(page.get_by_test_id("plan-count")).to_have_text("1 job would be made due now.")
            expect(page.get_by_test_id("plan-effect").nth(0)).to_contain_text("keeps its place in its queue")
            page.get_by_test_id("reason").fill("the customer asked for it now")
            page.get_by_test_id("run-action").click()
            expect(page.get_by_text("Made 1 delayed job due now")).to_be_visible()
            wait_for(lambda: record.exists() and record.read_text().split() == ["1"], 20, "the worker to run it")
            # Its page: gone from the queue, completed, and no Run now any more.
            page.goto(f"{node.url}/jobs/{first}/")
            expect(page.get_by_test_id("job-status")).to_have_text("completed")
            expect(page.get_by_role("button", name="Run now", exact=True)).to_have_count(0)
            # From the list, with the keyboard: j x n opens the dry run for the highlighted delayed job.
            page.goto(f"{node.url}/jobs/?queue=later&status=pending")
            expect(page.get_by_role("button", name="Run all 2 delayed now")).to_be_visible()
            page.keyboard.press("j")
            page.keyboard.press("x")
            page.keyboard.press("n")
            expect(page.get_by_test_id("plan-count")).to_have_text("1 job would be made due now.")
            page.keyboard.press("Escape")
            expect(page.get_by_test_id("plan-count")).to_have_count(0)

        ran = cluster.manage("queueaction", "run_now", "--ids", second, "--user", USER, "--reason", "shell", "--yes")
        assert ran.returncode == 0, ran.stderr.decode()
        printed = ran.stdout.decode()
        assert "1 job would be made due now." in printed  # the dry run, first
        assert "Made 1 delayed job due now" in printed
        wait_for(lambda: record.read_text().split() == ["1", "2"], 20, "the worker to run the second")
    finally:
        worker.terminate()
        assert worker.wait(30) == 0
    [waiting] = cluster.document()["jobs"]
    assert (waiting["id"], waiting["status"]) == (third, "pending") and waiting["not_before"]
