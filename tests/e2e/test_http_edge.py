"""The HTTP edge of a real daphne node, through raw sockets (issue 9, defect 8).

A request body must not be read before the server knows it wants it: a
declared length over the limit, or a request with no token, is answered
before the client has sent a byte of the body; a chunked body is cut off
at the limit; a body that stops arriving gets 408 and a closed connection.
Each test proves "not read" by sending only the headers and getting the
answer, never by timing.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Callable, Iterator

import httpx
import orjson
import pytest

from tests.e2e.harness import TOKEN, Cluster, Node, api
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

MAX_REQUEST = 128 * 1024
IDLE_SECONDS = 1.0
# A bound on any one socket read, so a server that never answers fails the
# test instead of hanging it. The answers expected come far sooner.
SOCKET_TIMEOUT = 30.0


@pytest.fixture
def node(cluster_factory: Callable[..., Cluster]) -> Iterator[Node]:
    cluster = cluster_factory(QUEUE_MAX_PAYLOAD_BYTES="65536", QUEUE_MAX_REQUEST_BYTES=str(MAX_REQUEST),
                              QUEUE_HTTP_IDLE_SECONDS=str(IDLE_SECONDS))
    node = cluster.node()
    wait_for(lambda: node.role() == "leader", 15, "the node to lead")
    yield node


def connect(node: Node) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", node.port), timeout=SOCKET_TIMEOUT)
    return sock


def head(node: Node, method: str, path: str, *headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{node.port}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes its side."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def read_until_status(sock: socket.socket) -> bytes:
    """One whole response on a connection that stays open (its body is as long as it says)."""
    data = b""
    while True:
        head_part, found, body = data.partition(b"\r\n\r\n")
        if found:
            length = next((int(line.split(b":", 1)[1]) for line in head_part.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            if len(body) >= length:
                return data
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection before its answer was complete"
        data += chunk


def parse(raw: bytes) -> tuple[int, dict[str, str], dict[str, object]]:
    head_part, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head_part.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (h.partition(":") for h in header_lines)}
    return int(status_line.split()[1]), headers, orjson.loads(body[: int(headers["content-length"])])


def test_a_huge_declared_body_is_refused_before_any_of_it_is_sent(node: Node) -> None:
    for auth in ([], [f"Authorization: Bearer {TOKEN}"]):  # with or without a token
        with connect(node) as sock:
            sock.sendall(head(node, "POST", "/api/v1/jobs", "Content-Type: application/json",
                              "Content-Length: 314572800", *auth))
            # Not one byte of the 300 MiB body was sent, and the answer is in, and the connection closed.
            status, headers, body = parse(read_until_closed(sock))
        assert status == 413 and body["error"] == "payload_too_large"
        assert (body["size"], body["limit"]) == (314572800, MAX_REQUEST)
        assert headers["content-type"] == "application/json" and headers["connection"] == "close"


def test_a_body_without_a_token_is_refused_before_it_is_sent(node: Node) -> None:
    before = node.health()
    for auth in ([], ["Authorization: Basic dGVzdA=="], ["Authorization: Bearer"]):
        with connect(node) as sock:
            sock.sendall(head(node, "POST", "/api/v1/jobs", "Content-Type: application/json",
                              f"Content-Length: {MAX_REQUEST}", *auth))
            status, headers, body = parse(read_until_closed(sock))
        assert status == 401 and body["error"] == "unauthorized", body
        assert headers["www-authenticate"].startswith("Bearer")
    assert before is not None


def test_expect_100_continue_gets_the_refusal_instead(node: Node) -> None:
    with connect(node) as sock:
        sock.sendall(head(node, "POST", "/api/v1/claim", "Content-Type: application/json",
                          "Content-Length: 100", "Expect: 100-continue"))
        raw = read_until_closed(sock)
    assert raw.startswith(b"HTTP/1.1 401 ")  # and no "100 Continue" before or after it
    assert b"100 Continue" not in raw


def test_a_body_shorter_than_declared_gets_408_and_a_closed_connection(node: Node) -> None:
    with connect(node) as sock:
        sock.sendall(head(node, "POST", "/api/v1/jobs", "Content-Type: application/json", "Content-Length: 1000",
                          f"Authorization: Bearer {TOKEN}") + b'{"queue": "q", ')
        status, headers, body = parse(read_until_closed(sock))
    assert status == 408 and body["error"] == "request_timeout"
    assert headers["connection"] == "close"


def test_a_body_that_keeps_arriving_slowly_is_read_whatever_it_takes_in_all(node: Node) -> None:
    """The 408 is for a body that stops, not for a slow one: each piece
    arriving within the idle limit moves its deadline, so a body sent over
    2.5 times the limit, a piece every half of it, is read and served."""
    body = orjson.dumps({"queue": "slow", "payload": "x" * 40})
    pieces = [body[i:i + 12] for i in range(0, len(body), 12)]
    assert len(pieces) >= 5
    with connect(node) as sock:
        sock.sendall(head(node, "POST", "/api/v1/jobs", "Content-Type: application/json",
                          f"Content-Length: {len(body)}", f"Authorization: Bearer {TOKEN}"))
        for piece in pieces:
            time.sleep(IDLE_SECONDS / 2)
            sock.sendall(piece)
        status, _, answer = parse(read_until_status(sock))
    assert status == 201, answer


def test_a_chunked_body_is_cut_off_at_the_limit(node: Node) -> None:
    chunk = b"x" * 16384
    frame = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    with connect(node) as sock:
        sock.sendall(head(node, "POST", "/api/v1/jobs", "Content-Type: application/json",
                          "Transfer-Encoding: chunked", f"Authorization: Bearer {TOKEN}"))
        sent = 0
        # Send until the server answers; it must answer once it has seen more than the limit.
        while not select.select([sock], [], [], 0)[0]:
            assert sent <= 64 * MAX_REQUEST, "no answer to an endless chunked body"
            sock.sendall(frame)
            sent += len(chunk)
        status, _, body = parse(read_until_closed(sock))
    assert status == 413 and body["error"] == "payload_too_large" and body["limit"] == MAX_REQUEST


def test_ordinary_requests_are_untouched(node: Node) -> None:
    # A push with its body, a long-poll claim that outlasts the idle limits
    # (the body timer stops once the body is in), and keep-alive reuse.
    with httpx.Client(base_url=node.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as client:
        pushed = client.post("/api/v1/jobs", json={"queue": "q", "payload": "x" * 60000})
        assert pushed.status_code == 201, pushed.text
        waited = client.post("/api/v1/claim", json={"worker": "w", "queues": ["empty"],
                                                    "wait_seconds": 3 * IDLE_SECONDS})
        assert waited.status_code == 200 and waited.json() == {"jobs": []}
        claimed = client.post("/api/v1/claim", json={"worker": "w", "queues": ["q"]})
        assert claimed.json()["jobs"][0]["id"] == pushed.json()["ids"][0]
    # Chunked, under the limit.
    body = orjson.dumps({"queue": "q", "payload": 1})
    response = httpx.post(f"{node.url}/api/v1/jobs", content=iter([body[:5], body[5:]]), timeout=30,
                          headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    assert response.status_code == 201, response.text
    # The health check needs no token, and its (odd) body is not refused for that.
    assert api(node, "GET", "/api/v1/health", token=None).status_code == 200
    # A body for a path that does not exist is the API's 404, not a 401.
    assert api(node, "POST", "/api/v1/nope", {"a": 1}, token=None).status_code == 404
    # A Host not in ALLOWED_HOSTS is a JSON 400 too, not Django's HTML page.
    foreign = httpx.get(f"{node.url}/api/v1/health", headers={"Host": "evil.example"}, timeout=30)
    assert foreign.status_code == 400 and foreign.json()["error"] == "disallowed_host"


@pytest.mark.parametrize("content_type", ["multipart/form-data; boundary=x", "application/x-www-form-urlencoded"])
def test_a_body_labelled_as_a_form_reaches_the_application(node: Node, content_type: str) -> None:
    # Twisted would parse form bodies itself before daphne saw them (and
    # drop the connection with a bare 400 for one that is not multipart);
    # the edge switches that off. The API reads the body as the JSON it is,
    # and the dashboard's forms are Django's to parse.
    body = orjson.dumps({"queue": "q", "payload": 1})
    with socket.create_connection(("127.0.0.1", node.port), timeout=SOCKET_TIMEOUT) as sock:
        sock.sendall(head(node, "POST", "/api/v1/jobs", f"Authorization: Bearer {TOKEN}", "Connection: close",
                          f"Content-Type: {content_type}", f"Content-Length: {len(body)}") + body)
        status, headers, answer = parse(read_until_closed(sock))
    assert status == 201 and headers["content-type"] == "application/json", (status, headers, answer)
    assert len(answer["ids"]) == 1  # type: ignore[arg-type]


def test_the_api_is_served_by_its_own_application_and_the_dashboard_by_django(node: Node) -> None:
    # Django's middleware marks every answer it makes (X-Frame-Options); the
    # API's answers never pass through it, the dashboard's always do.
    health = httpx.get(f"{node.url}/api/v1/health", timeout=30)
    assert health.status_code == 200 and "x-frame-options" not in health.headers
    assert health.headers["content-length"] == str(len(health.content))
    login = httpx.get(f"{node.url}/login/", timeout=30)
    assert login.status_code == 200 and login.headers["x-frame-options"] == "DENY"
    # The refusals the application makes itself, each JSON: the method, then the token.
    wrong_method = api(node, "GET", "/api/v1/claim", token=None)
    assert (wrong_method.status_code, wrong_method.json()["error"]) == (405, "method_not_allowed")
    assert wrong_method.headers["allow"] == "POST"
    no_token = api(node, "GET", "/api/v1/document", token=None)
    assert (no_token.status_code, no_token.json()["error"]) == (401, "unauthorized")
    unknown = api(node, "DELETE", "/api/v1/jobs/x/y/z")
    assert (unknown.status_code, unknown.json()["error"]) == (404, "not_found")


def test_a_database_token_works_until_it_is_revoked(cluster_factory: Callable[..., Cluster]) -> None:
    # The token cache reads the table on a thread of daphne's, closing its
    # connection each time (no Django request signals on the API's path).
    cluster = cluster_factory()
    assert cluster.manage("migrate", "--verbosity", "0").returncode == 0
    made = cluster.manage("shell", "-c", "from queueadmin.models import ApiToken; row = ApiToken(name='fleet'); "
                                         "print(row.issue()); row.save()")
    assert made.returncode == 0, made.stderr
    token = made.stdout.decode().split()[-1]  # after the shell's own notice of its imports
    node = cluster.node()
    wait_for(lambda: node.role() == "leader", 15, "the node to lead")
    assert api(node, "POST", "/api/v1/jobs", {"queue": "q", "payload": 1}, token=token).status_code == 201
    revoked = cluster.manage("shell", "-c", "from django.utils import timezone; from queueadmin.models import "
                                            "ApiToken; ApiToken.objects.update(revoked_at=timezone.now())")
    assert revoked.returncode == 0, revoked.stderr
    # Refused within the token cache's window (5 s), and the refusal is JSON.
    wait_for(lambda: api(node, "GET", "/api/v1/document", token=token).status_code == 401, 20,
             "the revoked token to be refused")
    refused = api(node, "POST", "/api/v1/jobs", {"queue": "q", "payload": 2}, token=token)
    assert refused.json()["error"] == "unauthorized"
    assert [job["payload"] for job in cluster.document()["jobs"]] == [1]
