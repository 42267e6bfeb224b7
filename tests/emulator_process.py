"""Start and stop an emulator (moto, fake-gcs-server, Azurite) as a real process on a loopback port.

Shared by the S3 and the GCS/Azure fixtures; a process that does not answer in
time fails the test with its log.
"""

from __future__ import annotations

import http.client
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import pytest


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on at the moment."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answers(port: int, path: str) -> bool:
    """Whether an HTTP server on 127.0.0.1:``port`` answers ``GET path`` (with anything)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        conn.request("GET", path)
        conn.getresponse().read()
        return True
    except OSError:
        return False
    finally:
        conn.close()


def start_emulator(
    argv: list[str],
    *,
    port: int,
    probe: str,
    log_path: Path,
    name: str,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Run ``argv`` (output to ``log_path``) until ``GET probe`` on ``port`` answers; return the process.

    Fails the test, after stopping the process, if it exits or does not answer within ``timeout`` seconds.
    """
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=cwd)
    deadline = time.monotonic() + timeout
    while not answers(port, probe):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_emulator(proc)
            pytest.fail(f"{name} did not start:\n{log_path.read_text(errors='replace')}")
        time.sleep(0.05)
    return proc


def stop_emulator(proc: subprocess.Popen[bytes]) -> None:
    """Terminate ``proc`` (kill it after 10 seconds) and reap it. Idempotent."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
