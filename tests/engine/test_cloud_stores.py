"""What the contract suite cannot show about the ``gs://`` and ``az://`` stores.

* The emulators themselves refuse stale conditional writes: single raw HTTP
  requests, with no client library in between (so a refusal is the
  emulator's, not client-side logic).
* Concurrent conditional writers on one object, as threads and as OS
  processes: exactly one wins per version.
* URLs, options, missing buckets and containers.

Error mapping that the emulators cannot produce is in test_cloud_store_errors.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

from engine.errors import PreconditionFailed, StoreConfigError
from engine.stores import ObjectStore, open_store
from engine.stores.azure import AzureBlobStore
from engine.stores.gcs import GCSStore
from tests.cloud_fixtures import AZURITE_ACCOUNT, AZURITE_KEY, AzureTarget, azurite_connection_string

WRITERS = 8
ROUNDS = 12

# -- the emulators enforce the preconditions on single requests -------------------------


def _gcs_upload(endpoint: str, bucket: str, name: str, data: bytes, generation: int) -> httpx.Response:
    """One multipart upload (the kind google-cloud-storage sends for documents up to 8 MiB) with
    ``ifGenerationMatch``. fake-gcs-server ignores the condition on ``uploadType=media``, which
    this store never sends; it honours it on multipart and resumable uploads."""
    boundary = "queueadmin-boundary"
    body = (
        (
            f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n"
            f"{json.dumps({'name': name})}\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return httpx.post(
        f"{endpoint}/upload/storage/v1/b/{bucket}/o",
        params={"uploadType": "multipart", "ifGenerationMatch": str(generation)},
        content=body,
        headers={"Content-Type": f"multipart/related; boundary={boundary}"},
        timeout=10,
    )


def test_fake_gcs_server_refuses_a_second_create_and_a_stale_generation(fake_gcs_server: str, gcs_bucket: str) -> None:
    created = _gcs_upload(fake_gcs_server, gcs_bucket, "q/queue.json", b"v1", 0)
    assert created.status_code == 200, created.text
    first = int(created.json()["generation"])

    again = _gcs_upload(fake_gcs_server, gcs_bucket, "q/queue.json", b"v1 again", 0)
    replaced = _gcs_upload(fake_gcs_server, gcs_bucket, "q/queue.json", b"v2", first)
    stale = _gcs_upload(fake_gcs_server, gcs_bucket, "q/queue.json", b"v3", first)

    assert again.status_code == 412
    assert replaced.status_code == 200 and int(replaced.json()["generation"]) != first
    assert stale.status_code == 412
    store = GCSStore(bucket=gcs_bucket, prefix="q", endpoint_url=fake_gcs_server)
    blob = store.get("queue.json")
    assert blob is not None and (blob.data, blob.etag) == (b"v2", replaced.json()["generation"])
    store.close()


def _azure_sas(endpoint: str) -> str:
    return generate_account_sas(
        AZURITE_ACCOUNT,
        AZURITE_KEY,
        resource_types=ResourceTypes(object=True),
        permission=AccountSasPermissions(read=True, write=True, create=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )


def _azure_put(endpoint: str, container: str, name: str, data: bytes, **conditions: str) -> httpx.Response:
    headers = {"x-ms-blob-type": "BlockBlob", "x-ms-version": "2025-01-05", "Content-Type": "application/octet-stream"}
    headers.update({k.replace("_", "-").title(): v for k, v in conditions.items()})
    return httpx.put(f"{endpoint}/{container}/{name}?{_azure_sas(endpoint)}", content=data, headers=headers, timeout=10)


def test_azurite_refuses_create_over_an_existing_blob_and_a_stale_if_match(azure_target: AzureTarget) -> None:
    endpoint, container = azure_target.endpoint, azure_target.container

    created = _azure_put(endpoint, container, "q/queue.json", b"v1", if_none_match="*")
    assert created.status_code == 201, created.text
    first = created.headers["ETag"]
    again = _azure_put(endpoint, container, "q/queue.json", b"v1 again", if_none_match="*")
    replaced = _azure_put(endpoint, container, "q/queue.json", b"v2", if_match=first)
    stale = _azure_put(endpoint, container, "q/queue.json", b"v3", if_match=first)
    missing = _azure_put(endpoint, container, "q/other.json", b"v3", if_match=first)

    assert again.status_code == 409 and again.headers["x-ms-error-code"] == "BlobAlreadyExists"
    assert replaced.status_code == 201 and replaced.headers["ETag"] != first
    assert stale.status_code == 412 and stale.headers["x-ms-error-code"] == "ConditionNotMet"
    assert missing.status_code in (404, 412)
    store = AzureBlobStore(container=container, prefix="q", connection_string=azure_target.connection_string)
    blob = store.get("queue.json")
    assert blob is not None and (blob.data, blob.etag) == (b"v2", replaced.headers["ETag"])
    assert store.get("other.json") is None
    store.close()


# -- concurrent writers: one winner per version -------------------------------------------


@pytest.fixture(params=["gcs", "azure"])
def cloud_store_factory(request: pytest.FixtureRequest) -> Iterator[Callable[[], ObjectStore]]:
    """Makes independent stores (own clients, own connections) on one fresh bucket or container."""
    opened: list[ObjectStore] = []
    if request.param == "gcs":
        url = request.getfixturevalue("gcs_url")

        def make() -> ObjectStore:
            opened.append(open_store(url))
            return opened[-1]
    else:
        target: AzureTarget = request.getfixturevalue("azure_target")

        def make() -> ObjectStore:
            opened.append(open_store(target.url, azure_connection_string=target.connection_string))
            return opened[-1]

    yield make
    for store in opened:
        store.close()


def test_concurrent_conditional_writers_one_winner_per_version(cloud_store_factory: Callable[[], ObjectStore]) -> None:
    """WRITERS stores race a replace of the same version, ROUNDS times.

    Both emulators proved atomic here: exactly one writer wins every round,
    the others get PreconditionFailed, and the object holds the winner's
    bytes under the winner's ETag; a non-atomic emulator would show two
    winners in some round. Real GCS and Azure Blob document their
    preconditions as atomic; the emulators stand in for them here.
    """
    stores = [cloud_store_factory() for _ in range(WRITERS)]
    etag = stores[0].put("queue.json", b"round-0", if_none_match=True)
    barrier = threading.Barrier(WRITERS)

    def attempt(index: int, expected: str, round_: int) -> str | None:
        barrier.wait()
        try:
            return stores[index].put("queue.json", f"round-{round_}-writer-{index}".encode(), if_match=expected)
        except PreconditionFailed:
            return None

    with ThreadPoolExecutor(WRITERS) as pool:
        for round_ in range(1, ROUNDS + 1):
            results = list(pool.map(attempt, range(WRITERS), [etag] * WRITERS, [round_] * WRITERS))
            winners = [(i, new) for i, new in enumerate(results) if new is not None]
            assert len(winners) == 1, f"round {round_}: {len(winners)} writers won"
            ((winner, etag),) = winners
            blob = stores[0].get("queue.json")
            assert blob is not None
            assert (blob.data, blob.etag) == (f"round-{round_}-writer-{winner}".encode(), etag)


def test_concurrent_creates_one_winner(cloud_store_factory: Callable[[], ObjectStore]) -> None:
    stores = [cloud_store_factory() for _ in range(WRITERS)]
    barrier = threading.Barrier(WRITERS)

    def attempt(index: int) -> bool:
        barrier.wait()
        try:
            stores[index].put("queue.json", f"writer-{index}".encode(), if_none_match=True)
        except PreconditionFailed:
            return False
        return True

    with ThreadPoolExecutor(WRITERS) as pool:
        won = list(pool.map(attempt, range(WRITERS)))

    assert won.count(True) == 1
    blob = stores[0].get("queue.json")
    assert blob is not None and blob.data == f"writer-{won.index(True)}".encode()


# -- missing bucket or container, URLs --------------------------------------------------


def test_gcs_missing_bucket_is_a_config_error(fake_gcs_server: str) -> None:
    store = GCSStore(bucket="no-such-bucket-here", endpoint_url=fake_gcs_server)
    try:
        for call in (lambda: store.put("queue.json", b"x", if_none_match=True), lambda: store.list()):
            with pytest.raises(StoreConfigError, match="no-such-bucket-here"):
                call()
    finally:
        store.close()


def test_azure_missing_container_is_a_config_error(azurite: str) -> None:
    store = AzureBlobStore(container="no-such-container", connection_string=azurite_connection_string(azurite))
    try:
        for call in (
            lambda: store.get("queue.json"),
            lambda: store.etag("queue.json"),
            lambda: store.put("queue.json", b"x", if_none_match=True),
            lambda: store.list(),
            lambda: store.delete("queue.json"),
        ):
            with pytest.raises(StoreConfigError, match="no-such-container"):
                call()
    finally:
        store.close()


def test_azure_wrong_key_is_a_config_error_without_echoing_it(azure_target: AzureTarget) -> None:
    wrong = azure_target.connection_string.replace(AZURITE_KEY, "d3Jvbmcta2V5LWh1bnRlcjI=")
    store = AzureBlobStore(container=azure_target.container, connection_string=wrong, max_attempts=1)
    try:
        with pytest.raises(StoreConfigError, match="refused access") as info:
            store.get("queue.json")
        assert "d3Jvbmcta2V5" not in str(info.value)
    finally:
        store.close()


def test_gcs_without_credentials_is_a_config_error(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.setenv("NO_GCE_CHECK", "true")  # never probe a metadata server
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    store = GCSStore(bucket="some-bucket", endpoint_url="https://storage.example.invalid")
    try:
        with pytest.raises(StoreConfigError, match="no Google Cloud credentials found"):
            store.get("queue.json")
    finally:
        store.close()


def test_open_store_opens_gcs_and_azure() -> None:
    gcs = open_store("gs://my-bucket/queues/prod?endpoint_url=http%3A%2F%2F127.0.0.1%3A4443&read_retry_seconds=0")
    assert isinstance(gcs, GCSStore)
    assert (gcs.bucket, gcs.prefix, gcs.endpoint_url, gcs.anonymous) == (
        "my-bucket",
        "queues/prod/",
        "http://127.0.0.1:4443",
        True,
    )
    assert gcs.describe() == "gs://my-bucket/queues/prod at http://127.0.0.1:4443"
    real = open_store("gs://my-bucket/q?project=my-project")
    assert isinstance(real, GCSStore) and not real.anonymous and real.endpoint_url is None
    az = open_store("az://my-container/q?account=myaccount")
    assert isinstance(az, AzureBlobStore)
    assert az.describe() == "az://my-container/q at https://myaccount.blob.core.windows.net"
    secret = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=aHVudGVyMi1zZWNyZXQ=;EndpointSuffix=x"
    with_string = open_store("az://my-container/q", azure_connection_string=secret)
    assert "aHVudGVy" not in with_string.describe()
    for store in (gcs, real, az, with_string):
        store.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("gs://bucket/p?colour=blue", "colour"),
        ("gs://bucket/p?anonymous=maybe", "anonymous"),
        ("gs://bucket/p?read_timeout=-1", "read_timeout"),
        ("gs://bucket/p?endpoint_url=ftp://host", "endpoint_url"),
        ("gs://Bucket/p", "bucket"),
        ("gs:///p", "bucket"),
        ("gs://bucket/a/../b", "prefix"),
        ("az://container/p", "account"),
        ("az://container/p?account=ab", "account"),
        ("az://container/p?account=acct&endpoint_url=http://127.0.0.1:1", "not both"),
        ("az://Container/p?account=acct", "container"),
        ("az://container/p?account=acct&max_attempts=0", "max_attempts"),
        ("az://container/p?account=acct&colour=blue", "colour"),
    ],
)
def test_bad_cloud_urls_are_config_errors(url: str, message: str) -> None:
    with pytest.raises(StoreConfigError, match=message):
        open_store(url)


@pytest.mark.parametrize(
    "url",
    [
        "gs://hunter2-secret:x@bucket/prefix",
        "gs://bucket/prefix?endpoint_url=http://user:hunter2-secret@127.0.0.1:4443",
        "az://hunter2-secret:x@container/prefix",
        "az://container/prefix?endpoint_url=http://user:hunter2-secret@127.0.0.1:10000",
    ],
)
def test_credentials_in_cloud_urls_are_refused_without_echoing_them(url: str) -> None:
    with pytest.raises(StoreConfigError) as info:
        open_store(url)
    assert "hunter2" not in str(info.value)
    assert "credentials" in str(info.value)


def test_a_malformed_connection_string_is_not_echoed() -> None:
    with pytest.raises(StoreConfigError) as info:
        open_store("az://container/p", azure_connection_string="AccountKeyhunter2-secret")
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize("shape", ["development", "endpoint"])
def test_azure_endpoint_url_overrides_the_connection_string(azure_target: AzureTarget, shape: str) -> None:
    """``UseDevelopmentStorage=true`` (Azurite's default port) or a string naming another
    endpoint, with ``endpoint_url`` pointing at the Azurite the tests run: its key still signs in."""
    if shape == "development":
        connection = "UseDevelopmentStorage=true"
    else:
        connection = azure_target.connection_string.replace(
            azure_target.endpoint, "http://127.0.0.1:9/devstoreaccount1"
        )
    store = AzureBlobStore(
        container=azure_target.container, endpoint_url=azure_target.endpoint, connection_string=connection
    )
    try:
        etag = store.put("queue.json", b"x", if_none_match=True)
        assert store.etag("queue.json") == etag
    finally:
        store.close()


def test_an_empty_object_round_trips(cloud_store_factory: Callable[[], ObjectStore]) -> None:
    store = cloud_store_factory()
    etag = store.put("empty.json", b"", if_none_match=True)

    blob = store.get("empty.json")

    assert blob is not None and (blob.data, blob.etag) == (b"", etag)
    assert store.etag("empty.json") == etag


@pytest.mark.parametrize(
    ("url", "module", "extra"),
    [
        ("gs://bucket/p", "engine.stores.gcs", "queueadmin[gcs]"),
        ("az://ctr/p?account=acct", "engine.stores.azure", "queueadmin[azure]"),
    ],
)
def test_a_missing_extra_is_a_config_error_saying_what_to_install(
    monkeypatch: pytest.MonkeyPatch, url: str, module: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as if its library were not installed

    with pytest.raises(StoreConfigError, match=re.escape(f"pip install '{extra}'")):
        open_store(url)


_RACER = """
import sys, time
from pathlib import Path
from engine.errors import PreconditionFailed
from engine.stores import open_store

url, connection, etag, go, name = sys.argv[1:6]
store = open_store(url, azure_connection_string=connection or None)
store.etag("queue.json")  # connect first, so that the race is the writes
Path(go).with_suffix("." + name).touch()
while not Path(go).exists():
    time.sleep(0.002)
try:
    print(store.put("queue.json", name.encode(), if_match=etag))
except PreconditionFailed:
    print("lost")
store.close()
"""
PROCESSES = 4


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["gcs", "azure"])
def test_concurrent_writer_processes_one_winner(request: pytest.FixtureRequest, tmp_path: Path, backend: str) -> None:
    """The same race with writers in separate OS processes, as separate broker nodes would be."""
    if backend == "gcs":
        url, connection = request.getfixturevalue("gcs_url"), ""
    else:
        target: AzureTarget = request.getfixturevalue("azure_target")
        url, connection = target.url, target.connection_string
    store = open_store(url, azure_connection_string=connection or None)
    etag = store.put("queue.json", b"start", if_none_match=True)
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, url, connection, etag, str(go), f"p{i}"],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(PROCESSES)
    ]
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("go.p*"))) < PROCESSES:
            assert time.monotonic() < deadline, "the racers did not start"
            assert all(p.poll() is None for p in racers), "a racer died"
            time.sleep(0.02)
        go.touch()
        outputs = [p.communicate(timeout=60)[0].strip() for p in racers]
    finally:
        for p in racers:
            if p.poll() is None:
                p.kill()
                p.wait()

    winners = [(i, out) for i, out in enumerate(outputs) if out != "lost"]
    assert len(winners) == 1, outputs
    ((winner, new_etag),) = winners
    blob = store.get("queue.json")
    assert blob is not None and (blob.data, blob.etag) == (f"p{winner}".encode(), new_etag)
    store.close()
