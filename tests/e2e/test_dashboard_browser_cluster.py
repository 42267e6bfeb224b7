"""A failover watched from a standby's dashboard, in headless Chromium: the
broker panel shows the leader's commits going late when the leader is killed,
then this node leading at the next epoch, without a reload. Its screenshots
(``make screenshots``) are the README's "Running several nodes" pictures."""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.e2e.browser import push, shot, signed_in, with_operator
from tests.e2e.harness import Cluster, Node, api
from tests.helpers import wait_for

pytestmark = pytest.mark.e2e


def test_a_standby_dashboard_shows_the_leader_die_and_itself_take_over(
    browser: Browser, node: tuple[Cluster, Node]
) -> None:
    cluster, first = node
    second = cluster.node()
    leader = cluster.leader([first, second])
    standby = second if leader is first else first
    push(leader, "emails", [{"n": n} for n in range(5)])

    with signed_in(browser, standby) as page:
        panel = page.locator("#live-broker")
        expect(panel).to_contain_text(f"standby {standby.health()['node']['id']}")  # type: ignore[index]
        expect(panel).to_contain_text(leader.url)
        epoch = int(panel.locator("dt:text-is('Epoch') + dd").inner_text())
        shot(page, "cluster-before")

        leader.kill()
        # No commit lands: the panel marks the last commit as late while the
        # standby waits out the takeover interval on its own clock.
        expect(panel.locator("dd.bad").first).to_be_visible(timeout=15_000)
        shot(page, "cluster-takeover-pending")
        expect(panel).to_contain_text(f"leader {standby.health()['node']['id']}", timeout=30_000)  # type: ignore[index]
        expect(panel.locator("dt:text-is('Epoch') + dd")).to_have_text(str(epoch + 1))
        expect(panel).to_contain_text(standby.url)
        shot(page, "cluster-after-takeover")

    pending = [job for job in cluster.document()["jobs"] if job["queue"] == "emails"]
    assert len(pending) == 5  # nothing the dead leader acknowledged was lost


def test_a_worker_idle_on_the_leader_is_listed_by_the_standby_and_after_the_failover(
    browser: Browser, cluster_factory: Callable[..., Cluster]
) -> None:
    # The leader saves the workers it saw with each metrics sample: every second here.
    cluster, first = with_operator(cluster_factory(QUEUE_METRICS_SAMPLE_SECONDS="1"))
    second = cluster.node()
    leader = cluster.leader([first, second])
    standby = second if leader is first else first
    # A worker idle in a long-poll claim on the leader: it holds no lease, so
    # the document does not show it; only the leader saw it ask.
    stop = threading.Event()

    def idle() -> None:
        while not stop.is_set():
            try:
                api(leader, "POST", "/api/v1/claim", {"worker": "idle-worker", "queues": ["quiet"], "wait_seconds": 2})
            except httpx.HTTPError:
                return  # the leader was killed

    poller = threading.Thread(target=idle, daemon=True)
    poller.start()
    try:
        with signed_in(browser, standby) as page:
            listed(page, standby)
        leader.kill()
        poller.join(30)  # the worker is gone with it: the new leader never sees it ask
        wait_for(lambda: standby.role() == "leader", 60, "the standby to take over")
        with signed_in(browser, standby) as page:
            listed(page, standby)
            shot(page, "cluster-workers-after-takeover")
    finally:
        stop.set()


def listed(page: Page, node: Node) -> None:
    """Wait until ``node``'s Workers page lists idle-worker (the leader saves it within a sample)."""
    def shown() -> bool:
        page.goto(f"{node.url}/workers/")
        return page.get_by_text("idle-worker").count() > 0

    wait_for(shown, 20, "idle-worker on the Workers page")
