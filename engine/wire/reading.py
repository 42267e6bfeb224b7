"""Reading JSON from the wire strictly: exact parsing, field by field.

Pure: no I/O. Everything refused raises a :class:`~engine.errors.ValidationError`
whose message names the place at fault (``'jobs[2].payload'``), or, for bytes
that are not JSON text at all, :class:`MalformedJson`.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import orjson

from engine.errors import EngineError, MalformedJson, ValidationError

# orjson reads integers beyond 64 bits as floats, which would silently change
# a payload. A run of 19+ digits can be such an integer, so those bodies are
# read by the exact (slower) standard parser instead.
_LONG_DIGITS = re.compile(rb"[0-9]{19}")
# A lone surrogate: a code point of the UTF-16 surrogate range in a str (a
# well-formed pair has already been joined into one character by the parser).
_SURROGATE = re.compile("[\ud800-\udfff]")

_TYPE_NAMES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "a number",
    float: "a number",
    type(None): "null",
}


def json_type(value: object) -> str:
    """How a message names the JSON type of ``value`` ("an object", "null", ...)."""
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def loads(body: bytes) -> Any:
    """Parse JSON exactly, or raise MalformedJson.

    Numbers JSON allows but a float cannot hold (``1e400``) parse to infinity
    and are refused later as an invalid payload; ``NaN``/``Infinity`` literals
    are not JSON and are malformed, and so is a string or key holding a lone
    UTF-16 surrogate escape (``"\\ud800"``): it is not Unicode text, and no
    later step could encode it.
    """
    if not _LONG_DIGITS.search(body):
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass  # maybe valid JSON that orjson cannot represent; let the exact parser decide
    try:
        data = json.loads(body, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise MalformedJson(f"the body is not valid JSON: {exc}") from None
    # orjson refuses lone surrogates; the standard parser lets "\ud800" through
    # as a str that no UTF-8 encoder can write, so it would fail only later,
    # inside a commit (I8). Refuse it here, where the client can be told.
    where = lone_surrogate_at(data)
    if where is not None:
        raise MalformedJson(
            f"the body is not valid JSON text: {where} holds a lone UTF-16 "
            "surrogate escape (\\ud800-\\udfff without its pair), which is not Unicode"
        )
    return data


def lone_surrogate_at(data: Any, where: str = "body") -> str | None:
    """Where in ``data`` (a parsed JSON value) a string, key or value, holds a
    lone UTF-16 surrogate, as ``body.jobs[0].payload``; None if nowhere.

    Iterative, so any nesting the parser accepted is walked without recursion.
    """
    stack: list[tuple[Any, str]] = [(data, where)]
    while stack:
        value, at = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                return at
        elif isinstance(value, dict):
            for key, item in value.items():
                if _SURROGATE.search(key):
                    return f"a key of {at}"
                stack.append((item, f"{at}.{key}"))
        elif isinstance(value, list):
            stack.extend((item, f"{at}[{index}]") for index, item in enumerate(value))
    return None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class Fields:
    """One JSON object of a request, read field by field.

    ``where`` names the object in messages (``"body"``, ``"jobs[2]"``).
    Call :meth:`done` after reading every known field: it refuses the rest.
    Raises ValidationError.
    """

    def __init__(self, data: object, where: str = "body") -> None:
        if not isinstance(data, dict):
            raise ValidationError(f"{where} must be a JSON object, not {json_type(data)}")
        self.data: dict[str, Any] = data
        self.where = where
        self._known: list[str] = []

    def _name(self, name: str) -> str:
        return name if self.where == "body" else f"{self.where}.{name}"

    def required(self, name: str) -> Any:
        """The value of ``name``, which may be any JSON value including null."""
        self._known.append(name)
        if name not in self.data:
            raise ValidationError(f"missing field {self._name(name)!r}")
        return self.data[name]

    def optional(self, name: str) -> Any:
        """The value of ``name``, or None when it is absent or null."""
        self._known.append(name)
        return self.data.get(name)

    def string(self, name: str) -> str:
        """The required string field ``name``."""
        return self._check_string(name, self.required(name))

    def optional_string(self, name: str) -> str | None:
        """The string field ``name``, or None when it is absent or null."""
        value = self.optional(name)
        return None if value is None else self._check_string(name, value)

    def _check_string(self, name: str, value: object) -> str:
        if not isinstance(value, str):
            raise ValidationError(f"{self._name(name)!r} must be a string, not {json_type(value)}")
        return value

    def array(self, name: str) -> list[Any]:
        value = self.required(name)
        if not isinstance(value, list):
            raise ValidationError(f"{self._name(name)!r} must be an array, not {json_type(value)}")
        return value

    def done(self) -> None:
        unknown = sorted(set(self.data) - set(self._known))
        if unknown:
            raise ValidationError(
                f"unknown field {self._name(unknown[0])!r}; {self.where} takes {', '.join(sorted(self._known))}"
            )


def parse_time(value: object) -> datetime:
    """A timezone-aware time a broker sent. Raises EngineError."""
    if not isinstance(value, str):
        raise EngineError(f"the broker sent {value!r} where a time was expected")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise EngineError(f"the broker sent {value!r} where a time was expected") from None
    if moment.tzinfo is None:
        raise EngineError(f"the broker sent a time without a timezone: {value!r}")
    return moment


def check_url(url: str) -> str:
    """A broker's URL, without a trailing slash. Raises ValueError unless it
    is an absolute http:// or https:// URL."""
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"broker URL must be an absolute http:// or https:// URL, got {url!r}")
    return url.rstrip("/")
