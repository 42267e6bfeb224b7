"""The dashboard in a real browser: headless Chromium (Debian's package,
driven by Playwright through ``executable_path``) against a real daphne node
and a real worker process.

The operator signs in, submits a job, and watches it go from pending to
running to done on its page while a worker process runs it, without the
page reloading. Then a job that fails ends in the dead letters; the operator
requeues it with a reason and finds the action in the audit log and in
Django admin. Purge on one dead job's page removes that job only.

The fixtures (``browser``, ``node``) and helpers are in tests/e2e/browser.py;
tests/e2e/conftest.py makes the fixtures visible to every browser test file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from tests.e2e.browser import HIDE, SHOTS, SHOW, USER, push, shot, signed_in, submit
from tests.e2e.harness import Cluster, Node, api
from tests.helpers import wait_for

pytestmark = pytest.mark.e2e


def test_an_operator_follows_a_job_live_and_requeues_a_dead_one(browser: Browser, node: tuple[Cluster, Node]) -> None:
    cluster, server = node
    with signed_in(browser, server) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))

        # Invalid JSON is refused inline, and nothing is pushed.
        page.goto(f"{server.url}/submit/")
        page.locator("#id_payload").fill("{not json")
        page.get_by_role("button", name="Submit").click()
        expect(page.get_by_text("Not valid JSON")).to_be_visible()
        assert "browser" not in cluster.document()["queues"]
        page.locator("#id_payload").fill("{}")  # edited: the error about what was there goes
        expect(page.get_by_text("Not valid JSON")).to_have_count(0)

        job_id = submit(page, server.url, "browser", '{"seconds": 3, "fail_rate": 0}')
        page.get_by_test_id("created-id").click()
        status = page.get_by_test_id("job-status")
        expect(status).to_have_text("pending")
        # Its whole payload, as a download.
        with page.expect_download() as download:
            page.get_by_test_id("payload-download").click()
        assert download.value.suggested_filename == f"job-{job_id}-payload.json"
        assert json.loads(Path(download.value.path()).read_text()) == {"seconds": 3, "fail_rate": 0}
        # A marker that a reload would wipe: the page must update in place.
        page.evaluate("window.__stillTheSamePage = true")

        worker = cluster.worker(
            "--queue", "browser", "--handler", "queueadmin.demo:work", "--worker-id", "browser-worker"
        )
        expect(status).to_have_text("running", timeout=15_000)
        expect(page.get_by_text("claimed by browser-worker")).to_be_visible()
        shot(page, "job-running")
        if SHOTS:  # the lease as the Workers page shows it, from a second tab
            other = page.context.new_page()
            other.goto(f"{server.url}/workers/")
            expect(other.get_by_text("browser-worker").first).to_be_visible()
            shot(other, "workers")
            other.close()
        # It leaves the document; its finished-job record then names how (test_dashboard_browser_finished.py).
        expect(status).to_have_text("completed", timeout=15_000)
        assert page.evaluate("window.__stillTheSamePage") is True

        # Some traffic on other queues, for a fuller overview.
        push(server, "emails", [{"n": n} for n in range(40)])
        push(server, "reports", [{"n": n} for n in range(12)], delay_seconds=600)
        page.goto(f"{server.url}/")
        row = page.locator('tr[data-row="browser"]')
        expect(row).to_contain_text("1")
        expect(page.locator('tr[data-row="reports"]')).to_contain_text("12 (0 ready)")
        shot(page, "overview")

        # A job that always fails, with one attempt: it ends in the dead letters.
        dead_id = submit(page, server.url, "browser", '{"fail": true, "seconds": 0}', max_attempts="1")
        page.goto(f"{server.url}/jobs/{dead_id}/")
        expect(page.get_by_test_id("job-status")).to_have_text("dead", timeout=15_000)
        expect(page.get_by_text("failed on purpose").first).to_be_visible()
        worker.terminate()
        worker.wait(15)
        shot(page, "job-dead")
        page.goto(f"{server.url}/dead/")
        expect(page.get_by_text("failed on purpose").first).to_be_attached()
        shot(page, "dead-letters")

        # Requeue it with a reason, from its page.
        page.goto(f"{server.url}/jobs/{dead_id}/")
        page.get_by_role("button", name="Requeue").click()
        expect(page.get_by_test_id("plan-count")).to_contain_text("1 job")
        page.get_by_test_id("reason").fill("fixed the upstream bug, retrying")
        page.get_by_test_id("run-action").click()
        expect(page.get_by_text("Requeued 1 job.")).to_be_visible()
        statuses = {j["id"]: j["status"] for j in cluster.document()["jobs"]}
        assert statuses[dead_id] == "pending"

        # Clone it as a new job, edited: a second job, the first one untouched.
        page.get_by_test_id("clone-job").click()
        expect(page.get_by_test_id("clone-note")).to_contain_text(f"A copy of job {dead_id}")
        expect(page.locator("#id_max_attempts")).to_have_value("1")
        page.locator("#id_payload").fill('{"fail": false, "seconds": 0}')
        page.get_by_role("button", name="Submit").click()
        clone_id = page.get_by_test_id("created-id").inner_text()
        assert clone_id != dead_id
        payloads = {j["id"]: j["payload"] for j in cluster.document()["jobs"]}
        assert payloads[clone_id] == {"fail": False, "seconds": 0}
        assert payloads[dead_id] == {"fail": True, "seconds": 0}

        page.goto(f"{server.url}/jobs/")
        shot(page, "jobs")
        page.goto(f"{server.url}/audit/")
        entry = page.locator("tr[data-entry]").filter(has_text="requeue").first
        expect(entry).to_contain_text("fixed the upstream bug, retrying")
        expect(entry).to_contain_text(USER)
        expect(entry.locator(f'a[href="/jobs/{dead_id}/"]')).to_be_visible()
        shot(page, "audit-log")

        page.goto(f"{server.url}/admin/queueadmin/auditentry/")
        expect(page.get_by_text("fixed the upstream bug, retrying")).to_be_visible()
        assert job_id != dead_id and errors == []


def test_the_dashboard_is_usable_on_a_phone(browser: Browser, node: tuple[Cluster, Node]) -> None:
    _, server = node
    push(server, "emails", [{"to": "ada@example.com", "body": "x" * 500}])
    with signed_in(browser, server, viewport={"width": 390, "height": 844}, is_mobile=True) as page:
        # Nothing is wider than the screen: the tables scroll inside their cards.
        for path in ("/", "/jobs/", "/workers/", "/dead/", "/document/", "/submit/", "/audit/"):
            page.goto(f"{server.url}{path}")
            expect(page.locator("main")).to_be_visible()
            assert page.evaluate("document.documentElement.scrollWidth") <= 390, path
        page.goto(f"{server.url}/")
        shot(page, "overview-phone")


def test_selected_rows_stay_put_and_new_jobs_wait_behind_a_button(browser: Browser, node: tuple[Cluster, Node]) -> None:
    _, server = node
    with signed_in(browser, server) as page:
        push(server, "sel", [1, 2, 3])
        page.goto(f"{server.url}/jobs/?queue=sel")
        rows = page.locator("#live-jobs tbody tr[data-job-id]")
        expect(rows).to_have_count(3)
        page.locator("input[data-select]").first.check()
        expect(page.get_by_text("1 selected")).to_be_visible()

        push(server, "sel", [4, 5])

        note = page.locator("#live-pending-note")
        expect(note).to_be_visible(timeout=10_000)
        expect(note).to_have_text("Held while rows are selected: 2 new jobs — show")
        expect(rows).to_have_count(3)  # the operator's rows did not move
        assert page.locator("input[data-select]").first.is_checked()
        shot(page, "jobs-selection")
        note.get_by_role("button").click()
        expect(rows).to_have_count(5)
        expect(note).to_be_hidden()


def test_the_live_connection_reconnects_after_the_server_restarts(browser: Browser, node: tuple[Cluster, Node]) -> None:
    cluster, server = node
    with signed_in(browser, server) as page:
        state = page.locator("#live-state")
        expect(state).to_contain_text("data as of")
        # A hidden tab lets go of its socket, and takes it back when shown.
        page.evaluate(HIDE)
        expect(state).to_have_attribute("data-state", "paused")
        page.evaluate(SHOW)
        expect(state).to_have_attribute("data-state", "live")
        server.kill()
        expect(state).to_have_attribute("data-state", "reconnecting", timeout=10_000)
        cluster.node(port=server.port)  # the same address; the session lives in the shared database
        expect(state).to_have_attribute("data-state", "live", timeout=30_000)
        # Updates flow again on the new connection (once the new node has taken over).
        wait_for(
            lambda: api(server, "POST", "/api/v1/jobs", {"queue": "after", "payload": 1}).status_code == 201,
            30,
            "the restarted node to lead",
        )
        expect(page.locator('tr[data-row="after"]')).to_be_visible(timeout=30_000)


def test_an_action_on_a_standby_node_runs_on_the_leader(browser: Browser, node: tuple[Cluster, Node]) -> None:
    cluster, first = node
    second = cluster.node()
    standby = second if cluster.leader([first, second]) is first else first
    assert standby.role() == "standby"
    leader = cluster.leader([first, second])
    # A job that failed its only attempt.
    push(leader, "fwd", [{"n": 1}], max_attempts=1)
    [job] = api(leader, "POST", "/api/v1/claim", {"worker": "w", "queues": ["fwd"]}).json()["jobs"]
    assert (
        api(leader, "POST", f"/api/v1/jobs/{job['id']}/fail", {"lease": job["lease"], "error": "boom"}).json()["status"]
        == "dead"
    )

    with signed_in(browser, standby) as page:
        page.goto(f"{standby.url}/jobs/{job['id']}/")
        expect(page.get_by_test_id("job-status")).to_have_text("dead")
        page.get_by_role("button", name="Requeue").click()
        page.get_by_test_id("reason").fill("requeued through the standby")
        page.get_by_test_id("run-action").click()
        expect(page.get_by_text(f"Requeued 1 job on the leader {leader.url}.")).to_be_visible()

    statuses = {j["id"]: j["status"] for j in cluster.document()["jobs"]}
    assert statuses[job["id"]] == "pending"


def test_purge_on_a_job_page_removes_that_job_only(browser: Browser, node: tuple[Cluster, Node]) -> None:
    """Defect 1: the Purge button of a job's page once sent the page's
    ``status`` with it, and the run purged every dead job of the queue."""
    cluster, server = node
    push(server, "three", [{"n": n} for n in range(3)], max_attempts=1)
    dead = []
    for _ in range(3):
        [job] = api(server, "POST", "/api/v1/claim", {"worker": "w", "queues": ["three"]}).json()["jobs"]
        answer = api(server, "POST", f"/api/v1/jobs/{job['id']}/fail", {"lease": job["lease"], "error": "boom"})
        assert answer.json()["status"] == "dead"
        dead.append(job["id"])
    target = dead[1]

    with signed_in(browser, server) as page:
        page.goto(f"{server.url}/jobs/{target}/")
        expect(page.get_by_test_id("job-status")).to_have_text("dead")
        page.get_by_role("button", name="Purge", exact=True).click()
        expect(page.get_by_test_id("plan-count")).to_have_text("1 job would be removed for good.")
        page.get_by_test_id("reason").fill("this one job is bad")
        page.get_by_test_id("run-action").click()
        expect(page.locator(".msg")).to_have_text("Purged 1 job.")

        assert {d["id"] for d in cluster.document()["dead"]} == set(dead) - {target}
        page.goto(f"{server.url}/audit/")
        entry = page.locator("tr[data-entry]").filter(has_text="this one job is bad")
        expect(entry).to_have_count(1)
        expect(entry.locator("a.id")).to_have_count(1)
        expect(entry.locator(f'a[href="/jobs/{target}/"]')).to_be_visible()
        page.goto(f"{server.url}/jobs/?queue=three&status=dead")
        expect(page.locator("#live-jobs tbody tr[data-job-id]")).to_have_count(2)

        # An edited confirmation is refused in place, and changes nothing.
        page.goto(f"{server.url}/jobs/{dead[0]}/")
        page.get_by_role("button", name="Purge", exact=True).click()
        page.locator('input[name="plan"]').evaluate("input => { input.value = input.value.slice(0, -3) + 'xyz' }")
        page.get_by_test_id("reason").fill("edited in the browser")
        page.get_by_test_id("run-action").click()
        expect(page.get_by_test_id("refused")).to_contain_text("not made by the dashboard")
        assert {d["id"] for d in cluster.document()["dead"]} == set(dead) - {target}
