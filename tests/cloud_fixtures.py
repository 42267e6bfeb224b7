"""GCS and Azure fixtures for every test folder: fake-gcs-server and Azurite as
real processes on loopback ports, fresh buckets and containers, store URLs.

Nothing is skipped: a missing emulator fails the test with how to install it
(``.ci/run`` does both).
"""

from __future__ import annotations

import http.client
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from chaos.emulators import (
    AZURITE_ACCOUNT,
    AZURITE_KEY,
    EmulatorMissing,
    azurite_argv,
    azurite_connection_string,
    create_azure_container,
    create_gcs_bucket,
    fake_gcs_argv,
)
from tests.s3_fixtures import _free_port

__all__ = ["AZURITE_ACCOUNT", "AZURITE_KEY", "AzureTarget", "azurite_connection_string"]


def _argv(make: Callable[[int], list[str]], port: int) -> list[str]:
    try:
        return make(port)
    except EmulatorMissing as exc:
        pytest.fail(str(exc))


EMULATOR_START_TIMEOUT = 60.0


def _answers(port: int, path: str) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        conn.request("GET", path)
        conn.getresponse().read()
        return True
    except OSError:
        return False
    finally:
        conn.close()


def _start(argv: list[str], port: int, probe: str, log_path: Path, name: str) -> subprocess.Popen[bytes]:
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=log_path.parent
        )
    deadline = time.monotonic() + EMULATOR_START_TIMEOUT
    while not _answers(port, probe):
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            pytest.fail(f"{name} did not start:\n{log_path.read_text(errors='replace')}")
        time.sleep(0.05)
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def fake_gcs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Run fake-gcs-server (in memory, plain HTTP) on 127.0.0.1; yield its endpoint URL."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start(
        _argv(fake_gcs_argv, port),
        port,
        "/storage/v1/b",
        tmp_path_factory.mktemp("fake-gcs") / "fake-gcs.log",
        "fake-gcs-server",
    )
    try:
        yield url
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Run Azurite's blob service on 127.0.0.1; yield the development account's blob endpoint."""
    workdir = tmp_path_factory.mktemp("azurite")
    port = _free_port()
    proc = _start(_argv(azurite_argv, port), port, f"/{AZURITE_ACCOUNT}?comp=list", workdir / "azurite.log",
                  "Azurite")  # fmt: skip
    try:
        yield f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
    finally:
        _stop(proc)


@dataclass(frozen=True, slots=True, kw_only=True)
class AzureTarget:
    """A fresh container on Azurite: the store URL and the connection string to open it with."""

    url: str
    connection_string: str
    container: str
    endpoint: str


@pytest.fixture
def gcs_bucket(fake_gcs_server: str) -> str:
    return create_gcs_bucket(fake_gcs_server)


@pytest.fixture
def gcs_url(fake_gcs_server: str, gcs_bucket: str) -> str:
    """A store URL for a fresh bucket on fake-gcs-server."""
    return f"gs://{gcs_bucket}/some-prefix?endpoint_url={quote(fake_gcs_server, safe='')}"


@pytest.fixture
def azure_target(azurite: str) -> AzureTarget:
    """A fresh container on Azurite, its store URL and connection string."""
    container = create_azure_container(azurite)
    return AzureTarget(
        url=f"az://{container}/some-prefix?endpoint_url={quote(azurite, safe='')}",
        connection_string=azurite_connection_string(azurite),
        container=container,
        endpoint=azurite,
    )
