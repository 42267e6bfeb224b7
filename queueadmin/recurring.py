"""Recurring jobs from ``QUEUE_SCHEDULES``: the setting, read into engine schedules.

``QUEUE_SCHEDULES`` maps a schedule's name to what it pushes and when::

    QUEUE_SCHEDULES = {
        # A Django task (queueadmin's tasks backend), at 03:00 Paris time:
        "nightly-report": {"cron": "0 3 * * *", "timezone": "Europe/Paris",
                           "task": "reports.tasks.nightly", "kwargs": {"full": True}},
        # A plain job, every 30 seconds:
        "ping": {"every_seconds": 30, "queue": "pings", "payload": {"kind": "ping"}},
    }

Each entry has ``cron`` (five fields; ``timezone``, an IANA name, default
UTC) or ``every_seconds``; then either ``task`` (a Django task's module path,
with ``args`` and ``kwargs``; it runs on the task's own backend) or
``queue`` and ``payload`` (any JSON value); and optionally ``max_attempts``
and ``catch_up_seconds`` (how late a tick may still fire, 3600). The engine
fires each tick once, on the leader, across failovers (engine.schedules).

:func:`build` turns the setting into :class:`engine.Schedule` objects or
raises ImproperlyConfigured naming the entry and the problem; every node
builds the broker with it, so a bad entry stops start-up instead of a
schedule that silently never runs.
"""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from engine import DEFAULT_CATCH_UP_SECONDS, Policy, Schedule, ValidationError, schedule

__all__ = ["build", "check_schedules"]

_TIMING = {"cron", "every_seconds", "timezone", "catch_up_seconds", "max_attempts"}
_PLAIN = _TIMING | {"queue", "payload"}
_TASK = _TIMING | {"task", "args", "kwargs"}


def build(raw: Any, *, policy: Policy) -> list[Schedule]:
    """The schedules ``raw`` (the value of ``QUEUE_SCHEDULES``) describes, in
    its order. Raises ImproperlyConfigured naming the first bad entry. Imports
    each ``task`` (Django's app registry must be ready)."""
    if raw is None:
        return []
    if not isinstance(raw, dict):
        raise ImproperlyConfigured(f"QUEUE_SCHEDULES must be a dict of name to schedule, got {type(raw).__name__}")
    built = []
    for name, entry in raw.items():
        where = f"QUEUE_SCHEDULES[{name!r}]"
        if not isinstance(entry, dict):
            raise ImproperlyConfigured(f"{where} must be a dict, got {type(entry).__name__}")
        try:
            built.append(_one(name, entry, policy=policy, where=where))
        except ValidationError as exc:
            raise ImproperlyConfigured(f"{where}: {exc}") from exc
    return built


def _one(name: Any, entry: dict[str, Any], *, policy: Policy, where: str) -> Schedule:
    allowed = _TASK if "task" in entry else _PLAIN
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise ImproperlyConfigured(f"{where}: unknown key(s) {', '.join(map(repr, unknown))} "
                                   f"(allowed: {', '.join(sorted(allowed))})")
    if "task" in entry:
        queue, payload = _task_job(entry, where)
    else:
        missing = [key for key in ("queue", "payload") if key not in entry]
        if missing:
            raise ImproperlyConfigured(
                f"{where} needs 'task', or 'queue' and 'payload' (missing: {', '.join(missing)})")
        queue, payload = entry["queue"], entry["payload"]
    return schedule(
        name, queue=queue, payload=payload, policy=policy,
        cron=entry.get("cron"), every_seconds=entry.get("every_seconds"),
        timezone=entry.get("timezone", "UTC"), max_attempts=entry.get("max_attempts"),
        catch_up_seconds=entry.get("catch_up_seconds", DEFAULT_CATCH_UP_SECONDS),
    )


def _task_job(entry: dict[str, Any], where: str) -> tuple[str, dict[str, Any]]:
    """The queue and payload that run the entry's Django task, as ``enqueue`` would push them."""
    # Imported here: the tasks backend imports the app's configuration, which imports this module.
    from django.tasks import Task

    from queueadmin.tasks.payload import task_payload

    path = entry["task"]
    try:
        task = import_string(path) if isinstance(path, str) else None
    except ImportError as exc:
        raise ImproperlyConfigured(f"{where}: cannot import the task {path!r}: {exc}") from exc
    if not isinstance(task, Task):
        raise ImproperlyConfigured(f"{where}: 'task' must name a Django task (decorated with @task), got {path!r}")
    args, kwargs = entry.get("args", []), entry.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise ImproperlyConfigured(f"{where}: 'args' must be a list and 'kwargs' a dict")
    try:
        payload = task_payload(task, args, kwargs, backend=task.backend)
    except TypeError as exc:
        raise ImproperlyConfigured(f"{where}: the task's arguments are not JSON values: {exc}") from exc
    return task.queue_name, payload


def check_schedules(**kwargs: Any) -> list[checks.CheckMessage]:
    """The system check (``manage.py check``): a bad ``QUEUE_SCHEDULES``
    entry is an error there, as it stops a node from starting."""
    from queueadmin import config  # config imports this module

    try:
        config.schedules()
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), hint='See the README, "Recurring jobs".', id="queueadmin.E001")]
    return []
