"""A queue's concurrency limit set in Chromium, from the queue page: the form
opens the dry run, the run is confirmed with a reason, and the page and the
overview show the limit, live."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.e2e.browser import set_on_queue_page, signed_in, with_operator
from tests.e2e.harness import Cluster, api

pytestmark = pytest.mark.e2e


def set_limit(page: Page, value: str, *, plan: str, reason: str, done: str) -> None:
    """Fill the queue page's limit form, check its dry run says ``plan``, confirm with ``reason``."""
    set_on_queue_page(page, "limit-form", {"max_running": value}, button="Set limit", plan_id="plan-limit", plan=plan,
                      reason=reason, done=done)


def test_set_and_remove_a_limit_from_the_queue_page(browser: Browser,
                                                    cluster_factory: Callable[..., Cluster]) -> None:
    cluster, server = with_operator(cluster_factory())
    assert api(server, "POST", "/api/v1/jobs", {"queue": "mail", "payload": {"n": 1}}).status_code == 201
    with signed_in(browser, server) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{server.url}/queues/mail/")
        expect(page.locator("#live-state")).to_have_attribute("data-state", "live", timeout=10_000)
        set_limit(page, "2", plan="At most 2 jobs of mail will run at once", reason="the mail relay throttles us",
                  done="Limited mail to 2 running jobs (was no limit).")
        expect(page.get_by_test_id("limit")).to_have_text("(at most 2)")
        assert cluster.document()["queues"]["mail"]["max_running"] == 2
        page.goto(f"{server.url}/")
        expect(page.locator('tr[data-row="mail"]')).to_contain_text("/ 2")

        # Blank removes it, after the same dry run.
        page.goto(f"{server.url}/queues/mail/")
        set_limit(page, "", plan="mail will have no concurrency limit", reason="relay fixed",
                  done="Removed the limit of mail (was at most 2).")
        expect(page.get_by_test_id("limit")).to_have_count(0)
        assert "max_running" not in cluster.document()["queues"]["mail"]
        assert errors == []
