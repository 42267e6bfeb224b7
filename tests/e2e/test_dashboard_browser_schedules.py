"""The Schedules page in Chromium, on a real daphne node scheduling a job
every two seconds: reached with ``g`` then ``c``, its last tick moves on live
(no reload), the job a tick pushed opens from its link, and "Run now" pushes
the schedule's job once more through the submit form."""

from __future__ import annotations

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
