"""A queue's rate limit set in Chromium, from the queue page: the form opens
the dry run, the run is confirmed with a reason, the page shows the rate and,
once a claim used up the window, that no job starts before it closes; the
overview shows the rate."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.e2e.browser import set_on_queue_page, signed_in, with_operator
from tests.e2e.harness import Cluster, api

pytestmark = pytest.mark.e2e


def set_rate(page: Page, jobs: str, seconds: str, *, plan: str, reason: str, done: str) -> None:
    """Fill the queue page's rate form, check its dry run says ``plan``, confirm with ``reason``."""
    set_on_queue_page(page, "rate-form", {"rate_jobs": jobs, "rate_seconds": seconds}, button="Set rate",
                      plan_id="plan-rate", plan=plan, reason=reason, done=done)


def test_set_and_remove_a_rate_from_the_queue_page(browser: Browser,
                                                   cluster_factory: Callable[..., Cluster]) -> None:
    cluster, server = with_operator(cluster_factory())
    jobs = [{"payload": {"n": n}} for n in range(3)]
    answer = api(server, "POST", "/api/v1/jobs", {"queue": "partner", "jobs": jobs})
    assert answer.status_code == 201
    with signed_in(browser, server) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{server.url}/queues/partner/")
        expect(page.locator("#live-state")).to_have_attribute("data-state", "live", timeout=10_000)
        set_rate(page, "2", "3600", plan="At most 2 jobs of partner will start in each window of 3600 s",
                 reason="the partner API allows two calls an hour", done="Limited partner to 2 per 3600 s (was no "
                 "rate limit).")
        expect(page.get_by_test_id("rate")).to_have_text("at most 2 per 3600 s")
        assert cluster.document()["queues"]["partner"]["rate_limit"] == {"jobs": 2, "seconds": 3600.0}

        # A worker's claim takes the window's two; the page, live, says the window is used up.
        claim = api(server, "POST", "/api/v1/claim", {"worker": "w", "queues": ["partner"], "max_jobs": 3})
        assert claim.status_code == 200 and len(claim.json()["jobs"]) == 2
        expect(page.get_by_test_id("rate-used-up")).to_contain_text("used up until", timeout=10_000)
        page.goto(f"{server.url}/")
        expect(page.locator('tr[data-row="partner"]')).to_contain_text("≤ 2 per 3600 s")

        # Both blank remove it, after the same dry run; the third job can start.
        page.goto(f"{server.url}/queues/partner/")
        set_rate(page, "", "", plan="partner will have no rate limit", reason="new contract",
                 done="Removed the rate limit of partner (was 2 per 3600 s).")
        expect(page.get_by_test_id("rate")).to_have_count(0)
        assert "rate_limit" not in cluster.document()["queues"]["partner"]
        claim = api(server, "POST", "/api/v1/claim", {"worker": "w", "queues": ["partner"]})
        assert claim.status_code == 200 and len(claim.json()["jobs"]) == 1
        assert errors == []
