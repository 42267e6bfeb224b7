"""Real processes on a store that ignores conditional writes (the fault
store's ``unconditional``: writes lose their If-Match and If-None-Match, as
behind a proxy that strips them). A daphne node refuses to write there and
says why on /readyz and in its log, so no document appears; ``manage.py
queuecheck`` fails on it with the reason and passes on the same folder without
the fault."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
import pytest

from engine import FileStore
from engine.stores import fault_store_url
from tests.e2e.harness import ROOT, Cluster, api
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_a_node_on_a_store_that_drops_the_conditions_never_writes_and_says_why(
    cluster_factory: Callable[..., Cluster], tmp_path: Path,
) -> None:
    control = tmp_path / "control.json"
    control.write_bytes(orjson.dumps({"unconditional": True}))
    folder = tmp_path / "store"
    cluster = cluster_factory(fault_store_url(folder.as_uri(), control))
    node = cluster.node()

    def ready() -> httpx.Response:
        return httpx.get(f"{node.url}/readyz", timeout=5)

    wait_for(lambda: ready().json().get("reason") == "store_unsafe", 20, "the node to find the store unsafe")
    answer = ready()
    assert answer.status_code == 503
    assert "replaced the first instead of being refused" in answer.json()["message"]
    push = api(node, "POST", "/api/v1/jobs", {"queue": "q", "payload": {"n": 1}})
    assert push.status_code == 503 and push.json()["error"] == "not_leader"
    assert FileStore(folder).list() == []  # no document, no marker, no probe left
    node.proc.send_signal(signal.SIGTERM)
    node.proc.wait(30)
    assert "conditional writes do not work on this store" in node.log.read_text(errors="replace")


def test_queuecheck_fails_on_that_store_and_passes_without_the_fault(tmp_path: Path) -> None:
    control = tmp_path / "control.json"
    control.write_bytes(orjson.dumps({"unconditional": True}))
    folder = tmp_path / "store"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("QUEUE_")},
           "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
           "QUEUE_STORE_URL": fault_store_url(folder.as_uri(), control)}

    def queuecheck() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "manage.py", "queuecheck"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)

    refused = queuecheck()
    assert refused.returncode == 1, refused
    assert "If-None-Match: * replaced the first instead of being refused" in refused.stderr

    control.write_bytes(b"{}")
    passed = queuecheck()
    assert passed.returncode == 0, passed
    assert "reachable, and it refuses a second create" in passed.stdout
    assert FileStore(folder).list() == []
