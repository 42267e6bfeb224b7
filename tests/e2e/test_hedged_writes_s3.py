"""Hedged writes against S3 over real HTTP: boto3 talks to moto's server
through a TCP proxy that can hold one request of the document, as a stalled
connection would. The committer's hedge goes out on another connection and
lands; the held request, delivered afterwards, is refused by S3 (its
If-Match names a version the hedge replaced) and changes nothing.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from urllib.parse import quote

import orjson
import pytest

from engine import GroupCommitter, open_store
from engine.ops import push_op

pytestmark = pytest.mark.e2e

WARM_UP_WRITES = 40  # more than the committer needs before it judges a write slow
HEDGE_SECONDS = 0.1


class HoldingProxy:
    """Forwards 127.0.0.1:port to ``target``; once armed, holds the next
    ``PUT`` of the document (its bytes, and those after it on the same
    connection) until released. Every other request passes at once."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.armed = False
        self.held = threading.Event()
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.responses: list[bytes] = []  # the status lines S3 sent back for the held request
        self.closing = False
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closing:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self.sockets += [client, upstream]
            watch: dict[str, bool] = {"held": False}
            threading.Thread(target=self._pump, args=(client, upstream, watch, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, watch, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, watch: dict[str, bool], outbound: bool) -> None:
        try:
            while data := source.recv(65536):
                if outbound and self._should_hold(data):
                    watch["held"] = True
                    self.held.set()
                    self.release.wait(30)
                elif not outbound and watch["held"] and data.startswith(b"HTTP/1.1 ") and not data.startswith(
                        b"HTTP/1.1 100"):
                    self.responses.append(data.split(b"\r\n", 1)[0])
                    watch["held"] = False
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            if not outbound:  # the second pump to end closes both
                source.close()
                sink.close()

    def _should_hold(self, data: bytes) -> bool:
        line = data.split(b"\r\n", 1)[0]
        with self.lock:
            if self.armed and line.startswith(b"PUT ") and b"/queue.json " in line:
                self.armed = False
                return True
        return False

    def close(self) -> None:
        self.closing = True
        self.release.set()
        self.listener.close()
        for sock in self.sockets:
            sock.close()


@pytest.fixture
def proxy(moto_server: str) -> Iterator[HoldingProxy]:
    holding = HoldingProxy(int(moto_server.rsplit(":", 1)[1]))
    yield holding
    holding.close()


def test_a_held_put_to_s3_is_overtaken_by_its_hedge_and_then_refused(
    proxy: HoldingProxy, s3_bucket: str,
) -> None:
    endpoint = f"http://127.0.0.1:{proxy.port}"
    store = open_store(f"s3://{s3_bucket}/hedged?endpoint_url={quote(endpoint, safe='')}&region=us-east-1")
    committer = GroupCommitter(store, hedge_seconds=HEDGE_SECONDS).start()
    try:
        for n in range(WARM_UP_WRITES):
            committer.push("warm", [n])
        assert committer.stats.hedged == 0
        with proxy.lock:
            proxy.armed = True
        ids = committer.execute(push_op("q", ["held"], policy=committer.policy), timeout=10)
        # Answered by the hedge while the first request is still held in the proxy.
        assert proxy.held.is_set() and not proxy.release.is_set()
        assert (committer.stats.hedged, committer.stats.hedges_landed) == (1, 1)
        blob = store.get("queue.json")
        assert blob is not None
        seq = orjson.loads(blob.data)["seq"]

        proxy.release.set()
        deadline = threading.Event()
        for _ in range(100):
            if proxy.responses:
                break
            deadline.wait(0.05)
        assert proxy.responses and proxy.responses[0].startswith(b"HTTP/1.1 412"), proxy.responses

        after = store.get("queue.json")
        assert after is not None and after.etag == blob.etag  # the held request changed nothing
        more = committer.push("q", ["next"])
        final = orjson.loads(store.get("queue.json").data)  # type: ignore[union-attr]
        assert final["seq"] == seq + 1
        assert [job["id"] for job in final["jobs"] if job["queue"] == "q"] == ids + more
        assert committer.stats.lost_races == 0 and committer.stats.ambiguous == 0
    finally:
        committer.stop()
        store.close()
