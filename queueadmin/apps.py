"""The queueadmin Django app."""

from __future__ import annotations

from django.apps import AppConfig


class QueueadminConfig(AppConfig):
    """App config. ``ready()`` must stay free of side effects: the embedded
    broker is started only by the serving process, never by ``migrate``,
    ``check`` or tests (see DESIGN.md, "Start-up")."""

    name = "queueadmin"
    verbose_name = "Queue admin"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Django registers the task backends' system checks only when
        # django.tasks.checks is imported; do it here so `manage.py check`
        # reports a misconfigured TASKS backend (no I/O happens until a check runs).
        import django.tasks.checks  # noqa: F401

        # manage.py check reports a bad QUEUE_SCHEDULES entry (no I/O).
        from django.core import checks

        from queueadmin.recurring import check_schedules

        checks.register(check_schedules)

        # Connects the sign-out signal to the live sockets (no I/O until it fires).
        import queueadmin.dashboard.sessions  # noqa: F401
