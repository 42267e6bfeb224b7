"""A test client for the broker API, which Django's test client cannot reach:
the API is served before Django (queueadmin/asgi.py, queueadmin.api.app).

:class:`Client` and :class:`AsyncClient` offer the subset of Django's test
clients the API tests use (``get``/``post``/``put``/``delete`` with
``content_type`` and ``headers``; Django-style ``HTTP_*``, ``CONTENT_LENGTH``
and ``REMOTE_ADDR`` keywords) and answer a :class:`TestResponse`
(``status_code``, ``content``, ``json()``, ``response["Header"]``). Each
request goes through ``queueadmin.asgi.application``, the application daphne
serves, as one ASGI call, so the path router in asgi.py is part of every test.

The sync client runs each request on an event loop of its own through
``async_to_sync``, as Django's test client does: a database read that the
API makes with ``sync_to_async`` then runs on the test's own thread, inside
its transaction.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
from asgiref.sync import async_to_sync

from engine import HttpAnswer

#: Seconds a request may take before the client fails the test instead of hanging it.
REQUEST_SECONDS = 30.0


class TestResponse:
    """What the application answered to one request."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self, status_code: int, headers: httpx.Headers, content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content

    def __getitem__(self, name: str) -> str:
        value: str = self.headers[name]
        return value

    def get(self, name: str, default: str | None = None) -> str | None:
        value: str | None = self.headers.get(name, default)
        return value

    def json(self) -> Any:
        return orjson.loads(self.content)


def _encode(data: Any, content_type: str | None) -> bytes:
    if data is None:
        return b""
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode()
    if content_type is not None and content_type.startswith("application/json"):
        return orjson.dumps(data)
    raise TypeError(f"cannot send {type(data).__name__} as {content_type!r}; give bytes, str or JSON data")


class AsyncClient:
    """Requests to the API through the ASGI application, awaited on the caller's loop.

    ``headers`` go with every request (a request's own ``headers`` win);
    ``defaults`` are Django-style keys: ``HTTP_X_NAME`` for header
    ``X-Name``, ``CONTENT_LENGTH`` to declare a length other than the
    body's, ``REMOTE_ADDR`` for the client's address.
    """

    def __init__(self, headers: Mapping[str, str] | None = None, **defaults: str) -> None:
        self.headers = dict(headers or {})
        self.defaults = defaults

    async def get(self, path: str, data: Any = None, *, headers: Mapping[str, str] | None = None,
                  **extra: str) -> TestResponse:
        return await self.generic("GET", path, data, headers=headers, **extra)

    async def post(self, path: str, data: Any = None, content_type: str | None = "application/json", *,
                   headers: Mapping[str, str] | None = None, **extra: str) -> TestResponse:
        return await self.generic("POST", path, data, content_type, headers=headers, **extra)

    async def put(self, path: str, data: Any = None, content_type: str | None = "application/json", *,
                  headers: Mapping[str, str] | None = None, **extra: str) -> TestResponse:
        return await self.generic("PUT", path, data, content_type, headers=headers, **extra)

    async def delete(self, path: str, data: Any = None, *, headers: Mapping[str, str] | None = None,
                     **extra: str) -> TestResponse:
        return await self.generic("DELETE", path, data, headers=headers, **extra)

    async def generic(self, method: str, path: str, data: Any = None, content_type: str | None = None, *,
                      headers: Mapping[str, str] | None = None, **extra: str) -> TestResponse:
        """One request; the path may carry a query string."""
        body = _encode(data, content_type)
        meta = {**self.defaults, **extra}
        merged = {"host": "testserver"}
        if content_type is not None and body:
            merged["content-type"] = content_type
        merged["content-length"] = meta.pop("CONTENT_LENGTH", str(len(body)))
        remote = meta.pop("REMOTE_ADDR", "127.0.0.1")
        for key, value in meta.items():
            if not key.startswith("HTTP_"):
                raise TypeError(f"unsupported request keyword {key!r}")
            merged[key.removeprefix("HTTP_").replace("_", "-").lower()] = value
        merged |= {name.lower(): value for name, value in {**self.headers, **(headers or {})}.items()}
        raw_path, _, query = path.partition("?")
        scope = {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "method": method, "scheme": "http", "path": raw_path, "raw_path": raw_path.encode(),
            "query_string": query.encode(), "root_path": "",
            "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in merged.items()],
            "client": (remote, 50000), "server": ("testserver", 80),
        }
        return await _call(scope, body)


class Client:
    """:class:`AsyncClient`, each request run to its end on an event loop of its own."""

    def __init__(self, headers: Mapping[str, str] | None = None, **defaults: str) -> None:
        self._client = AsyncClient(headers, **defaults)

    def get(self, path: str, data: Any = None, **kwargs: Any) -> TestResponse:
        return self.generic("GET", path, data, **kwargs)

    def post(self, path: str, data: Any = None, content_type: str | None = "application/json",
             **kwargs: Any) -> TestResponse:
        return self.generic("POST", path, data, content_type, **kwargs)

    def put(self, path: str, data: Any = None, content_type: str | None = "application/json",
            **kwargs: Any) -> TestResponse:
        return self.generic("PUT", path, data, content_type, **kwargs)

    def delete(self, path: str, data: Any = None, **kwargs: Any) -> TestResponse:
        return self.generic("DELETE", path, data, **kwargs)

    def generic(self, method: str, path: str, data: Any = None, content_type: str | None = None,
                **kwargs: Any) -> TestResponse:
        response: TestResponse = async_to_sync(self._client.generic)(method, path, data, content_type, **kwargs)
        return response


class Transport:
    """An :class:`engine.http_transport.HttpTransport` that sends each request
    through the ASGI application as :class:`Client` does, so that an engine
    client (a :class:`~engine.BrokerClient`) reaches the real API with no server."""

    def send(self, method: str, url: str, content: bytes | None, headers: Mapping[str, str], *,
             connect_timeout: float, read_timeout: float) -> HttpAnswer:
        path = urlsplit(url)
        answer = Client().generic(method, path.path + (f"?{path.query}" if path.query else ""), content or b"",
                                  headers=dict(headers))
        return HttpAnswer(status=answer.status_code, reason=HTTPStatus(answer.status_code).phrase,
                          content=answer.content)

    def close(self) -> None:
        pass


async def _call(scope: dict[str, Any], body: bytes) -> TestResponse:
    from queueadmin.asgi import application  # imported late: it sets Django up

    answered = asyncio.Event()
    sent: list[dict[str, Any]] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await answered.wait()  # the client stays connected until it has its answer
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            answered.set()

    try:
        await asyncio.wait_for(application(scope, receive, send), REQUEST_SECONDS)
    finally:
        answered.set()
    [start] = [m for m in sent if m["type"] == "http.response.start"]
    content = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return TestResponse(start["status"], httpx.Headers(start["headers"]), content)
