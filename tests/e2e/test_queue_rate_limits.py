"""A rate limit through real processes: set with ``manage.py queueaction``
(forwarded, signed, to the leader), then two ``queueworker`` processes with
four slots each, long-polling, drain a queue limited to three starts a
second: the starts come in bursts of at most three, a window apart, and
every job runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.harness import Cluster, api
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

JOBS = 12
RATE, WINDOW = 3, 1.0
# How much later a handler may start than its claim landed (the answer's
# trip and the worker's hand-off): a window's starts may spread by this much.
JITTER = 0.3


def starts(record: Path) -> list[tuple[int, float]]:
    """(job, wall-clock start) per handler run, in start order."""
    runs = [line.split() for line in record.read_text().splitlines() if line.startswith("start ")]
    return sorted(((int(n), float(t)) for _, n, t in runs), key=lambda run: run[1])


def most_within(times: list[float], span: float) -> int:
    """The most starts in any interval of ``span`` seconds."""
    return max(sum(1 for t in times if first <= t < first + span) for first in times)


def test_two_workers_with_four_slots_each_start_no_more_than_the_rate_allows(
        cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    from tests.e2e.browser import USER, with_operator  # the superuser the action is audited as

    record = tmp_path / "runs.txt"
    cluster, node = with_operator(cluster_factory(E2E_RECORD=str(record)))
    wait_for(lambda: node.role() == "leader", 30, "the node to lead")
    rated = cluster.manage("queueaction", "rate_limit", "--queue", "partner", "--rate", f"{RATE}/s", "--user", USER,
                           "--reason", "e2e rate", "--yes")
    assert rated.returncode == 0, rated.stderr.decode()
    assert "Limited partner to 3 per 1 s (was no rate limit) on the leader" in rated.stdout.decode()
    assert cluster.document()["queues"]["partner"]["rate_limit"] == {"jobs": RATE, "seconds": WINDOW}

    answer = api(node, "POST", "/api/v1/jobs", {"queue": "partner", "jobs": [{"payload": {"n": n}}
                                                                            for n in range(JOBS)]})
    assert answer.status_code == 201, answer.text
    cluster.drain(node, "partner", "tests.e2e.handlers:timed", workers=2, concurrency=4,
                  done=lambda: record.exists() and record.read_text().count("start ") == JOBS)
    runs = starts(record)
    assert sorted(n for n, _ in runs) == list(range(JOBS))
    times = [t for _, t in runs]
    # Four windows of three: the last opens at least three windows after the first.
    assert times[-1] - times[0] >= (JOBS / RATE - 1) * WINDOW - JITTER, times
    # No window held more than three (eight slots were free the whole time).
    assert most_within(times, WINDOW - JITTER) == RATE, times
    assert cluster.document()["queues"]["partner"]["completed"] == JOBS
