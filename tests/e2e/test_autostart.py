"""The embedded broker starts when the serving entry point is imported, and
never when a management command runs: each checked in a fresh Python process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine import FileStore

ROOT = Path(__file__).resolve().parents[2]


def _run_with_autostart(tmp_path: Path, args: list[str]) -> bool:
    """Run ``python *args`` in the project with autostart on; return whether
    queue.json exists afterwards (a started broker takes over at once, writing it)."""
    queue_dir = tmp_path / "queue"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUE_", "DJANGO_"))}
    env.update(QUEUE_STORE_URL=queue_dir.as_uri(), QUEUE_BROKER_AUTOSTART="true",
               DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}")
    result = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return queue_dir.exists() and FileStore(queue_dir).etag("queue.json") is not None


@pytest.mark.parametrize("command", [["check"], ["makemigrations", "--check", "--dry-run"]])
def test_management_commands_never_start_a_broker(tmp_path: Path, command: list[str]) -> None:
    assert not _run_with_autostart(tmp_path, ["manage.py", *command])


# Imports the serving entry point, then waits (bounded) for the broker's first write.
SERVE = """
import time
import queueadmin.asgi
from django.conf import settings
from engine import open_store
store = open_store(settings.QUEUE_STORE_URL)
deadline = time.monotonic() + 10
while store.etag("queue.json") is None and time.monotonic() < deadline:
    time.sleep(0.02)
"""


def test_importing_the_asgi_app_in_a_fresh_process_starts_the_broker(tmp_path: Path) -> None:
    # The control for the test above: the same set-up does write queue.json
    # when the serving entry point is imported.
    assert _run_with_autostart(tmp_path, ["-c", SERVE])
