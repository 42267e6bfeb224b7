"""End-to-end harness: real daphne nodes and real worker processes on loopback.

Every process gets its own log file under the test's tmp folder; a failing
test prints the logs of the processes it started (see conftest.py).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from engine import open_store
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "e2e-token"
HEARTBEAT_SECONDS = 0.25
TAKEOVER_SECONDS = 2.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Node:
    """One daphne process serving queueadmin.asgi:application."""

    port: int
    log: Path
    proc: subprocess.Popen[bytes]
    #: The path prefix it serves under (daphne's --root-path), or "".
    root: str = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.root}"

    def health(self) -> dict[str, Any] | None:
        try:
            response = httpx.get(f"{self.url}/api/v1/health", timeout=1)
        except httpx.HTTPError:
            return None
        return response.json() if response.status_code == 200 else None

    def role(self) -> str | None:
        health = self.health()
        return None if health is None else str(health["role"])

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


@dataclass
class Cluster:
    """Starts nodes and workers that share one store, and cleans up after them."""

    tmp: Path
    store_url: str
    env: dict[str, str]
    processes: list[tuple[str, subprocess.Popen[bytes], Path]] = field(default_factory=list)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.tmp / f"{name}-{len(self.processes)}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            )
        self.processes.append((name, proc, log))
        return proc, log

    def node(self, port: int | None = None, *, root: str = "", **env: str) -> Node:
        """Start a node and wait until it answers health (leader or standby);
        ``root``: serve under that path prefix (daphne's --root-path), as behind
        a proxy that keeps the prefix."""
        port = port or free_port()
        node_env = {**self.env, "QUEUE_ADVERTISE_URL": f"http://127.0.0.1:{port}{root}", **env}
        argv = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                *(["--root-path", root] if root else []), "queueadmin.asgi:application"]
        proc, log = self._spawn(f"node-{port}", argv, node_env)
        node = Node(port=port, log=log, proc=proc, root=root)
        wait_for(lambda: node.health() is not None or proc.poll() is not None, 30, f"node {port} to answer")
        assert proc.poll() is None, log.read_text(errors="replace")
        return node

    def worker(self, *args: str, **env: str) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "manage.py", "queueworker", *args]
        proc, _ = self._spawn("worker", argv, {**self.env, **env})
        return proc

    def drain(self, node: Node, queue: str, handler: str, *, workers: int, concurrency: int,
              done: Callable[[], bool], timeout: float = 60) -> None:
        """Run ``workers`` ``queueworker`` processes of ``concurrency`` slots on ``queue`` against ``node`` until
        ``done()``, then stop them with SIGTERM; each must exit 0."""
        procs = [self.worker("--queue", queue, "--handler", handler, "--concurrency", str(concurrency),
                             "--broker", node.url) for _ in range(workers)]
        try:
            wait_for(done, timeout, f"the workers to drain {queue}")
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                assert proc.wait(30) == 0

    def manage(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, timeout=60
        )

    def raw_document(self) -> bytes:
        """The bytes of queue.json as stored now (read-only)."""
        store = open_store(self.store_url)
        try:
            blob = store.get("queue.json")
        finally:
            store.close()
        assert blob is not None
        return blob.data

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = orjson.loads(self.raw_document())
        return doc

    def leader(self, nodes: list[Node]) -> Node:
        for node in nodes:
            if node.role() == "leader":
                return node
        raise AssertionError("no node leads")

    def stop_all(self) -> None:
        for _, proc, _ in self.processes:
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGCONT)
                    proc.send_signal(signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.wait(10)

    def logs(self) -> str:
        return "\n".join(
            f"==== {name} ({log})\n{log.read_text(errors='replace')[-4000:]}" for name, _, log in self.processes
        )


def base_env(store_url: str, tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUE_", "DJANGO_"))}
    env.update(
        PYTHONPATH=str(ROOT),
        DJANGO_DEBUG="false",
        DJANGO_SECRET_KEY="e2e-secret-key-not-for-production-0123456789",
        ALLOWED_HOSTS="127.0.0.1,localhost",
        DATABASE_URL=f"sqlite:///{tmp / 'db.sqlite3'}",
        QUEUE_STORE_URL=store_url,
        QUEUE_API_TOKEN=TOKEN,
        QUEUE_HEARTBEAT_SECONDS=str(HEARTBEAT_SECONDS),
        QUEUE_TAKEOVER_SECONDS=str(TAKEOVER_SECONDS),
        QUEUE_BROKER_AUTOSTART="true",
    )
    env.update(extra)
    return env


def api(
    node: Node, method: str, path: str, body: Any = None, *, token: str | None = TOKEN, **kw: Any
) -> httpx.Response:
    """One HTTP call to a node's API, with the e2e token unless told otherwise."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    content = kw.pop("content", None)
    if body is not None:
        content = orjson.dumps(body)
        headers["Content-Type"] = "application/json"
    return httpx.request(method, f"{node.url}{path}", content=content, headers=headers, timeout=30, **kw)
