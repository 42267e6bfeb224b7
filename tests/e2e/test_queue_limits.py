"""A concurrency limit through real processes: set with ``manage.py
queueaction`` (forwarded, signed, to the leader), then two ``queueworker``
processes with four slots each drain a queue limited to two: never more than
two of its jobs run at once, and all of them run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.harness import Cluster, api
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

JOBS = 10


def most_at_once(record: Path) -> int:
    """The most handlers running at once, from the start and done lines in file order (O_APPEND)."""
    running = most = 0
    for line in record.read_text().splitlines():
        running += 1 if line.startswith("start ") else -1
        most = max(most, running)
    return most


def test_two_workers_with_four_slots_each_run_at_most_two_jobs_of_a_limited_queue(
        cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    from tests.e2e.browser import USER, with_operator  # the superuser the action is audited as

    record = tmp_path / "runs.txt"
    cluster, node = with_operator(cluster_factory(E2E_RECORD=str(record)))
    wait_for(lambda: node.role() == "leader", 30, "the node to lead")
    limited = cluster.manage("queueaction", "limit", "--queue", "slow", "--max-running", "2", "--user", USER,
                             "--reason", "e2e limit", "--yes")
    assert limited.returncode == 0, limited.stderr.decode()
    assert "Limited slow to 2 running jobs (was no limit) on the leader" in limited.stdout.decode()
    assert cluster.document()["queues"]["slow"]["max_running"] == 2

    answer = api(node, "POST", "/api/v1/jobs", {"queue": "slow", "jobs": [
        {"payload": {"n": n, "seconds": 0.4}} for n in range(JOBS)]})
    assert answer.status_code == 201, answer.text
    cluster.drain(node, "slow", "tests.e2e.handlers:slow", workers=2, concurrency=4,
                  done=lambda: record.exists() and record.read_text().count("done ") == JOBS)
    assert sorted(int(line.split()[1]) for line in record.read_text().splitlines() if line.startswith("done ")) \
        == list(range(JOBS))
    assert most_at_once(record) == 2  # the limit, reached: eight slots were free
    assert cluster.document()["queues"]["slow"]["completed"] == JOBS
