"""The Schedules page in Chromium, on a real daphne node scheduling a job
every two seconds: reached with ``g`` then ``c``, its last tick moves on live
(no reload), the job a tick pushed opens from its link, and "Run now" pushes
the schedule's job once more through the submit form. Pause and Resume go
through their dry run, and the row follows the skipped ticks live."""

from __future__ import annotations

import time
from collections.abc import Callable

import orjson
import pytest
from playwright.sync_api import Browser, expect

from tests.e2e.browser import shot, signed_in, with_operator
from tests.e2e.harness import Cluster

pytestmark = pytest.mark.e2e

SCHEDULES = {"every-two": {"every_seconds": 2, "queue": "ticks", "payload": {"n": 1}}}


def test_the_schedules_page_follows_the_ticks_live_and_links_their_jobs(
        browser: Browser, cluster_factory: Callable[..., Cluster]) -> None:
    _, server = with_operator(cluster_factory(QUEUE_SCHEDULES=orjson.dumps(SCHEDULES).decode()))
    with signed_in(browser, server) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.keyboard.press("g")
        page.keyboard.press("c")
        expect(page).to_have_url(f"{server.url}/schedules/")
        expect(page.locator("#live-state")).to_have_attribute("data-state", "live", timeout=10_000)
        row = page.locator('tr[data-schedule="every-two"]')
        expect(row).to_contain_text("Every 2 s")
        link = row.locator("a.id")
        expect(link).to_contain_text("schedule:every-two:", timeout=10_000)
        first = link.inner_text()
        # The next tick's job replaces it, pushed over the socket.
        expect(link).not_to_have_text(first, timeout=10_000)
        assert page.evaluate("performance.getEntriesByType('navigation').length") == 1  # no reload
        expect(row.locator(".badge.ok")).to_have_text("fired")
        shot(page, "schedules")
        job_id = link.inner_text()
        link.click()
        expect(page).to_have_url(f"{server.url}/jobs/{job_id}/")
        expect(page.locator("h1")).to_contain_text(job_id[:16])

        page.goto(f"{server.url}/schedules/")
        page.locator('tr[data-schedule="every-two"] [data-testid="run-now"]').click()
        expect(page.locator('[data-testid="run-now-note"]')).to_contain_text("every-two")
        expect(page.locator("#id_queue")).to_have_value("ticks")
        page.get_by_role("button", name="Submit").click()
        created = page.locator('[data-testid="created-id"]')
        expect(created).to_be_visible()
        assert not created.inner_text().startswith("schedule:")
        assert errors == []


def test_pause_and_resume_a_schedule_from_its_row(browser: Browser,
                                                 cluster_factory: Callable[..., Cluster]) -> None:
    cluster, server = with_operator(cluster_factory(QUEUE_SCHEDULES=orjson.dumps(SCHEDULES).decode()))

    def pushed() -> int:
        return int(cluster.document()["queues"].get("ticks", {}).get("pushed", 0))

    with signed_in(browser, server) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{server.url}/schedules/")
        expect(page.locator("#live-state")).to_have_attribute("data-state", "live", timeout=10_000)
        row = page.locator('tr[data-schedule="every-two"]')
        expect(row.locator(".badge.ok")).to_have_text("fired", timeout=10_000)

        row.get_by_role("button", name="Pause").click()
        expect(page.get_by_test_id("plan-schedule")).to_contain_text("will push no jobs until it is resumed")
        page.get_by_test_id("reason").fill("ticks service down")
        page.get_by_test_id("run-action").click()
        expect(page.locator(".msg")).to_have_text("Paused schedule every-two.")
        assert "every-two" in cluster.document()["schedule_pauses"]
        expect(row.get_by_test_id("schedule-paused")).to_be_visible()
        expect(row.get_by_test_id("schedule-paused-by")).to_contain_text("ticks service down")
        # The next tick is marked skipped, over the socket, and pushes nothing.
        expect(row.locator(".badge.warn", has_text="skipped")).to_be_visible(timeout=10_000)
        before = pushed()
        time.sleep(4.5)  # two more ticks, both skipped
        assert pushed() == before

        row.get_by_role("button", name="Resume").click()
        expect(page.get_by_test_id("plan-schedule")).to_contain_text("will push its jobs again")
        page.get_by_test_id("reason").fill("service back")
        page.get_by_test_id("run-action").click()
        expect(page.locator(".msg")).to_have_text("Resumed schedule every-two.")
        expect(row.locator(".badge.ok")).to_have_text("fired", timeout=10_000)
        expect(row.get_by_test_id("schedule-paused")).to_have_count(0)
        assert pushed() > before
        assert "schedule_pauses" not in cluster.document()

        page.goto(f"{server.url}/audit/")
        expect(page.locator("tr[data-entry]").filter(has_text="ticks service down")).to_contain_text("pause schedule")
        assert errors == []
