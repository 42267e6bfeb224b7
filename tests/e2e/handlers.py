"""Job handlers for the end-to-end tests, run inside real queueworker processes.

Each one appends a line to the file named by ``E2E_RECORD`` (O_APPEND makes
concurrent writers' lines whole), so the test can count executions.
"""

from __future__ import annotations

import os
import time
from typing import Any


def _record(line: str) -> None:
    fd = os.open(os.environ["E2E_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def record(payload: Any) -> None:
    """Record ``payload["n"]`` and succeed."""
    _record(str(payload["n"]))


def slow(payload: Any) -> None:
    """Record the start, then work for ``payload["seconds"]``."""
    _record(f"start {payload['n']} pid={os.getpid()}")
    time.sleep(float(payload["seconds"]))
    _record(f"done {payload['n']}")


def timed(payload: Any) -> None:
    """Record the start with its wall-clock time, and succeed."""
    _record(f"start {payload['n']} {time.time():.6f}")


def always_fail(payload: Any) -> None:
    """Record the attempt and fail."""
    _record(f"fail {payload['n']}")
    raise RuntimeError(f"job {payload['n']} always fails")


def cancellable(payload: Any) -> None:
    """Record the start, then work in steps for up to ``payload["seconds"]``,
    checking for a cancellation between steps: record "cancelled" (and
    re-raise) when the job is no longer this worker's, "done" otherwise."""
    from engine import JobCancelled, check_cancelled, current_cancellation

    _record(f"start {payload['n']} {time.time():.6f}")
    deadline = time.monotonic() + float(payload["seconds"])
    try:
        while time.monotonic() < deadline:
            check_cancelled()
            current_cancellation().wait(0.05)
    except JobCancelled as exc:
        _record(f"cancelled {payload['n']} {time.time():.6f} {exc.reason}")
        raise
    _record(f"done {payload['n']}")


def database(payload: Any) -> None:
    """Ask the database for this connection's server process, through the ORM's
    connection, and record it ("ok N PID"); record the error ("error N ...")
    and re-raise if the query fails."""
    from django.db import connection

    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()" if connection.vendor == "postgresql" else "SELECT 1")
            (pid,) = cursor.fetchone()
    except Exception as exc:
        _record(f"error {payload['n']} {type(exc).__name__}")
        raise
    _record(f"ok {payload['n']} {pid}")
