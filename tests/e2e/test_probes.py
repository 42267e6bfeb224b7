"""``/livez`` and ``/readyz`` on real daphne nodes: a leader and a standby
are both ready, and a standby stays ready after its leader is killed and it
takes over; a probe needs no token and any Host."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from tests.e2e.harness import Cluster, Node
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def probe(node: Node, path: str) -> httpx.Response:
    return httpx.get(f"{node.url}{path}", headers={"Host": "10.0.0.7:8000"}, timeout=5)


def test_a_leader_and_a_standby_are_ready_and_stay_ready_through_a_takeover(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster = cluster_factory()
    first = cluster.node()
    wait_for(lambda: first.role() == "leader", 20, "the first node to lead")
    second = cluster.node()
    wait_for(lambda: probe(second, "/readyz").status_code == 200, 20, "the standby to be ready")

    assert probe(first, "/livez").json() == {"status": "ok"}
    assert probe(first, "/readyz").json()["role"] == "leader"
    assert probe(second, "/readyz").json()["role"] == "standby"

    first.kill()
    wait_for(lambda: probe(second, "/readyz").json()["role"] == "leader", 30, "the standby to take over")
    assert probe(second, "/readyz").status_code == 200
