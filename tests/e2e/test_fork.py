"""A process forked from one that has drawn job ids draws its own: the block
of ids it inherits is not reused (engine.model.new_job_id)."""

from __future__ import annotations

import subprocess
import sys

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
