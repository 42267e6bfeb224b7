"""The processes of ``python -m bench network`` and the line protocol between them.

The measuring process starts every other process as a :class:`Child`: daphne
nodes, push load generators (:mod:`bench.pushgen`) and drain worker processes
(:mod:`bench.drainer`). Each child is killed by the kernel if the measuring
process dies (``PR_SET_PDEATHSIG``), runs in its own session (Ctrl-C is the
measuring process's to handle) and is killed by :meth:`Child.kill` on every
way out. Generators and workers speak a line protocol: they write lines such
as ``ready``, ``progress …`` and ``result {json}`` to stdout, and read
commands (``go``, ``stop``) from stdin. Every wait on a child is bounded.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

PR_SET_PDEATHSIG = 1
STOP_TIMEOUT_SECONDS = 5.0
LOG_TAIL_CHARS = 3000
ROOT = Path(__file__).resolve().parent.parent


class ChildError(Exception):
    """A child process did not answer in time, exited early, or said something unexpected."""


def _die_with_parent() -> None:
    """In the child before exec: the kernel kills it if the measuring process dies (even by SIGKILL)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Child:
    """One child process. Its stdout lines are read by a thread into a queue
    (so every read can time out); its stderr goes to ``log_path``."""

    def __init__(
        self, name: str, argv: Sequence[str], *, log_path: Path, env: dict[str, str] | None = None, pipes: bool = True
    ) -> None:
        self.name = name
        self.log_path = log_path
        self._lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                list(argv),
                cwd=ROOT,
                env=env,
                stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
                stdout=subprocess.PIPE if pipes else log,
                stderr=log,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # safe: runs in the child before exec, nothing else does
            )
        if pipes:
            threading.Thread(target=self._read, name=f"{name}-stdout", daemon=True).start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self._lines.put(raw.decode(errors="replace").rstrip("\n"))
        self._lines.put(None)  # end of output

    def send(self, line: str) -> None:
        """Write one command line to the child's stdin (ignored if it already exited)."""
        if self.proc.stdin is None:
            return
        with contextlib.suppress(BrokenPipeError, OSError, ValueError):
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()

    def next_line(self, deadline: float) -> str:
        """The child's next stdout line; ChildError if none comes by ``deadline`` (monotonic) or it exited."""
        timeout = deadline - time.monotonic()
        try:
            line = self._lines.get(timeout=max(0.0, timeout))
        except queue.Empty:
            raise ChildError(f"{self.name} said nothing in time") from None
        if line is None:
            self._lines.put(None)  # keep answering "exited" to later calls
            status = self.proc.wait(STOP_TIMEOUT_SECONDS)
            raise ChildError(f"{self.name} exited with status {status}{self._tail()}")
        return line

    def expect(self, word: str, deadline: float) -> str:
        """Skip lines until one starting with ``word``; return what follows it."""
        while True:
            line = self.next_line(deadline)
            if line == word or line.startswith(word + " "):
                return line[len(word) + 1 :]

    def poll_line(self) -> str | None:
        """A line the child already wrote, or None (never blocks)."""
        try:
            line = self._lines.get_nowait()
        except queue.Empty:
            return None
        if line is None:
            self._lines.put(None)
            status = self.proc.wait(STOP_TIMEOUT_SECONDS)
            raise ChildError(f"{self.name} exited with status {status}{self._tail()}")
        return line

    def _tail(self) -> str:
        try:
            text = self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return ""
        return f"; its log ends:\n{text}" if text.strip() else ""

    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds for the child to exit; its status, or None."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        """SIGTERM, then SIGKILL if it is still there after a moment. Idempotent; never raises."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
            if self.wait(STOP_TIMEOUT_SECONDS) is None:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                self.wait(STOP_TIMEOUT_SECONDS)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far, from /proc/<pid>/stat (None if gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (fields 14, 15)


# -- the child's side ---------------------------------------------------------


def say(line: str) -> None:
    """In a child: write one protocol line to stdout."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def wait_for(word: str, timeout: float) -> bool:
    """In a child: block until stdin carries ``word`` (True), or EOF or ``timeout`` (False).

    EOF means the measuring process is gone or gave up: the child should end.
    """
    result: list[bool] = []
    done = threading.Event()

    def read() -> None:
        for line in sys.stdin:
            if line.strip() == word:
                result.append(True)
                break
        done.set()

    threading.Thread(target=read, name=f"wait-{word}", daemon=True).start()
    done.wait(timeout)
    return bool(result)


def wait_until(predicate: Callable[[], object], seconds: float, what: str) -> None:
    """In the measuring process: poll ``predicate`` until it is true; raise
    TimeoutError naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {seconds:g} s")
        time.sleep(0.01)


def own_cpu_seconds() -> float:
    """User + system CPU seconds of this process so far."""
    times = os.times()
    return times.user + times.system


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run_interruptibly(run: Callable[[Callable[[str], None]], int]) -> int:
    """``run(out)``, printing each line at once; SIGTERM stops it as Ctrl-C
    does, so that its ``finally`` blocks kill every child process. Returns
    its exit status, or 130 when interrupted."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        return run(lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        print("interrupted; every child process was stopped", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
