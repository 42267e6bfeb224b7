"""Reading request bodies: the size limit, then exact JSON.

The body of a request is read from the stream, never past the limit
(:meth:`queueadmin.api.http.Request.read`), and parsed exactly
(:func:`read_json`). What the JSON must hold, and how it becomes an engine
operation, is :mod:`engine.wire`'s: its readers (``wire.push_from``, ...)
refuse a bad body with a ValidationError naming the field, which the
endpoint answers as ``400 invalid`` (``400 malformed_json`` for a body that
is not JSON).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine import wire

if TYPE_CHECKING:
    from queueadmin.api.http import Request


async def read_body(request: Request, limit: int) -> bytes:
    """The raw request body, refusing one over ``limit`` bytes with 413
    (the declared length before any of it is read; see ``Request.read``)."""
    return await request.read(limit)


async def read_json(request: Request, limit: int) -> Any:
    """The request body, at most ``limit`` bytes, parsed exactly (:func:`engine.wire.loads`)."""
    return wire.loads(await request.read(limit))
