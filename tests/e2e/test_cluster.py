"""``manage.py cluster`` (``make cluster``): three real nodes, two workers and
demo jobs on one store. The leader is killed with SIGKILL, another node takes
over, Ctrl-C (SIGINT) stops everything with status 0, and no acknowledged
push is missing from the store."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.e2e.harness import ROOT, TOKEN
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def free_ports(count: int) -> int:
    """A first port such that it and the ``count - 1`` after it are free now."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = int(probe.getsockname()[1])
        if first + count > 65535:
            continue
        try:
            socks = [socket.socket() for _ in range(count)]
            for offset, sock in enumerate(socks):
                sock.bind(("127.0.0.1", first + offset))
            return first
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError("no run of free ports")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_cluster_survives_a_killed_leader_and_stops_cleanly(tmp_path: Path) -> None:
    port = free_ports(3)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUE_", "DJANGO_", "DATABASE_"))}
    env.update(QUEUE_API_TOKEN=TOKEN, QUEUE_HEARTBEAT_SECONDS="0.25", QUEUE_TAKEOVER_SECONDS="2",
               PYTHONUNBUFFERED="1")
    folder = tmp_path / "cluster"
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "cluster", "--port", str(port), "--dir", str(folder), "--every", "0.2",
         "--grace-seconds", "5"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    pids: list[int] = []
    try:
        wait_for(lambda: any(" leads (epoch " in line for line in lines), 90, "a leader")
        banner = "".join(lines)
        assert all(f"http://127.0.0.1:{port + i}/" in banner for i in range(3)), banner
        assert "dashboard logins: admin / " in banner and f"API token: {TOKEN}" in banner
        pids = [int(p.read_text()) for p in folder.glob("*.pid")]
        assert len(pids) == 5  # three nodes, two workers
        leader_url = next(line for line in lines if " leads (epoch " in line).split()[0]
        leader_pid = int((folder / f"node-{leader_url.rsplit(':', 1)[1]}.pid").read_text())
        wait_for(lambda: (folder / "worker-1.log").read_text().count("completed") >= 2, 60, "jobs completing")

        os.kill(leader_pid, signal.SIGKILL)
        wait_for(lambda: any(" took over (epoch 2) after " in line for line in lines), 60, "a takeover")
        wait_for(lambda: (folder / "worker-2.log").read_text().count("completed") + (
            folder / "worker-1.log").read_text().count("completed") >= 6, 60, "jobs completing after it")

        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    reader.join(10)
    proc.stdout.close()  # type: ignore[union-attr]
    out = "".join(lines)
    assert "stopped every node and worker" in out
    assert "no acknowledged push is missing" in out, out
    assert not [pid for pid in pids if alive(pid)], "a child outlived the cluster command"
