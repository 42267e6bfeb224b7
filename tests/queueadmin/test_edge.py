"""The decisions daphne makes before reading a body (queueadmin.edge), without
a server: which requests are refused early, with what, and which are left to
the views. tests/e2e/test_http_edge.py drives the same through real daphne."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import orjson
import pytest

from queueadmin import edge
from queueadmin.api import auth
from queueadmin.api.errors import ApiError
from queueadmin.models import ApiToken
from tests.queueadmin.api_client import Client

if TYPE_CHECKING:
    from pytest_django.fixtures import Settings as SettingsWrapper

TOKEN = "edge-token-0123456789"
LIMIT = 100_000


@pytest.fixture(autouse=True)
def limits(settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.QUEUE_API_TOKEN = TOKEN
    settings.QUEUE_MAX_REQUEST_BYTES = LIMIT
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2 * LIMIT
    # A token cache of the test's own: the process-wide one must not keep what this test read.
    monkeypatch.setattr(auth, "digests", auth.TokenDigests())


def code(error: ApiError | None) -> str | None:
    return None if error is None else error.code


def test_importing_the_asgi_application_installs_the_edge() -> None:
    import daphne.server

    import queueadmin.asgi  # noqa: F401

    assert daphne.server.HTTPFactory is edge.EdgeHTTPFactory


@pytest.mark.parametrize(("verbosity", "written"), [(0, 0), (1, 0), (2, 1), (3, 1)])
def test_twisteds_own_access_line_is_formatted_only_where_daphne_sends_it(verbosity: int, written: int) -> None:
    """At daphne's default verbosity (1) its Twisted log goes nowhere: the
    line is not even formatted. Above it, the line reaches the stdlib logger."""
    from types import SimpleNamespace

    factory = edge.EdgeHTTPFactory(SimpleNamespace(verbosity=verbosity))
    lines: list[str] = []
    factory._logFile = SimpleNamespace(write=lines.append)
    factory._logFormatter = lambda when, request: f"{request.method} {request.uri}"
    factory.log(SimpleNamespace(method="POST", uri="/api/v1/ack"))
    assert lines == ["POST /api/v1/ack\n"] * written


def test_one_sweep_answers_stalled_bodies_and_stops_when_none_wait(
    settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """BodyWatch: a request's deadline moves with each piece of its body; the
    sweep (every quarter of the idle limit) answers the ones past it, and is
    not scheduled again once nothing waits (an idle broker has no timer)."""
    settings.QUEUE_HTTP_IDLE_SECONDS = 8
    clock = [100.0]
    monkeypatch.setattr(edge.time, "monotonic", lambda: clock[0])
    timers: list[tuple[float, object, tuple[object, ...]]] = []

    def call_later(delay: float, fn: object, *args: object) -> None:
        timers.append((delay, fn, args))

    def fire() -> None:
        _, fn, args = timers.pop(0)
        fn(*args)  # type: ignore[operator]

    stalled: list[str] = []

    class Request:  # what BodyWatch calls on a request
        def __init__(self, name: str) -> None:
            self.name = name

        def stalled(self) -> None:
            stalled.append(self.name)

    class Broken(Request):
        def stalled(self) -> None:
            raise OSError("the transport is gone")

    slow, steady, quick = Request("slow"), Request("steady"), Request("quick")
    watch = edge.BodyWatch()
    for request in (Broken("broken"), slow, steady, quick):  # a broken one does not stop the others
        watch.expect(request, call_later)  # type: ignore[arg-type]
    assert [delay for delay, _, _ in timers] == [2.0]  # one timer for all of them
    watch.done(quick)  # its body came in
    clock[0] += 6
    watch.arrived(steady)  # a piece at 6 s: due again at 14 s
    clock[0] += 2
    fire()  # at 8 s: slow is past its time
    assert stalled == ["slow"] and len(timers) == 1
    clock[0] += 6
    fire()  # at 14 s: steady too
    assert stalled == ["slow", "steady"] and timers == []  # nothing waits: no timer
    watch.expect(quick, call_later)  # type: ignore[arg-type]
    assert len(timers) == 1


def test_an_ended_request_leaves_daphnes_table_as_soon_as_its_application_returns() -> None:
    """Daphne keeps every HTTP request in ``Server.connections`` until its
    once-a-second sweep; an EdgeRequest removes itself as it ends, once its
    application instance returned cleanly. One that raised or was cancelled
    stays for daphne's sweep, which logs it; a live one stays."""
    from daphne.server import Server

    class Protocol:  # what _reap_when_done needs of an EdgeRequest; hashable, as daphne's table needs
        def __init__(self, server: Server) -> None:
            self.server = server

    server = Server(application=None, endpoints=["tcp:port=0:interface=127.0.0.1"])  # built, never run
    server.connections = {}  # as Server.run starts it
    loop = asyncio.new_event_loop()
    try:
        def request(outcome: str) -> tuple[Protocol, asyncio.Future[None]]:
            protocol = Protocol(server)
            instance: asyncio.Future[None] = loop.create_future()
            server.protocol_connected(protocol)
            server.connections[protocol]["application_instance"] = instance
            if outcome == "returned":
                instance.set_result(None)
            elif outcome == "raised":
                instance.set_exception(RuntimeError("a bug"))
            elif outcome == "cancelled":
                instance.cancel()
            return protocol, instance

        def end(protocol: Protocol) -> None:  # what WebRequest.finish and connectionLost do, then ours
            server.protocol_disconnected(protocol)
            edge.EdgeRequest._reap_when_done(protocol)

        returned, _ = request("returned")
        end(returned)
        assert returned not in server.connections

        still_running, instance = request("running")  # the last body chunk is sent before the application returns
        end(still_running)
        assert still_running in server.connections
        instance.set_result(None)
        loop.run_until_complete(asyncio.sleep(0))  # its done callbacks run on the loop
        assert still_running not in server.connections

        left = [request(outcome)[0] for outcome in ("raised", "cancelled")]
        for protocol in left:
            end(protocol)
        live, _ = request("running")  # not ended: stays whatever its instance does
        edge.reap(server, live)
        assert all(protocol in server.connections for protocol in (*left, live))
    finally:
        loop.close()


