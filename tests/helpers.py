"""Small helpers every test folder shares: the document's key and what is
stored under it, a bounded wait on a condition, and worker options that keep
tests quick.

Import them as ``from tests.helpers import KEY, wait_for`` (pytest runs from
the project root with ``--import-mode=importlib``, so ``tests`` is importable).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from engine import ObjectStore, Worker, WorkerOptions, WorkerStats
from engine.stores import fault_store_url

# Where the queue document lives by default (engine.policy.DOCUMENT_KEY),
# spelled out so that a change of the default shows up in the tests.
KEY = "queue.json"

POLL_SECONDS = 0.01
# A worker that polls and backs off in milliseconds, not seconds, so that
# tests of the worker loop take as long as their jobs.
FAST_WORKER = WorkerOptions(poll_seconds=0.01, backoff_seconds=0.001, backoff_cap_seconds=0.01)
DEFAULT_TIMEOUT = 10.0


def wait_for(predicate: Callable[[], bool], timeout: float = DEFAULT_TIMEOUT, what: str = "condition") -> None:
    """Return as soon as ``predicate()`` holds; fail the test after ``timeout`` seconds.

    The timeout is a bound on a hang, not a pause: a passing test waits only
    as long as the condition takes. Re-checks every few milliseconds.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(POLL_SECONDS)


def stored(store: ObjectStore) -> bytes:
    """The document's bytes as stored; fails the test if there is none."""
    blob = store.get(KEY)
    assert blob is not None, f"no {KEY} in the store"
    return blob.data


def document(store: ObjectStore) -> dict[str, Any]:
    """The stored document, parsed."""
    return orjson.loads(stored(store))  # type: ignore[no-any-return]


def start(worker: Worker) -> tuple[threading.Thread, list[WorkerStats | BaseException]]:
    """Run ``worker`` on a daemon thread; its stats (or what it raised) land in the list."""
    result: list[WorkerStats | BaseException] = []

    def run() -> None:
        try:
            result.append(worker.run())
        except BaseException as exc:
            result.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def behind_fault_store(settings: Any, folder: Path, plan: bytes) -> Path:
    """Point ``settings.QUEUE_STORE_URL`` at a folder store behind the fault
    store (engine.stores.faults), whose control file (``control.json`` beside
    ``folder``) holds ``plan``; return the control file, to change the plan."""
    control = folder.parent / "control.json"
    control.write_bytes(plan)
    settings.QUEUE_STORE_URL = fault_store_url(folder.as_uri(), control)
    return control
