"""Stopping a running job through real processes: a ``queueworker`` process
runs a handler that checks ``engine.check_cancelled()``; an operator stops
the job, from its page in Chromium or with ``manage.py queueaction stop``.
The handler is cancelled as soon as the stop commits (the worker watches
its leases), and the job waits in the dead letters with why, as the dry
run said, instead of being lost (a purge) or run again (a requeue)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from engine import STOPPED_ERROR
from tests.e2e.browser import USER, signed_in, with_operator
from tests.e2e.harness import Cluster, Node, api
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

LEASE = 30.0  # heartbeats every 10 s: a cancellation within moments is the lease watch's


def start_long_job(cluster: Cluster, node: Node, record: Path) -> tuple[str, subprocess.Popen[bytes]]:
    """A job whose handler works for a minute, running on a queueworker process."""
    answer = api(node, "POST", "/api/v1/jobs", {"queue": "long", "jobs": [{"payload": {"n": 1, "seconds": 60}}]})
    assert answer.status_code == 201, answer.text
    [job_id] = answer.json()["ids"]
    worker = cluster.worker("--queue", "long", "--handler", "tests.e2e.handlers:cancellable", "--broker", node.url,
                            "--lease-seconds", str(LEASE))
    wait_for(lambda: record.exists() and "start 1" in record.read_text(), 30, "the handler to start")
    return job_id, worker


def cancelled_within(record: Path, since: float, seconds: float) -> None:
    wait_for(lambda: "cancelled 1" in record.read_text(), 30, "the handler to be cancelled")
    [line] = [ln for ln in record.read_text().splitlines() if ln.startswith("cancelled 1")]
    assert float(line.split(" ")[2]) - since < seconds, line  # its next heartbeat was 10 s away
    assert "its lease was lost" in line and "done 1" not in record.read_text()


def kept_as_dead_letter(cluster: Cluster, job_id: str) -> None:
    doc = cluster.document()
    assert not doc["jobs"], doc["jobs"]
    [dead] = doc["dead"]
    assert (dead["id"], dead["error"], dead["attempts"]) == (job_id, STOPPED_ERROR, 1)
    counters = doc["queues"]["long"]
    assert (counters["dead"], counters["failed"], counters["completed"], counters["purged"]) == (1, 1, 0, 0)


def test_stopping_a_running_job_from_its_page_cancels_its_handler_and_keeps_it_as_a_dead_letter(
        browser: Browser, cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    record = tmp_path / "runs.txt"
    cluster, node = with_operator(cluster_factory(E2E_RECORD=str(record)))
    wait_for(lambda: node.role() == "leader", 30, "the node to lead")
    job_id, worker = start_long_job(cluster, node, record)
    try:
        with signed_in(browser, node) as page:
            page.goto(f"{node.url}/jobs/{job_id}/")
            expect(page.get_by_test_id("job-status")).to_have_text("running")
            page.get_by_role("button", name="Stop", exact=True).click()
            effects = page.get_by_test_id("plan-effect")
            expect(effects.nth(0)).to_contain_text("Each goes to the dead letters at once")
            expect(effects.nth(1)).to_contain_text("1 of these jobs is running now")
            page.get_by_test_id("reason").fill("runaway export")
            stopped_at = time.time()
            page.get_by_test_id("run-action").click()
            expect(page.get_by_text("Stopped 1 running job, kept in the dead letters")).to_be_visible()
            cancelled_within(record, stopped_at, 8)
            # The job's page, live: dead, with why, and Redrive's way back offered (no Stop).
            page.goto(f"{node.url}/jobs/{job_id}/")
            expect(page.get_by_test_id("job-status")).to_have_text("dead")
            expect(page.get_by_text(STOPPED_ERROR).first).to_be_visible()
            expect(page.get_by_role("button", name="Stop", exact=True)).to_have_count(0)
            expect(page.get_by_role("button", name="Requeue", exact=True)).to_be_visible()
    finally:
        worker.terminate()
        assert worker.wait(30) == 0
    kept_as_dead_letter(cluster, job_id)


def test_an_operator_stops_one_of_two_running_jobs_from_the_filtered_list_with_the_keyboard(
        browser: Browser, cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    """``/jobs/?status=running``: ``j`` ``x`` ``s`` opens the dry run of stopping the highlighted job, which
    says what becomes of it; the other keeps running."""
    record = tmp_path / "runs.txt"
    cluster, node = with_operator(cluster_factory(E2E_RECORD=str(record)))
    wait_for(lambda: node.role() == "leader", 30, "the node to lead")
    jobs = [{"payload": {"n": n, "seconds": 60}} for n in (1, 2)]
    assert api(node, "POST", "/api/v1/jobs", {"queue": "long", "jobs": jobs}).status_code == 201
    worker = cluster.worker("--queue", "long", "--handler", "tests.e2e.handlers:cancellable", "--broker", node.url,
                            "--lease-seconds", str(LEASE), "--concurrency", "2", "--grace-seconds", "1")
    try:
        wait_for(lambda: record.exists() and record.read_text().count("start ") == 2, 30, "both handlers to start")
        with signed_in(browser, node) as page:
            page.goto(f"{node.url}/jobs/?status=running")
            rows = page.locator("#live-jobs tbody tr[data-job-id]")
            expect(rows).to_have_count(2)
            expect(page.get_by_role("button", name="Stop all 2 matching")).to_be_visible()
            page.keyboard.press("j")
            page.keyboard.press("x")
            expect(page.get_by_text("1 selected")).to_be_visible()
            chosen = rows.nth(0).get_attribute("data-job-id")
            page.keyboard.press("s")
            expect(page.get_by_test_id("plan-count")).to_have_text(
                "1 job would be stopped, and kept in the dead letters.")
            page.get_by_test_id("reason").fill("keyboard stop")
            page.get_by_test_id("run-action").click()
            expect(page.locator(".msg")).to_have_text("Stopped 1 running job, kept in the dead letters.")
            page.keyboard.press("?")
            expect(page.locator("dialog.keys-help")).to_contain_text("Stop the selected running rows")
        wait_for(lambda: "cancelled " in record.read_text(), 30, "one handler to be cancelled")
        doc = cluster.document()
        assert [d["id"] for d in doc["dead"]] == [chosen]
        assert [j["status"] for j in doc["jobs"]] == ["running"]
        assert record.read_text().count("cancelled ") == 1
    finally:
        worker.terminate()
        assert worker.wait(30) == 0


def test_queueaction_stop_cancels_the_handler_and_a_second_stop_finds_nothing_running(
        cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    record = tmp_path / "runs.txt"
    cluster, node = with_operator(cluster_factory(E2E_RECORD=str(record)))
    wait_for(lambda: node.role() == "leader", 30, "the node to lead")
    job_id, worker = start_long_job(cluster, node, record)
    try:
        stopped_at = time.time()
        stopped = cluster.manage("queueaction", "stop", "--ids", job_id, "--user", USER, "--reason", "stuck", "--yes")
        assert stopped.returncode == 0, stopped.stderr.decode()
        printed = stopped.stdout.decode()
        assert "1 job would be stopped, and kept in the dead letters." in printed  # the dry run, first
        assert "Stopped 1 running job, kept in the dead letters" in printed
        cancelled_within(record, stopped_at, 8)
        again = cluster.manage("queueaction", "stop", "--ids", job_id, "--user", USER, "--reason", "again", "--yes")
        assert again.returncode != 0
        assert f"Job {job_id} is dead, not running: it is left out." in again.stdout.decode() + again.stderr.decode()
    finally:
        worker.terminate()
        assert worker.wait(30) == 0
    kept_as_dead_letter(cluster, job_id)
