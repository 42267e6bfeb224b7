"""The HTTP edge: what daphne decides before it reads a request's body.

Daphne (on Twisted) reads a whole request body, spooling a large one to
disk, before it calls the ASGI application. Left alone, an unauthenticated
300 MiB POST is read in full before its 401, and a ``Content-Length`` larger
than the body sent holds the connection open forever. :func:`install`, run
when :mod:`queueadmin.asgi` is imported (daphne's CLI and ``runserver``
import the application before they serve), makes daphne's server use
:class:`EdgeHTTPFactory`, whose requests (:class:`EdgeRequest`) decide as
soon as the headers are in:

* a declared ``Content-Length`` over the limit gets ``413 payload_too_large``
  at once; the limit is ``QUEUE_MAX_REQUEST_BYTES`` under ``/api/``, and
  elsewhere (the dashboard's forms) the larger of that and Django's
  ``DATA_UPLOAD_MAX_MEMORY_SIZE``;
* a chunked body is counted as it arrives and gets the same 413 once it
  passes the limit;
* a request with a body for an API endpoint that needs a token gets
  ``401 unauthorized`` at once when :func:`queueadmin.api.auth.refusal_without_io`
  can tell without the database (no or a malformed ``Authorization``
  header, or a token that is neither ``QUEUE_API_TOKEN`` nor a database
  token read in the last few seconds); otherwise the body is read, up to the
  limit, and the endpoint decides as before. Which paths are endpoints, and
  which need a token, is the API application's own route table
  (:mod:`queueadmin.api.urls`), so the two never disagree;
* a body that stalls for ``QUEUE_HTTP_IDLE_SECONDS`` gets
  ``408 request_timeout``. The connection's own idle limit (slow headers, an
  idle keep-alive connection) is twice that, so the 408 always comes first.

Each early answer is JSON like every API error, carries ``Connection:
close``, and is sent without reading the body. The server then drops what
the client still sends, without buffering it, until the client closes or
:data:`LINGER_SECONDS` pass: closing at once while body bytes are still in
flight would make the kernel answer them with a reset, which can destroy
the answer before the client reads it. A client that sends ``Expect:
100-continue`` gets the answer instead of the ``100 Continue``, and never
sends the body at all.

Twisted's own parsing of form bodies into ``request.args`` is switched off
for every request: daphne never reads it (the application gets the raw
body), it cost 14 % of the node's CPU under single-job pushes, and it
answered a body labelled ``multipart/form-data`` that is not multipart with
a bare 400 before the application saw it.

Twisted's own access line is formatted only when daphne's verbosity sends
it somewhere (:meth:`EdgeHTTPFactory.log`).

Each request leaves daphne's table of connections as soon as it has ended
and its application returned (:func:`reap`), instead of at daphne's
once-a-second sweep, whose walk over a second's worth of ended requests
stalled the event loop.

Only HTTP/1.1 connections are guarded this way; everything else about
daphne, and ``daphne queueadmin.asgi:application`` itself, is unchanged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote, urlsplit

from daphne.http_protocol import HTTPFactory, WebRequest
from django.conf import settings
from twisted.web import http

from queueadmin import config, mount
from queueadmin.api.auth import refusal_without_io
from queueadmin.api.errors import ApiError, encode_json, too_large
from queueadmin.api.routing import PREFIX as API_PREFIX
from queueadmin.api.urls import router

log = logging.getLogger(__name__)

#: How long a refused connection keeps draining what the client still sends.
LINGER_SECONDS = 2.0


def body_limit(path: str) -> int:
    """The most bytes a request body for ``path`` may have."""
    limit = config.max_request_bytes()
    if path.startswith(API_PREFIX):
        return limit
    forms = settings.DATA_UPLOAD_MAX_MEMORY_SIZE  # None: Django sets no limit of its own
    return max(limit, int(forms)) if forms is not None else limit


def refusal(method: str, path: str, authorization: str | None, length: int | None) -> ApiError | None:
    """The answer for a request whose headers are in, before its body is read:
    ``length`` is the declared Content-Length (None: chunked). None lets it
    through. No I/O, so it can run on the server's event loop."""
    limit = body_limit(path)
    if length is not None and length > limit:
        return too_large(limit, length)
    if length == 0 or not path.startswith(API_PREFIX):
        return None
    # The API application's own route table (queueadmin.api.urls): an
    # unknown path is left to its 404.
    found = router.resolve(path)
    if found is None:
        return None
    endpoint = found[0].endpoint
    # Only where the endpoint itself would answer 401: its method, and a token needed.
    if method in endpoint.methods and endpoint.token:
        return refusal_without_io(authorization)
    return None


