"""A scripted HTTP server on 127.0.0.1, for the error mapping the emulators cannot produce.

Each request is answered with the next scripted :class:`Reply` and recorded in
:attr:`Script.seen`, so a test can assert both what the store raised and which
requests it sent (how many, with which conditions).
"""

from __future__ import annotations

import ssl
import sys
import threading
import traceback
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """One scripted HTTP answer. ``delay``: wait (at most) this long first; ``drop``: close without answering;
    ``raw``: send these bytes instead of an answer, then close (an answer cut short, or one that is not HTTP);
    ``reason``: the status line's phrase (the status's own by default)."""

    status: int = 200
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    delay: float = 0.0
    drop: bool = False
    raw: bytes | None = None
    reason: str | None = None


@dataclass(slots=True, kw_only=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""
    #: The client's (address, port): one per connection it used.
    client: tuple[str, int] = ("", 0)


@dataclass(slots=True)
class Script:
    """Answers each request with the next reply (``fallback`` once they run out) and records what it saw."""

    replies: deque[Reply]
    fallback: Reply = field(default_factory=lambda: Reply(status=500, body=b"unexpected request"))
    seen: list[Seen] = field(default_factory=list)
    #: Set when the server stops, so that delayed replies end at once.
    release: threading.Event = field(default_factory=threading.Event)


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.1 so that botocore's "Expect: 100-continue" on PUT is answered
        # at once instead of after its one-second wait.
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            script.seen.append(Seen(method=self.command, path=self.path, headers=dict(self.headers.items()),
                                    body=body, client=self.client_address[:2]))
            reply = script.replies.popleft() if script.replies else script.fallback
            if reply.delay:
                script.release.wait(reply.delay)
            if reply.drop or reply.raw is not None:
                self.close_connection = True
                if reply.raw is not None:
                    self.wfile.write(reply.raw)
                return
            try:
                self.send_response(reply.status, reply.reason)
                for name, value in reply.headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(reply.body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a read timeout test)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


class _Server(ThreadingHTTPServer):
    """Keeps what went wrong while serving, rather than printing it from its
    thread (outside pytest's capture): a client that hung up is expected (a
    timeout test, a pooled connection closed), anything else is kept in
    ``errors`` for :class:`ScriptedServers` to raise."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.errors: list[str] = []

    def handle_error(self, request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            self.errors.append(traceback.format_exc())


class ScriptedServers:
    """Scripted servers started by :meth:`start` and all stopped on exit (use it in a fixture)."""

    def __init__(self) -> None:
        self._started: list[tuple[_Server, threading.Thread, Script]] = []

    def start(
        self, *replies: Reply, fallback: Reply | None = None, tls: ssl.SSLContext | None = None
    ) -> tuple[Script, str]:
        """Start a server answering with ``replies``; return its script and its ``http://127.0.0.1:port``
        (``https://`` with ``tls``, a server context holding its certificate)."""
        script = Script(deque(replies)) if fallback is None else Script(deque(replies), fallback)
        server = _Server(("127.0.0.1", 0), _handler(script))
        if tls is not None:
            server.socket = tls.wrap_socket(server.socket, server_side=True)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        self._started.append((server, thread, script))
        return script, f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"

    def __enter__(self) -> ScriptedServers:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        for server, thread, script in self._started:
            script.release.set()
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)
        errors = [error for server, _, _ in self._started for error in server.errors]
        if errors and kind is None:
            raise AssertionError("a scripted server failed while serving:\n" + "\n".join(errors))
