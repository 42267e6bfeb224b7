"""Error codes, their HTTP statuses, and JSON responses.

Every answer under ``/api/`` is JSON; an error is
``{"error": "<code>", "message": "<text>"}`` (plus ``leader_url`` for
``not_leader``, and ``size`` and ``limit`` in bytes for
``payload_too_large``), with the status ``docs/api.md`` gives for its code. Engine
errors are mapped by their stable ``code`` attribute, never by type ladders.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from django.http import HttpResponse

from engine import EngineError, NotLeader, PayloadTooLarge

# docs/api.md, "Errors". internal_error is for bugs only: it is never expected.
STATUS_BY_CODE: Mapping[str, int] = {
    "malformed_json": 400,
    "invalid": 400,
    "invalid_payload": 400,
    # Refused before any view runs (queueadmin.api.middleware, queueadmin.edge).
    "disallowed_host": 400,
    "bad_request": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "job_not_found": 404,
    "not_found": 404,
    "method_not_allowed": 405,
    "request_timeout": 408,
    "lease_lost": 409,
    "payload_too_large": 413,
    "internal_error": 500,
    "not_leader": 503,
    "store_unavailable": 503,
    "document_error": 503,
    "document_missing": 503,
    # An operation that got past validation but could not be applied or
    # encoded (I8): refused alone, nothing changed; retrying it unchanged fails again.
    "operation_failed": 400,
}

# Engine codes that are not API codes themselves, and the API code they become.
_ENGINE_ALIASES: Mapping[str, str] = {
    # Every store failure leaves the outcome unknown to the client: retry.
    "store_error": "store_unavailable",
    "precondition_failed": "store_unavailable",
    "store_config": "store_unavailable",
    # A stopped committer applied nothing; to a client that is "not the leader".
    "committer_stopped": "not_leader",
    # The generic queue refusal: bad input that no narrower code describes.
    "queue_error": "invalid",
}


def encode_json(data: Any) -> bytes:
    """``data`` as compact JSON, datetimes as RFC 3339 UTC strings ending in "Z"."""
    return orjson.dumps(data, option=orjson.OPT_UTC_Z)


def json_response(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> HttpResponse:
    """``data`` as a JSON response (see :func:`encode_json`), never cached."""
    return encoded_json_response(encode_json(data), status, headers)


def encoded_json_response(
    content: bytes, status: int = 200, headers: Mapping[str, str] | None = None
) -> HttpResponse:
    """A JSON response with ``content`` already encoded, never cached."""
    response = HttpResponse(content, status=status, content_type="application/json", headers=headers)
    # Queue state changes every commit; no proxy may serve a stale answer.
    response["Cache-Control"] = "no-store"
    # Set here, not left to CommonMiddleware: answers made before the middleware
    # stack runs (a disallowed Host) would otherwise go out chunked.
    response["Content-Length"] = str(len(content))
    return response


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

    def response(self) -> HttpResponse:
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
    """The API error for an engine error, keeping the engine's message.

    ``where`` names the part of the request at fault (``"jobs[3]"``) and is
    put before the message. ``leader_url`` is used for a not_leader answer
    when the error does not carry one itself.
    """
    code = _ENGINE_ALIASES.get(exc.code, exc.code)
    if code not in STATUS_BY_CODE:
        code = "internal_error"
    message = f"{where}: {exc}" if where else str(exc)
    if code == "not_leader":
        url = exc.leader_url if isinstance(exc, NotLeader) else leader_url
        return ApiError(code, message, leader_url=url)
    if isinstance(exc, PayloadTooLarge):  # clients rebuild the engine error from these
        return ApiError(code, message, size=exc.size, limit=exc.limit)
    return ApiError(code, message)
