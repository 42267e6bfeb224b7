"""I10 end to end: queue.json deleted under a real daphne node (and a standby).

The nodes stop writing and say so on /api/v1/health, a push gets a JSON 503
document_missing, and nothing re-creates the document, across several
takeover intervals; ``manage.py queueinit --force --reason ...`` then
re-initialises the store and the nodes serve again by themselves.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from engine import open_store
from tests.e2e.harness import TAKEOVER_SECONDS, Cluster, Node, api
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(180)


def missing(node: Node) -> bool:
    health = node.health()
    return health is not None and health["document"]["state"] == "missing"


def test_a_deleted_document_stops_the_nodes_until_queueinit_force(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    cluster = cluster_factory()
    migrate = cluster.manage("migrate", "--noinput")
    assert migrate.returncode == 0, migrate.stderr.decode()
    a = cluster.node()
    wait_for(lambda: a.role() == "leader", 30, "the first node to lead")
    b = cluster.node()
    wait_for(lambda: (b.health() or {}).get("broker", {}).get("url") == a.url, 30, "the standby to see the leader")
    pushed = api(a, "POST", "/api/v1/jobs", {"queue": "q", "payload": {"n": 1}})
    assert pushed.status_code == 201
    lost_seq = cluster.document()["seq"]

    open_store(cluster.store_url).delete("queue.json")  # an operator's mistake, a lifecycle rule...

    wait_for(lambda: missing(a) and missing(b), 30, "both nodes to report the document missing")
    health = a.health()
    assert health is not None
    assert health["document"]["error"] == "document_missing" and "queueinit" in health["document"]["message"]
    for node in (a, b):
        refused = api(node, "POST", "/api/v1/jobs", {"queue": "q", "payload": {"n": 2}})
        assert refused.status_code == 503
        assert refused.headers["content-type"] == "application/json"
        assert refused.json()["error"] == "document_missing"
    # Watch the store for two takeover intervals: in that time a standby that
    # mistook the gap for a dead leader would have taken over (and re-created it).
    store = open_store(cluster.store_url)
    try:
        end = time.monotonic() + 2 * TAKEOVER_SECONDS
        while time.monotonic() < end:
            assert store.get("queue.json") is None, "a node re-created the lost document"
            time.sleep(0.1)
    finally:
        store.close()
    assert missing(a) and missing(b)

    refused_init = cluster.manage("queueinit")
    assert refused_init.returncode != 0 and b"--force" in refused_init.stderr
    init = cluster.manage("queueinit", "--force", "--reason", "e2e: the document was deleted")
    assert init.returncode == 0, init.stderr.decode()

    wait_for(lambda: a.role() == "leader" or b.role() == "leader", 30, "a node to lead again")
    leader = cluster.leader([a, b])
    assert not missing(a) and not missing(b)
    again = api(leader, "POST", "/api/v1/jobs", {"queue": "q", "payload": {"n": 3}})
    assert again.status_code == 201, again.text
    assert cluster.document()["seq"] > lost_seq
