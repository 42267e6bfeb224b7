"""Charts and metrics in a real browser (issue 12, part 2): the overview's
sparklines, a queue's page with its charts, redrawn live, the range
selector, the phone layout, and ``/metrics`` served by the same node.

The node samples its metrics history every half second here
(``QUEUE_METRICS_SAMPLE_SECONDS``), so the charts fill within the test.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Browser, expect

from tests.e2e.browser import push, shot, signed_in, with_operator
from tests.e2e.harness import TOKEN, Cluster, Node, api
from tests.helpers import wait_for

pytestmark = pytest.mark.e2e

SAMPLE_SECONDS = "0.5"


@pytest.fixture
def sampling_node(cluster_factory: Callable[..., Cluster]) -> tuple[Cluster, Node]:
    """A node (with the browser tests' superuser) that samples every half second."""
    return with_operator(cluster_factory(QUEUE_METRICS_SAMPLE_SECONDS=SAMPLE_SECONDS))


def test_charts_draw_the_history_and_follow_the_queue_live(
    browser: Browser, sampling_node: tuple[Cluster, Node]
) -> None:
    _, server = sampling_node
    push(server, "mail", list(range(5)))
    push(server, "reports", [1])
    with signed_in(browser, server) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        # The overview: each queue's last hour as a sparkline in its row, once two samples are in.
        spark = page.locator('tr[data-row="mail"] svg.spark path.line')
        expect(spark).to_have_count(1, timeout=15_000)
        expect(page.locator('tr[data-row="reports"] svg.spark')).to_have_count(1)
        shot(page, "overview-sparklines")

        page.locator('tr[data-row="mail"] th a').click()
        page.wait_for_url(f"{server.url}/queues/mail/")
        expect(page.get_by_role("heading", name="Queue mail")).to_be_visible()
        expect(page.locator("#live-state")).to_have_attribute("data-state", "live")
        charts = page.locator("svg.chart")
        expect(charts).to_have_count(5)
        for name in (
            "Throughput (jobs/s)",
            "Depth (jobs)",
            "Oldest pending job (seconds)",
            "Failures (per s)",
            "Commit latency (all queues) (ms)",
        ):
            expect(page.get_by_role("img", name=name)).to_be_visible()
        depth = page.locator("#chart-depth path.line.s0")
        expect(depth).to_have_count(1)
        before = depth.get_attribute("d")

        # Live: new jobs show in the numbers and, at the next samples, in the depth chart, with no reload.
        page.evaluate("window.__same_page = true")
        push(server, "mail", list(range(20)))
        expect(page.get_by_test_id("pending")).to_contain_text("25")
        # The depth axis grows to the new peak (25 jobs) once a sample has seen them.
        wait_for(
            lambda: "25" in page.locator("#chart-depth text.axis").all_text_contents(),
            15,
            "the depth chart to be redrawn with 25 pending",
        )
        assert page.locator("#chart-depth path.line.s0").get_attribute("d") != before
        assert page.evaluate("window.__same_page") is True
        shot(page, "queue-charts")

        page.get_by_role("link", name="7 days").click()
        page.wait_for_url(f"{server.url}/queues/mail/?range=7d")
        expect(page.locator('nav.ranges a[aria-current="true"]')).to_have_text("7 days")
        expect(page.get_by_role("heading", name="Last 7 days")).to_be_visible()
        expect(page.locator("svg.chart")).to_have_count(5)
        assert not errors, errors

    with signed_in(browser, server, viewport={"width": 390, "height": 844}) as phone:
        phone.goto(f"{server.url}/queues/mail/")
        expect(phone.locator("svg.chart")).to_have_count(5)
        # The charts fit the phone's width: nothing to scroll sideways.
        assert phone.evaluate("document.scrollingElement.scrollWidth") <= 390
        shot(phone, "queue-charts-phone")


def test_metrics_are_served_by_the_node_with_the_token(sampling_node: tuple[Cluster, Node]) -> None:
    _, server = sampling_node
    push(server, "mail", [1, 2])
    assert api(server, "GET", "/metrics", token=None).status_code == 401
    # A scrape reads the dashboard's snapshot, which may be a moment old
    # (the source's freshness window): wait for the one that has the push.
    wait_for(lambda: 'queueadmin_queue_pending{queue="mail"} 2.0' in api(server, "GET", "/metrics", token=TOKEN).text,
             10, "a scrape that shows the pushed jobs")
    scraped = api(server, "GET", "/metrics", token=TOKEN)
    assert scraped.status_code == 200
    text = scraped.text
    assert 'queueadmin_queue_pending{queue="mail"} 2.0' in text
    assert 'queueadmin_queue_pushed_total{queue="mail"} 2.0' in text
    assert 'queueadmin_node_role{role="leader"} 1.0' in text
    assert 'queueadmin_api_request_duration_seconds_count{endpoint="push",status="201"} 1.0' in text
