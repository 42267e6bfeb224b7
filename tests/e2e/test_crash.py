"""kill -9 a writer in the middle of its writes: queue.json always parses, and
every push it acknowledged is there (I1, I2, crash safety of file://)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine import FileStore, Policy, parse_document

# The writer: many threads pushing through one GroupCommitter, printing each
# id only after its push was acknowledged.
WRITER = r"""
import sys, threading
from engine import FileStore, GroupCommitter
committer = GroupCommitter(FileStore(sys.argv[1])).start()
lock = threading.Lock()
def pusher(n):
    i = 0
    while True:
        ids = committer.push("q", [{"writer": n, "i": i, "pad": "x" * 200}] * 5)
        i += 1
        with lock:
            sys.stdout.write("".join(f"{job_id}\n" for job_id in ids))
            sys.stdout.flush()
threads = [threading.Thread(target=pusher, args=(n,), daemon=True) for n in range(16)]
for t in threads:
    t.start()
threads[0].join()
"""


@pytest.mark.timeout(240)
def test_kill_9_during_writes_never_tears_the_document(tmp_path: Path) -> None:
    rng = random.Random(1234)
    store = FileStore(tmp_path)
    acknowledged: set[str] = set()
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    for _ in range(15):
        with subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, env=env, cwd=os.getcwd()
        ) as child:
            assert child.stdout is not None
            first = child.stdout.readline()  # wait until it is really writing
            assert first.endswith(b"\n"), "writer produced nothing"
            time.sleep(rng.uniform(0.0, 0.25))
            child.send_signal(signal.SIGKILL)
            rest = child.stdout.read()
        lines = (first + rest).split(b"\n")
        acknowledged.update(line.decode() for line in lines[:-1])  # the last piece may be cut off

        blob = store.get("queue.json")
        assert blob is not None
        state = parse_document("queue.json", blob.data, policy=Policy())  # never torn, never empty
        missing = acknowledged - set(state.jobs)
        assert not missing, f"{len(missing)} acknowledged pushes lost after kill -9"
    assert len(acknowledged) > 100
    # Only the object, its creation marker (I10) and the store's own folders:
    # no stray half-written objects.
    assert store.list() == ["queue.json", "queue.json.created"]
