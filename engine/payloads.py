"""Payloads: a job's payload encoded as JSON once, at push, refusing what
JSON cannot hold (objects it cannot encode, NaN and Infinity, nesting deeper
than :data:`MAX_PAYLOAD_DEPTH`) and what is larger than the policy allows.

Used by the push builder (:func:`engine.ops.push_op`); ``engine.ops``
re-exports :func:`encode_payload` and :data:`MAX_PAYLOAD_DEPTH`, its public
home. Split from :mod:`engine.ops`.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from engine.errors import InvalidPayload, PayloadTooLarge
from engine.model import exact

__all__ = ["MAX_PAYLOAD_DEPTH", "encode_payload"]

# Payloads nested deeper than this are refused at push. orjson encodes at most
# 254 levels, and every read wraps a payload in a few more (the document, an
# API answer): this leaves room for any wrapping, so whatever push accepts,
# every later read can encode.
MAX_PAYLOAD_DEPTH = 128
_JSON_DEPTH_LIMIT = 254


def encode_payload(payload: Any, *, limit: int) -> bytes:
    """Encode one payload as JSON, refusing what JSON cannot hold."""
    try:
        # OPT_PASSTHROUGH_DATACLASS/DATETIME make dataclasses and datetimes an
        # error instead of silently turning them into dicts and strings.
        raw = orjson.dumps(payload, option=_PAYLOAD_OPTS)
    except (TypeError, orjson.JSONEncodeError) as exc:
        if "Recursion limit" in str(exc):
            raise _too_deep() from exc
        raise InvalidPayload(f"payload is not JSON-serialisable: {exc}") from exc
    if raw.count(b"[") + raw.count(b"{") > MAX_PAYLOAD_DEPTH:
        # Only then can it be too deep (brackets inside strings count too,
        # which costs at most this one extra encoding).
        _reject_too_deep(payload)
    if b"null" in raw:
        # orjson writes NaN and Infinity as null; refuse rather than change the
        # data. Only payloads with a null in them need the (slower) walk.
        _reject_non_finite(payload)
    if len(raw) > limit:
        raise PayloadTooLarge(len(raw), limit)
    return exact(raw)


_PAYLOAD_OPTS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def _reject_too_deep(payload: Any) -> None:
    # orjson refuses to encode more than _JSON_DEPTH_LIMIT levels: inside
    # enough empty lists, a payload encodes only if it is at most
    # MAX_PAYLOAD_DEPTH deep. Exact, and no slower than one encoding.
    wrapped = payload
    for _ in range(_JSON_DEPTH_LIMIT - MAX_PAYLOAD_DEPTH):
        wrapped = [wrapped]
    try:
        orjson.dumps(wrapped, option=_PAYLOAD_OPTS)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise _too_deep() from exc


def _too_deep() -> InvalidPayload:
    return InvalidPayload(f"payload is nested more than {MAX_PAYLOAD_DEPTH} levels deep (lists and objects)")


def _reject_non_finite(value: Any) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidPayload("payload contains NaN or Infinity, which JSON cannot hold")
    if isinstance(value, dict):
        for item in value.values():
            _reject_non_finite(item)
    elif isinstance(value, list | tuple):
        for item in value:
            _reject_non_finite(item)
