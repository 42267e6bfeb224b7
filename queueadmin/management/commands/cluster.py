"""``manage.py cluster`` (``make cluster``): several nodes on one local store,
with workers and demo jobs, to watch a failover happen.

All on 127.0.0.1, under ``--dir`` (``var/cluster/``):

* ``--nodes`` daphne nodes (3) on ``--port`` and the ports after it
  (8000-8002), each with its embedded broker, on one ``file://`` store and
  one SQLite database, so logins and the audit log are shared;
* ``--workers`` ``queueworker`` processes (2) on the ``demo`` queue, given
  every node's URL, so they follow whichever node leads;
* demo jobs, pushed by this command every ``--every`` seconds through a
  :class:`~engine.BrokerClient` that also follows the leader.

It prints each node's dashboard URL, the logins and the API token, then
watches the nodes and prints each change of leader, with how long the
cluster had none. Kill the leader to see one (its pid is in
``<dir>/node-<port>.pid``: ``kill -9 $(cat var/cluster/node-8000.pid)``).
Ctrl-C (or SIGTERM) stops everything: the pushes, then the workers (their
running jobs get ``--grace-seconds``), then the nodes. Last, it checks that
every push the cluster acknowledged is still in ``queue.json`` (pending,
running or dead) or among its recently finished ids (the dedup window, 15
minutes by default), and says how many it could not check by id.

Children get their own session, so Ctrl-C in the terminal reaches only this
command, which stops them in order; on Linux they are also killed should
this command itself be killed. Their output goes to ``<dir>/<name>.log``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx
import orjson
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from engine import DOCUMENT_KEY, BrokerClient, EngineError, open_store
from queueadmin import config
from queueadmin.demo import demo_payload
from queueadmin.management.commands.demo import DEMO_QUEUE

WATCH_SECONDS = 0.25
STOP_NODES_SECONDS = 10.0
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, between fork and exec
    """Linux: the child gets SIGTERM when this command dies, however it dies."""
    with contextlib.suppress(OSError):  # not Linux: Ctrl-C and SIGTERM still stop every child
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    port: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class Watch:
    """What the watcher saw: the leader, and since when nobody answered as one."""

    leader: str | None = None  # the leading node's URL
    epoch: int = 0
    lost_at: float | None = None  # monotonic: when the leader stopped answering


class Command(BaseCommand):
    help = "Run several nodes on one local store, with workers and demo jobs, to watch a failover (make cluster)."
    # A launcher: the nodes it starts run the checks that matter (with the token it gives them).
    requires_system_checks: ClassVar[list[str]] = []  # type: ignore[misc]

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--nodes", type=int, default=3, help="daphne nodes (3)")
        parser.add_argument("--port", type=int, default=8000, help="the first node's port; the others follow (8000)")
        parser.add_argument("--workers", type=int, default=2, help="queueworker processes (2)")
        parser.add_argument("--every", type=float, default=1.0, metavar="SECONDS",
                            help="seconds between demo jobs (1)")
        parser.add_argument("--grace-seconds", type=float, default=10.0,
                            help="on Ctrl-C, how long running jobs may finish (10)")
        parser.add_argument("--dir", default=None, help="where the store, database and logs go (var/cluster)")

    def handle(self, *args: Any, **options: Any) -> None:
        if not 1 <= options["nodes"] <= 9 or not 0 <= options["workers"] <= 9 or options["every"] <= 0:
            raise CommandError("need 1 to 9 nodes, 0 to 9 workers and a positive --every")
        folder = Path(options["dir"] or Path(settings.BASE_DIR) / "var" / "cluster").resolve()
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.children: list[Child] = []
        self.stopping = threading.Event()
        self.acked: list[str] = []
        env = self._environment(folder)
        self._run_manage(env, "migrate", "--noinput")
        logins = self._run_manage(env, "demo", "--logins").strip()
        ports = [options["port"] + i for i in range(options["nodes"])]
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        previous = {sig: signal.signal(sig, self._interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            for port in ports:
                self._spawn(f"node-{port}", [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                                             "queueadmin.asgi:application"],
                            {**env, "QUEUE_ADVERTISE_URL": f"http://127.0.0.1:{port}"}, port=port)
            brokers = [arg for url in urls for arg in ("--broker", url)]
            for n in range(1, options["workers"] + 1):
                self._spawn(f"worker-{n}", [sys.executable, "manage.py", "queueworker", "--queue", DEMO_QUEUE,
                                            "--handler", "queueadmin.demo:work", "--concurrency", "2",
                                            "--worker-id", f"cluster-worker-{n}",
                                            "--grace-seconds", f"{options['grace_seconds']:g}", *brokers], env)
            self._banner(urls, logins, env)
            pusher = threading.Thread(target=self._push, args=(urls, env["QUEUE_API_TOKEN"], options["every"]),
                                      name="cluster-pusher", daemon=True)
            pusher.start()
            self._watch(Watch())
            pusher.join(timeout=10)
        finally:
            self._stop_children(options["grace_seconds"])
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self._account(env["QUEUE_STORE_URL"])

    # -- set-up ----------------------------------------------------------------

    def _environment(self, folder: Path) -> dict[str, str]:
        """The children's environment: one store, one database, one token and
        one secret key (forwarded operator actions need a real one)."""
        token = config.api_token()
        if not token:
            token_file = Path(settings.BASE_DIR) / "var" / "api-token"
            if not token_file.exists() or not token_file.read_text().strip():
                token_file.parent.mkdir(parents=True, exist_ok=True)
                token_file.write_text(secrets.token_urlsafe(24) + "\n")
            token = token_file.read_text().strip()
        key_file = folder / "secret-key"
        if not key_file.exists():
            key_file.write_text(secrets.token_urlsafe(50) + "\n")
            key_file.chmod(0o600)
        # Other QUEUE_* settings (the heartbeat, the takeover interval, ...) pass through.
        env = {k: v for k, v in os.environ.items() if k not in ("QUEUE_ADVERTISE_URL", "DATABASE_URL")}
        env.update(
            QUEUE_STORE_URL=(folder / "store").as_uri(),
            DATABASE_URL=f"sqlite:///{folder / 'db.sqlite3'}",
            QUEUE_API_TOKEN=token,
            DJANGO_SECRET_KEY=os.environ.get("DJANGO_SECRET_KEY") or key_file.read_text().strip(),
            PYTHONUNBUFFERED="1",
        )
        # The README's advice for nodes ("Deploying"): glibc keeps an arena per
        # busy thread, and a leader's segment threads made it hold ~400 MB
        # where two arenas hold ~220 MB (docs/benchmark.md).
        env.setdefault("MALLOC_ARENA_MAX", "2")
        return env

    def _run_manage(self, env: dict[str, str], *args: str) -> str:
        done = subprocess.run([sys.executable, "manage.py", *args], cwd=settings.BASE_DIR, env=env,
                              capture_output=True, text=True, timeout=300, check=False)
        if done.returncode != 0:
            raise CommandError(f"manage.py {' '.join(args)} failed:\n{done.stderr or done.stdout}")
        return done.stdout

    def _spawn(self, name: str, argv: list[str], env: dict[str, str], *, port: int | None = None) -> None:
        log = (self.folder / f"{name}.log").open("ab")
        proc = subprocess.Popen(argv, cwd=settings.BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        log.close()
        (self.folder / f"{name}.pid").write_text(f"{proc.pid}\n")
        self.children.append(Child(name, proc, port))

    def _banner(self, urls: list[str], logins: str, env: dict[str, str]) -> None:
        """What runs where, the logins and how to stop or break it."""
        heartbeat, takeover = config.heartbeat_seconds(), config.takeover_seconds()
        lines = [f"queueadmin cluster: {len(urls)} nodes on one store ({env['QUEUE_STORE_URL']})"]
        lines += [f"  {child.url}/   (pid in {self.folder / child.name}.pid)" for child in self.children if child.port]
        lines += [
            f"  {logins}",
            f"  API token: {env['QUEUE_API_TOKEN']}",
            f"  heartbeat {heartbeat:g} s, takeover after {takeover:g} s without a commit; logs in {self.folder}/",
            f"  stop the leader to watch a hand-over: kill $(cat {self.folder}/node-<port>.pid)",
            f"  or kill it to watch a takeover: kill -9 $(cat {self.folder}/node-<port>.pid)",
            "  Ctrl-C stops everything",
        ]
        self.stdout.write("\n".join(lines))

    # -- running ---------------------------------------------------------------

    def _interrupt(self, signum: int, frame: object) -> None:
        self.stopping.set()

    def _push(self, urls: list[str], token: str, every: float) -> None:
        """Push a demo job every ``every`` seconds, noting each acknowledged id."""
        with BrokerClient(urls, token=token) as client:
            while not self.stopping.wait(every):
                try:
                    self.acked += client.push(DEMO_QUEUE, [demo_payload()], max_attempts=2)
                except EngineError as exc:  # no leader right now: the next push tries again
                    self.stderr.write(f"push refused: {exc}")

    def _watch(self, watch: Watch) -> None:
        """Print each change of leader until stopped (nodes that died are reported once)."""
        with httpx.Client(timeout=1.0) as http:
            gone: set[str] = set()
            while not self.stopping.wait(WATCH_SECONDS):
                leaders: list[tuple[str, int]] = []
                for node in (c for c in self.children if c.port is not None):
                    if node.proc.poll() is not None:
                        if node.name not in gone:
                            gone.add(node.name)
                            self.stdout.write(f"{node.name} exited (status {node.proc.returncode})")
                        continue
                    try:
                        health = http.get(f"{node.url}/api/v1/health").json()
                    except (httpx.HTTPError, ValueError):
                        continue
                    if health.get("role") == "leader":
                        leaders.append((node.url, int(health["broker"]["epoch"])))
                self._note(watch, leaders)

    def _note(self, watch: Watch, leaders: list[tuple[str, int]]) -> None:
        now = time.monotonic()
        if not leaders:
            if watch.leader is not None and watch.lost_at is None:
                watch.lost_at = now
                self.stdout.write(f"{watch.leader} stopped answering as leader")
            return
        url, epoch = max(leaders, key=lambda pair: pair[1])
        if url == watch.leader and watch.lost_at is None:
            return
        if watch.leader is None:
            self.stdout.write(f"{url} leads (epoch {epoch})")
        elif url != watch.leader or epoch != watch.epoch:
            without = now - watch.lost_at if watch.lost_at is not None else 0.0
            self.stdout.write(f"{url} took over (epoch {epoch}) after {without:.1f} s without a leader")
        watch.leader, watch.epoch, watch.lost_at = url, epoch, None

    # -- stopping --------------------------------------------------------------

    def _stop_children(self, grace: float) -> None:
        """Workers first (their running jobs get ``grace``), then nodes."""
        self.stopping.set()
        workers = [c for c in self.children if c.port is None]
        nodes = [c for c in self.children if c.port is not None]
        for group, wait in ((workers, grace + 5), (nodes, STOP_NODES_SECONDS)):
            for child in group:
                if child.proc.poll() is None:
                    child.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + wait
            for child in group:
                try:
                    child.proc.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    child.proc.kill()
                    child.proc.wait()
                (self.folder / f"{child.name}.pid").unlink(missing_ok=True)
        self.stdout.write("stopped every node and worker")

    def _account(self, store_url: str) -> None:
        """Check every acknowledged push against the document (see the module)."""
        blob = open_store(store_url).get(DOCUMENT_KEY)
        if blob is None:
            raise CommandError("queue.json is gone from the cluster's store")
        doc = orjson.loads(blob.data)
        present = {job["id"] for job in doc["jobs"]} | {dead["id"] for dead in doc["dead"]}
        finished = {job_id for _, ids in doc.get("finished", []) for job_id in ids.split()}
        acked = set(self.acked)
        unaccounted = acked - present - finished
        counters = doc["queues"].get(DEMO_QUEUE, {})
        self.stdout.write(
            f"{len(acked)} pushes acknowledged: {len(acked & finished)} finished (completed, or dropped), "
            f"{len(acked & present)} still pending, running or dead; {DEMO_QUEUE} queue counters: "
            f"{counters.get('completed', 0)} completed, {counters.get('dead', 0)} dead"
        )
        if unaccounted:
            # Finished ids leave the dedup window after 15 minutes (or 10,000 ids).
            self.stdout.write(f"{len(unaccounted)} acknowledged pushes could not be found by id: they finished "
                              "longer ago than the dedup window keeps ids (see docs/format.md), or were lost")
        else:
            self.stdout.write("no acknowledged push is missing")
