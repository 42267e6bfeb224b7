"""Django tasks for the tests, importable by real queueworker processes
(``tests.e2e.sample_tasks``) as well as by the test process.

A task that records appends one JSON line to the file named by
``E2E_RECORD`` (O_APPEND keeps concurrent lines whole).
"""

from __future__ import annotations

import os
import time
from typing import Any

import orjson
from django.tasks import TaskContext, task

from engine import JobCancelled, check_cancelled, current_cancellation


def _record(**fields: Any) -> None:
    path = os.environ.get("E2E_RECORD")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, orjson.dumps(fields) + b"\n")
        finally:
            os.close(fd)


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Returns its arguments; a tuple comes back as a list (JSON-normalised)."""
    return {"args": args, "kwargs": kwargs}


@task
def explode(message: str) -> None:
    raise ValueError(f"exploded: {message}")


@task
def unserialisable() -> object:
    return {1, 2, 3}


@task(takes_context=True)
def attempt_info(context: TaskContext, fail_before: int = 0) -> dict[str, Any]:
    """Fails until attempt ``fail_before``, then returns what the context says."""
    result = context.task_result
    if context.attempt < fail_before:
        raise RuntimeError(f"attempt {context.attempt} fails on purpose")
    return {"attempt": context.attempt, "id": result.id, "worker_ids": result.worker_ids,
            "status": result.status}


@task
async def async_add(a: int, b: int) -> int:
    return a + b


@task
def stamp(label: str) -> float:
    """Records when it ran (wall clock) and returns that time."""
    now = time.time()
    _record(label=label, ran_at=now, pid=os.getpid())
    return now


def plain_function(x: int) -> int:
    """Not a task: a worker must refuse it."""
    return x


not_a_task = 42


@task(takes_context=True)
def record_run(context: TaskContext) -> None:
    """Records the id of the job it runs as (a schedule's job id names its tick)."""
    _record(id=context.task_result.id, attempt=context.attempt, pid=os.getpid())


@task
def patient(seconds: float) -> str:
    """Works in steps for up to ``seconds``, checking for a cancellation
    between them; records its start, and its cancellation with the reason."""
    _record(label="patient", event="start", at=time.time())
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            check_cancelled()
            current_cancellation().wait(0.05)
    except JobCancelled as exc:
        _record(label="patient", event="cancelled", at=time.time(), reason=exc.reason)
        raise
    return "done"


@task
def group_name(pk: int) -> str:
    """The name of auth Group ``pk``, as this worker's database connection
    sees it (DoesNotExist while the row is not committed)."""
    from django.contrib.auth.models import Group

    return Group.objects.get(pk=pk).name
