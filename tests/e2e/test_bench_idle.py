"""``python -m bench idle``: a tiny run end to end.

The benchmark is a tool, never a timed test: this checks that it runs and
prints its table row and both target lines, not whether the targets pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--workers", "5", "--seconds", "2", "--warmup", "0.5", "--wait", "1"]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_tiny_idle_run_prints_its_row_and_both_target_lines() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUE_", "DJANGO_"))}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "idle", *TINY],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=160,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 2, out  # the header and one row
    assert rows[1][0].strip() == "5"
    assert any(line.startswith("CPU < 5 %: ") and line.endswith(("PASS", "MISS")) for line in out.splitlines()), out
    assert any(
        line.startswith("commits <= 1 per heartbeat (+1 for the window edge): ") and line.endswith(("PASS", "MISS"))
        for line in out.splitlines()
    ), out
