"""Browser tests for the operational fixes of issue 12: sign-out closes the
session's live sockets, and a double-clicked Submit pushes one job.

The fixtures (``browser``, ``node``) and helpers are in tests/e2e/browser.py.
"""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import Browser, expect

from tests.e2e.browser import signed_in
from tests.e2e.harness import Cluster, Node

pytestmark = pytest.mark.e2e


def test_signing_out_in_one_tab_stops_the_other_tabs_live_updates(browser: Browser, node: tuple[Cluster, Node]) -> None:
    _, server = node
    with signed_in(browser, server) as page:
        other = page.context.new_page()  # a second tab of the same session
        other.goto(f"{server.url}/jobs/")
        badge = other.locator("#live-state")
        expect(badge).to_have_attribute("data-state", "live")

        page.get_by_role("button", name="Sign out").click()
        expect(page).to_have_url(f"{server.url}/login/")
        signed_out = time.monotonic()
        # The sign-out message, not the 15 s session re-check, closes it.
        expect(badge).to_contain_text("signed out", timeout=1000)
        assert time.monotonic() - signed_out < 1.5
        expect(badge).to_have_attribute("data-state", "offline")


def test_a_double_clicked_submit_makes_one_job_and_clears_the_form(
    browser: Browser, node: tuple[Cluster, Node]
) -> None:
    cluster, server = node
    with signed_in(browser, server) as page:
        page.goto(f"{server.url}/submit/")
        page.locator("#id_queue").fill("twice")
        page.locator("#id_payload").fill('{"n": 1}')
        button = page.get_by_role("button", name="Submit")
        button.click()
        page.wait_for_timeout(700)  # the second click of the report, 0.7 s later
        button.click(force=True)  # even if the page disabled it meanwhile
        created = page.get_by_test_id("created-id")
        expect(created).to_be_visible()
        page.wait_for_timeout(500)  # let a second push land, if one was made

        jobs = [j for j in cluster.document()["jobs"] if j["queue"] == "twice"]
        assert [j["id"] for j in jobs] == [created.inner_text()]
        expect(page.locator("#id_payload")).to_have_value("")  # cleared for the next job
        expect(page.locator("#id_queue")).to_have_value("twice")


def test_a_job_submitted_from_a_queue_page_goes_to_that_queue(browser: Browser, node: tuple[Cluster, Node]) -> None:
    """The submit form opened from a queue page names that queue, and offers the others to pick from."""
    cluster, server = node
    with signed_in(browser, server) as page:
        for queue in ("reports", "emails"):
            page.goto(f"{server.url}/submit/")
            page.locator("#id_queue").fill(queue)
            page.locator("#id_payload").fill("1")
            page.get_by_role("button", name="Submit").click()
            expect(page.get_by_test_id("created-id")).to_be_visible()
        page.goto(f"{server.url}/queues/reports/")
        page.get_by_test_id("submit-here").click()
        expect(page).to_have_url(f"{server.url}/submit/?queue=reports")
        expect(page.locator("#id_queue")).to_have_value("reports")
        offered = page.locator("#queue-names option").evaluate_all("os => os.map(o => o.value)")
        assert {"reports", "emails"} <= set(offered)
        page.locator("#id_payload").fill('{"from": "queue page"}')
        page.get_by_role("button", name="Submit").click()
        created = page.get_by_test_id("created-id").inner_text()
        [job] = [j for j in cluster.document()["jobs"] if j["id"] == created]
        assert (job["queue"], job["payload"]) == ("reports", {"from": "queue page"})
