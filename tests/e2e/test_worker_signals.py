"""A real ``manage.py queueworker`` process stopped by a signal, against a
real node: an idle worker leaves at once (it does not wait out its long
poll), and a worker with a running job lets it finish and report it, also
when Ctrl-C stops ``make run``'s processes."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.harness import ROOT, Cluster, Node, api, base_env, free_port
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def records(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_an_idle_worker_exits_within_a_second_of_sigterm(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory()
    node = cluster.node()
    wait_for(lambda: node.role() == "leader", 15, "the node to lead")
    worker = cluster.worker(
        "--queue", "idle", "--handler", "tests.e2e.handlers:record", "--broker", node.url, "--wait-seconds", "10"
    )
    log = cluster.processes[-1][2]
    wait_for(lambda: "queues idle" in log.read_text(errors="replace"), 30, "the worker to start")
    time.sleep(1.0)  # well inside its first 10 s long poll

    sent = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    took = time.monotonic() - sent
    # About 0.1 s here; it waited out the rest of its long poll (~9 s) before.
    # The slack is for a loaded machine, not for the long poll.
    assert took < 2.0, f"the idle worker took {took:.1f} s to exit"
    assert "stopped: claimed 0" in log.read_text(errors="replace")


def test_sigint_lets_the_running_job_finish_and_report(cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    cluster = cluster_factory()
    node = cluster.node()
    wait_for(lambda: node.role() == "leader", 15, "the node to lead")
    record = tmp_path / "record.txt"
    [job_id] = api(node, "POST", "/api/v1/jobs", {"queue": "slow", "payload": {"n": 1, "seconds": 3}}).json()["ids"]
    worker = cluster.worker(
        "--queue", "slow", "--handler", "tests.e2e.handlers:slow", "--broker", node.url, E2E_RECORD=str(record)
    )
    wait_for(lambda: any(line.startswith("start 1") for line in records(record)), 30, "the job to start")

    worker.send_signal(signal.SIGINT)  # Ctrl-C
    assert worker.wait(60) == 0
    assert records(record)[-1] == "done 1"  # it ran to the end ...
    log = cluster.processes[-1][2].read_text(errors="replace")
    assert "SIGINT: no more claims" in log and "stopped: claimed 1, completed 1" in log  # ... and was acknowledged
    assert api(node, "GET", f"/api/v1/jobs/{job_id}").status_code == 404  # completed: it left the document


def test_ctrl_c_in_make_run_lets_the_demo_worker_finish_its_job_and_exits_0(tmp_path: Path) -> None:
    # `make run`'s recipe runs scripts/run-demo.sh as a job-control foreground
    # job (set -m): the same here, in a terminal of its own, and Ctrl-C typed in it.
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = base_env(
        f"file://{tmp_path / 'store'}", tmp_path, QUEUE_ADVERTISE_URL=url, ACCESS_LOG=str(tmp_path / "access.log")
    )
    # As the recipe does first: a migrated database (the leader records metrics
    # and finished jobs there; an unmigrated one floods the terminal with errors).
    migrated = subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env,
                              capture_output=True, timeout=120, check=False)
    assert migrated.returncode == 0, migrated.stderr.decode()
    command = f"set -m; scripts/run-demo.sh {Path(sys.executable).parent} {port}; :"
    pid, terminal = pty.fork()
    if pid == 0:  # the child: a shell in the new terminal
        os.chdir(ROOT)
        # A user's shell starts with every signal at its default and none
        # blocked; pytest's process may have changed that, and exec keeps it.
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        for number in (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGTSTP):
            signal.signal(number, signal.SIG_DFL)
        os.execve("/bin/bash", ["bash", "-c", command], env)
    output = bytearray()

    def read(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if select.select([terminal], [], [], min(left, 0.1))[0]:
                try:
                    output.extend(os.read(terminal, 65536))
                except OSError:
                    return

    try:
        node = Node(port=port, log=tmp_path / "access.log", proc=None)  # type: ignore[arg-type]
        read_until = time.monotonic() + 60
        while node.role() != "leader" and time.monotonic() < read_until:
            read(0.2)
        [job_id] = api(
            node, "POST", "/api/v1/jobs", {"queue": "demo", "payload": {"seconds": 3, "fail_rate": 0}}
        ).json()["ids"]
        while api(node, "GET", f"/api/v1/jobs/{job_id}").json().get("status") != "running":
            assert time.monotonic() < read_until, output.decode(errors="replace")
            read(0.1)

        os.write(terminal, b"\x03")  # Ctrl-C
        status = None
        until = time.monotonic() + 60
        while status is None and time.monotonic() < until:
            read(0.2)
            done, raw = os.waitpid(pid, os.WNOHANG)
            status = os.waitstatus_to_exitcode(raw) if done else None
        read(0.2)
        text = output.decode(errors="replace")
        assert status == 0, text
        assert f"job {job_id} (demo, attempt 1) completed" in text, text  # finished, then acknowledged
        assert "stopped: claimed" in text and "lost 0" in text, text
    finally:
        with contextlib.suppress(ChildProcessError, ProcessLookupError):
            if os.waitpid(pid, os.WNOHANG)[0] == 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        os.close(terminal)