def raw_response(error: ApiError) -> bytes:
    """``error`` as a whole HTTP/1.1 response that closes the connection."""
    body = encode_json({"error": error.code, "message": error.message, **error.extra})
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body)), "Cache-Control": "no-store",
               "Connection": "close", **(error.headers or {})}
    head = f"HTTP/1.1 {error.status} {HTTPStatus(error.status).phrase}\r\n" + "".join(
        f"{name}: {value}\r\n" for name, value in headers.items())
    return head.encode("latin-1") + b"\r\n" + body


def _discard(data: bytes) -> None:
    """What a refused connection does with the bytes the client still sends."""


class EdgeRequest(WebRequest):  # type: ignore[misc]
    """Daphne's request, refusing early what :func:`refusal` refuses, capping
    a chunked body, and timing out a stalled one (see the module docstring)."""

    _refused = False
    _received = 0
    _limit: int | None = None
    _watch: BodyWatch | None = None  # the factory's, while this request's body is still arriving
    _linger: Any = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Twisted parses a POST's form fields into ``request.args`` before
        # daphne sees the request, and finds the Content-Type of every POST
        # with a body through the stdlib's email header parser on the way:
        # 14 % of the broker's CPU under single-job pushes (a py-spy --gil
        # profile of `bench network`). Daphne never reads ``args``: the
        # application gets the raw body, and Django parses its own forms.
        self._parsePOSTFormSubmission = False

    def _guarded(self) -> bool:
        return isinstance(self.channel, http.HTTPChannel)  # HTTP/2 streams are left to daphne

    def gotLength(self, length: int | None) -> None:
        if not self._guarded():
            super().gotLength(length)
            return
        channel = self.channel
        # The request line is parsed, but Request.method/path are only set once
        # the body is in; HTTPChannel keeps them meanwhile.
        target = bytes(getattr(channel, "_path", b"") or b"").decode("latin-1")
        # Under a path prefix (queueadmin.mount), by the path below it, as the
        # application routes it: daphne's --root-path, or a proxy's header.
        root = self.requestHeaders.getRawHeaders(b"Daphne-Root-Path", [None])[0]
        root_path = unquote(root.decode("ascii", "replace")) if root is not None else \
            getattr(getattr(channel.factory, "server", None), "root_path", "")
        path = mount.local_path(unquote(urlsplit(target).path), mount.script_prefix(root_path))
        method = bytes(getattr(channel, "_command", b"") or b"").decode("latin-1")
        authorization = self.requestHeaders.getRawHeaders(b"Authorization", [None])[0]
        try:
            error = refusal(method, path, authorization.decode("latin-1") if authorization is not None else None,
                            length)
        except Exception:  # a bug here must not drop the connection: the endpoints check everything again
            log.exception("the edge check failed for %s %s; reading the body as usual", method, path)
            error = None
        if error is not None:
            super().gotLength(0)  # an empty body, never filled
            # Answer instead of "100 Continue": the client need not send the body.
            self.requestHeaders.removeHeader(b"Expect")
            self._refuse(error)
            return
        super().gotLength(length)
        self._limit = body_limit(path)
        if length != 0:
            self._watch = self.channel.factory.bodies
            self._watch.expect(self, self.channel.callLater)

    def handleContentChunk(self, data: bytes) -> None:
        if self._refused:
            return
        self._received += len(data)
        if self._limit is not None and self._received > self._limit:
            self._refuse(too_large(self._limit))
            return
        if self._watch is not None:
            self._watch.arrived(self)
        super().handleContentChunk(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        self._unwatch()
        if self._refused:
            return  # answered already; the application never sees it
        super().requestReceived(command, path, version)

    def connectionLost(self, reason: Any) -> None:
        self._unwatch()
        if self._linger is not None and self._linger.active():
            self._linger.cancel()
        super().connectionLost(reason)
        self._reap_when_done()

    def finish(self) -> None:
        super().finish()
        self._reap_when_done()

    def _reap_when_done(self) -> None:
        """Drop this request from daphne's table of connections as soon as it
        has ended and its application instance returned (see :func:`reap`),
        instead of at daphne's next sweep. Called once daphne marked the
        request disconnected (its ``finish`` and ``connectionLost`` do)."""
        details = getattr(self.server, "connections", {}).get(self)
        if details is None:
            return
        instance = details.get("application_instance")
        if instance is None or instance.done():
            reap(self.server, self)
        else:  # the application sends its last body chunk, then returns
            instance.add_done_callback(lambda _: reap(self.server, self))

    def _unwatch(self) -> None:
        if self._watch is not None:
            self._watch.done(self)
            self._watch = None

    def stalled(self) -> None:
        """The body stopped arriving for the idle limit (:class:`BodyWatch`): 408."""
        self._watch = None
        self._refuse(ApiError("request_timeout", f"the request body stopped arriving for "
                                                 f"{config.http_idle_seconds():g} s before it was complete"))

    def _refuse(self, error: ApiError) -> None:
        """Answer ``error`` now, then drop the rest of the connection (module docstring)."""
        self._refused = True
        self._unwatch()
        channel = self.channel
        transport = channel.transport
        log.info("refused before reading the body: %s %s", error.status, error.message)
        channel.setTimeout(None)
        # As Twisted's own websocket upgrade does: this connection's bytes go elsewhere now.
        channel.dataReceived = _discard
        transport.write(raw_response(error))
        half_close = getattr(transport, "loseWriteConnection", None)
        if half_close is None:
            transport.loseConnection()
            return
        half_close()
        self._linger = channel.callLater(LINGER_SECONDS, getattr(transport, "abortConnection",
                                                                 transport.loseConnection))


def reap(server: Any, protocol: Any) -> None:
    """Remove ``protocol`` from ``server.connections`` if it is disconnected
    and its application instance returned cleanly.

    Daphne keeps every HTTP request there until ``Server.application_checker``,
    once a second, walks the whole table and removes the ended ones: at a
    thousand requests a second that walk holds the event loop for 9-18 ms
    each second (timed in ``bench network --runs single``), a stall every
    request in flight waits through. Reaped here as each ends, the table
    holds only live requests. An instance that raised or was cancelled is
    left to daphne's sweep, which logs it as before."""
    details = server.connections.get(protocol)
    if details is None or "disconnected" not in details:
        return
    instance = details.get("application_instance")
    if instance is not None and (not instance.done() or instance.cancelled() or instance.exception() is not None):
        return
    del server.connections[protocol]


class BodyWatch:
    """The requests whose body is still arriving, each with the time its
    next bytes are due, and one timer for all of them.

    A timer per request (armed when its headers are in, cancelled when its
    body is) cost 4 % of the broker's CPU under one-job requests, whose
    bodies nearly always arrive with their headers (a py-spy --gil profile
    of ``bench network --runs single``). Here a request costs two dict
    operations, and one sweep every quarter of the idle limit, scheduled
    only while some request has been waiting, answers those past their
    time with 408: between the idle limit and 1.25 times it, before the
    connection's own limit (twice it). Runs on the reactor thread only.
    """

    def __init__(self) -> None:
        self._due: dict[EdgeRequest, float] = {}
        self._sweeping = False

    def expect(self, request: EdgeRequest, call_later: Callable[..., Any]) -> None:
        """``request``'s headers are in and its body is not: watch it."""
        idle = config.http_idle_seconds()
        self._due[request] = time.monotonic() + idle
        if not self._sweeping:
            self._sweeping = True
            call_later(idle / 4, self._sweep, idle / 4, call_later)

    def arrived(self, request: EdgeRequest) -> None:
        """Some of ``request``'s body arrived: its next bytes are due an idle limit from now."""
        if request in self._due:
            self._due[request] = time.monotonic() + config.http_idle_seconds()

    def done(self, request: EdgeRequest) -> None:
        """``request``'s body is in, it was answered, or its connection is gone."""
        self._due.pop(request, None)

    def _sweep(self, interval: float, call_later: Callable[..., Any]) -> None:
        now = time.monotonic()
        for request in [r for r, due in self._due.items() if due <= now]:
            del self._due[request]
            try:
                request.stalled()
            except Exception:  # one broken connection must not stop the watch for all others
                log.exception("answering a stalled request body with 408 failed")
        self._sweeping = bool(self._due)
        if self._sweeping:
            call_later(interval, self._sweep, interval, call_later)


class EdgeHTTPFactory(HTTPFactory):  # type: ignore[misc]
    """Daphne's HTTP factory, building :class:`EdgeRequest` requests, with
    an idle limit on the connection itself and on request bodies
    (:class:`BodyWatch`)."""

    def __init__(self, server: Any) -> None:
        super().__init__(server)
        self.timeOut = 2 * config.http_idle_seconds()
        self.bodies = BodyWatch()

    def buildProtocol(self, addr: Any) -> Any:
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = EdgeRequest
        return protocol

    def log(self, request: Any) -> None:
        """Twisted's own access line, only where it goes somewhere.

        Twisted formats a combined-log line for every request and writes it
        to its own log, which daphne sends nowhere at its default verbosity
        (1 and below) and to the stdlib logger above it. Formatted for
        nothing, it cost 3 % of the broker's CPU under one-job requests (a
        py-spy --gil profile of ``bench network --runs single``). Daphne's
        own access log (``--access-log``) is another path and is unchanged.
        """
        if getattr(self.server, "verbosity", 1) > 1:
            super().log(request)


def install() -> None:
    """Make daphne's server build :class:`EdgeHTTPFactory` (idempotent).

    ``daphne.server.Server.run`` looks ``HTTPFactory`` up in its module when
    it starts serving, so this must run before that: importing
    :mod:`queueadmin.asgi` does it.
    """
    import daphne.server

    daphne.server.HTTPFactory = EdgeHTTPFactory
