"""``python -m bench backlog --quick``: a tiny run end to end.

A test of the harness, never a timed assertion: it checks that the format-2
depth runs seed, measure and report every column, that the backlog really
went into segments, and that one purge emptied the seeded queue.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
        assert result["max_commit_bytes"] > 0 and result["rss_bytes"] > 0
    assert not list(tmp_path.glob("bench-backlog-*"))  # each run removes its folder
