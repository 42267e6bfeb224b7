"""Real processes for a chaos run: daphne nodes on one store, and the store's
emulator when it is a cloud one: moto's S3 server, fake-gcs-server (GCS) or
Azurite (Azure Blob).

Each node opens its store through a fault store (``faults+...``) with a
control file of its own, so the nemesis can steer faults per node by
rewriting that file (:meth:`Node.set_faults`), and read the node's store
request counts from the stats file next to it. The nemesis and the watcher
open the inner store directly, without faults.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import orjson

from chaos.emulators import (
    AZURITE_ACCOUNT,
    azurite_argv,
    azurite_connection_string,
    create_azure_container,
    create_gcs_bucket,
    fake_gcs_argv,
)
from engine import ObjectStore, open_store
from engine.stores import STATS_SUFFIX, fault_store_url

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "chaos-token"
MIGRATE_TIMEOUT_SECONDS = 120.0
# The nodes' shared DJANGO_SECRET_KEY: they sign and check forwarded operator actions with it.
SECRET_KEY = "chaos-secret-key-not-for-production-0123456789"
HEARTBEAT_SECONDS = 0.25
TAKEOVER_SECONDS = 2.0
#: How long a node may take to exit on SIGTERM (queueadmin.shutdown bounds
#: each of its waits by 5 s; a stuck store would show here, not hang the run).
TERMINATE_TIMEOUT = 20.0
#: A recurring job on every node (README, "Recurring jobs"), on a queue no
#: client claims from: its mark must only move forward, and stall only while
#: a fault lasts (chaos.checker, ``schedules``).
SCHEDULE_NAME = "chaos-tick"
SCHEDULE_SECONDS = 2
SCHEDULE_QUEUE = "chaos-ticks"
SCHEDULES = {SCHEDULE_NAME: {"every_seconds": SCHEDULE_SECONDS, "queue": SCHEDULE_QUEUE, "payload": {"tick": True}}}
LEASE_SECONDS = 4.0
# Every node hedges its writes of the document (QUEUE_STORE_HEDGE_SECONDS), on
# every store and early, so that the nemesis's slow, hung and lost requests
# race a second attempt at the same write.
HEDGE_SECONDS = 0.1
NODE_START_TIMEOUT = 60.0
MOTO_REGION = "us-east-1"
# Dummy credentials for moto, which accepts any; never real ones.
DUMMY_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": MOTO_REGION,
    "AWS_EC2_METADATA_DISABLED": "true",
}
CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of process ``pid`` (all its threads), from /proc; None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime: fields 14 and 15 of stat(5)


def process_state(pid: int) -> str | None:
    """The state letter of ``pid`` (R, S, T for stopped, ...), or None if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


