"""One daphne process for ``python -m bench network``: the broker node, or the trivial app.

:class:`Node` is a context manager: entering starts daphne on a free port of
127.0.0.1 and waits (bounded) until it answers; leaving kills it. The broker
node serves ``queueadmin.asgi:application`` with ``QUEUE_BROKER_AUTOSTART``
on the given store and leads alone; the trivial node serves
:mod:`bench.trivial`, the ceiling for one request on this machine.
"""

from __future__ import annotations

import os
import secrets
import socket
import string
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bench.children import Child, cpu_seconds

STARTUP_TIMEOUT_SECONDS = 60.0
HEALTH_TIMEOUT_SECONDS = 2.0
BROKER_APP = "queueadmin.asgi:application"
TRIVIAL_APP = "bench.trivial:application"
ROOT = Path(__file__).resolve().parent.parent


class NodeError(Exception):
    """The node did not start, or stopped answering."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _random_secret(length: int) -> str:
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(length))


class Node:
    """One daphne process in folder ``tmp``; ``app`` is :data:`BROKER_APP` or :data:`TRIVIAL_APP`."""

    def __init__(self, tmp: Path, *, app: str = BROKER_APP, store_url: str | None = None, name: str = "node",
                 token: str | None = None, settings: dict[str, str] | None = None) -> None:
        self.tmp = tmp
        self.app = app
        self.name = name
        self.store_url = store_url or (tmp / "store").as_uri()
        self.token = token or secrets.token_urlsafe(24)
        #: More QUEUE_* settings for a broker node (the heartbeat, say).
        self.settings = dict(settings or {})
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / f"{name}.log"
        self.child: Child | None = None
        self._http = httpx.Client(timeout=HEALTH_TIMEOUT_SECONDS)

    @property
    def is_broker(self) -> bool:
        return self.app == BROKER_APP

    def env(self) -> dict[str, str]:
        """This environment without QUEUE_*/DJANGO_* settings, plus the node's own."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUE_", "DJANGO_"))}
        env["PYTHONPATH"] = str(ROOT)
        if self.is_broker:
            env.update(
                QUEUE_STORE_URL=self.store_url,
                QUEUE_API_TOKEN=self.token,
                QUEUE_ADVERTISE_URL=self.url,
                QUEUE_BROKER_AUTOSTART="true",
                DJANGO_DEBUG="false",
                DJANGO_SECRET_KEY=_random_secret(50),
                ALLOWED_HOSTS="127.0.0.1",
                DATABASE_URL=f"sqlite:///{self.tmp / f'{self.name}.sqlite3'}",
            )
            env.update(self.settings)
        return env

    def __enter__(self) -> Node:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, *, lead: bool = True) -> None:
        """Start daphne and wait until it answers (the broker: until it leads,
        or, without ``lead``, until it answers as leader or standby).
        A broker node's database is migrated first, as in production: the
        leader records finished jobs there."""
        if self.is_broker:
            migrate = subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=self.env(),
                                     capture_output=True, timeout=STARTUP_TIMEOUT_SECONDS)
            if migrate.returncode != 0:
                raise NodeError(f"{self.name}: migrate failed: {migrate.stderr.decode(errors='replace')[-2000:]}")
        argv = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), self.app]
        self.child = Child(self.name, argv, log_path=self.log_path, env=self.env(), pipes=False)
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
        while True:
            if self.child.proc.poll() is not None:
                raise NodeError(f"{self.name}: daphne exited with status {self.child.proc.returncode}{self.log_tail()}")
            if self.is_broker:
                health = self.health()
                if health is not None and (health.get("role") == "leader" or not lead):
                    return
            elif self._answers():
                return
            if time.monotonic() > deadline:
                raise NodeError(f"{self.name}: daphne did not answer within {STARTUP_TIMEOUT_SECONDS:g} s")
            time.sleep(0.1)

    def _answers(self) -> bool:
        try:
            return self._http.get(self.url + "/").status_code == 200
        except httpx.HTTPError:
            return False

    def health(self) -> dict[str, Any] | None:
        """``GET /api/v1/health`` (not counted as a client request), or None if it failed."""
        try:
            response = self._http.get(f"{self.url}/api/v1/health")
            data = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def seq(self) -> int:
        """The leader's last committed seq (0 for the trivial app); NodeError if it stops leading."""
        if not self.is_broker:
            return 0
        health = None
        for _ in range(3):
            health = self.health()
            if health is not None and health.get("role") == "leader" and isinstance(health.get("seq"), int):
                return int(health["seq"])
            time.sleep(0.2)
        raise NodeError(f"the node stopped answering health as leader (last answer: {health!r})")

    def cpu(self) -> float:
        """CPU seconds the daphne process has used so far; NodeError if it is gone."""
        value = None if self.child is None else cpu_seconds(self.child.pid)
        if value is None:
            raise NodeError(f"{self.name}: the daphne process is gone{self.log_tail()}")
        return value

    def log_tail(self) -> str:
        try:
            text = self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            return ""
        return f"; its log ends:\n{text}" if text.strip() else ""

    def stop(self) -> None:
        """Kill daphne (if running). Idempotent."""
        child, self.child = self.child, None
        if child is not None:
            child.kill()
        self._http.close()
