"""Calls into the real ASGI application (``queueadmin.asgi:application``), as
daphne makes them, with a deadline on each call.

The fuzz tests need what Django's test client hides: raw body bytes, any
``Host`` and ``Content-Length`` header, and a call that never answers.
:func:`call` sends one request and records every message the application
sends back, so a test can check that it got exactly one
complete answer, in time. A call with no answer by its deadline is reported
as :class:`NoAnswer`, a failure of that call, not a stuck suite.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

import httpx
import orjson
from asgiref.sync import async_to_sync

#: Seconds one call may take before it counts as a hang.
CALL_SECONDS = 5.0


class NoAnswer(AssertionError):  # an assertion: the call broke the "one answer" property
    """The application did not finish an answer before the call's deadline."""


@dataclass(slots=True)
class Answer:
    """What the application sent for one request."""

    status: int
    headers: dict[str, str]
    body: bytes
    starts: int = 1
    #: Bytes of the request body the application had asked for when it answered.
    body_read: int = 0

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    def json(self) -> Any:
        return orjson.loads(self.body)


def job_path(job_id: str, action: str = "") -> str:
    """The path of job ``job_id`` as a real HTTP client sends it.

    ``engine.BrokerClient`` quotes the id with ``safe=''``; httpx, like every
    client that follows RFC 3986, then removes dot segments (``.``, ``..``).
    """
    # A hostile client can send any bytes; a lone surrogate goes as its UTF-8-style bytes.
    raw = f"/api/v1/jobs/{quote(job_id.encode('utf-8', 'surrogatepass'), safe='')}{action}"
    return client_path(raw)


def client_path(raw: str) -> str:
    """``raw`` (already percent-encoded) after a client's normalisation."""
    return httpx.URL("http://testserver" + raw).raw_path.decode("ascii")


def _app() -> Any:
    from queueadmin.asgi import application  # imported late: it sets Django up

    return application


def call(
    method: str,
    path: str,
    body: bytes | Iterable[bytes] = b"",
    *,
    headers: dict[str, str] | list[tuple[bytes, bytes]] | None = None,
    host: str | None = "testserver",
    content_length: int | bool | None = True,
    seconds: float = CALL_SECONDS,
) -> Answer:
    """One HTTP request through the ASGI application; raises NoAnswer on a hang.

    ``path`` is the raw (percent-encoded) path, query string included.
    ``content_length``: True sends the body's real length, an int sends that
    number, None sends no header. What daphne decides before it calls the
    application (bodies too large or that never end) is fuzzed against a real
    daphne in test_fuzz_daphne.
    """
    return async_to_sync(_call)(method, path, body, headers, host, content_length, seconds)


async def _call(
    method: str,
    path: str,
    body: bytes | Iterable[bytes],
    headers: dict[str, str] | list[tuple[bytes, bytes]] | None,
    host: str | None,
    content_length: int | bool | None,
    seconds: float,
) -> Answer:
    chunks = [body] if isinstance(body, bytes) else list(body)
    raw_path, _, query = path.partition("?")
    header_list: list[tuple[bytes, bytes]] = []
    if host is not None:
        header_list.append((b"host", host.encode("latin-1")))
    if content_length is True:
        header_list.append((b"content-length", str(sum(map(len, chunks))).encode()))
    elif content_length is not None and content_length is not False:
        header_list.append((b"content-length", str(content_length).encode()))
    if isinstance(headers, dict):
        header_list += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    elif headers:
        header_list += headers
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        # daphne decodes the path the same way.
        "path": unquote(raw_path, errors="replace"),
        "raw_path": raw_path.encode("latin-1"),
        "query_string": query.encode("latin-1"),
        "root_path": "",
        "headers": header_list,
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    answered = asyncio.Event()  # the answer is complete, or the caller gave up: the client hangs up
    sent: list[dict[str, Any]] = []
    read = 0
    index = 0

    async def receive() -> dict[str, Any]:
        nonlocal read, index
        if answered.is_set():
            return {"type": "http.disconnect"}
        if index < len(chunks):
            chunk = chunks[index]
            index += 1
            read += len(chunk)
            return {"type": "http.request", "body": chunk, "more_body": index < len(chunks)}
        # The body is complete; the client keeps the connection open until it
        # is answered or gives up.
        await answered.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            answered.set()

    task = asyncio.ensure_future(_app()(scope, receive, send))
    try:
        await asyncio.wait_for(asyncio.shield(answered.wait()), seconds)
    except TimeoutError:
        # Hang up, as a client would, so the application cleans up (closes
        # its spooled body, cancels the view); cancel it only if it will not.
        answered.set()
        done, _ = await asyncio.wait({task}, timeout=2.0)
        if not done:
            task.cancel()
        raise NoAnswer(f"{method} {path}: no complete answer within {seconds:g} s "
                       f"({len(sent)} message(s) sent, {read} body bytes read)") from None
    # Let the application finish its own clean-up, briefly.
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.cancel()
    elif task.exception() is not None:
        raise task.exception()  # type: ignore[misc]
    starts = [m for m in sent if m["type"] == "http.response.start"]
    body_bytes = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    first = starts[0]
    response_headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in first.get("headers", [])}
    return Answer(status=first["status"], headers=response_headers, body=body_bytes, starts=len(starts),
                  body_read=read)
