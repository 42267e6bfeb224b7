"""Refusals and JSON responses.

Every answer under ``/api/`` is JSON; an error is
``{"error": "<code>", "message": "<text>"}`` (plus ``leader_url`` for
``not_leader``, and ``size`` and ``limit`` in bytes for
``payload_too_large``), with the status ``docs/api.md`` gives for its code.
The codes, their statuses and the mapping of engine errors (by their stable
``code`` attribute, never by type ladders) are :mod:`engine.wire`'s, which
clients read answers with too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from engine import EngineError
from engine.wire import STATUS_BY_CODE, error_json
from queueadmin.api.http import Response


def encode_json(data: Any) -> bytes:
    """``data`` as compact JSON, datetimes as RFC 3339 UTC strings ending in "Z"."""
    return orjson.dumps(data, option=orjson.OPT_UTC_Z)


def json_response(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    """``data`` as a JSON response (see :func:`encode_json`), never cached."""
    return Response(encode_json(data), status, headers)


def encoded_json_response(content: bytes, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    """A JSON response with ``content`` already encoded, never cached (see
    :class:`~queueadmin.api.http.Response` for the headers every answer has)."""
    return Response(content, status, headers)


class ApiError(Exception):
    """A refused request: raise it anywhere in a view to answer with it.

    ``code`` must be a key of :data:`STATUS_BY_CODE`; ``extra`` adds fields to
    the JSON body and ``headers`` to the response.
    """

    def __init__(
        self, code: str, message: str, *, headers: Mapping[str, str] | None = None, **extra: Any
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status = STATUS_BY_CODE[code]
        self.message = message
        self.headers = headers
        self.extra = extra

    def response(self) -> Response:
        return json_response(
            {"error": self.code, "message": self.message, **self.extra}, status=self.status, headers=self.headers
        )


# The largest integer every JSON reader takes exactly (JavaScript's safe
# integers); orjson cannot even encode one past 2**64.
MAX_JSON_INTEGER = 2**53 - 1


def too_large(limit: int, size: int | None = None) -> ApiError:
    """413 for a body over ``limit`` bytes. ``size`` is the declared or read
    size, when known; a declared size too large for JSON (a Content-Length of
    2**64, say) is named in the message only, so the answer can always be
    encoded (I8)."""
    if size is None:
        return ApiError("payload_too_large", f"the request body is over the limit of {limit} bytes", limit=limit)
    message = f"the request body is {size} bytes; the limit is {limit}"
    if size > MAX_JSON_INTEGER:
        return ApiError("payload_too_large", message, limit=limit)
    return ApiError("payload_too_large", message, size=size, limit=limit)


def from_engine(exc: EngineError, *, where: str | None = None, leader_url: str | None = None) -> ApiError:
    """The API error for an engine error, keeping the engine's message
    (:func:`engine.wire.error_json`, which says what ``where`` and
    ``leader_url`` add)."""
    body = error_json(exc, where=where, leader_url=leader_url)
    return ApiError(body.pop("error"), body.pop("message"), **body)
