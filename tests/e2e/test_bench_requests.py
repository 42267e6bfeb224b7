"""``python -m bench requests``: a tiny run end to end.

A tool, not a timed test: this checks that it runs and that its counts have
the shape the README's deployment costs rest on: an idle leader only writes,
once per heartbeat; a standby reads and checks the ETag about as often; and
batching jobs costs fewer writes than sending them one by one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_tiny_run_counts_requests_by_kind() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUE_", "DJANGO_"))}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "requests", "--seconds", "4", "--jobs", "40", "--push-batch", "10",
         "--heartbeat", "0.5", "--takeover", "3", "--latency-ms", "5"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=160, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {line.split("|")[1].strip(): [float(c.replace(",", "")) for c in line.split("|")[2:-1]]
            for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line and "what" not in line}
    idle = next(v for k, v in rows.items() if k.startswith("idle"))
    put, get, etag = idle[0], idle[1], idle[2]
    assert 0.8 * 7200 <= put <= 1.2 * 7200  # one write per 0.5 s heartbeat, per hour
    assert 0.7 * 7200 <= get <= 1.2 * 7200 and 0.7 * 7200 <= etag <= 1.2 * 7200
    batched = next(v for k, v in rows.items() if "pushes of 10" in k)
    single = next(v for k, v in rows.items() if "one job per push" in k)
    assert 0 < batched[0] < single[0]
