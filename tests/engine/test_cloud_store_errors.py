"""Error mapping of the ``gs://`` and ``az://`` stores that the emulators cannot
produce, against a scripted HTTP server on 127.0.0.1: 401/403, 409, 412, 429,
5xx, read timeouts, a write whose response is lost, refused connections. Each
write is sent exactly once (never retried by the library) and carries the
right condition; each read is the one request the contract promises.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterator
from urllib.parse import parse_qs, urlsplit

import pytest

from engine.errors import PreconditionFailed, StoreConfigError, StoreError, StoreUnavailable
from engine.stores.azure import AzureBlobStore
from engine.stores.base import ObjectStore
from engine.stores.gcs import GCSStore
from tests.cloud_fixtures import AZURITE_ACCOUNT, AZURITE_KEY, azurite_connection_string
from tests.engine.scripted_http import Reply, Script, ScriptedServers

# -- error mapping against a scripted server ------------------------------------------------


@pytest.fixture
def scripted() -> Iterator[Callable[..., tuple[Script, str]]]:
    """Start a scripted HTTP server on 127.0.0.1; return its script and endpoint."""
    with ScriptedServers() as servers:
        yield servers.start


Scripted = Callable[..., tuple[Script, str]]


def _gcs_error(status: int, reason: str = "") -> Reply:
    body = json.dumps({"error": {"code": status, "message": reason or "scripted", "errors": [{"reason": reason}]}})
    return Reply(status=status, body=body.encode(), headers=(("Content-Type", "application/json"),))


def _gcs_uploaded(generation: int) -> Reply:
    body = json.dumps({"bucket": "bucket", "name": "q/queue.json", "generation": str(generation), "size": "1"})
    return Reply(status=200, body=body.encode(), headers=(("Content-Type", "application/json"),))


def _gcs_store(endpoint: str, **kwargs: float) -> GCSStore:
    options: dict[str, float] = {"read_retry_seconds": 0, "read_timeout": 5.0, **kwargs}
    return GCSStore(bucket="bucket", prefix="q", endpoint_url=endpoint, **options)


def test_gcs_get_takes_the_generation_from_the_download(scripted: Scripted) -> None:
    script, endpoint = scripted(Reply(status=200, body=b"document", headers=(("x-goog-generation", "42"),)))
    store = _gcs_store(endpoint)

    blob = store.get("queue.json")

    assert blob is not None and (blob.data, blob.etag) == (b"document", "42")
    assert [(s.method, urlsplit(s.path).path) for s in script.seen] == [
        ("GET", "/download/storage/v1/b/bucket/o/q%2Fqueue.json")
    ]
    store.close()


def test_gcs_put_sends_the_generation_conditions_once(scripted: Scripted) -> None:
    script, endpoint = scripted(_gcs_uploaded(7), _gcs_uploaded(8), _gcs_uploaded(9))
    store = _gcs_store(endpoint)

    assert store.put("queue.json", b"a", if_none_match=True) == "7"
    assert store.put("queue.json", b"b", if_match="7") == "8"
    assert store.put("queue.json", b"c") == "9"

    queries = [parse_qs(urlsplit(s.path).query) for s in script.seen]
    assert [s.method for s in script.seen] == ["POST"] * 3
    assert [q.get("ifGenerationMatch") for q in queries] == [["0"], ["7"], None]
    store.close()


def test_gcs_etag_is_one_metadata_request(scripted: Scripted) -> None:
    body = json.dumps({"bucket": "bucket", "name": "q/queue.json", "generation": "5"}).encode()
    script, endpoint = scripted(Reply(status=200, body=body, headers=(("Content-Type", "application/json"),)))
    store = _gcs_store(endpoint)

    assert store.etag("queue.json") == "5"

    (seen,) = script.seen
    assert seen.method == "GET" and urlsplit(seen.path).path == "/storage/v1/b/bucket/o/q%2Fqueue.json"
    assert "alt=media" not in seen.path
    store.close()


@pytest.mark.parametrize("status", [412, 409])
def test_gcs_refused_condition_is_precondition_failed(scripted: Scripted, status: int) -> None:
    _, endpoint = scripted(_gcs_error(status, "conditionNotMet"), _gcs_error(status, "conditionNotMet"))
    store = _gcs_store(endpoint)

    with pytest.raises(PreconditionFailed):
        store.put("queue.json", b"x", if_match="3")
    with pytest.raises(PreconditionFailed):
        store.put("queue.json", b"x", if_none_match=True)
    store.close()


def test_gcs_a_foreign_etag_matches_nothing(scripted: Scripted) -> None:
    script, endpoint = scripted()
    store = _gcs_store(endpoint)

    with pytest.raises(PreconditionFailed):
        store.put("queue.json", b"x", if_match='"d41d8cd98f00b204e9800998ecf8427e"')
    assert script.seen == []
    store.close()


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_gcs_transient_errors_are_unavailable_and_writes_are_sent_once(scripted: Scripted, status: int) -> None:
    script, endpoint = scripted(*[_gcs_error(status)] * 3)
    store = _gcs_store(endpoint)

    with pytest.raises(StoreUnavailable, match="may have landed"):
        store.put("queue.json", b"x", if_match="3")
    with pytest.raises(StoreUnavailable):
        store.get("queue.json")
    with pytest.raises(StoreUnavailable):
        store.list()
    assert len(script.seen) == 3  # each once: writes are never retried, reads were told not to be
    store.close()


# google-cloud-storage's download retry drops the failed (streamed) response without
# closing it; its socket is closed when collected. Collect it here, not in a later test.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_gcs_reads_are_retried_within_their_budget(scripted: Scripted) -> None:
    script, endpoint = scripted(_gcs_error(503), Reply(status=200, body=b"doc", headers=(("x-goog-generation", "4"),)))
    store = _gcs_store(endpoint, read_retry_seconds=10)

    blob = store.get("queue.json")

    assert blob is not None and blob.etag == "4"
    assert [s.method for s in script.seen] == ["GET", "GET"]
    store.close()
    gc.collect()


def test_gcs_a_write_whose_response_is_lost_is_ambiguous(scripted: Scripted) -> None:
    script, endpoint = scripted(Reply(drop=True), _gcs_error(412))
    store = _gcs_store(endpoint)

    with pytest.raises(StoreUnavailable, match="may have landed"):
        store.put("queue.json", b"x", if_match="3")
    assert len(script.seen) == 1  # not retried: a retry would see our own write as a lost race
    store.close()


def test_gcs_read_timeout_is_unavailable(scripted: Scripted) -> None:
    _, endpoint = scripted(Reply(delay=5, body=b"late", headers=(("x-goog-generation", "1"),)), Reply(delay=5))
    store = _gcs_store(endpoint, read_timeout=0.3)

    with pytest.raises(StoreUnavailable):
        store.get("queue.json")
    with pytest.raises(StoreUnavailable, match="may have landed"):
        store.put("queue.json", b"x", if_match="3")
    store.close()


@pytest.mark.parametrize("status", [401, 403])
def test_gcs_refused_access_is_a_config_error(scripted: Scripted, status: int) -> None:
    _, endpoint = scripted(*[_gcs_error(status)] * 2)
    store = _gcs_store(endpoint)

    with pytest.raises(StoreConfigError, match="'bucket'"):
        store.get("queue.json")
    with pytest.raises(StoreConfigError, match="'bucket'"):
        store.put("queue.json", b"x")
    store.close()


def test_gcs_other_client_errors_are_store_errors(scripted: Scripted) -> None:
    _, endpoint = scripted(_gcs_error(400, "invalid"))
    store = _gcs_store(endpoint)

    with pytest.raises(StoreError) as info:
        store.put("queue.json", b"x")
    assert type(info.value) is StoreError
    store.close()


def _azure_error(status: int, code: str) -> Reply:
    body = f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code><Message>scripted</Message></Error>'
    return Reply(
        status=status, body=body.encode(), headers=(("Content-Type", "application/xml"), ("x-ms-error-code", code))
    )


def _azure_created(etag: str) -> Reply:
    return Reply(status=201, headers=(("ETag", etag), ("Last-Modified", "Tue, 01 Dec 2026 00:00:00 GMT")))


def _azure_store(endpoint: str, **kwargs: float) -> AzureBlobStore:
    options: dict[str, float] = {"max_attempts": 1, "read_timeout": 5.0, **kwargs}
    return AzureBlobStore(
        container="ctr",
        prefix="q",
        connection_string=azurite_connection_string(f"{endpoint}/{AZURITE_ACCOUNT}"),
        **options,  # type: ignore[arg-type]
    )


def test_azure_put_sends_the_conditions_once(scripted: Scripted) -> None:
    script, endpoint = scripted(_azure_created('"e1"'), _azure_created('"e2"'), _azure_created('"e3"'))
    store = _azure_store(endpoint)

    assert store.put("queue.json", b"a", if_none_match=True) == '"e1"'
    assert store.put("queue.json", b"b", if_match='"e1"') == '"e2"'
    assert store.put("queue.json", b"c") == '"e3"'

    assert [(s.method, s.path) for s in script.seen] == [("PUT", f"/{AZURITE_ACCOUNT}/ctr/q/queue.json")] * 3
    create, replace, plain = (s.headers for s in script.seen)
    assert create.get("If-None-Match") == "*" and "If-Match" not in create
    assert replace.get("If-Match") == '"e1"' and "If-None-Match" not in replace
    assert "If-Match" not in plain and "If-None-Match" not in plain
    store.close()


def test_azure_etag_is_one_head_request(scripted: Scripted) -> None:
    script, endpoint = scripted(Reply(status=200, headers=(("ETag", '"e9"'), ("x-ms-blob-type", "BlockBlob"))))
    store = _azure_store(endpoint)

    assert store.etag("queue.json") == '"e9"'
    assert [s.method for s in script.seen] == ["HEAD"]
    store.close()


@pytest.mark.parametrize(
    ("status", "code", "create"),
    [(412, "ConditionNotMet", False), (409, "BlobAlreadyExists", True), (412, "ConditionNotMet", True)],
)
def test_azure_refused_condition_is_precondition_failed(
    scripted: Scripted, status: int, code: str, create: bool
) -> None:
    _, endpoint = scripted(_azure_error(status, code))
    store = _azure_store(endpoint)

    with pytest.raises(PreconditionFailed):
        if create:
            store.put("queue.json", b"x", if_none_match=True)
        else:
            store.put("queue.json", b"x", if_match='"old"')
    store.close()


@pytest.mark.parametrize(
    ("status", "code"),
    [(503, "ServerBusy"), (500, "InternalError"), (429, "TooManyRequests"), (408, "OperationTimedOut")],
)
def test_azure_transient_errors_are_unavailable_and_writes_are_sent_once(
    scripted: Scripted, status: int, code: str
) -> None:
    script, endpoint = scripted(*[_azure_error(status, code)] * 4)
    store = _azure_store(endpoint, max_attempts=2)

    with pytest.raises(StoreUnavailable, match="may have landed"):
        store.put("queue.json", b"x", if_match='"old"')
    assert len(script.seen) == 1  # a write is never retried, even with max_attempts=2
    with pytest.raises(StoreUnavailable):
        store.etag("queue.json")
    if status >= 500:
        assert len(script.seen) == 3  # reads get their two attempts
    store.close()


def test_azure_a_write_whose_response_is_lost_is_ambiguous(scripted: Scripted) -> None:
    script, endpoint = scripted(Reply(drop=True), _azure_error(412, "ConditionNotMet"))
    store = _azure_store(endpoint, max_attempts=3)

    with pytest.raises(StoreUnavailable, match="may have landed"):
        store.put("queue.json", b"x", if_match='"old"')
    assert len(script.seen) == 1
    store.close()


def test_azure_read_timeout_is_unavailable(scripted: Scripted) -> None:
    _, endpoint = scripted(Reply(delay=5), Reply(delay=5))
    store = _azure_store(endpoint, read_timeout=0.3)

    with pytest.raises(StoreUnavailable):
        store.get("queue.json")
    with pytest.raises(StoreUnavailable, match="may have landed"):
        store.put("queue.json", b"x", if_match='"old"')
    store.close()


@pytest.mark.parametrize(
    ("status", "code"),
    [(403, "AuthenticationFailed"), (403, "AuthorizationPermissionMismatch"), (404, "ContainerNotFound")],
)
def test_azure_refused_access_is_a_config_error(scripted: Scripted, status: int, code: str) -> None:
    _, endpoint = scripted(*[_azure_error(status, code)] * 3)
    store = _azure_store(endpoint)

    for call in (lambda: store.get("queue.json"), lambda: store.put("queue.json", b"x"), lambda: store.list()):
        with pytest.raises(StoreConfigError, match="'ctr'") as info:
            call()
        assert AZURITE_KEY not in str(info.value)
    store.close()


def test_azure_other_client_errors_are_store_errors(scripted: Scripted) -> None:
    _, endpoint = scripted(_azure_error(400, "InvalidHeaderValue"))
    store = _azure_store(endpoint)

    with pytest.raises(StoreError, match="InvalidHeaderValue") as info:
        store.put("queue.json", b"x")
    assert type(info.value) is StoreError
    store.close()


@pytest.mark.parametrize("make_store", [_gcs_store, _azure_store], ids=["gcs", "azure"])
def test_connection_refused_is_unavailable(make_store: Callable[[str], ObjectStore]) -> None:
    store = make_store(f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(StoreUnavailable):
        store.get("queue.json")
    with pytest.raises(StoreUnavailable, match="may have landed"):
        store.put("queue.json", b"x", if_none_match=True)
    store.close()


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
