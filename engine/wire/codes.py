"""Error codes on the wire (docs/api.md, "Errors"), in both directions.

An error answer is ``{"error": "<code>", "message": "<text>"}``, plus
``leader_url`` for ``not_leader`` and ``size`` and ``limit`` (bytes) for
``payload_too_large``, with the status :data:`STATUS_BY_CODE` gives its code.

* Broker side: :func:`error_code` and :func:`error_json` turn an engine error
  into its code and body, by the error's stable ``code`` attribute.
* Client side: :func:`error_from_answer` turns an answer back into the engine
  error :data:`ERROR_BY_CODE` names for its code, keeping the broker's wording.

For every code in :data:`ERROR_BY_CODE`, the error a client rebuilds maps back
to a code with the same status (the same code, except ``malformed_json``,
which a client reads as a plain ValidationError). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.errors import (
    BrokerUnavailable,
    DocumentError,
    DocumentMissing,
    EngineError,
    Forbidden,
    InvalidPayload,
    JobNotFound,
    LeaseLost,
    NotLeader,
    OperationFailed,
    PayloadTooLarge,
    StoreUnavailable,
    Unauthorized,
    ValidationError,
)
from engine.wire.reading import check_url

# internal_error is for bugs only: it is never expected.
STATUS_BY_CODE: Mapping[str, int] = {
    "malformed_json": 400,
    "invalid": 400,
    "invalid_payload": 400,
    # Refused before any view runs (the API application's Host check).
    "disallowed_host": 400,
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
    # The shared database could not record a forwarded operator request's
    # nonce (down, or not migrated): the operation was not run.
    "database_unavailable": 503,
    # An operation that got past validation but could not be applied or
    # encoded (I8): refused alone, nothing changed; retrying it unchanged fails again.
    "operation_failed": 400,
}

# Engine codes that are not API codes themselves, and the API code they become.
ENGINE_ALIASES: Mapping[str, str] = {
    # Every store failure leaves the outcome unknown to the client: retry.
    "store_error": "store_unavailable",
    "precondition_failed": "store_unavailable",
    "store_config": "store_unavailable",
    # A stopped committer applied nothing; to a client that is "not the leader".
    "committer_stopped": "not_leader",
    # A segment that does not verify is the document's trouble to a client.
    "segment_unreadable": "document_error",
    # The generic queue refusal: bad input that no narrower code describes.
    "queue_error": "invalid",
}

#: The engine error a client raises for each code it understands; any other
#: code (``not_found``, ...) becomes a plain EngineError.
ERROR_BY_CODE: Mapping[str, type[EngineError]] = {
    "not_leader": NotLeader,
    "store_unavailable": StoreUnavailable,
    "lease_lost": LeaseLost,
    "job_not_found": JobNotFound,
    "invalid_payload": InvalidPayload,
    "payload_too_large": PayloadTooLarge,
    "invalid": ValidationError,
    "malformed_json": ValidationError,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "document_error": DocumentError,
    "document_missing": DocumentMissing,
    "operation_failed": OperationFailed,
}

#: Statuses of gateways and throttling in front of a broker: an answer with
#: one of them and no error code means the request was not served.
RETRY_STATUSES = frozenset({429, 502, 503, 504})

# A 401 answer is Unauthorized whatever its code, except for these codes,
# which the client has always read first. (No broker sends them with a 401.)
_READ_BEFORE_401 = frozenset(
    {
        "not_leader",
        "store_unavailable",
        "lease_lost",
        "job_not_found",
        "invalid_payload",
        "payload_too_large",
        "invalid",
        "malformed_json",
    }
)


def error_code(exc: EngineError) -> str:
    """The API code for ``exc``: its own code, or the code it is an alias of,
    or ``internal_error`` for a code the API does not know."""
    code = ENGINE_ALIASES.get(exc.code, exc.code)
    return code if code in STATUS_BY_CODE else "internal_error"


def error_json(exc: EngineError, *, where: str | None = None, leader_url: str | None = None) -> dict[str, Any]:
    """The error answer's body for ``exc``, keeping the engine's message.

    ``where`` names the part of the request at fault (``"jobs[3]"``) and is
    put before the message. ``leader_url`` is used for a not_leader answer
    when the error does not carry one itself.
    """
    code = error_code(exc)
    body: dict[str, Any] = {"error": code, "message": f"{where}: {exc}" if where else str(exc)}
    if code == "not_leader":
        body["leader_url"] = exc.leader_url if isinstance(exc, NotLeader) else leader_url
    elif isinstance(exc, PayloadTooLarge):  # clients rebuild the engine error from these
        body["size"] = exc.size
        body["limit"] = exc.limit
    return body


def error_from_answer(
    status: int, data: Mapping[str, Any], *, reason: str = "", where: str = "", job_id: str = "", key: str = ""
) -> EngineError:
    """The engine error a client raises for a refused request.

    ``status`` and ``reason`` are the HTTP status and reason phrase, ``data``
    the answer's JSON object (empty if it had none), ``where`` names the
    request (``POST http://...``), ``job_id`` the job it was about and ``key``
    the document's key (for DocumentError). Raises ValueError for a
    not_leader answer naming something other than an http(s) URL.
    """
    code = data.get("error")
    message = str(data.get("message") or f"HTTP {status} {reason}".strip())
    if code is None and status in RETRY_STATUSES:
        return BrokerUnavailable(f"{where}: {message}")
    kind = ERROR_BY_CODE.get(code) if isinstance(code, str) else None
    if status == 401 and not (isinstance(code, str) and code in _READ_BEFORE_401):
        kind = Unauthorized
    if kind is None:
        return EngineError(f"{where}: the broker answered {status}{f' {code}' if code else ''}: {message}")
    return _rebuilt(kind, message, data, job_id=job_id, key=key)


def _rebuilt(kind: type[EngineError], message: str, data: Mapping[str, Any], *, job_id: str, key: str) -> EngineError:
    """An error of ``kind`` with the broker's ``message`` and its fields."""
    exc: EngineError
    if kind is NotLeader:
        leader = data.get("leader_url")
        return NotLeader(check_url(leader) if isinstance(leader, str) and leader else None, message)
    if kind is Unauthorized:
        return Unauthorized(f"{message} (check the API token)")
    if kind is LeaseLost or kind is JobNotFound:
        exc = kind(job_id)
    elif kind is PayloadTooLarge:
        size, limit = data.get("size"), data.get("limit")
        exc = PayloadTooLarge(size if isinstance(size, int) else 0, limit if isinstance(limit, int) else 0)
    elif kind is DocumentError or kind is DocumentMissing:
        exc = kind(key, message)
    else:
        return kind(message)
    exc.args = (message,)  # the broker's own wording, not the local default message
    return exc
