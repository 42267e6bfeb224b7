"""GCS and Azure fixtures for every test folder: fake-gcs-server and Azurite as
real processes on loopback ports, fresh buckets and containers, store URLs.

Nothing is skipped: a missing emulator fails the test with how to install it
(``.ci/run`` does both).
"""

from __future__ import annotations

import subprocess
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
from tests.emulator_process import free_port, start_emulator, stop_emulator

__all__ = ["AZURITE_ACCOUNT", "AZURITE_KEY", "AzureTarget", "azurite_connection_string"]


def _argv(make: Callable[[int], list[str]], port: int) -> list[str]:
    try:
        return make(port)
    except EmulatorMissing as exc:
        pytest.fail(str(exc))


EMULATOR_START_TIMEOUT = 60.0


def _start(argv: list[str], port: int, probe: str, log_path: Path, name: str) -> subprocess.Popen[bytes]:
    return start_emulator(
        argv, port=port, probe=probe, log_path=log_path, name=name, timeout=EMULATOR_START_TIMEOUT, cwd=log_path.parent
    )


@pytest.fixture(scope="session")
def fake_gcs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Run fake-gcs-server (in memory, plain HTTP) on 127.0.0.1; yield its endpoint URL."""
    port = free_port()
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
        stop_emulator(proc)


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Run Azurite's blob service on 127.0.0.1; yield the development account's blob endpoint."""
    workdir = tmp_path_factory.mktemp("azurite")
    port = free_port()
    proc = _start(_argv(azurite_argv, port), port, f"/{AZURITE_ACCOUNT}?comp=list", workdir / "azurite.log",
                  "Azurite")  # fmt: skip
    try:
        yield f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
    finally:
        stop_emulator(proc)


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
