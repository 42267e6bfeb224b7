"""``python -m bench backlog --quick``: a tiny run end to end, and its
jobs page measurement in process.

Tests of the harness, never timed assertions: they check that the format-2
depth runs seed, measure and report every column, that the backlog really
went into segments, that the jobs page it times is deep inside them, and
that one purge emptied the seeded queue.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bench.backlog import table, target_lines
from bench.backlog_probes import _job_by_id, _job_page, _jobs_page
from bench.backlog_run import CountingStore, _seed
from engine import Broker, LatencyStore, MemoryStore, Policy
from queueadmin.dashboard import segments
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_quick_run_reports_every_depth_with_segments(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUE_", "DJANGO_"))}
    out = tmp_path / "backlog.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "backlog", "--quick", "--segments", "64,50,25", "--depths", "0,1000",
         "--latency", "5", "--tmp", str(tmp_path), "--json", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=160, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Policy(segment_jobs=64, head_jobs=50, refill_below=25)" in done.stdout
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 1 |")]
    assert [row.split("|")[2].strip() for row in rows] == ["0", "1,000"]
    results = json.loads(out.read_text())["results"]
    deep = results[1]
    assert deep["keeper"]["sealed"] >= 1000 // 64 - 2  # the seeded backlog went into segments
    assert deep["keeper"]["problems"] == {}
    # One purge operation emptied the queue (segments and all); other commits
    # (a heartbeat, a seal) may land during the call, so only >= 1 is certain.
    assert deep["purge"]["left"] == 0 and deep["purge"]["commits"] >= 1
    assert deep["purge"]["pending"] >= 1000 - deep["drain"]["jobs"]
    for result in results:
        assert result["push"]["ops"] > 0 and result["drain"]["jobs"] > 0
        assert result["max_commit_bytes"] >= result["p90_commit_bytes"] > 0 and result["rss_bytes"] > 0
        assert result["jobs_page"]["rows"] > 0 and result["jobs_page_cached_ms"] > 0, result["jobs_page"]
    assert deep["jobs_page"]["in_segments"] > 0 and deep["jobs_page"]["segments_read"] >= 1
    # Both need a segment with an id index: none at this size, and both say so.
    assert deep["job_page"].get("error") == deep["job_by_id"].get("error"), (deep["job_page"], deep["job_by_id"])
    assert "jobs page deep in segments, cached <= 200 ms" in done.stdout
    assert not list(tmp_path.glob("bench-backlog-*"))  # each run removes its folder


def test_the_jobs_page_it_times_is_the_dashboards_page_deep_inside_the_segments() -> None:
    policy = Policy(segment_jobs=20, head_jobs=20, refill_below=10)
    store = LatencyStore(MemoryStore(), latency=0.001, bandwidth=None)
    broker = Broker(store, url="http://leader", policy=policy, heartbeat_seconds=60, takeover_seconds=600).start()
    try:
        wait_for(lambda: broker.role == "leader", what="the broker leading")
        _seed(broker, ["q"], 500, policy)
        measured = _jobs_page(broker, "q", repeat=2)
    finally:
        broker.stop(timeout=10)
        segments.cache.clear()

    assert "error" not in measured, measured
    assert measured["total"] == 500 and measured["in_segments"] >= 400
    assert measured["page"] == 6 and measured["rows"] == 50  # jobs 250..299: the middle, in a segment
    assert measured["segments_read"] >= 1  # the first load read them from the store
    assert measured["last"]["page"] == measured["pages"] == 10 and measured["last"]["rows"] == 50
    assert measured["cold_ms"] > 0 and measured["cached_ms"] > 0


def _row(depth: int, cached_ms: float | None) -> dict[str, Any]:
    step = {"ops_per_s": 100.0, "p50_ms": 1.0, "p99_ms": 2.0, "jobs_per_s": 100.0}
    row: dict[str, Any] = {
        "queues": 1, "depth": depth, "push": step, "drain": step, "mean_commit_bytes": 1e5, "p90_commit_bytes": 1.5e5,
        "max_commit_bytes": 2e5,
        "rss_bytes": 1e8, "standby_bytes_per_min": 1e6, "overview_ms": 3.0, "seed_push_s": 1, "seed_settle_s": 1,
        "jobs_page": {"in_segments": depth},
    }
    if cached_ms is not None:
        row |= {"jobs_page_cold_ms": 400.0, "jobs_page_cached_ms": cached_ms}
    return row


def test_the_table_and_targets_report_the_jobs_page() -> None:
    results = [_row(0, 1.5), _row(1_000_000, 12.0), _row(5_000_000, None)]

    text = table(results)
    header, rule, *rows = text.splitlines()
    assert "jobs page cold ms" in header and "cached ms" in header
    assert len({line.count("|") for line in (header, rule, *rows)}) == 1, text
    assert "| 400.0 | 12.0 |" in rows[1] and "| — | — |" in rows[2]
    assert "| bytes/commit mean | p90 | max |" in header and "| 0.10 MB | 0.15 MB | 0.20 MB |" in rows[0]
    checks = [line for line in target_lines(results, 0.05) if "jobs page" in line]
    assert checks == ["- jobs page deep in segments, cached <= 200 ms: largest 12.0 ms "
                      "(1 queue(s), depth 1,000,000; first load 400 ms) — PASS"]
    assert "FAIL" in target_lines([_row(1_000_000, 250.0)], 0.05)[-1]


@contextlib.contextmanager
def seeded_leader(*seeds: tuple[str, int]) -> Iterator[tuple[Broker, CountingStore]]:
    """A leader on a counted memory store (1 ms a call), each ``(queue,
    jobs)`` of ``seeds`` seeded in turn into segments of 20 merged up to
    160: some with an id index."""
    policy = Policy(segment_jobs=20, head_jobs=20, refill_below=10, merge_jobs=160)
    counted = CountingStore(MemoryStore())
    broker = Broker(LatencyStore(counted, latency=0.001, bandwidth=None), url="http://leader", policy=policy,
                    heartbeat_seconds=60, takeover_seconds=600).start()
    try:
        wait_for(lambda: broker.role == "leader", what="the broker leading")
        for queue, jobs in seeds:
            _seed(broker, [queue], jobs, policy)
        yield broker, counted
    finally:
        broker.stop(timeout=10)
        segments.cache.clear()
        segments.ranged.clear()


@pytest.fixture
def seeded() -> Iterator[tuple[Broker, CountingStore]]:
    """2,000 jobs of queue q (see :func:`seeded_leader`)."""
    with seeded_leader(("q", 2_000)) as leader:
        yield leader


def test_the_lookup_by_id_it_times_finds_a_job_deep_in_the_backlog_through_the_indexes(
        seeded: tuple[Broker, CountingStore]) -> None:
    measured = _job_by_id(*seeded, "q", repeat=2)

    assert "error" not in measured, measured
    assert measured["indexed_segments"] >= 2
    # Cold: the indexes newest first, in doubling batches, up to the job's
    # segment's (an absent one for a small seal), then the job's entry in its
    # index and the job itself (two ranged reads); warm: nothing.
    assert 3 <= measured["reads"] <= measured["references"] + 2
    assert 3 <= measured["cold_recent_reads"] <= measured["reads"] and measured["cold_recent_ms"] > 0
    assert measured["cold_ms"] > 0 and measured["warm_ms"] > 0 and measured["unknown_ms"] > 0
    # The new leader's warm-up read every segment's index (absent ones too).
    assert measured["warmed"] == measured["references"] and measured["warm_up_s"] > 0
    assert measured["after_warm_up_ms"] > 0


def test_the_job_page_it_times_reads_a_job_by_range_then_a_second_one_whole_then_nothing(
        seeded: tuple[Broker, CountingStore]) -> None:
    _job_by_id(*seeded, "q", repeat=1)  # its warm-up holds every index, as in a run
    measured = _job_page(*seeded, "q")

    assert "error" not in measured, measured
    ranged, whole, again = measured["range"], measured["whole"], measured["again"]
    # By range: the job's entry in the id index and the job's bytes.
    assert ranged["reads"] == 2 and 0 < ranged["bytes_read"] < measured["segment_bytes"] / 10
    # A second job of the segment: the segment whole (verified), once.
    assert whole["reads"] == 1 and whole["bytes_read"] == measured["segment_bytes"]
    assert again["reads"] == 0 and again["bytes_read"] == 0


def test_a_delayed_backlog_is_seeded_due_later_and_labelled_so() -> None:
    """``--delayed``: the backlog is pushed through the same path, each job due
    in that many seconds (a backlog of retries waiting for their backoff);
    with no delayed horizon, delayed jobs stay in the document (docs/format.md), so
    the seeding must not wait for them to be sealed. The table and the
    target lines say the depth was delayed."""
    policy = Policy(segment_jobs=20, head_jobs=20, refill_below=10)
    broker = Broker(MemoryStore(), url="http://leader", policy=policy, heartbeat_seconds=60,
                    takeover_seconds=600).start()
    try:
        wait_for(lambda: broker.role == "leader", what="the broker leading")
        started = datetime.now(UTC)
        _seed(broker, ["q"], 300, policy, delayed=3_600)
        state = broker.committer.state if broker.committer is not None else None
        assert state is not None
        jobs = [job for job in state.jobs.values() if job.queue == "q" and job.status == "pending"]
    finally:
        broker.stop(timeout=10)

    assert len(jobs) == 300
    assert all(job.not_before is not None and job.not_before >= started + timedelta(seconds=3_599) for job in jobs)
    rows = [_row(0, 1.5), {**_row(300, 2.0), "delayed": 3_600.0}]
    assert "| 1 | 300 delayed |" in table(rows).splitlines()[3]
    assert any("depth 300 delayed" in line for line in target_lines(rows, 0.05))


def test_a_delayed_backlog_with_a_horizon_is_seeded_into_delayed_segments() -> None:
    """``--delayed`` with the app's horizon (``--delayed-horizon``, 60 s by
    default): the seeding waits for the delayed jobs past the front share to
    be sealed into delayed segments, as it waits for pending ones, so every
    phase starts with a small document."""
    policy = Policy(segment_jobs=20, head_jobs=20, refill_below=10, delayed_horizon_seconds=60)
    broker = Broker(MemoryStore(), url="http://leader", policy=policy, heartbeat_seconds=60,
                    takeover_seconds=600).start()
    try:
        wait_for(lambda: broker.role == "leader", what="the broker leading")
        _seed(broker, ["q"], 300, policy, delayed=3_600)
        state = broker.committer.state if broker.committer is not None else None
        assert state is not None
        assert state.pending("q") == 300 and state.pending_here["q"] == 20 and state.delayed_away("q") == 280
    finally:
        broker.stop(timeout=10)


def test_the_benchmark_runs_the_apps_delayed_horizon_unless_told() -> None:
    from bench.backlog import APP_DELAYED_HORIZON_SECONDS, parse_args
    from queueadmin.config import DEFAULT_QUEUE_DELAYED_HORIZON_SECONDS

    assert APP_DELAYED_HORIZON_SECONDS == DEFAULT_QUEUE_DELAYED_HORIZON_SECONDS
    assert parse_args(["--delayed", "3600"]).delayed_horizon == APP_DELAYED_HORIZON_SECONDS
    assert parse_args(["--delayed-horizon", "0"]).delayed_horizon == 0


def test_the_recent_job_it_looks_up_is_in_the_most_recently_sealed_segment_of_any_queue() -> None:
    # Two queues: the second queue's seals come after the first's, so a job
    # of the first queue's newest segment is behind all of them in the
    # newest-first order (run S read nearly every index for it in ten queues).
    with seeded_leader(("q", 1_000), ("r", 1_000)) as (broker, counted):
        measured = _job_by_id(broker, counted, "q", repeat=1)

    assert "error" not in measured, measured
    # The first batch of indexes, newest first (8, the lookup's
    # FIRST_CANDIDATE_BATCH), held the job's: then its entry in that index
    # and the job. (The first queue's newest merged segment is in the second
    # batch, which reads the other 6: 16 reads.)
    assert measured["cold_recent_reads"] == 8 + 2, measured
