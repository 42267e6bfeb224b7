"""The fault-injecting store's freeze (engine/stores/faults.py) stops a real
process in the middle of a write. The other fault kinds are in
tests/engine/test_fault_store.py."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from engine.stores import FileStore, fault_store_url
from tests.engine.test_fault_store import _control, _writing
from tests.helpers import wait_for

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def control(tmp_path: Path) -> Path:
    return tmp_path / "control.json"


def test_freeze_stops_the_process_in_the_middle_of_a_write(tmp_path: Path, control: Path) -> None:
    """A process told to freeze stops itself (SIGSTOP) in the middle of its next
    write: nothing of it has landed, and the write finishes when it resumes."""
    url = fault_store_url(f"file://{tmp_path / 'store'}", control)
    _control(control, freeze="once")
    script = (
        "import sys; from engine.stores import open_store\n"
        "s = open_store(sys.argv[1]); s.put('queue.json', b'frozen'); s.put('queue.json', b'again'); s.close()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script, url], cwd=PROJECT_ROOT)
    try:
        wait_for(lambda: _state(child.pid) == "T", what="the child to stop itself")
        assert _writing(tmp_path / "store")
        assert FileStore(tmp_path / "store").get("queue.json") is None
        child.send_signal(signal.SIGCONT)
        assert child.wait(30) == 0
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGCONT)
            child.kill()
            child.wait()
    stats = orjson.loads(control.with_name(control.name + ".stats").read_bytes())
    assert stats["frozen"] == ["once"]  # only once per token: the second put went through
    blob = FileStore(tmp_path / "store").get("queue.json")
    assert blob is not None and blob.data == b"again"


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
