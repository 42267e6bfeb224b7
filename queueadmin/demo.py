"""Demo handlers for ``manage.py queueworker --handler queueadmin.demo:work``.

They exist to try the queue out and to load it in tests and benchmarks;
they do nothing useful. A handler is called with the job's payload: returning
completes the job, raising fails it.
"""

from __future__ import annotations

import random
from typing import Any

from engine import check_cancelled, current_cancellation

MAX_SECONDS = 60.0
DEFAULT_SECONDS = 0.2
DEFAULT_FAIL_RATE = 0.1


class DemoFailure(Exception):
    """The failure ``work`` raises on purpose."""


def _number(payload: Any, name: str, default: float, low: float, high: float) -> float:
    value = payload.get(name, default) if isinstance(payload, dict) else default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    return min(max(float(value), low), high)


def work(payload: Any) -> None:
    """Pretend to work for ``payload["seconds"]`` (default 0.2, at most 60),
    stopping early with :class:`engine.JobCancelled` if the job is cancelled
    meanwhile (purged or requeued while it runs); then fail if
    ``payload["fail"]`` is true, or at random with probability
    ``payload["fail_rate"]`` (default 0.1). Any payload is accepted; a
    non-object payload uses the defaults."""
    seconds = _number(payload, "seconds", DEFAULT_SECONDS, 0.0, MAX_SECONDS)
    fail_rate = _number(payload, "fail_rate", DEFAULT_FAIL_RATE, 0.0, 1.0)
    # Waiting on the job's cancellation rather than sleeping: a job purged or
    # requeued from the dashboard while it works stops at the worker's next
    # heartbeat, as a real handler that checks would (engine.cancellation).
    if current_cancellation().wait(seconds):
        check_cancelled()
    if isinstance(payload, dict) and payload.get("fail"):
        raise DemoFailure("failed on purpose: the payload asked for it")
    if random.random() < fail_rate:
        raise DemoFailure(f"failed at random (fail_rate {fail_rate:g})")


def demo_payload() -> dict[str, Any]:
    """One demo job for :func:`work`: a named task taking 0.2 to 4 s that
    fails a quarter of the time (``manage.py demo`` and ``cluster`` push these)."""
    return {
        "task": random.choice(["resize-image", "send-email", "build-report", "sync-account"]),
        "seconds": round(random.uniform(0.2, 4.0), 1),
        "fail_rate": 0.25,
    }


def noop(payload: Any) -> None:
    """Do nothing and complete at once (for throughput runs)."""
