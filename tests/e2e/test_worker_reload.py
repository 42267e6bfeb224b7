"""``queueworker --reload`` in a real process: a change to the handler's
code lets the running job finish on the old code, then the worker restarts
and runs the next job on the new code; no job runs twice."""

from __future__ import annotations

import os
import signal
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.harness import ROOT, Cluster, api
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

HANDLER = textwrap.dedent('''
    import os
    import time

    VERSION = "{version}"


    def work(payload):
        def record(line):
            with open(os.environ["E2E_RECORD"], "a") as f:
                f.write(line + "\\n")

        record(f"start {{payload['n']}}")
        time.sleep(payload.get("seconds", 0))
        record(f"{{VERSION}} {{payload['n']}}")
''')


def test_a_code_change_restarts_the_worker_after_its_running_job_ends(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    module = code / "reload_handler.py"
    module.write_text(HANDLER.format(version="v1"))
    record = tmp_path / "record.txt"
    cluster = cluster_factory()
    node = cluster.node()
    wait_for(lambda: node.role() == "leader", 15, "the node to lead")
    worker = cluster.worker("--queue", "r", "--handler", "reload_handler:work", "--reload", "--broker", node.url,
                            "--wait-seconds", "1", "--grace-seconds", "30", E2E_RECORD=str(record),
                            PYTHONPATH=f"{ROOT}{os.pathsep}{code}")

    def lines() -> list[str]:
        return record.read_text().splitlines() if record.exists() else []

    def push(**payload: object) -> None:
        assert api(node, "POST", "/api/v1/jobs", {"queue": "r", "payload": payload}).status_code == 201

    log = Path(cluster.processes[-1][2])
    wait_for(lambda: "watching for code changes" in log.read_text(), 30, "the reloader to watch")
    push(n=1)
    wait_for(lambda: "v1 1" in lines(), 30, "job 1 on the first code")
    time.sleep(1.5)  # the watcher's first look at the files (once a second) has seen the module
    push(n=2, seconds=4)
    wait_for(lambda: "start 2" in lines(), 30, "job 2 to start")
    module.write_text(HANDLER.format(version="v2"))
    later = time.time() + 5  # a new mtime even on a coarse clock
    os.utime(module, (later, later))
    wait_for(lambda: "v1 2" in lines(), 30, "job 2 to finish on the old code")
    push(n=3)
    wait_for(lambda: "v2 3" in lines(), 60, "job 3 on the new code, after the restart")
    assert lines() == ["start 1", "v1 1", "start 2", "v1 2", "start 3", "v2 3"]  # job 2 ran once
    # Job 3's handler has returned; its acknowledgement lands a moment later.
    wait_for(lambda: cluster.document()["jobs"] == [], 30, "every job acknowledged")
    worker.send_signal(signal.SIGTERM)
    worker.wait(30)
