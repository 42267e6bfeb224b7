"""The API's own request and response: the little of HTTP its endpoints use.

The API is served as a plain ASGI application (:mod:`queueadmin.api.app`),
not through Django's request handling, so its endpoints get a
:class:`Request` built straight from the ASGI scope and answer with a
:class:`Response` that is sent as two ASGI messages. Both are deliberately
small: what the endpoints read (method, path, headers, query string, body)
and what they answer (a status, JSON bytes, a few headers).

The body is not read when the request is built: an endpoint reads it with
:meth:`Request.read`, after its method and token were checked, and only
after the declared ``Content-Length`` was found within the limit.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from queueadmin.api.grants import Grant

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]

T = TypeVar("T")

# The longest Content-Length value read as a number: anything longer is over
# every limit, and int() refuses strings past 4,300 digits.
_MAX_LENGTH_DIGITS = 30


class ClientGone(Exception):
    """The client hung up before its answer was ready: there is no one to answer."""


class Request:
    """One HTTP request to the API, read from its ASGI scope. No I/O until :meth:`read`.

    ``headers`` maps lower-case names to values (latin-1, as ASGI servers
    pass them); a header sent twice has its values joined with ``","``, and
    names with an underscore are dropped, both as Django does, so that a
    proxy's ``X_Forwarded_Host`` can never pass for ``X-Forwarded-Host``.
    """

    __slots__ = ("_body", "_receive", "grant", "headers", "method", "path", "query", "scheme", "server")

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self.method: str = scope["method"].upper()
        self.path: str = _path_info(scope)
        query = scope.get("query_string", b"")
        self.query: str = query.decode("latin-1") if isinstance(query, bytes) else str(query)
        self.scheme: str = scope.get("scheme") or "http"
        server = scope.get("server")
        #: (host, port) the server listens on; used only for a request without a Host header.
        self.server: tuple[str, str] = (str(server[0]), str(server[1])) if server else ("unknown", "0")
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope.get("headers", ()):
            name = raw_name.decode("latin-1").lower()
            if "_" in name:
                continue
            value = raw_value.decode("latin-1")
            headers[name] = f"{headers[name]},{value}" if name in headers else value
        self.headers: dict[str, str] = headers
        self._receive = receive
        self._body: bytes | None = None
        #: What the request's token may do (queueadmin.api.grants), once the
        #: endpoint checked it; None for an endpoint that needs no token.
        self.grant: Grant | None = None

    async def read(self, limit: int) -> bytes:
        """The whole body, at most ``limit`` bytes (read once, then kept).

        Raises ApiError ``payload_too_large`` (413) when the declared
        ``Content-Length`` is over ``limit``, before reading any of it, or
        when the body turns out longer (no or a false ``Content-Length``),
        once more than ``limit`` bytes have arrived. Raises ClientGone if the
        client hung up meanwhile.
        """
        # Imported when called: errors.py imports this module (its Response).
        from queueadmin.api.errors import too_large

        if self._body is not None:
            if len(self._body) > limit:
                raise too_large(limit, len(self._body))
            return self._body
        declared = self.headers.get("content-length", "")
        if declared.isascii() and declared.isdigit():
            if len(declared) > _MAX_LENGTH_DIGITS:
                raise too_large(limit)
            if int(declared) > limit:
                raise too_large(limit, int(declared))
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                raise ClientGone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:  # the size is only known to be above the limit
                raise too_large(limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        self._body = b"".join(chunks)
        return self._body

    async def unless_disconnected(self, work: Awaitable[T]) -> T:
        """``work``'s result, or ClientGone (``work`` cancelled) if the
        client hangs up first.

        For an endpoint that may wait long (a long-poll claim), so that a
        worker that went away stops waiting, and is not handed jobs nobody
        will receive. The body must have been read (:meth:`read`): from then
        on the only message a client can send is its disconnect.
        """
        if self._body is None:
            raise RuntimeError("read the body before waiting for a disconnect")
        task = asyncio.ensure_future(work)
        watcher = asyncio.ensure_future(self._disconnected())
        try:
            await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pending in (task, watcher):
                if not pending.done():
                    pending.cancel()
            if not task.done():
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task  # let it unwind (it stops listening for commits) before going on
        if not task.cancelled() and task.done():
            return task.result()
        raise ClientGone

    async def _disconnected(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass


def _path_info(scope: Scope) -> str:
    """The path below the server's root path, as Django's ``path_info`` is."""
    path: str = scope["path"]
    root = str(scope.get("root_path") or "").rstrip("/")
    if root and (path.startswith(root + "/") or path == root):
        return path[len(root):]
    return path


class Response:
    """A JSON answer: ``status_code``, the encoded ``content`` and extra ``headers``.

    Sent with ``Content-Type: application/json``, its ``Content-Length``
    (never chunked), ``Cache-Control: no-store`` (queue state changes every
    commit; no proxy may serve a stale answer) and ``X-Content-Type-Options:
    nosniff`` (what Django's SecurityMiddleware added to every answer).
    """

    __slots__ = ("content", "headers", "status_code")

    def __init__(self, content: bytes, status: int = 200, headers: Mapping[str, str] | None = None) -> None:
        self.content = content
        self.status_code = status
        self.headers: dict[str, str] = dict(headers) if headers else {}

    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        """Every header of the answer, as ASGI sends them."""
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(self.content)).encode("ascii")),
            (b"cache-control", b"no-store"),
            (b"x-content-type-options", b"nosniff"),
        ]
        headers += [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in self.headers.items()]
        return headers

    async def send(self, send: Send) -> None:
        """Send the whole answer (start, then the one body message)."""
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers()})
        await send({"type": "http.response.body", "body": self.content})
