"""Narrowed API tokens with real processes: tokens made with ``manage.py
queuetoken``, a daphne node, ``manage.py enqueue`` (also run twice with
``--id``: one job) and ``queueworker`` processes that use them
(queueadmin.api.grants)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.harness import Cluster, api, wait_for

pytestmark = pytest.mark.e2e


def make_token(cluster: Cluster, *args: str) -> str:
    made = cluster.manage("queuetoken", "create", *args)
    assert made.returncode == 0, made.stderr
    return made.stdout.decode().strip()


def test_producer_and_worker_tokens_do_only_their_part(cluster_factory: Callable[..., Cluster],
                                                       tmp_path: Path) -> None:
    cluster = cluster_factory()
    assert cluster.manage("migrate", "--verbosity", "0").returncode == 0
    producer = make_token(cluster, "billing producers", "--queues", "billing", "--push-only")
    worker = make_token(cluster, "billing workers", "--queues", "billing-*", "billing", "--work-only")
    node = cluster.node()
    wait_for(lambda: node.role() == "leader", 15, "the node to lead")

    def enqueue(queue: str, token: str) -> tuple[int, str]:
        done = cluster.manage("enqueue", queue, '{"n": 1}', "--broker", node.url, "--token", token)
        return done.returncode, (done.stdout + done.stderr).decode()

    assert enqueue("billing", producer)[0] == 0
    # Run twice (a retried cron job), a push with its own id makes one job.
    for _ in range(2):
        done = cluster.manage("enqueue", "billing", '{"n": 2}', "--id", "invoice-7", "--broker", node.url,
                              "--token", producer)
        assert done.returncode == 0 and done.stdout.decode().strip() == "invoice-7", done.stderr
    code, said = enqueue("mail", producer)
    assert code != 0 and "may not push to 'mail'" in said and "'billing producers'" in said
    code, said = enqueue("billing", worker)
    assert code != 0 and "may not push jobs" in said
    # The leader's heartbeat commits meanwhile: what matters is the jobs.
    before = cluster.document()["jobs"]

    record = tmp_path / "record.txt"

    def work(queue: str, token: str) -> int:
        proc = cluster.worker("--queue", queue, "--handler", "tests.e2e.handlers:record", "--burst",
                              "--broker", node.url, "--token", token, E2E_RECORD=str(record))
        return proc.wait(60)

    # Refused for good: the worker stops at once with the broker's reason, and claims nothing.
    assert work("billing", producer) != 0
    assert work("mail", worker) != 0
    assert cluster.document()["jobs"] == before
    logs = cluster.logs()
    assert "worker stopped" in logs and "for pushing only" in logs and "may not claim from 'mail'" in logs
    # The worker token drains its own queue.
    assert work("billing", worker) == 0
    assert record.read_text().split() == ["1", "2"]
    assert api(node, "GET", "/api/v1/document", token=worker).json()["error"] == "forbidden"
    revoked = cluster.manage("queuetoken", "revoke", "billing producers")
    assert revoked.returncode == 0, revoked.stderr
    wait_for(lambda: enqueue("billing", producer)[0] != 0, 20, "the revoked token to be refused")
