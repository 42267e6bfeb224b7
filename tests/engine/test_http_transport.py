"""PooledTransport against real sockets on loopback (tests.engine.scripted_http):
answers, kept-alive connections, and every way an answer fails to arrive
(BrokerUnavailable); and BrokerClient over it when an answer is lost. BrokerClient
over it against real brokers is in the e2e tests."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from engine import BrokerClient
from engine.errors import BrokerUnavailable
from engine.http_transport import PooledTransport
from tests.engine.scripted_http import Reply, ScriptedServers

QUICK = {"connect_timeout": 2.0, "read_timeout": 2.0}


@pytest.fixture
def servers() -> Iterator[ScriptedServers]:
    with ScriptedServers() as started:
        yield started


def test_an_answer_is_read_whole_whatever_its_status_with_the_headers_and_body_sent(
    servers: ScriptedServers,
) -> None:
    script, url = servers.start(Reply(status=409, reason="Taken Already", body=b'{"error": "lease_lost"}'))
    transport = PooledTransport(max_connections=4, pool_timeout=2)
    answer = transport.send("POST", f"{url}/api/v1/ack?x=1", b'{"a":1}',
                            {"Authorization": "Bearer t", "Content-Type": "application/json"}, **QUICK)
    assert (answer.status, answer.reason, answer.ok) == (409, "Taken Already", False)
    assert answer.content == b'{"error": "lease_lost"}'
    [sent] = script.seen
    assert sent.path == "/api/v1/ack?x=1" and sent.body == b'{"a":1}'
    assert sent.headers["Authorization"] == "Bearer t"
    assert sent.headers["Content-Length"] == "7"
    transport.close()


def test_connections_are_kept_alive_and_reused(servers: ScriptedServers) -> None:
    script, url = servers.start(fallback=Reply(status=200, body=b"{}"))
    transport = PooledTransport(max_connections=4, pool_timeout=2)
    for _ in range(20):
        transport.send("GET", f"{url}/health", None, {}, **QUICK)
    assert len(script.seen) == 20 and len({seen.client for seen in script.seen}) == 1
    transport.close()


def test_a_refused_connection_is_broker_unavailable() -> None:
    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(BrokerUnavailable, match=rf"POST http://127.0.0.1:{port}/x: "):
        PooledTransport(max_connections=1, pool_timeout=1).send(
            "POST", f"http://127.0.0.1:{port}/x", b"{}", {}, **QUICK)


def test_no_answer_within_the_read_timeout_is_broker_unavailable(servers: ScriptedServers) -> None:
    _, url = servers.start(Reply(delay=10))
    started = time.monotonic()
    with pytest.raises(BrokerUnavailable, match=r"(?i)timed out"):
        PooledTransport(max_connections=1, pool_timeout=1).send(
            "POST", f"{url}/claim", b"{}", {}, connect_timeout=2, read_timeout=0.3)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("reply", [
    Reply(raw=b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"jobs"'),  # fewer bytes than announced
    Reply(raw=b"SSH-2.0-OpenSSH_9.2\r\n"),  # not HTTP
    Reply(drop=True),  # closed without a byte
], ids=["cut-short", "not-http", "closed"])
def test_an_answer_broken_off_or_not_http_is_broker_unavailable(servers: ScriptedServers, reply: Reply) -> None:
    _, url = servers.start(reply)
    with pytest.raises(BrokerUnavailable):
        PooledTransport(max_connections=1, pool_timeout=1).send("POST", f"{url}/ack", b"{}", {}, **QUICK)


def test_a_request_waits_for_a_free_connection_and_gives_up_after_the_pool_timeout(
    servers: ScriptedServers,
) -> None:
    script, url = servers.start(Reply(status=409, delay=10), fallback=Reply(status=200, body=b"{}"))
    transport = PooledTransport(max_connections=1, pool_timeout=0.3)
    held: list[int] = []
    holder = threading.Thread(target=lambda: held.append(
        transport.send("POST", f"{url}/hold", b"", {}, connect_timeout=2, read_timeout=10).status))
    holder.start()
    while not script.seen:
        time.sleep(0.01)
    with pytest.raises(BrokerUnavailable, match=r"(?i)pool"):
        transport.send("GET", f"{url}/health", None, {}, **QUICK)
    script.release.set()  # the held answer goes out
    holder.join(10)
    assert held == [409]
    assert transport.send("GET", f"{url}/health", None, {}, **QUICK).status == 200  # the connection is back
    assert len(script.seen) == 2 and len({seen.client for seen in script.seen}) == 1


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
def tls_server(servers: ScriptedServers, tmp_path: Path) -> tuple[str, Path]:
    cert_file, key_file = _self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    _, url = servers.start(fallback=Reply(status=200, body=b"{}"), tls=context)
    return url, cert_file


def test_https_is_verified_against_the_systems_certificates(tls_server: tuple[str, Path]) -> None:
    url, _ = tls_server
    with pytest.raises(BrokerUnavailable, match=r"(?i)certificate"):
        PooledTransport(max_connections=1, pool_timeout=1).send("GET", f"{url}/health", None, {}, **QUICK)


def test_ssl_cert_file_names_a_private_ca(tls_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    url, cert_file = tls_server
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))  # read by OpenSSL when a connection is made
    answer = PooledTransport(max_connections=1, pool_timeout=1).send("GET", f"{url}/health", None, {}, **QUICK)
    assert answer.status == 200


def test_bad_pool_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        PooledTransport(max_connections=0, pool_timeout=1)
    with pytest.raises(ValueError):
        PooledTransport(max_connections=1, pool_timeout=0)


def test_a_broker_client_whose_answer_is_lost_sends_the_push_again_with_its_ids(servers: ScriptedServers) -> None:
    """The connection closes after the push was sent and before its answer
    (the broker may have committed it): the client finds the leader again and
    sends the same push, whose ids make it idempotent, and returns once it is
    answered (I1)."""
    health = Reply(status=200, body=orjson.dumps({
        "role": "leader", "broker": {"id": "b", "url": None, "epoch": 1}, "node": {"id": "n", "url": None}, "seq": 1}))
    script, url = servers.start(health, Reply(drop=True), health, Reply(status=201, body=b'{"ids": ["job-1"]}'))
    with BrokerClient([url], token="t", backoff_seconds=0.001, backoff_cap_seconds=0.01) as client:
        assert client.push("q", [{"n": 1}], ids=["job-1"]) == ["job-1"]
    assert [(seen.method, seen.path) for seen in script.seen] == [
        ("GET", "/api/v1/health"), ("POST", "/api/v1/jobs"), ("GET", "/api/v1/health"), ("POST", "/api/v1/jobs")]
    first, again = (orjson.loads(seen.body) for seen in script.seen[1::2])
    assert first == again and [job["id"] for job in first["jobs"]] == ["job-1"]
    assert script.seen[1].headers["Authorization"] == "Bearer t"
