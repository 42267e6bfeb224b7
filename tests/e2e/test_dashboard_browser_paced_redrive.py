"""A redrive at a pace, as an operator takes it: in Chromium on a daphne
node (the dead letters page, the dry run's pace form, the run), and with
``manage.py queueaction --pace`` in its own process, forwarded to the
leader. The jobs must come back exactly as the dry run said: the first at
once, each next one a fixed interval after the one before.

The fixtures (``browser``, ``node``, ``cluster_factory``) and helpers are in
tests/e2e/browser.py and tests/e2e/harness.py.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from tests.e2e.browser import USER, kill, shot, signed_in, with_operator
from tests.e2e.harness import Cluster, Node, api
from tests.helpers import wait_for

pytestmark = pytest.mark.e2e


def due_every(doc: dict[str, Any], ids: list[str]) -> list[float]:
    """The seconds between the due times of ``ids``, pending in ``doc``,
    in order (the first must be due at once: no due time)."""
    jobs = {j["id"]: j for j in doc["jobs"]}
    assert all(jobs[i]["status"] == "pending" for i in ids)
    assert jobs[ids[0]].get("not_before") is None
    due = [datetime.fromisoformat(jobs[i]["not_before"]) for i in ids[1:]]
    return [(b - a) / timedelta(seconds=1) for a, b in itertools.pairwise(due)]


def test_an_operator_redrives_a_group_at_a_pace(browser: Browser, node: tuple[Cluster, Node]) -> None:
    cluster, server = node
    dead = [kill(server, "partner", "ConnectionError: partner API down") for _ in range(4)]

    with signed_in(browser, server) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{server.url}/dead/")
        page.get_by_role("button", name="Redrive to pending").click()
        expect(page.get_by_test_id("plan-count")).to_have_text("4 jobs would be moved back to pending.")

        # The pace, typed into the dry run: the dry run is made again with it.
        page.get_by_test_id("pace-jobs").fill("2")
        page.get_by_test_id("pace-seconds").select_option(label="minute")
        page.get_by_test_id("pace-preview").click()
        expect(page.get_by_test_id("plan-effect").first).to_contain_text(
            "Paced at 2 per 60 s: the jobs are due one after another, in the order of the list, one every 30 s; the "
            "first at once, the last 1.5 min after you confirm")
        expect(page.locator("#confirm-title + p")).to_contain_text(", paced at 2 per 60 s.")
        expect(page.get_by_test_id("pace-jobs")).to_have_value("2")
        shot(page, "dead-letters-redrive-paced")
        page.get_by_test_id("reason").fill("partner API is back, slowly")
        page.get_by_test_id("run-action").click()
        expect(page.locator(".msg")).to_have_text("Redrove 4 dead letters back to pending.")
        assert errors == []

    doc = cluster.document()
    order = [j["id"] for j in doc["jobs"] if j["id"] in dead]
    assert sorted(order) == sorted(dead)
    assert due_every(doc, order) == [30.0, 30.0]
    # Only the first is due: a worker gets it, and nothing else yet.
    claimed = api(server, "POST", "/api/v1/claim", {"worker": "w", "queues": ["partner"], "max_jobs": 4}).json()
    assert [j["id"] for j in claimed["jobs"]] == order[:1]


def test_queueaction_redrives_at_a_pace_on_the_leader(cluster_factory: Callable[..., Cluster]) -> None:
    """The command runs no broker: its paced requeue is signed and forwarded to the leader."""
    cluster, node = with_operator(cluster_factory())
    wait_for(lambda: node.role() == "leader", 15, "the node to lead")
    dead = [kill(node, "mail", "SMTPServerDisconnected: please run connect() first") for _ in range(3)]

    ran = cluster.manage("queueaction", "redrive", "--queue", "mail", "--pace", "10/s", "--user", USER,
                         "--reason", "SMTP is back", "--yes")

    assert ran.returncode == 0, ran.stderr.decode()
    out = ran.stdout.decode()
    assert ", paced at 10 per 1 s." in out and "! Paced at 10 per 1 s: the jobs are due one after another" in out
    assert out.splitlines()[-1] == f"Redrove 3 dead letters back to pending on the leader {node.url}."
    doc = cluster.document()
    order = [j["id"] for j in doc["jobs"] if j["id"] in dead]
    assert sorted(order) == sorted(dead) and due_every(doc, order) == [0.1]