@dataclass
class Node:
    """One daphne process serving queueadmin.asgi:application on a fixed port."""

    name: str
    port: int
    control: Path
    log: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False
    starts: int = 0
    fault_history: list[dict[str, int]] = field(default_factory=list)  # fault counts of earlier lives

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    @property
    def alive(self) -> bool:
        return self.pid is not None

    def start(self) -> None:
        """Start the process (no wait). The same port is reused on restart,
        so the node keeps its advertised URL, as a restarted service would."""
        self.starts += 1
        stats = self.store_stats()
        if stats:  # the last life's counts; the new process starts its own file
            self.fault_history.append(stats.get("faults", {}))
            self.control.with_name(self.control.name + STATS_SUFFIX).unlink(missing_ok=True)
        with open(self.log, "ab") as out:
            out.write(f"\n==== start {self.starts} at {time.monotonic():.3f}\n".encode())
            out.flush()
            argv = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port),
                    "queueadmin.asgi:application"]
            self.proc = subprocess.Popen(
                argv, cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            )
        self.paused = False

    def health(self, timeout: float = 1.0) -> dict[str, Any] | None:
        try:
            response = httpx.get(f"{self.url}/api/v1/health", timeout=timeout)
            answer = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        return answer if isinstance(answer, dict) else None

    def wait_ready(self, timeout: float = NODE_START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while self.health() is None:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"node {self.name} exited at start; see {self.log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {self.name} did not answer within {timeout:g}s; see {self.log}")
            time.sleep(0.1)

    def terminate(self, timeout: float = TERMINATE_TIMEOUT) -> int | None:
        """SIGTERM, as a deploy stops a node, and reap; its exit status, or
        None if it had not exited within ``timeout`` (then it is killed)."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            status: int | None = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            status = None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.paused = False
        return status

    def kill(self) -> None:
        """kill -9, and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.paused = False

    def pause(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def stopped(self) -> bool:
        """Whether the process is stopped now (SIGSTOP from us, or it froze itself)."""
        pid = self.pid
        return pid is not None and process_state(pid) == "T"

    def set_faults(self, **plan: Any) -> None:
        """Replace this node's fault plan (see engine.stores.faults); no arguments: no faults."""
        tmp = self.control.with_name(f".{self.control.name}.tmp")
        tmp.write_bytes(orjson.dumps(plan))
        os.replace(tmp, self.control)

    def store_stats(self) -> dict[str, Any]:
        """The node's fault-store counts, as last written ({} before any)."""
        try:
            stats = orjson.loads(self.control.with_name(self.control.name + STATS_SUFFIX).read_bytes())
        except (OSError, ValueError):
            return {}
        return stats if isinstance(stats, dict) else {}

    def store_requests(self) -> int:
        stats = self.store_stats()
        if stats.get("pid") != self.pid:
            return 0
        return sum(stats.get("requests", {}).values())


@dataclass
class Cluster:
    """Nodes on one store (a folder, or S3, GCS or Azure through an emulator we run), and their cleanup."""

    workdir: Path
    store: str  # "file", "s3", "gcs" or "azure"
    size: int = 3
    nodes: list[Node] = field(default_factory=list)
    store_url: str = ""  # the inner store, without faults
    azure_connection_string: str | None = None  # Azurite's development account, for "azure"
    moto: subprocess.Popen[bytes] | None = None
    emulator: subprocess.Popen[bytes] | None = None  # fake-gcs-server or Azurite
    env: dict[str, str] = field(default_factory=dict)  # more environment for every node (format 2's settings)

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        extra: dict[str, str] = {}
        if self.store == "s3":
            extra = dict(DUMMY_AWS)
            self.store_url = self._start_moto()
        elif self.store == "file":
            self.store_url = (self.workdir / "store").as_uri()
        elif self.store == "gcs":
            self.store_url = self._start_fake_gcs()
        elif self.store == "azure":
            self.store_url = self._start_azurite()
            assert self.azure_connection_string is not None
            extra = {"AZURE_STORAGE_CONNECTION_STRING": self.azure_connection_string}
        else:
            raise ValueError(f"store must be file, s3, gcs or azure, got {self.store!r}")
        for i in range(self.size):
            port = free_port()
            control = self.workdir / f"faults-n{i}.json"
            control.write_bytes(b"{}")
            env = self._env(fault_store_url(self.store_url, control), port, extra)
            self.nodes.append(Node(name=f"n{i}", port=port, control=control,
                                   log=self.workdir / f"node-n{i}.log", env=env))
        # The nodes share one database, set up as a deployment sets it up: the
        # leader records forwarded operator requests there, and the finished jobs.
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=self.nodes[0].env,
                       check=True, capture_output=True, timeout=MIGRATE_TIMEOUT_SECONDS)
        for node in self.nodes:
            node.start()
        for node in self.nodes:
            node.wait_ready()

    def open_store(self) -> ObjectStore:
        """The inner store (no faults), opened as the nodes open it."""
        return open_store(self.store_url, azure_connection_string=self.azure_connection_string)

    def _env(self, store_url: str, port: int, extra: dict[str, str]) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("QUEUE_", "DJANGO_", "AWS_", "AZURE_", "GOOGLE_"))
        }
        env.update(
            PYTHONPATH=str(ROOT),
            DJANGO_DEBUG="false",
            DJANGO_SECRET_KEY=SECRET_KEY,
            ALLOWED_HOSTS="127.0.0.1,localhost",
            DATABASE_URL=f"sqlite:///{self.workdir / 'db.sqlite3'}",
            QUEUE_STORE_URL=store_url,
            QUEUE_ADVERTISE_URL=f"http://127.0.0.1:{port}",
            QUEUE_API_TOKEN=TOKEN,
            QUEUE_HEARTBEAT_SECONDS=str(HEARTBEAT_SECONDS),
            QUEUE_TAKEOVER_SECONDS=str(TAKEOVER_SECONDS),
            QUEUE_LEASE_SECONDS=str(LEASE_SECONDS),
            QUEUE_STORE_HEDGE_SECONDS=str(HEDGE_SECONDS),
            QUEUE_BROKER_AUTOSTART="true",
            QUEUE_SCHEDULES=orjson.dumps(SCHEDULES).decode(),
        )
        env.update(extra)
        env.update(self.env)
        return env

    def _start_moto(self) -> str:
        import boto3  # only for S3 runs

        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(DUMMY_AWS)
        with open(self.workdir / "moto.log", "wb") as log:
            self.moto = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )
        endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{endpoint}/moto-api/", timeout=1)
                break
            except httpx.HTTPError:
                if self.moto.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto did not start; see {self.workdir / 'moto.log'}") from None
                time.sleep(0.05)
        bucket = f"chaos-{uuid.uuid4().hex[:12]}"
        client = boto3.client("s3", endpoint_url=endpoint, region_name=MOTO_REGION,
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        try:
            client.create_bucket(Bucket=bucket)
        finally:
            client.close()
        for name, value in DUMMY_AWS.items():  # for the watcher and nemesis in this process
            os.environ.setdefault(name, value)
        return f"s3://{bucket}/chaos?endpoint_url={quote(endpoint, safe='')}&region={MOTO_REGION}"

    def _start_emulator(self, argv: list[str], probe: str, name: str) -> None:
        log_path = self.workdir / f"{name}.log"
        with open(log_path, "wb") as log:
            self.emulator = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                             cwd=self.workdir)
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(probe, timeout=1)
                return
            except httpx.HTTPError:
                if self.emulator.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not start; see {log_path}") from None
                time.sleep(0.05)

    def _start_fake_gcs(self) -> str:
        port = free_port()
        endpoint = f"http://127.0.0.1:{port}"
        self._start_emulator(fake_gcs_argv(port), f"{endpoint}/storage/v1/b", "fake-gcs-server")
        return f"gs://{create_gcs_bucket(endpoint)}/chaos?endpoint_url={quote(endpoint, safe='')}"

    def _start_azurite(self) -> str:
        port = free_port()
        endpoint = f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
        self._start_emulator(azurite_argv(port), f"{endpoint}?comp=list", "azurite")
        self.azure_connection_string = azurite_connection_string(endpoint)
        return f"az://{create_azure_container(endpoint)}/chaos?endpoint_url={quote(endpoint, safe='')}"

    def leader(self) -> Node | None:
        """The node that says it leads now (None if none does)."""
        for node in self.nodes:
            if node.alive and not node.paused:
                health = node.health()
                if health is not None and health.get("role") == "leader":
                    return node
        return None

    def heal(self) -> None:
        """Faults off, every node resumed, dead nodes restarted; waits until they answer."""
        for node in self.nodes:
            node.set_faults()
            node.resume()
        for node in self.nodes:
            if not node.alive:
                node.start()
        for node in self.nodes:
            node.wait_ready()

    def stop(self) -> None:
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.resume()
                node.proc.send_signal(signal.SIGKILL)
                node.proc.wait(10)
        for proc in (self.moto, self.emulator):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
