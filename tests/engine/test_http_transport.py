"""PooledTransport against real sockets on loopback: answers, kept-alive
connections, and every way an answer fails to arrive (BrokerUnavailable).
BrokerClient over it against real brokers is in the e2e tests."""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from engine.errors import BrokerUnavailable
from engine.http_transport import PooledTransport

QUICK = {"connect_timeout": 2.0, "read_timeout": 2.0}


class Server(socketserver.ThreadingTCPServer):
    """A loopback server whose connections are handled by ``serve(conn)``."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, handler: type[socketserver.BaseRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.connections = 0
        self.release = threading.Event()
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def stop(self) -> None:
        self.release.set()
        self.shutdown()
        self.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[[type[socketserver.BaseRequestHandler]], Server]]:
    servers: list[Server] = []

    def start(handler: type[socketserver.BaseRequestHandler]) -> Server:
        servers.append(Server(handler))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


class Echo(http.server.BaseHTTPRequestHandler):
    """Answers 409 with what it was sent; counts connections; holds a request
    to ``/hold`` until the server's ``release`` is set."""

    protocol_version = "HTTP/1.1"  # keep-alive
    server: Server  # type: ignore[assignment]

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/hold":
            self.server.release.wait(10)
        sent = orjson.dumps({"path": self.path, "body": body.decode(), "headers": dict(self.headers.items())})
        self.send_response(409, "Taken Already")
        self.send_header("Content-Length", str(len(sent)))
        self.end_headers()
        self.wfile.write(sent)

    do_GET = do_POST

    def log_message(self, *args: Any) -> None:
        pass


def test_an_answer_is_read_whole_whatever_its_status_with_the_headers_and_body_sent(
    serve: Callable[..., Server],
) -> None:
    server = serve(Echo)
    transport = PooledTransport(max_connections=4, pool_timeout=2)
    answer = transport.send("POST", f"{server.url}/api/v1/ack?x=1", b'{"a":1}',
                            {"Authorization": "Bearer t", "Content-Type": "application/json"}, **QUICK)
    assert (answer.status, answer.reason, answer.ok) == (409, "Taken Already", False)
    sent = orjson.loads(answer.content)
    assert sent["path"] == "/api/v1/ack?x=1" and sent["body"] == '{"a":1}'
    assert sent["headers"]["Authorization"] == "Bearer t"
    assert sent["headers"]["Content-Length"] == "7"
    transport.close()


def test_connections_are_kept_alive_and_reused(serve: Callable[..., Server]) -> None:
    server = serve(Echo)
    transport = PooledTransport(max_connections=4, pool_timeout=2)
    for _ in range(20):
        transport.send("GET", f"{server.url}/health", None, {}, **QUICK)
    assert server.connections == 1
    transport.close()


def test_a_refused_connection_is_broker_unavailable() -> None:
    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(BrokerUnavailable, match=rf"POST http://127.0.0.1:{port}/x: "):
        PooledTransport(max_connections=1, pool_timeout=1).send(
            "POST", f"http://127.0.0.1:{port}/x", b"{}", {}, **QUICK)


class Silent(socketserver.BaseRequestHandler):
    """Reads the request and never answers until the server stops."""

    server: Server

    def handle(self) -> None:
        self.request.recv(65536)
        self.server.release.wait(10)


def test_no_answer_within_the_read_timeout_is_broker_unavailable(serve: Callable[..., Server]) -> None:
    server = serve(Silent)
    started = time.monotonic()
    with pytest.raises(BrokerUnavailable, match=r"(?i)timed out"):
        PooledTransport(max_connections=1, pool_timeout=1).send(
            "POST", f"{server.url}/claim", b"{}", {}, connect_timeout=2, read_timeout=0.3)
    assert time.monotonic() - started < 5


class CutShort(socketserver.BaseRequestHandler):
    """Answers with fewer bytes than it announced, then closes."""

    def handle(self) -> None:
        self.request.recv(65536)
        self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"jobs\"")


class Garbage(socketserver.BaseRequestHandler):
    """Answers with something that is not HTTP."""

    def handle(self) -> None:
        self.request.recv(65536)
        self.request.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")


@pytest.mark.parametrize("handler", [CutShort, Garbage], ids=["cut-short", "not-http"])
def test_an_answer_broken_off_or_not_http_is_broker_unavailable(
    serve: Callable[..., Server], handler: type[socketserver.BaseRequestHandler]
) -> None:
    server = serve(handler)
    with pytest.raises(BrokerUnavailable):
        PooledTransport(max_connections=1, pool_timeout=1).send("POST", f"{server.url}/ack", b"{}", {}, **QUICK)


def test_a_request_waits_for_a_free_connection_and_gives_up_after_the_pool_timeout(
    serve: Callable[..., Server],
) -> None:
    server = serve(Echo)
    transport = PooledTransport(max_connections=1, pool_timeout=0.3)
    held: list[int] = []
    holder = threading.Thread(target=lambda: held.append(
        transport.send("POST", f"{server.url}/hold", b"", {}, connect_timeout=2, read_timeout=10).status))
    holder.start()
    while server.connections < 1:
        time.sleep(0.01)
    with pytest.raises(BrokerUnavailable, match=r"(?i)pool"):
        transport.send("GET", f"{server.url}/health", None, {}, **QUICK)
    server.release.set()
    holder.join(10)
    assert held == [409]
    assert transport.send("GET", f"{server.url}/health", None, {}, **QUICK).status == 409  # the connection is back
    assert server.connections == 1


def _self_signed(folder: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "queueadmin test broker")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = folder / "broker.pem", folder / "broker.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


@pytest.fixture
def tls_server(serve: Callable[..., Server], tmp_path: Path) -> tuple[str, Path]:
    cert_file, key_file = _self_signed(tmp_path)
    server = serve(Echo)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    return f"https://127.0.0.1:{server.server_address[1]}", cert_file


def test_https_is_verified_against_the_systems_certificates(tls_server: tuple[str, Path]) -> None:
    url, _ = tls_server
    with pytest.raises(BrokerUnavailable, match=r"(?i)certificate"):
        PooledTransport(max_connections=1, pool_timeout=1).send("GET", f"{url}/health", None, {}, **QUICK)


def test_ssl_cert_file_names_a_private_ca(tls_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    url, cert_file = tls_server
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))  # read by OpenSSL when a connection is made
    answer = PooledTransport(max_connections=1, pool_timeout=1).send("GET", f"{url}/health", None, {}, **QUICK)
    assert answer.status == 409


def test_bad_pool_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        PooledTransport(max_connections=0, pool_timeout=1)
    with pytest.raises(ValueError):
        PooledTransport(max_connections=1, pool_timeout=0)
