"""The TASKS default in the settings, and its one environment variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRINT = "import queueadmin.settings as s; print(s.TASKS['default']['BACKEND'], s.TASKS['default']['OPTIONS'])"


def _settings(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "QUEUE_"))}
    return subprocess.run([sys.executable, "-c", PRINT], cwd=ROOT, env={**clean, **env}, capture_output=True,
                          text=True, timeout=60, check=False)


def test_tasks_default_to_this_queue_with_a_week_of_results() -> None:
    result = _settings()
    assert result.returncode == 0, result.stderr
    assert result.stdout.split(" ", 1) == ["queueadmin.tasks.ObjectStoreBackend", "{'RESULT_TTL_SECONDS': 604800.0}\n"]


def test_result_retention_comes_from_the_environment() -> None:
    assert "{'RESULT_TTL_SECONDS': 60.0}" in _settings(QUEUE_TASK_RESULT_TTL_SECONDS="60").stdout
    bad = _settings(QUEUE_TASK_RESULT_TTL_SECONDS="a week")
    assert bad.returncode != 0 and "QUEUE_TASK_RESULT_TTL_SECONDS" in bad.stderr
