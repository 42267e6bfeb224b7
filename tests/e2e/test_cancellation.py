"""Cancelling a running job through real processes: a ``queueworker``
process runs a handler (or a Django task) that checks
``engine.check_cancelled()``; an operator purges the job, from its page in
Chromium or with ``manage.py queueaction``, and the handler stops as soon as
the purge commits (the worker watches its leases), or at its next heartbeat,
instead of working on for a minute, with nothing reported for it, as the dry
run said."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from playwright.sync_api import Browser, expect

from tests.e2e.browser import USER, signed_in, with_operator
from tests.e2e.harness import TOKEN, Cluster, api
from tests.helpers import wait_for

if TYPE_CHECKING:
    from pytest_django.fixtures import SettingsWrapper

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

LEASE = 3.0  # heartbeats every second


def test_purging_a_running_job_from_its_page_stops_its_handler_as_the_dry_run_said(
        browser: Browser, cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    record = tmp_path / "runs.txt"
    cluster, node = with_operator(cluster_factory(E2E_RECORD=str(record)))
    wait_for(lambda: node.role() == "leader", 30, "the node to lead")
    answer = api(node, "POST", "/api/v1/jobs", {"queue": "long", "jobs": [{"payload": {"n": 1, "seconds": 60}}]})
    assert answer.status_code == 201, answer.text
    [job_id] = answer.json()["ids"]
    worker = cluster.worker("--queue", "long", "--handler", "tests.e2e.handlers:cancellable", "--broker", node.url,
                            "--lease-seconds", str(LEASE))
    try:
        wait_for(lambda: record.exists() and "start 1" in record.read_text(), 30, "the handler to start")
        with signed_in(browser, node) as page:
            page.goto(f"{node.url}/jobs/{job_id}/")
            expect(page.get_by_test_id("job-status")).to_have_text("running")
            page.get_by_role("button", name="Purge", exact=True).click()
            expect(page.get_by_test_id("plan-effect")).to_have_text(
                "1 of these jobs is running now. Its worker finds out as soon as this runs (it watches its leases), "
                "at the latest at its next heartbeat (every third of the lease by default: within 1.0 s here), and "
                "cancels it: a handler that calls engine.check_cancelled() stops there; one that does not runs to "
                "its end, and its result is refused.")
            page.get_by_test_id("reason").fill("stuck on a dead partner API")
            purged_at = time.time()
            page.get_by_test_id("run-action").click()
            expect(page.get_by_text("Purged 1 job")).to_be_visible()

        wait_for(lambda: "cancelled 1" in record.read_text(), 30, "the handler to be cancelled")
        [line] = [ln for ln in record.read_text().splitlines() if ln.startswith("cancelled 1")]
        _, _, at, reason = line.split(" ", 3)
        # Told within a heartbeat or two of the purge, not when its minute of work ran out.
        assert float(at) - purged_at < 3 * LEASE, line
        assert "its lease was lost" in reason and job_id in reason, reason
        assert "done 1" not in record.read_text()
    finally:
        worker.terminate()
        assert worker.wait(30) == 0
    counters = cluster.document()["queues"]["long"]
    assert (counters["purged"], counters["completed"], counters["failed"]) == (1, 0, 0)
    log = cluster.logs()
    assert "stopped on its cancellation after its lease was lost" in log, log


@pytest.mark.parametrize("watch", [True, False])
def test_a_worker_watching_its_leases_learns_of_a_purge_before_its_next_heartbeat(
        cluster_factory: Callable[..., Cluster], tmp_path: Path, watch: bool) -> None:
    """A long lease (heartbeats every 20 s): with its lease watch the handler
    is cancelled within moments of the purge; without it (``--no-lease-watch``,
    or a broker of an older release), at the next heartbeat."""
    record = tmp_path / "runs.txt"
    cluster, node = with_operator(cluster_factory(E2E_RECORD=str(record)))
    wait_for(lambda: node.role() == "leader", 30, "the node to lead")
    answer = api(node, "POST", "/api/v1/jobs", {"queue": "long", "jobs": [{"payload": {"n": 1, "seconds": 90}}]})
    [job_id] = answer.json()["ids"]
    worker = cluster.worker("--queue", "long", "--handler", "tests.e2e.handlers:cancellable", "--broker", node.url,
                            "--lease-seconds", "60", *([] if watch else ["--no-lease-watch"]))
    try:
        wait_for(lambda: record.exists() and "start 1" in record.read_text(), 30, "the handler to start")
        purged_at = time.time()
        purged = cluster.manage("queueaction", "purge", "--ids", job_id, "--user", USER, "--reason", "stuck",
                                "--yes")
        assert purged.returncode == 0, purged.stderr.decode()
        if watch:
            wait_for(lambda: "cancelled 1" in record.read_text(), 10, "the handler to be cancelled")
            [line] = [ln for ln in record.read_text().splitlines() if ln.startswith("cancelled 1")]
            assert float(line.split(" ")[2]) - purged_at < 10, line  # the next heartbeat is 20 s away
            assert "its lease was lost" in line
        else:
            time.sleep(3)
            assert "cancelled 1" not in record.read_text()  # it waits for its heartbeat
    finally:
        worker.terminate()
        assert worker.wait(30) == 0


def test_a_django_task_that_checks_stops_when_its_job_is_purged_and_its_result_says_why(
        cluster_factory: Callable[..., Cluster], tmp_path: Path, settings: SettingsWrapper) -> None:
    from django.tasks import TaskResultStatus, task_backends
    from django.tasks.exceptions import TaskResultDoesNotExist

    from queueadmin import runtime
    from tests.e2e import sample_tasks as st

    record = tmp_path / "ran.jsonl"
    cluster, node = with_operator(cluster_factory())
    wait_for(lambda: node.role() == "leader", 30, "the node to lead")
    worker = cluster.worker("--broker", node.url, "--lease-seconds", str(LEASE), E2E_RECORD=str(record))
    runtime.stop_broker()
    settings.QUEUE_STORE_URL = cluster.store_url
    settings.TASKS = {"default": {"BACKEND": "queueadmin.tasks.ObjectStoreBackend",
                                  "OPTIONS": {"BROKERS": [node.url], "TOKEN": TOKEN}}}
    try:
        result = st.patient.enqueue(60)

        def events() -> list[dict[str, Any]]:
            return [orjson.loads(line) for line in record.read_bytes().splitlines()] if record.exists() else []

        wait_for(lambda: [e["event"] for e in events()] == ["start"], 30, "the task to start")
        purged = cluster.manage("queueaction", "purge", "--ids", result.id, "--user", USER, "--reason", "cancel",
                                "--yes")
        assert purged.returncode == 0, purged.stderr.decode()
        wait_for(lambda: len(events()) == 2, 30, "the task to be cancelled")
        start, cancelled = events()
        assert cancelled["event"] == "cancelled" and cancelled["at"] - start["at"] < 30, (start, cancelled)

        def finished() -> bool:
            # The job is gone (purged) a moment before the task runner writes the attempt's result.
            try:
                return st.patient.get_result(result.id).is_finished
            except TaskResultDoesNotExist:
                return False

        wait_for(finished, 30, "its result to be written")
        done = st.patient.get_result(result.id)
        assert done.status == TaskResultStatus.FAILED
        [error] = done.errors
        assert error.exception_class_path == "engine.cancellation.JobCancelled"
        assert "its lease was lost" in error.traceback
    finally:
        worker.terminate()
        assert worker.wait(30) == 0
        task_backends["default"].link.close()


def test_queueworker_times_out_a_job_that_runs_too_long_and_it_dies_with_the_reason(
        cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    record = tmp_path / "runs.txt"
    cluster = cluster_factory(E2E_RECORD=str(record))
    node = cluster.node()
    wait_for(lambda: node.role() == "leader", 30, "the node to lead")
    jobs = [{"payload": {"n": 1, "seconds": 60}, "max_attempts": 1}]
    answer = api(node, "POST", "/api/v1/jobs", {"queue": "slow", "jobs": jobs})
    assert answer.status_code == 201, answer.text
    [job_id] = answer.json()["ids"]
    worker = cluster.worker("--queue", "slow", "--handler", "tests.e2e.handlers:cancellable", "--broker", node.url,
                            "--lease-seconds", str(LEASE), "--timeout", "1")
    try:
        wait_for(lambda: cluster.document()["dead"] != [], 30, "the job to time out")
    finally:
        worker.terminate()
        assert worker.wait(30) == 0
    [dead] = cluster.document()["dead"]
    assert dead["id"] == job_id
    assert dead["error"] == "JobTimeout: the handler ran longer than the worker's timeout (1 s); it was cancelled"
    start, cancelled = record.read_text().splitlines()
    assert float(cancelled.split()[2]) - float(start.split()[2]) < 2 * LEASE, (start, cancelled)
    assert cancelled.endswith("it ran longer than the worker's timeout (1 s)"), cancelled
