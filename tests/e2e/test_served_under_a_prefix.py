"""The whole site served under a path prefix, as behind a reverse proxy at
``/queueadmin/`` that keeps the prefix: daphne runs with ``--root-path``,
and every request names the prefix.

The API (a push, a claim, a completion, an early refusal), ``/metrics`` and
the probes answer below it; the dashboard signs in, loads its static files,
goes live over its websocket, redraws a page with links under the prefix,
and runs an action. A path without the prefix (from a proxy that strips it)
is taken as it is, as Django takes it.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from playwright.sync_api import Browser, expect

from tests.e2e.browser import PASSWORD, USER, push, with_operator
from tests.e2e.harness import TOKEN, Cluster, api
from tests.helpers import wait_for

pytestmark = pytest.mark.e2e

ROOT = "/queueadmin"


def test_the_api_and_the_dashboard_work_under_a_path_prefix(browser: Browser,
                                                             cluster_factory: Callable[..., Cluster]) -> None:
    # A small request limit: a body over it is refused by daphne before it is read (queueadmin.edge).
    # And an environment badge (queueadmin/dashboard/context.py), seen in the browser below.
    cluster, server = with_operator(cluster_factory(QUEUE_MAX_PAYLOAD_BYTES="1000", QUEUE_MAX_REQUEST_BYTES="100000",
                                                    QUEUE_ENVIRONMENT="staging"), root=ROOT)
    assert server.url.endswith(ROOT)
    wait_for(lambda: server.role() == "leader", 15, "the node to lead")

    # The API below the prefix: push, claim, complete.
    [job_id] = api(server, "POST", "/api/v1/jobs", {"queue": "mounted", "payload": {"n": 1}}).json()["ids"]
    [job] = api(server, "POST", "/api/v1/claim", {"worker": "w", "queues": ["mounted"]}).json()["jobs"]
    assert job["id"] == job_id
    done = api(server, "POST", f"/api/v1/jobs/{job_id}/complete", {"lease": job["lease"]})
    assert done.status_code == 200, done.text
    # Refusals are the API's own JSON, early ones too (queueadmin.edge): no token; a body over the limit.
    no_token = httpx.post(f"{server.url}/api/v1/jobs", json={"queue": "q", "payload": 1})
    assert (no_token.status_code, no_token.json()["error"]) == (401, "unauthorized")
    too_big = httpx.post(f"{server.url}/api/v1/jobs", content=b"x" * 1_000_000,
                         headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    assert (too_big.status_code, too_big.json()["error"]) == (413, "payload_too_large")
    # By the edge, which closes the connection (the application would keep it): it read the API's path
    # below the prefix, where the API's limit holds (1 MB is within the dashboard's form limit).
    assert too_big.headers["connection"] == "close"
    assert httpx.get(f"{server.url}/readyz").status_code == 200
    metrics = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert metrics.status_code == 200 and "queueadmin_" in metrics.text
    # A proxy that strips the prefix sends the path below it: taken as it is, as Django takes it.
    bare = f"http://127.0.0.1:{server.port}"
    assert httpx.post(f"{bare}/api/v1/jobs", json={"queue": "stripped", "payload": 1},
                      headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 201

    context = browser.new_context(viewport={"width": 1280, "height": 860})
    try:
        page = context.new_page()
        failed: list[str] = []
        page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{server.url}/")
        expect(page).to_have_url(f"{server.url}/login/?next={ROOT}/")
        expect(page.get_by_test_id("environment")).to_have_text("staging")
        expect(page.get_by_test_id("environment")).to_have_css("background-color", "rgb(178, 106, 0)")
        expect(page).to_have_title("[staging] Sign in · queueadmin")
        page.get_by_label("Username").fill(USER)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        expect(page).to_have_url(f"{server.url}/")
        expect(page.get_by_role("heading", name="Queues")).to_be_visible()
        expect(page.locator("#live-state")).to_have_attribute("data-state", "live")

        # A live redraw: a new queue appears, its link under the prefix.
        push(server, "arrived", [1, 2, 3])
        row = page.locator('tr[data-row="arrived"]')
        expect(row).to_be_visible(timeout=10_000)
        link = row.locator("a.name")
        expect(link).to_have_attribute("href", f"{ROOT}/queues/arrived/")
        link.click()
        expect(page).to_have_url(f"{server.url}/queues/arrived/")
        expect(page.get_by_test_id("pending")).to_have_text("3")
        expect(page.locator("#live-state")).to_have_attribute("data-state", "live")

        # An action: its form posts under the prefix, and the run lands.
        page.goto(f"{server.url}/")
        page.locator('tr[data-row="arrived"]').get_by_role("button", name="Pause").click()
        page.get_by_test_id("reason").fill("mounted pause")
        page.get_by_test_id("run-action").click()
        expect(page.locator(".msg")).to_have_text("Paused arrived.")
        assert cluster.document()["queues"]["arrived"]["paused"] is True
        assert failed == [] and errors == []
    finally:
        context.close()
