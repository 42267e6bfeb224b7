"""Live updates where websockets do not get through, in Chromium on a real
daphne node: the page falls back to polling itself over HTTP, keeps showing
new data, and goes live again once a socket opens.

The block is made in the page, before its scripts run: while
``window.__blockSockets`` is set, every WebSocket is opened to a closed port
on the loopback address instead, so it fails as one refused by a proxy does
(an error, then a close, without ever opening).

The fixtures (``browser``, ``node``) and helpers are in tests/e2e/browser.py.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

from tests.e2e.browser import push, signed_in
from tests.e2e.harness import Cluster, Node, free_port

pytestmark = pytest.mark.e2e

BLOCK = """
(() => {
  window.__blockSockets = true;
  const Real = window.WebSocket;
  window.WebSocket = function (url, protocols) {
    return new Real(window.__blockSockets ? "ws://127.0.0.1:%d/" : url, protocols);
  };
  window.WebSocket.prototype = Real.prototype;
})();
"""


def test_a_page_polls_when_websockets_are_blocked_and_goes_live_once_one_opens(
        browser: Browser, node: tuple[Cluster, Node]) -> None:
    _, server = node
    push(server, "before", [1])
    with signed_in(browser, server) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.context.add_init_script(BLOCK % free_port())
        page.reload()
        state = page.locator("#live-state")
        expect(page.locator('tr[data-row="before"]')).to_be_visible()
        # Three sockets refused in a row (1 + 2 s apart), then the page polls.
        expect(state).to_have_attribute("data-state", "polling", timeout=15_000)
        expect(state).to_contain_text("polling every 5 s (no websocket) · data as of")

        # New data arrives by polling: a queue pushed to now appears without a reload.
        push(server, "while-polling", [1, 2])
        row = page.locator('tr[data-row="while-polling"]')
        expect(row).to_be_visible(timeout=15_000)
        expect(row.locator("td.num").first).to_have_text("2")
        assert page.evaluate("performance.getEntriesByType('navigation').length") == 1  # no reload

        # Sockets get through again: the next attempt opens one, and polling stops.
        page.evaluate("window.__blockSockets = false")
        expect(state).to_have_attribute("data-state", "live", timeout=40_000)
        push(server, "after", [1])
        expect(page.locator('tr[data-row="after"]')).to_be_visible(timeout=10_000)
        assert errors == []
