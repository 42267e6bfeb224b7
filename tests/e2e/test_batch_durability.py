"""A batching worker killed with SIGKILL mid-run loses nothing the broker
acknowledged: a real daphne node, real ``queueworker`` processes (batching,
the default), and a handler that records each job it starts and finishes.

What the broker acknowledged is read from the store right after the kill: a
completed job leaves the document, so every job missing from it then was
acknowledged as completed. Those must never run again; the jobs still in it
(their acknowledgement was not confirmed, or they had not run yet) are the
only ones that may run twice (at-least-once); and every job ends completed.
"""

from __future__ import annotations

import re
import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from engine import BrokerClient
from tests.e2e.harness import TOKEN, Cluster
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
JOBS = 480
# Each job runs longer than an acknowledgement takes, so that a worker that
# acknowledged a job before its handler finished would be caught by the kill.
JOB_SECONDS = 0.1
LEASE_SECONDS = "2"
START = re.compile(r"start (\d+) pid=(\d+)")


def starts(record: Path) -> list[tuple[int, int]]:
    """(job number, worker pid) for every start recorded, in order."""
    text = record.read_text() if record.exists() else ""
    return [(int(n), int(pid)) for n, pid in START.findall(text)]


def finished(record: Path) -> Counter[int]:
    text = record.read_text() if record.exists() else ""
    return Counter(int(line.split()[1]) for line in text.splitlines() if line.startswith("done "))


def test_a_batching_worker_killed_mid_run_loses_no_acknowledged_job(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    cluster = cluster_factory(QUEUE_LEASE_SECONDS=LEASE_SECONDS)
    node = cluster.node()
    wait_for(lambda: node.role() == "leader", 15, "the node to lead")
    with BrokerClient([node.url], token=TOKEN) as client:
        for first in range(0, JOBS, 160):
            client.push("q", [{"n": n, "seconds": JOB_SECONDS} for n in range(first, first + 160)])
    record = tmp_path / "record.txt"
    argv = ["--queue", "q", "--handler", "tests.e2e.handlers:slow", "--concurrency", "16", "--broker", node.url]

    victim = cluster.worker(*argv, E2E_RECORD=str(record))
    wait_for(lambda: sum(finished(record).values()) >= JOBS // 4, 60, "a quarter of the jobs to finish")
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    after_kill = cluster.document()
    left = {job["payload"]["n"] for job in after_kill["jobs"]}
    acknowledged = set(range(JOBS)) - left  # completed jobs leave the document
    assert after_kill["dead"] == []
    assert len(acknowledged) >= JOBS // 8, "the kill came before anything was acknowledged"
    assert any(job["status"] == "running" for job in after_kill["jobs"]), "the kill came after all work was done"
    victim_starts = starts(record)
    assert all(n in {m for m, _ in victim_starts} for n in acknowledged)

    # The victim's leases expire (nobody heartbeats them) and the jobs are pending again.
    wait_for(lambda: all(j["status"] == "pending" for j in cluster.document()["jobs"]), 30, "the leases to expire")
    rescuer = cluster.worker(*argv, "--burst", E2E_RECORD=str(record))
    assert rescuer.wait(180) == 0

    doc = cluster.document()
    assert doc["jobs"] == [] and doc["dead"] == []
    assert doc["queues"]["q"]["completed"] == JOBS  # every job completed once in the broker's count
    assert set(finished(record)) == set(range(JOBS))  # and every one ran to the end
    runs = Counter(n for n, _ in starts(record))
    rerun = {n for n, count in runs.items() if count > 1}
    assert not rerun & acknowledged, sorted(rerun & acknowledged)[:5]  # nothing acknowledged ran again
    assert rerun <= left  # redeliveries are only of jobs not confirmed at the kill
    assert all(pid == rescuer.pid for n, pid in starts(record)[len(victim_starts):]), "a job ran after the kill"
    assert {n for n, pid in starts(record) if pid == rescuer.pid} <= left
