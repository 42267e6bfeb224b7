"""``manage.py cluster`` (``make cluster``): three real nodes, two workers and
demo jobs on one store. The leader is killed with SIGKILL, another node takes
over, Ctrl-C typed in the terminal stops everything with status 0, and no
acknowledged push is missing from the store.

The command runs as ``make cluster``'s recipe runs it: a job-control
foreground job (``set -m``) of a shell in a terminal of its own (a pty), so
the Ctrl-C is the terminal's, sent to the foreground process group."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import shlex
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.harness import ROOT, TOKEN

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
    argv = [sys.executable, "manage.py", "cluster", "--port", str(port), "--dir", str(folder), "--every", "0.2",
            "--grace-seconds", "5"]
    pid, terminal = pty.fork()
    if pid == 0:  # the child: a shell in the new terminal, as make's recipe
        os.chdir(ROOT)
        # A user's shell starts with every signal at its default and none
        # blocked; pytest's process may have changed that, and exec keeps it.
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        for number in (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGTSTP):
            signal.signal(number, signal.SIG_DFL)
        os.execve("/bin/bash", ["bash", "-c", f"set -m; {shlex.join(argv)}; :"], env)
    output = bytearray()

    def read_until(done: Callable[[str], bool], seconds: float, what: str) -> str:
        deadline = time.monotonic() + seconds
        while not done(text := output.decode(errors="replace")):
            assert time.monotonic() < deadline, f"no {what} within {seconds:g} s:\n{text}"
            if select.select([terminal], [], [], 0.1)[0]:
                with contextlib.suppress(OSError):
                    output.extend(os.read(terminal, 65536))
        return text

    def completed() -> int:
        return sum((folder / f"worker-{n}.log").read_text().count(" completed in ") for n in (1, 2))

    pids: list[int] = []
    try:
        banner = read_until(lambda t: " leads (epoch " in t, 90, "leader")
        assert all(f"http://127.0.0.1:{port + i}/" in banner for i in range(3)), banner
        assert "dashboard logins: admin / " in banner and f"API token: {TOKEN}" in banner
        pids = [int(p.read_text()) for p in folder.glob("*.pid")]
        assert len(pids) == 5  # three nodes, two workers
        leader_url = next(line for line in banner.splitlines() if " leads (epoch " in line).split()[0]
        leader_pid = int((folder / f"node-{leader_url.rsplit(':', 1)[1]}.pid").read_text())
        read_until(lambda _: completed() >= 2, 60, "completed jobs")

        os.kill(leader_pid, signal.SIGKILL)
        read_until(lambda t: " took over (epoch 2) after " in t, 60, "takeover")
        before = completed()
        read_until(lambda _: completed() >= before + 3, 60, "completed jobs after the takeover")

        os.write(terminal, b"\x03")  # Ctrl-C, typed in the terminal
        out = read_until(lambda t: "acknowledged push" in t, 90, "summary")
        _, raw = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(raw) == 0, out
    finally:
        with contextlib.suppress(ChildProcessError, ProcessLookupError):
            if os.waitpid(pid, os.WNOHANG)[0] == 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        for child in pids:
            if alive(child):
                os.kill(child, signal.SIGKILL)
        os.close(terminal)
    assert "stopped every node and worker" in out
    assert "no acknowledged push is missing" in out, out
    assert not [child for child in pids if alive(child)], "a child outlived the cluster command"
