"""A failover watched from a standby's dashboard, in headless Chromium: the
broker panel shows the leader's commits going late when the leader is killed,
then this node leading at the next epoch, without a reload. Its screenshots
(``make screenshots``) are the README's "Running several nodes" pictures."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

from tests.e2e.browser import push, shot, signed_in
from tests.e2e.harness import Cluster, Node

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
