"""Reading request bodies: the size limit, then exact JSON.

The body of a request is read from the stream, never past the limit
(:func:`read_body`), and parsed exactly (:func:`read_json`). What the JSON
must hold, and how it becomes an engine operation, is :mod:`engine.wire`'s:
its readers (``wire.push_from``, ...) refuse a bad body with a
ValidationError naming the field, which the endpoint answers as
``400 invalid`` (``400 malformed_json`` for a body that is not JSON).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from engine import wire
from queueadmin.api.errors import too_large


def read_body(request: HttpRequest, limit: int) -> bytes:
    """The raw request body, refusing one over ``limit`` bytes with 413.

    Reads the stream directly (not ``request.body``, which has its own,
    unrelated limit) and never more than ``limit + 1`` bytes.
    """
    declared = request.META.get("CONTENT_LENGTH") or ""
    if declared.isdigit() and int(declared) > limit:
        raise too_large(limit, int(declared))
    body: bytes = request.read(limit + 1)
    if len(body) > limit:  # no (or a false) Content-Length: the size is only known to be above the limit
        raise too_large(limit)
    return body


def read_json(request: HttpRequest, limit: int) -> Any:
    """The request body, at most ``limit`` bytes, parsed exactly (:func:`engine.wire.loads`)."""
    return wire.loads(read_body(request, limit))
