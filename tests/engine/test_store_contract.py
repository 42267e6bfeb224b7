"""The store contract, run against every backend, plus what only one backend can show.

* The contract suite runs against memory, the local folder and S3 (moto's
  server in a separate process, so requests cross real HTTP).
* S3 error mapping that moto cannot produce (409, 503, 403, retried writes)
  is tested against a scripted HTTP server on 127.0.0.1.
* The file store's cross-process atomicity is tested with real processes.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import boto3
import pytest

from engine.errors import PreconditionFailed, StoreConfigError, StoreError, StoreUnavailable
from engine.stores import FileStore, ObjectStore, open_store
from engine.stores.s3 import S3Store
from tests.engine.scripted_s3 import Scripted, list_page, s3_reply

PROJECT_ROOT = Path(__file__).resolve().parents[2]
LARGE_OBJECT_BYTES = 5 * 1024 * 1024


def _is_s3(store: ObjectStore) -> bool:
    return isinstance(store, S3Store)


# -- the contract, for every backend ------------------------------------------


def test_get_missing_returns_none(any_store: ObjectStore) -> None:
    assert any_store.get("queue.json") is None


def test_create_only_if_absent(any_store: ObjectStore) -> None:
    etag = any_store.put("queue.json", b"first", if_none_match=True)

    blob = any_store.get("queue.json")
    assert blob is not None
    assert (blob.data, blob.etag) == (b"first", etag)
    with pytest.raises(PreconditionFailed):
        any_store.put("queue.json", b"second", if_none_match=True)
    blob = any_store.get("queue.json")
    assert blob is not None
    assert (blob.data, blob.etag) == (b"first", etag)


def test_put_with_current_etag_replaces(any_store: ObjectStore) -> None:
    old = any_store.put("queue.json", b"v1", if_none_match=True)

    new = any_store.put("queue.json", b"v2", if_match=old)

    assert new != old
    blob = any_store.get("queue.json")
    assert blob is not None
    assert (blob.data, blob.etag) == (b"v2", new)


def test_put_with_stale_etag_fails_and_changes_nothing(any_store: ObjectStore) -> None:
    stale = any_store.put("queue.json", b"v1", if_none_match=True)
    current = any_store.put("queue.json", b"v2", if_match=stale)

    with pytest.raises(PreconditionFailed):
        any_store.put("queue.json", b"v3", if_match=stale)

    blob = any_store.get("queue.json")
    assert blob is not None
    assert (blob.data, blob.etag) == (b"v2", current)


def test_put_if_match_on_missing_key_fails(any_store: ObjectStore) -> None:
    etag = any_store.put("other.json", b"x")

    with pytest.raises(PreconditionFailed):
        any_store.put("queue.json", b"v1", if_match=etag)

    assert any_store.get("queue.json") is None


def test_put_if_match_after_delete_fails(any_store: ObjectStore) -> None:
    etag = any_store.put("queue.json", b"v1")
    any_store.delete("queue.json")

    with pytest.raises(PreconditionFailed):
        any_store.put("queue.json", b"v2", if_match=etag)

    assert any_store.get("queue.json") is None


def test_unconditional_put_creates_and_replaces(any_store: ObjectStore) -> None:
    first = any_store.put("queue.json", b"v1")
    blob = any_store.get("queue.json")
    assert blob is not None
    assert (blob.data, blob.etag) == (b"v1", first)

    second = any_store.put("queue.json", b"v2")

    blob = any_store.get("queue.json")
    assert blob is not None
    assert (blob.data, blob.etag) == (b"v2", second)
    assert second != first


def test_rewriting_same_bytes_changes_etag(any_store: ObjectStore) -> None:
    if _is_s3(any_store):
        pytest.skip("S3 ETags are content hashes; the document's sequence number prevents ABA (I5)")
    first = any_store.put("queue.json", b"same", if_none_match=True)

    second = any_store.put("queue.json", b"same", if_match=first)

    assert second != first
    with pytest.raises(PreconditionFailed):
        any_store.put("queue.json", b"same", if_match=first)


def test_delete(any_store: ObjectStore) -> None:
    any_store.put("queue.json", b"v1")
    any_store.put("keep.json", b"k")

    any_store.delete("queue.json")
    any_store.delete("queue.json")  # a missing key is fine
    any_store.delete("never-existed.json")

    assert any_store.get("queue.json") is None
    assert any_store.list() == ["keep.json"]
    any_store.put("queue.json", b"again", if_none_match=True)  # absent again, so create works


def test_list_by_prefix_sorted_with_nested_keys(any_store: ObjectStore) -> None:
    keys = ["results/b/c.json", "queue.json", "results/a.json", "resultsx", "archive/2024/01.json"]
    for key in keys:
        any_store.put(key, key.encode())

    assert any_store.list() == sorted(keys)
    assert any_store.list("results/") == ["results/a.json", "results/b/c.json"]
    assert any_store.list("results") == ["results/a.json", "results/b/c.json", "resultsx"]
    assert any_store.list("nothing/") == []
    blob = any_store.get("results/b/c.json")
    assert blob is not None and blob.data == b"results/b/c.json"


@pytest.mark.parametrize("key", ["../x", "/abs", "", "a//b", ".hidden", "a/../b", "a/", "dir/.x", "sp ace", "a\nb"])
def test_invalid_keys_are_refused(any_store: ObjectStore, key: str) -> None:
    with pytest.raises(StoreConfigError):
        any_store.get(key)
    with pytest.raises(StoreConfigError):
        any_store.put(key, b"x")
    with pytest.raises(StoreConfigError):
        any_store.put(key, b"x", if_none_match=True)
    with pytest.raises(StoreConfigError):
        any_store.delete(key)
    assert any_store.list() == []


def test_both_conditions_are_refused(any_store: ObjectStore) -> None:
    etag = any_store.put("queue.json", b"v1")

    with pytest.raises(StoreConfigError):
        any_store.put("queue.json", b"v2", if_match=etag, if_none_match=True)
    with pytest.raises(StoreConfigError):
        any_store.put("new.json", b"v2", if_match=etag, if_none_match=True)

    blob = any_store.get("queue.json")
    assert blob is not None and blob.data == b"v1"
    assert any_store.get("new.json") is None


def test_large_object_round_trip(any_store: ObjectStore) -> None:
    data = os.urandom(LARGE_OBJECT_BYTES)
    etag = any_store.put("big.bin", data, if_none_match=True)

    blob = any_store.get("big.bin")

    assert blob is not None
    assert blob.etag == etag
    assert blob.data == data
    replaced = data[::-1]
    any_store.put("big.bin", replaced, if_match=etag)
    blob = any_store.get("big.bin")
    assert blob is not None and blob.data == replaced


def test_a_range_reads_those_bytes_and_no_more(any_store: ObjectStore) -> None:
    # Lookups by id read one job out of a segment and one entry out of an id
    # index (engine.idindex): the bytes asked for, fewer where the object
    # ends, none beyond it, whether the object was written whole or in parts.
    data = bytes(range(256)) * 40
    any_store.put("whole.bin", data, if_none_match=True)
    any_store.put_parts("parts.bin", [data[:1000], data[1000:7000], data[7000:]], if_none_match=True)

    for key in ("whole.bin", "parts.bin"):
        assert any_store.get_range(key, 0, 10) == data[:10]
        assert any_store.get_range(key, 995, 10_000) == data[995:]
        assert any_store.get_range(key, 5_000, 3_000) == data[5_000:8_000]
        assert any_store.get_range(key, len(data) - 1, 5) == data[-1:]
        assert any_store.get_range(key, len(data), 5) == b""
        assert any_store.get_range(key, len(data) + 100, 5) == b""
        assert any_store.get_range(key, 7, 0) == b""
    assert any_store.get_range("missing.bin", 0, 10) is None
    with pytest.raises(ValueError):
        any_store.get_range("whole.bin", -1, 10)


# -- S3 against moto ------------------------------------------------------------


def test_s3_keys_live_under_the_prefix(moto_server: str, s3_bucket: str, s3_url: str) -> None:
    store = open_store(s3_url)
    other = S3Store(bucket=s3_bucket, prefix="other/", endpoint_url=moto_server, region="us-east-1")
    whole = S3Store(bucket=s3_bucket, endpoint_url=moto_server, region="us-east-1")
    raw = boto3.client(
        "s3", endpoint_url=moto_server, region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t"
    )
    try:
        store.put("results/a.json", b"a")
        other.put("results/a.json", b"other")

        listing = raw.list_objects_v2(Bucket=s3_bucket)
        assert sorted(item["Key"] for item in listing["Contents"]) == [
            "other/results/a.json",
            "some-prefix/results/a.json",
        ]
        assert store.list() == ["results/a.json"]
        assert whole.list() == ["other/results/a.json", "some-prefix/results/a.json"]
        blob = other.get("results/a.json")
        assert blob is not None and blob.data == b"other"
    finally:
        raw.close()
        for s in (store, other, whole):
            s.close()


def test_s3_missing_bucket_is_a_config_error(moto_server: str, aws_credentials: None) -> None:
    store = S3Store(bucket="no-such-bucket-here", endpoint_url=moto_server, region="us-east-1")
    try:
        for call in (
            lambda: store.get("queue.json"),
            lambda: store.put("queue.json", b"x", if_none_match=True),
            lambda: store.list(),
        ):
            with pytest.raises(StoreConfigError, match="no-such-bucket-here"):
                call()
    finally:
        store.close()


@pytest.fixture
def no_aws_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "missing-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "missing-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("BOTO_CONFIG", str(tmp_path / "missing-boto-config"))


def test_s3_missing_credentials_is_a_config_error(moto_server: str, no_aws_credentials: None) -> None:
    store = S3Store(bucket="some-bucket", endpoint_url=moto_server, region="us-east-1")
    try:
        with pytest.raises(StoreConfigError, match="no AWS credentials found: set AWS_ACCESS_KEY_ID"):
            store.get("queue.json")
        with pytest.raises(StoreConfigError, match="no AWS credentials found"):
            store.put("queue.json", b"x")
    finally:
        store.close()


def test_s3_partial_credentials_is_a_config_error(
    moto_server: str, no_aws_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "only-the-id")
    store = S3Store(bucket="some-bucket", endpoint_url=moto_server, region="us-east-1")
    try:
        with pytest.raises(StoreConfigError, match="no AWS credentials found"):
            store.get("queue.json")
    finally:
        store.close()


def test_s3_connection_refused_is_unavailable(aws_credentials: None) -> None:
    store = S3Store(bucket="some-bucket", endpoint_url=f"http://127.0.0.1:{_closed_port()}", max_attempts=1)
    try:
        with pytest.raises(StoreUnavailable):
            store.get("queue.json")
        with pytest.raises(StoreUnavailable):
            store.put("queue.json", b"x", if_match='"abc"')
    finally:
        store.close()


def test_s3_close_is_idempotent_and_final(s3_url: str) -> None:
    store = open_store(s3_url)
    store.put("queue.json", b"x")

    store.close()
    store.close()

    with pytest.raises(StoreConfigError, match="closed"):
        store.get("queue.json")


def test_s3_describe_names_bucket_prefix_and_endpoint() -> None:
    store = S3Store(bucket="my-bucket", prefix="/queues/prod/", endpoint_url="http://127.0.0.1:9000", region="auto")
    assert store.describe() == "s3://my-bucket/queues/prod at http://127.0.0.1:9000"
    assert S3Store(bucket="my-bucket").describe() == "s3://my-bucket/"


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, {}),
        (
            {
                "endpoint_url": "http://127.0.0.1:9000",
                "region": "auto",
                "addressing_style": "virtual",
                "connect_timeout": "1.5",
                "read_timeout": "2",
                "max_attempts": "5",
            },
            {
                "endpoint_url": "http://127.0.0.1:9000",
                "region": "auto",
                "addressing_style": "virtual",
                "connect_timeout": 1.5,
                "read_timeout": 2.0,
                "max_attempts": 5,
            },
        ),
    ],
)
def test_s3_parse_options(options: dict[str, str], expected: dict[str, object]) -> None:
    parsed = S3Store.parse_options(options)
    assert parsed == expected
    assert all(type(parsed[k]) is type(v) for k, v in expected.items())


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("s3://bucket/p?endpoint=http://x&colour=blue", "colour, endpoint"),
        ("s3://bucket/p?max_attempts=three", "max_attempts"),
        ("s3://bucket/p?max_attempts=0", "max_attempts"),
        ("s3://bucket/p?connect_timeout=soon", "connect_timeout"),
        ("s3://bucket/p?read_timeout=-1", "read_timeout"),
        ("s3://bucket/p?addressing_style=sideways", "addressing_style"),
        ("s3://bucket/p?region=", "region"),
        ("s3://bucket/p?endpoint_url=ftp://host", "endpoint_url"),
        ("s3:///prefix", "bucket"),
        ("s3://bucket/a/../b", "prefix"),
    ],
)
def test_s3_bad_url_is_a_config_error(url: str, message: str) -> None:
    with pytest.raises(StoreConfigError, match=message):
        open_store(url)


@pytest.mark.parametrize(
    "url",
    [
        "s3://AKIAEXAMPLE:hunter2-secret@bucket/prefix",
        "s3://bucket/prefix?endpoint_url=http://AKIAEXAMPLE:hunter2-secret@127.0.0.1:9000",
    ],
)
def test_s3_credentials_in_url_are_refused_without_echoing_them(url: str) -> None:
    with pytest.raises(StoreConfigError) as info:
        open_store(url)
    assert "hunter2" not in str(info.value)
    assert "credentials" in str(info.value)


@pytest.mark.parametrize(
    "url", ["ftp://host/x", "redis://localhost", "queue.json", "/abs/but/no/scheme", "file://relative/path"]
)
def test_open_store_refuses_bad_urls(url: str) -> None:
    with pytest.raises(StoreConfigError):
        open_store(url)


def test_open_store_opens_each_backend(tmp_path: Path) -> None:
    assert type(open_store("memory://")).__name__ == "MemoryStore"
    assert open_store("memory://shared") is open_store("memory://shared")
    assert isinstance(open_store(f"file://{tmp_path}"), FileStore)
    s3 = open_store("s3://bucket/prefix?region=auto&endpoint_url=http%3A%2F%2F127.0.0.1%3A9000")
    assert isinstance(s3, S3Store)
    assert (s3.bucket, s3.prefix, s3.region, s3.endpoint_url) == ("bucket", "prefix/", "auto", "http://127.0.0.1:9000")
    s3.close()


# -- S3 error mapping against a scripted server ----------------------------------


def test_s3_get_takes_etag_from_the_one_get_response(scripted_s3: Scripted) -> None:
    script, store = scripted_s3(s3_reply(200, body=b"document", etag='"e1"'))

    blob = store.get("queue.json")

    assert blob is not None and (blob.data, blob.etag) == (b"document", '"e1"')
    assert [(s.method, s.path) for s in script.seen] == [("GET", "/bucket/q/queue.json")]


def test_s3_put_sends_the_conditions(scripted_s3: Scripted) -> None:
    ok = s3_reply(200, etag='"new"')
    script, store = scripted_s3(ok, ok, ok)

    assert store.put("queue.json", b"a", if_none_match=True) == '"new"'
    assert store.put("queue.json", b"b", if_match='"old"') == '"new"'
    assert store.put("queue.json", b"c") == '"new"'

    assert [s.method for s in script.seen] == ["PUT", "PUT", "PUT"]
    create, replace, plain = (s.headers for s in script.seen)
    assert create.get("If-None-Match") == "*" and "If-Match" not in create
    assert replace.get("If-Match") == '"old"' and "If-None-Match" not in replace
    assert "If-Match" not in plain and "If-None-Match" not in plain


def test_s3_list_follows_pages_and_strips_the_prefix(scripted_s3: Scripted) -> None:
    script, store = scripted_s3(
        list_page(["q/results/b.json", "q/results/c.json"], "token-1"),
        list_page(["q/results/a.json"], None),
    )

    assert store.list("results/") == ["results/a.json", "results/b.json", "results/c.json"]

    first, second = (s.path for s in script.seen)
    assert "prefix=q%2Fresults%2F" in first and "continuation-token" not in first
    assert "continuation-token=token-1" in second


@pytest.mark.parametrize(
    ("status", "code"), [(409, "ConditionalRequestConflict"), (412, "PreconditionFailed"), (404, "NoSuchKey")]
)
def test_s3_refused_condition_is_precondition_failed(scripted_s3: Scripted, status: int, code: str) -> None:
    _, store = scripted_s3(s3_reply(status, code=code))

    with pytest.raises(PreconditionFailed):
        store.put("queue.json", b"x", if_match='"old"')


def test_s3_conflict_on_create_is_precondition_failed(scripted_s3: Scripted) -> None:
    _, store = scripted_s3(s3_reply(409, code="ConditionalRequestConflict"))

    with pytest.raises(PreconditionFailed):
        store.put("queue.json", b"x", if_none_match=True)


@pytest.mark.parametrize(
    ("status", "code"),
    [(503, "SlowDown"), (503, "ServiceUnavailable"), (500, "InternalError"), (400, "RequestTimeout"), (429, "")],
)
def test_s3_transient_errors_are_unavailable(scripted_s3: Scripted, status: int, code: str) -> None:
    script, store = scripted_s3(*[s3_reply(status, code=code)] * 3, max_attempts=1)

    with pytest.raises(StoreUnavailable):
        store.put("queue.json", b"x", if_match='"old"')
    with pytest.raises(StoreUnavailable):
        store.get("queue.json")
    with pytest.raises(StoreUnavailable):
        store.list()
    assert len(script.seen) == 3  # max_attempts=1: no retries


def test_s3_max_attempts_counts_every_attempt(scripted_s3: Scripted) -> None:
    ok = s3_reply(200, body=b"doc", etag='"e"')
    script, store = scripted_s3(s3_reply(500, code="InternalError"), ok, max_attempts=2)

    blob = store.get("queue.json")

    assert blob is not None and blob.data == b"doc"
    assert [s.method for s in script.seen] == ["GET", "GET"]


def test_s3_condition_failing_after_a_retry_is_ambiguous(scripted_s3: Scripted) -> None:
    # The first attempt may have landed; then our own write fails the retry's condition.
    script, store = scripted_s3(
        s3_reply(503, code="SlowDown"), s3_reply(412, code="PreconditionFailed"), max_attempts=2
    )

    with pytest.raises(StoreUnavailable, match="may have landed"):
        store.put("queue.json", b"x", if_match='"old"')

    assert [s.method for s in script.seen] == ["PUT", "PUT"]


def test_s3_read_timeout_is_unavailable(scripted_s3: Scripted) -> None:
    _, store = scripted_s3(s3_reply(200, body=b"late", etag='"e"', delay=5), read_timeout=0.2)

    with pytest.raises(StoreUnavailable):
        store.get("queue.json")


@pytest.mark.parametrize(
    ("status", "code"),
    [(403, "AccessDenied"), (403, "InvalidAccessKeyId"), (403, "SignatureDoesNotMatch"), (404, "NoSuchBucket")],
)
def test_s3_refused_access_is_a_config_error(
    scripted_s3: Scripted, monkeypatch: pytest.MonkeyPatch, status: int, code: str
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter2-secret")
    _, store = scripted_s3(*[s3_reply(status, code=code)] * 3)

    for call in (lambda: store.get("queue.json"), lambda: store.put("queue.json", b"x"), lambda: store.list()):
        with pytest.raises(StoreConfigError, match="'bucket'") as info:
            call()
        assert "hunter2" not in str(info.value)


def test_s3_other_client_errors_are_store_errors(scripted_s3: Scripted) -> None:
    _, store = scripted_s3(s3_reply(400, code="EntityTooLarge"))

    with pytest.raises(StoreError, match="EntityTooLarge") as info:
        store.put("queue.json", b"x")
    assert type(info.value) is StoreError


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_etag_reports_the_current_version_without_reading_it(any_store: ObjectStore) -> None:
    assert any_store.etag("doc.json") is None
    first = any_store.put("doc.json", b"one", if_none_match=True)
    assert any_store.etag("doc.json") == first
    second = any_store.put("doc.json", b"two", if_match=first)
    assert any_store.etag("doc.json") == second
    blob = any_store.get("doc.json")
    assert blob is not None and blob.etag == second
    any_store.delete("doc.json")
    assert any_store.etag("doc.json") is None
