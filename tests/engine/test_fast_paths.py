"""The push path's shortcuts give exactly what the general path gives.

Each shortcut exists only for speed (see docs/benchmark.md); these tests fail
if one of them changes an outcome, an id's shape or a byte of the document.
"""

from __future__ import annotations

import subprocess
import sys
import threading

from engine import model


def test_job_ids_are_32_hex_characters_and_unique_across_threads() -> None:
    found: list[list[str]] = [[] for _ in range(8)]

    def draw(into: list[str]) -> None:
        into.extend(model.new_job_id() for _ in range(5_000))

    threads = [threading.Thread(target=draw, args=(into,)) for into in found]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = [i for into in found for i in into]
    assert len(set(ids)) == len(ids) == 40_000
    assert all(len(i) == 32 and i == i.lower() and int(i, 16) >= 0 for i in ids)


FORK_SCRIPT = """
import os
from engine.model import new_job_id
new_job_id()  # fills the block of ids the child inherits
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(write, new_job_id().encode())
    os._exit(0)
os.waitpid(pid, 0)
child = os.read(read, 64).decode()
parent = [new_job_id() for _ in range(300)]
print("same" if child in parent else "different")
"""


def test_a_forked_child_draws_its_own_job_ids() -> None:
    out = subprocess.run([sys.executable, "-c", FORK_SCRIPT], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "different"
