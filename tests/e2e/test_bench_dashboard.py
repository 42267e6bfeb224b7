"""``python -m bench.dashboard``: a tiny run end to end.

The benchmark is a tool, never a timed test: this checks that it still runs
against the dashboard's current code (it once broke silently when a name it
imported was renamed) and prints a time for every page it names.
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
def test_a_tiny_dashboard_run_prints_a_time_for_every_page() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUE_", "DJANGO_", "DATABASE_"))}
    done = subprocess.run(
        [sys.executable, "-m", "bench.dashboard", "--jobs", "1500", "--repeat", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=160, check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines()
            if line.startswith("| ") and "---" not in line]
    timings = {name.strip(): float(ms) for name, ms in rows[1:]}
    assert {"overview page", "jobs page 1 (all)", "one job's page", "dead letters page"} <= set(timings), done.stdout
    assert all(ms > 0 for ms in timings.values()), timings
