"""The lean API path's security (issue 11): the token, the body limits, the
Host and method checks, a JSON answer for every refusal, and what the path
must not do per request (Django's signals, a thread hop, a database read).

Every request goes through ``queueadmin.asgi.application``, the application
daphne serves (tests/fuzz/asgi_driver.py, which also says how much of the
body the application asked for). tests/e2e/test_http_edge.py drives the same
path through a real daphne process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from django.core.signals import request_finished, request_started

from engine import Broker, ObjectStore
from queueadmin.api import auth
from tests.fuzz.asgi_driver import Answer, call
from tests.helpers import stored
from tests.queueadmin.dashboard_fixtures import make_token, wait_for

if TYPE_CHECKING:
    from pytest_django.fixtures import Settings as SettingsWrapper

TOKEN = "security-token-0123456789"
AUTH = {"authorization": f"Bearer {TOKEN}"}
LIMIT = 4096
PUSH = orjson.dumps({"queue": "q", "payload": 1})


@pytest.fixture(autouse=True)
def node(broker: Broker, settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch) -> Iterator[Broker]:
    """The quiet leading broker (tests/queueadmin/dashboard_fixtures.py), this
    file's token and limit, and a token cache of the test's own."""
    settings.QUEUE_API_TOKEN = TOKEN
    settings.QUEUE_MAX_REQUEST_BYTES = LIMIT
    monkeypatch.setattr(auth, "digests", auth.TokenDigests())
    yield broker


def refusal(answer: Answer, status: int, code: str) -> dict[str, Any]:
    """The answer is the JSON error ``code``, complete and never cached."""
    assert answer.status == status, answer.body
    assert answer.content_type == "application/json"
    assert answer.headers["content-length"] == str(len(answer.body))
    assert answer.headers["cache-control"] == "no-store"
    body: dict[str, Any] = answer.json()
    assert body["error"] == code and isinstance(body["message"], str) and body["message"]
    return body


class Clock:
    """A monotonic clock the test moves (the token cache's)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now



# -- the token -------------------------------------------------------------------------------


@pytest.mark.parametrize("headers", [
    {}, {"authorization": "Bearer wrong-token"}, {"authorization": "Basic dGVzdA=="},
    {"authorization": f"Bearer{TOKEN}"}, {"authorization": "Bearer "}, {"authorization": TOKEN},
    {"authorization": f"Bearer {TOKEN}x"},
])
def test_a_missing_wrong_or_malformed_token_is_401_before_the_body_is_read(
    db: None, store: ObjectStore, headers: dict[str, str]
) -> None:
    before = stored(store)
    answer = call("POST", "/api/v1/jobs", PUSH, headers=headers)
    refusal(answer, 401, "unauthorized")
    assert answer.headers["www-authenticate"].startswith("Bearer")
    assert answer.body_read == 0
    assert stored(store) == before


@pytest.mark.django_db(transaction=True)  # the token cache reads the table on a thread of its own
def test_a_database_token_works_and_stops_working_once_revoked_after_the_cache_window(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    monkeypatch.setattr(auth, "time", clock)
    row, token = make_token("fleet")
    bearer = {"authorization": f"Bearer {token}"}
    assert call("POST", "/api/v1/jobs", PUSH, headers=bearer).status == 201

    row.revoked_at = row.created_at
    row.save()
    clock.now += auth.TOKEN_CACHE_SECONDS - 0.5
    # Within the window the digests read before still stand (no read per request).
    assert call("POST", "/api/v1/jobs", PUSH, headers=bearer).status == 201
    clock.now += 1.0
    before = stored(store)
    refusal(call("POST", "/api/v1/jobs", PUSH, headers=bearer), 401, "unauthorized")
    assert stored(store) == before
    assert call("POST", "/api/v1/jobs", PUSH, headers=AUTH).status == 201  # the settings token still works


@pytest.mark.django_db(transaction=True)
def test_the_database_is_read_once_per_cache_window_on_a_thread_that_closes_its_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    monkeypatch.setattr(auth, "time", clock)
    _, token = make_token("fleet")
    reads: list[str] = []
    closes: list[str] = []
    read = auth._read_digests

    def counted_read() -> frozenset[str]:
        reads.append("read")
        return read()

    monkeypatch.setattr(auth, "_read_digests", counted_read)
    monkeypatch.setattr(auth, "close_old_connections", lambda: closes.append("close"))
    for _ in range(5):
        assert call("POST", "/api/v1/jobs", PUSH, headers={"authorization": f"Bearer {token}"}).status == 201
    assert reads == ["read"]
    # Before and after its query, as Django's request signals would (they do not fire here).
    assert closes == ["close", "close"]


def test_the_settings_token_and_a_fresh_cache_never_hop_to_a_thread(
    db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_thread(*args: object, **kwargs: object) -> None:
        raise AssertionError("the API hopped to a thread")

    monkeypatch.setattr(auth, "sync_to_async", no_thread)
    assert call("POST", "/api/v1/jobs", PUSH, headers=AUTH).status == 201
    assert call("POST", "/api/v1/claim", b'{"worker": "w", "queues": ["q"]}', headers=AUTH).status == 200
    auth.digests._read_at = auth.time.monotonic()  # read just now: only the cache decides
    refusal(call("POST", "/api/v1/jobs", PUSH, headers={"authorization": "Bearer wrong"}), 401, "unauthorized")


def test_the_api_path_sends_no_django_request_signals(db: None) -> None:
    fired: list[str] = []

    def started(**kwargs: object) -> None:
        fired.append("started")

    def finished(**kwargs: object) -> None:
        fired.append("finished")

    request_started.connect(started)
    request_finished.connect(finished)
    try:
        assert call("POST", "/api/v1/jobs", PUSH, headers=AUTH).status == 201
        assert call("GET", "/api/v1/nope", headers=AUTH).status == 404
        assert fired == []
        assert call("GET", "/login/").status == 200  # the dashboard keeps Django's whole stack
        assert fired == ["started", "finished"]
    finally:
        request_started.disconnect(started)
        request_finished.disconnect(finished)


# -- body limits -----------------------------------------------------------------------------


def test_a_declared_length_over_the_limit_is_413_before_the_body_is_read(store: ObjectStore) -> None:
    before = stored(store)
    body = orjson.dumps({"queue": "q", "payload": "x" * LIMIT})
    answer = call("POST", "/api/v1/jobs", body, headers=AUTH)
    error = refusal(answer, 413, "payload_too_large")
    assert (error["size"], error["limit"]) == (len(body), LIMIT)
    assert answer.body_read == 0
    assert stored(store) == before


@pytest.mark.parametrize("declared", [None, 10])  # no length, or a false one
def test_a_body_longer_than_declared_is_cut_at_the_limit(store: ObjectStore, declared: int | None) -> None:
    before = stored(store)
    chunk = b" " * 1000
    chunks = [chunk] * 20  # 20,000 bytes, five times the limit
    answer = call("POST", "/api/v1/jobs", chunks, headers=AUTH, content_length=declared)
    error = refusal(answer, 413, "payload_too_large")
    assert error["limit"] == LIMIT and "size" not in error
    assert answer.body_read <= LIMIT + len(chunk)  # it stopped asking once past the limit
    assert stored(store) == before


@pytest.mark.parametrize("declared", [True, None])
def test_a_body_at_the_limit_is_read_whole_in_one_piece_or_many(store: ObjectStore, declared: bool | None) -> None:
    body = orjson.dumps({"queue": "q", "payload": "x"})
    body += b" " * (LIMIT - len(body))
    pieces = [body[i:i + 1000] for i in range(0, len(body), 1000)]
    answer = call("POST", "/api/v1/jobs", pieces, headers=AUTH, content_length=declared)
    assert answer.status == 201 and answer.body_read == LIMIT


def test_malformed_json_is_400_and_changes_nothing(store: ObjectStore) -> None:
    before = stored(store)
    refusal(call("POST", "/api/v1/jobs", b'{"queue": "q", "payload": ', headers=AUTH), 400, "malformed_json")
    assert stored(store) == before


# -- Host and method ---------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "", "local host", "testserver.evil.example"])
def test_a_host_not_allowed_is_400_before_anything_else(store: ObjectStore, host: str) -> None:
    before = stored(store)
    answer = call("POST", "/api/v1/jobs", PUSH, headers=AUTH, host=host)
    refusal(answer, 400, "disallowed_host")
    assert answer.body_read == 0
    # Even where the path, the method or the token would be refused too.
    refusal(call("DELETE", "/api/v1/nope", host=host), 400, "disallowed_host")
    assert stored(store) == before


def test_forwarded_hosts_count_only_when_django_is_told_to_trust_them(settings: SettingsWrapper) -> None:
    forwarded = {**AUTH, "x-forwarded-host": "evil.example"}
    assert call("POST", "/api/v1/jobs", PUSH, headers=forwarded).status == 201
    settings.USE_X_FORWARDED_HOST = True
    refusal(call("POST", "/api/v1/jobs", PUSH, headers=forwarded), 400, "disallowed_host")


def test_without_a_host_header_the_servers_own_name_is_checked(settings: SettingsWrapper) -> None:
    # asgi_driver's server is ("testserver", 80).
    assert call("POST", "/api/v1/jobs", PUSH, headers=AUTH, host=None).status == 201
    settings.ALLOWED_HOSTS = ["example.com"]
    refusal(call("POST", "/api/v1/jobs", PUSH, headers=AUTH, host=None), 400, "disallowed_host")


def test_with_debug_and_no_allowed_hosts_only_local_names_are_served(settings: SettingsWrapper) -> None:
    settings.ALLOWED_HOSTS = []
    settings.DEBUG = True
    assert call("GET", "/api/v1/health", host="localhost:8000").status == 200
    refusal(call("GET", "/api/v1/health", host="example.com"), 400, "disallowed_host")


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("GET", "/api/v1/jobs", "POST"), ("PUT", "/api/v1/claim", "POST"), ("POST", "/api/v1/health", "GET"),
    ("DELETE", "/api/v1/jobs/x", "GET"), ("GET", "/api/v1/jobs/x/fail", "POST"), ("GET", "/api/v1/operator", "POST"),
])
def test_a_wrong_method_is_405_with_allow_before_the_token_and_the_body(
    store: ObjectStore, method: str, path: str, allow: str
) -> None:
    before = stored(store)
    answer = call(method, path, PUSH)  # no token: the method is checked first
    refusal(answer, 405, "method_not_allowed")
    assert answer.headers["allow"] == allow
    assert answer.body_read == 0
    assert stored(store) == before


@pytest.mark.parametrize("path", ["/api/v1/nope", "/api/v1/jobs/", "/api/v1/jobs/a/b/c", "/api/", "/api/v2/jobs",
                                  "/api/v1/jobs/x/complete/"])
def test_an_unknown_path_is_404_json_whatever_the_method_and_token(path: str) -> None:
    for method, headers in (("GET", {}), ("POST", AUTH), ("PATCH", {"authorization": "Bearer wrong"})):
        answer = call(method, path, b"{}", headers=headers)
        refusal(answer, 404, "not_found")
        assert answer.body_read == 0


# -- a long poll whose client hangs up -----------------------------------------------------------


def test_a_waiting_claim_whose_client_hangs_up_stops_and_leases_nothing(node: Broker, store: ObjectStore) -> None:
    from queueadmin.asgi import application

    async def scenario() -> list[dict[str, Any]]:
        hang_up = asyncio.Event()
        sent: list[dict[str, Any]] = []
        body = orjson.dumps({"worker": "gone", "queues": ["q"], "wait_seconds": 20})
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop()
            await hang_up.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": "/api/v1/claim", "query_string": b"", "scheme": "http",
                 "headers": [(b"host", b"testserver"), *[(k.encode(), v.encode()) for k, v in AUTH.items()]],
                 "server": ("testserver", 80)}
        task = asyncio.ensure_future(application(scope, receive, send))
        await asyncio.to_thread(wait_for, lambda: node.waiters.parked() == 1)
        hang_up.set()
        await asyncio.wait_for(task, 5)  # it stops at once, not after 20 s
        return sent

    assert asyncio.run(scenario()) == []  # nobody to answer
    assert node.waiters.waiting() == 0
    # A job pushed now goes to the next claim, not to the worker that left.
    assert call("POST", "/api/v1/jobs", PUSH, headers=AUTH).status == 201
    claimed = call("POST", "/api/v1/claim", b'{"worker": "w", "queues": ["q"]}', headers=AUTH).json()["jobs"]
    assert len(claimed) == 1
