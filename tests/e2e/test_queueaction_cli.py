"""``manage.py queueaction`` as an operator runs it: its own process beside
a daphne node, with the node's settings. It runs no broker, so its run is
signed and forwarded to the leader the document names; the audit entry is
written in the shared database. With the leader gone, it fails, says why,
changes nothing and audits the refusal.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.e2e.browser import USER, with_operator
from tests.e2e.harness import Cluster, api
from tests.helpers import wait_for

pytestmark = pytest.mark.e2e


def audit_rows(cluster: Cluster) -> list[str]:
    code = ("from queueadmin.models import AuditEntry\n"
            "for e in AuditEntry.objects.order_by('id'):\n"
            "    print('|'.join((e.action, e.username, e.outcome, e.reason, str(e.count), e.detail)))")
    shown = cluster.manage("shell", "-c", code)
    assert shown.returncode == 0, shown.stderr.decode()
    return [line for line in shown.stdout.decode().splitlines() if "|" in line]  # not the shell's own notice


def test_a_redrive_from_the_shell_runs_on_the_leader_and_is_audited(cluster_factory: Callable[..., Cluster]) -> None:
    cluster, node = with_operator(cluster_factory())
    wait_for(lambda: node.role() == "leader", 15, "the node to lead")
    pushed = api(node, "POST", "/api/v1/jobs", {"queue": "orders", "jobs": [
        {"payload": {"n": n}, "max_attempts": 1} for n in range(3)]}).json()["ids"]
    claimed = api(node, "POST", "/api/v1/claim", {"worker": "w", "queues": ["orders"], "max_jobs": 3}).json()["jobs"]
    for job in claimed:
        api(node, "POST", f"/api/v1/jobs/{job['id']}/fail", {"lease": job["lease"], "error": "KeyError: 'sku'"})
    assert {d["id"] for d in cluster.document()["dead"]} == set(pushed)

    dry = cluster.manage("queueaction", "redrive", "--queue", "orders", "--user", USER, "--reason", "sku fixed",
                         "--dry-run")
    assert dry.returncode == 0, dry.stderr.decode()
    assert "3 jobs would be moved back to pending." in dry.stdout.decode()
    assert {d["id"] for d in cluster.document()["dead"]} == set(pushed)

    ran = cluster.manage("queueaction", "redrive", "--queue", "orders", "--user", USER, "--reason", "sku fixed",
                         "--yes")
    assert ran.returncode == 0, ran.stderr.decode()
    assert ran.stdout.decode().splitlines()[-1] == f"Redrove 3 dead letters back to pending on the leader {node.url}."
    doc = cluster.document()
    assert doc["dead"] == [] and sorted(j["id"] for j in doc["jobs"] if j["status"] == "pending") == sorted(pushed)
    [entry] = audit_rows(cluster)
    assert entry.startswith(f"redrive|{USER}|ok|sku fixed|3|redrove 3 dead letters back to pending on the leader ")

    # The leader is gone: the run cannot reach it. Nothing changes; the refusal is audited.
    node.kill()
    before = cluster.raw_document()
    failed = cluster.manage("queueaction", "pause", "--queue", "orders", "--user", USER, "--reason", "hold", "--yes")
    assert failed.returncode == 1
    assert f"Pause failed: ForwardRefused: the leader at {node.url} could not be reached" in failed.stderr.decode()
    assert cluster.raw_document() == before
    assert audit_rows(cluster)[-1].startswith(f"pause|{USER}|failed|hold|0|ForwardRefused: the leader at {node.url}")