@pytest.mark.parametrize(("path", "length", "expected"), [
    ("/api/v1/jobs", LIMIT + 1, "payload_too_large"),
    ("/api/v1/jobs", LIMIT, None),
    ("/api/v1/health", LIMIT + 1, "payload_too_large"),  # every path has a limit
    ("/login/", LIMIT + 1, None),  # forms: Django's own, larger limit
    ("/login/", 2 * LIMIT + 1, "payload_too_large"),
    ("/api/v1/jobs", None, None),  # chunked: counted as it arrives
])
def test_a_declared_length_over_the_limit_is_413(path: str, length: int | None, expected: str | None) -> None:
    error = edge.refusal("POST", path, f"Bearer {TOKEN}", length)
    assert code(error) == expected
    if error is not None:
        assert (error.extra["size"], error.extra["limit"]) == (length, edge.body_limit(path))


@pytest.mark.parametrize(("method", "path", "header", "length", "expected"), [
    ("POST", "/api/v1/jobs", None, 10, "unauthorized"),
    ("POST", "/api/v1/claim", "Basic dGVzdA==", None, "unauthorized"),
    ("POST", "/api/v1/jobs/abc/complete", "Bearer ", 10, "unauthorized"),
    ("POST", "/api/v1/jobs", f"Bearer {TOKEN}", 10, None),
    ("POST", "/api/v1/jobs", None, 0, None),  # no body to protect: the view answers
    ("POST", "/api/v1/operator", None, 10, None),  # signed, not token-authenticated
    ("POST", "/api/v1/health", None, 10, None),  # no token needed (the view answers 405)
    ("GET", "/api/v1/claim", None, 10, None),  # the view answers 405 before it asks for a token
    ("POST", "/api/v1/nope", None, 10, None),  # the view answers 404
    ("POST", "/login/", None, 10, None),
])
def test_a_request_with_no_token_is_401_where_the_view_would_say_so(
    db: None, method: str, path: str, header: str | None, length: int, expected: str | None
) -> None:
    assert code(edge.refusal(method, path, header, length)) == expected


@pytest.mark.django_db(transaction=True)  # the token cache reads the table from another thread
def test_a_wrong_token_is_refused_early_only_when_the_database_tokens_are_fresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(auth, "TOKEN_CACHE_SECONDS", 3600.0)  # stays fresh however slow the test runs
    row = ApiToken(name="fleet")
    good = row.issue()
    row.save()
    # Never read in this process: only the database can tell.
    assert edge.refusal("POST", "/api/v1/jobs", "Bearer wrong", 10) is None
    assert edge.refusal("POST", "/api/v1/jobs", f"Bearer {good}", 10) is None
    asyncio.run(auth.digests.current())  # what the first request that asks does
    assert code(edge.refusal("POST", "/api/v1/jobs", "Bearer wrong", 10)) == "unauthorized"
    assert edge.refusal("POST", "/api/v1/jobs", f"Bearer {good}", 10) is None
    assert edge.refusal("POST", "/api/v1/jobs", f"Bearer {TOKEN}", 10) is None


def test_an_early_answer_is_a_whole_json_response_that_closes() -> None:
    error = ApiError("unauthorized", "send the header", headers={"WWW-Authenticate": "Bearer"})
    head, _, body = edge.raw_response(error).partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 401 Unauthorized"
    assert {"Content-Type: application/json", "Connection: close", "WWW-Authenticate: Bearer",
            f"Content-Length: {len(body)}"} <= set(lines)
    assert orjson.loads(body) == {"error": "unauthorized", "message": "send the header"}


@pytest.mark.parametrize("length", [2**53, 2**64, 10**30])
def test_a_declared_length_too_large_for_json_is_still_answered(length: int) -> None:
    """A Content-Length past 2**64 cannot be put in a JSON answer (orjson
    refuses it): the 413 says it in its message, and is still encoded (I8),
    at daphne's edge and in the view alike."""
    error = edge.refusal("POST", "/api/v1/jobs", f"Bearer {TOKEN}", length)
    assert error is not None and "size" not in error.extra and str(length) in error.message
    assert orjson.loads(error.response().content)["error"] == "payload_too_large"

    response = Client().post("/api/v1/jobs", b"{}", content_type="application/json",
                             CONTENT_LENGTH=str(length), HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 413 and response.json()["error"] == "payload_too_large"
