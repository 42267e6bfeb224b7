"""``manage.py demo``: the local demo's logins, and a trickle of demo jobs.

``make run`` calls ``demo --logins`` once, which creates (first time) and
prints two accounts for the dashboard: ``admin``, a superuser, and ``viewer``,
read-only staff with only ``view_dashboard``. Their passwords are made once
and kept in ``var/``. It then runs ``demo`` in the background, which pushes a
demo job to the ``demo`` queue every ``--every`` seconds through the broker,
for the demo worker (``queueworker --handler queueadmin.demo:work``) to run:
most succeed, some fail and retry, a few end in the dead letters.
"""

from __future__ import annotations

import secrets
import threading
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management.base import BaseCommand, CommandError, CommandParser

from engine import EngineError
from queueadmin.demo import demo_payload
from queueadmin.management import broker_client

DEMO_QUEUE = "demo"


def _password(name: str) -> str:
    """The demo password of ``name``: made once, kept in var/<name>-password."""
    path = Path(settings.BASE_DIR) / "var" / f"{name}-password"
    if path.exists() and path.read_text().strip():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(12)
    path.write_text(password + "\n")
    path.chmod(0o600)
    return password


class Command(BaseCommand):
    help = "Print (creating them if needed) the local demo logins, or push demo jobs every few seconds."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--logins", action="store_true",
                            help="create the demo accounts if missing, print them, and exit")
        parser.add_argument("--every", type=float, default=2.0, metavar="SECONDS",
                            help="seconds between demo jobs (2)")
        parser.add_argument("--count", type=int, default=None, help="stop after this many jobs (default: never)")
        parser.add_argument("--broker", action="append", dest="brokers", metavar="URL")
        parser.add_argument("--token", help="the broker API token (default: QUEUE_API_TOKEN)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["logins"]:
            self._logins()
            return
        if options["every"] <= 0:
            raise CommandError("--every must be positive")
        stop = threading.Event()
        sent = 0
        with broker_client(brokers=options["brokers"], token=options["token"]) as client:
            while options["count"] is None or sent < options["count"]:
                try:
                    client.push(DEMO_QUEUE, [demo_payload()], max_attempts=2)
                except EngineError as exc:
                    self.stderr.write(f"demo: push failed ({exc}); retrying")
                sent += 1
                stop.wait(options["every"])

    def _logins(self) -> None:
        users = get_user_model()
        admin_password, viewer_password = _password("admin"), _password("viewer")
        admin = users.objects.filter(username="admin").first()
        if admin is None:
            users.objects.create_superuser("admin", "admin@localhost", admin_password)
        viewer = users.objects.filter(username="viewer").first()
        if viewer is None:
            viewer = users.objects.create_user("viewer", "viewer@localhost", viewer_password, is_staff=True)
            viewer.user_permissions.add(Permission.objects.get(codename="view_dashboard",
                                                               content_type__app_label="queueadmin"))
        self.stdout.write(f"dashboard logins: admin / {admin_password} (everything), "
                          f"viewer / {viewer_password} (read-only)")
        if admin is not None and not admin.check_password(admin_password):
            self.stdout.write("  (admin existed already with another password; yours is unchanged)")
