"""The payload of a task job: what ``enqueue`` pushes and the worker runs.

A task job's payload is one small JSON object::

    {"django_task": 1,                     # the marker (and format version)
     "task": "myapp.tasks.send_email",     # the Task's module path
     "args": ["ada@example.com"], "kwargs": {"subject": "hi"},
     "takes_context": false, "backend": "default", "queue_name": "default",
     "run_after": "2026-11-29T12:00:00+00:00" or null}

The marker tells the worker and the dashboard a task job from any other job;
a payload without it is not a task job (:func:`describe` returns None). No
I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from django.tasks import Task
from django.utils.json import normalize_json

#: The key that marks a task job's payload; its value is the format version.
MARKER = "django_task"
FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskView:
    """A task job's payload, read: enough to show it (no import of the task).

    ``task`` is the module path (``"myapp.tasks.send_email"``), ``name`` its
    last part (``"send_email"``); ``args`` and ``kwargs`` are as enqueued
    (JSON values).
    """

    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    takes_context: bool
    backend: str
    queue_name: str
    run_after: datetime | None

    @property
    def name(self) -> str:
        return self.task.rpartition(".")[2]

    def payload(self) -> dict[str, Any]:
        """The JSON payload this view was read from (round-trips through :func:`describe`)."""
        return {
            MARKER: FORMAT_VERSION,
            "task": self.task,
            "args": self.args,
            "kwargs": self.kwargs,
            "takes_context": self.takes_context,
            "backend": self.backend,
            "queue_name": self.queue_name,
            "run_after": None if self.run_after is None else self.run_after.isoformat(),
        }


def task_payload(task: Task[..., Any], args: Any, kwargs: Any, *, backend: str) -> dict[str, Any]:
    """The payload that runs ``task(*args, **kwargs)``. Raises TypeError when
    the arguments are not JSON values (as Django's own backends do)."""
    view = TaskView(
        task=task.module_path,
        # normalize_json maps a list to a list and a dict to a dict; its stub returns any JSON value.
        args=cast(list[Any], normalize_json(list(args))),
        kwargs=cast(dict[str, Any], normalize_json(dict(kwargs))),
        takes_context=task.takes_context,
        backend=backend,
        queue_name=task.queue_name,
        run_after=task.run_after,
    )
    return view.payload()


def describe(payload: Any) -> TaskView | None:
    """Read a job's payload as a task job: its task, args and kwargs.

    Returns None for any payload that is not a well-formed task job (another
    kind of job, or a marked payload with a missing or mistyped field). Pure:
    no I/O, and the task is not imported, so it works in any process.
    """
    if not isinstance(payload, dict) or payload.get(MARKER) != FORMAT_VERSION:
        return None
    task, args, kwargs = payload.get("task"), payload.get("args"), payload.get("kwargs")
    backend, queue_name = payload.get("backend"), payload.get("queue_name")
    takes_context, run_after = payload.get("takes_context"), payload.get("run_after")
    if not (isinstance(task, str) and "." in task and isinstance(args, list) and isinstance(kwargs, dict)):
        return None
    if not (isinstance(backend, str) and isinstance(queue_name, str) and isinstance(takes_context, bool)):
        return None
    when: datetime | None = None
    if run_after is not None:
        if not isinstance(run_after, str):
            return None
        try:
            when = datetime.fromisoformat(run_after)
        except ValueError:
            return None
    return TaskView(task=task, args=args, kwargs=kwargs, takes_context=takes_context, backend=backend,
                    queue_name=queue_name, run_after=when)
