"""Recurring jobs through real processes: two daphne nodes scheduling a
Django task every second, a ``manage.py queueworker`` running it, and the
leader killed with SIGKILL. Every tick's task runs once; the ticks that came
due while no node led are coalesced into one, which the new leader fires."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import orjson
import pytest

from engine import tick_of
from tests.e2e.harness import Cluster
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

SCHEDULES = {"every-second": {"every_seconds": 1, "task": "tests.e2e.sample_tasks.record_run",
                              "catch_up_seconds": 30}}


def tick(job_id: str) -> datetime:
    found = tick_of(job_id)
    assert found is not None and found[0] == "every-second", job_id
    return found[1]


def runs(record: Path) -> list[dict[str, object]]:
    if not record.exists():
        return []
    return [orjson.loads(line) for line in record.read_text().splitlines()]


def test_each_tick_runs_once_across_a_killed_leader(cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    record = tmp_path / "runs.jsonl"
    cluster = cluster_factory(QUEUE_SCHEDULES=orjson.dumps(SCHEDULES).decode(), E2E_RECORD=str(record))
    a = cluster.node()
    wait_for(lambda: a.role() == "leader", 30, "the first node to lead")
    b = cluster.node()
    worker = cluster.worker("--queue", "default", "--concurrency", "4", "--broker", a.url, "--broker", b.url)
    wait_for(lambda: len(runs(record)) >= 4, 30, "four ticks to run")

    a.kill()  # SIGKILL: its heartbeats and ticks stop at once
    killed_at = datetime.now(UTC)
    wait_for(lambda: b.role() == "leader", 30, "the standby to take over")
    wait_for(lambda: any(tick(str(r["id"])) > killed_at + timedelta(seconds=3) for r in runs(record)), 30,
             "ticks to run again under the new leader")
    worker.terminate()
    assert worker.wait(60) == 0

    ids = [str(r["id"]) for r in runs(record)]
    assert len(ids) == len(set(ids)), f"a tick ran twice: {sorted(ids)}"
    assert all(r["attempt"] == 1 for r in runs(record))
    ticks = sorted(map(tick, ids))
    gaps = [(earlier, later) for earlier, later in pairwise(ticks)
            if later - earlier > timedelta(seconds=1)]
    # The gap while nobody led: from the last tick the killed leader fired to
    # the latest one due when the new leader's first commit landed (the
    # takeover waits 2 s). Any other gap is a tick coalesced on a busy machine.
    [failover] = [gap for gap in gaps if gap[0] <= killed_at + timedelta(seconds=1) <= gap[1]]
    assert failover[1] - failover[0] >= timedelta(seconds=2)
    assert all(later - earlier <= timedelta(seconds=3) for earlier, later in gaps if (earlier, later) != failover), gaps
    document = cluster.document()
    mark = document["schedules"]["every-second"]
    assert mark["outcome"] == "fired" and tick(mark["job"]) >= ticks[-1]
    # Every job pushed ran: nothing is left behind, nothing ran that was not pushed.
    assert document["queues"]["default"]["pushed"] == document["queues"]["default"]["completed"] + sum(
        1 for j in document["jobs"] if j["queue"] == "default")
    assert document["queues"]["default"]["completed"] == len(ids)


def test_a_pause_made_through_a_standby_holds_across_a_killed_leader(cluster_factory: Callable[..., Cluster],
                                                                   tmp_path: Path) -> None:
    """``queueaction`` (a process of its own, forwarding the signed pause to
    the leader) pauses the schedule; the leader is killed; the new leader,
    which never saw the pause made, skips the ticks too, and a resume brings
    them back without running the skipped ones."""
    from tests.e2e.browser import USER, with_operator  # the superuser the action is audited as

    record = tmp_path / "runs.jsonl"
    cluster, a = with_operator(cluster_factory(QUEUE_SCHEDULES=orjson.dumps(SCHEDULES).decode(),
                                               E2E_RECORD=str(record)))
    wait_for(lambda: a.role() == "leader", 30, "the first node to lead")
    b = cluster.node()
    worker = cluster.worker("--queue", "default", "--concurrency", "4", "--broker", a.url, "--broker", b.url)
    wait_for(lambda: len(runs(record)) >= 2, 30, "two ticks to run")

    paused = cluster.manage("queueaction", "pause_schedule", "--schedule", "every-second", "--user", USER,
                            "--reason", "e2e pause", "--yes")
    assert paused.returncode == 0, paused.stderr.decode()
    assert "Paused schedule every-second on the leader" in paused.stdout.decode()
    paused_at = datetime.fromisoformat(cluster.document()["schedule_pauses"]["every-second"])
    wait_for(lambda: cluster.document()["schedules"]["every-second"]["outcome"] == "skipped", 30,
             "a tick to be skipped")

    a.kill()
    wait_for(lambda: b.role() == "leader", 30, "the standby to take over")
    taken_over = datetime.now(UTC)
    wait_for(lambda: datetime.fromisoformat(cluster.document()["schedules"]["every-second"]["tick"])
             > taken_over + timedelta(seconds=2), 30, "the new leader to handle ticks")
    assert cluster.document()["schedules"]["every-second"]["outcome"] == "skipped"
    # Nothing pushed for a tick after the pause; the worker drains what was pushed before it.
    wait_for(lambda: not any(j["queue"] == "default" for j in cluster.document()["jobs"]), 30, "the queue to drain")
    assert all(tick(str(r["id"])) <= paused_at for r in runs(record))

    resumed = cluster.manage("queueaction", "resume_schedule", "--schedule", "every-second", "--user", USER,
                             "--reason", "e2e resume", "--yes")
    assert resumed.returncode == 0, resumed.stderr.decode()
    resumed_at = datetime.now(UTC)
    wait_for(lambda: any(tick(str(r["id"])) > resumed_at for r in runs(record)), 30, "ticks to run again")
    worker.terminate()
    assert worker.wait(60) == 0
    ids = [str(r["id"]) for r in runs(record)]
    assert len(ids) == len(set(ids)), f"a tick ran twice: {sorted(ids)}"
    # None of the ticks between the pause and the resume ran, and none was caught up after.
    skipped = [t for t in map(tick, ids) if paused_at < t < resumed_at - timedelta(seconds=1)]
    assert skipped == [], skipped
