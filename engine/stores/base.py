"""The object-store contract every backend implements.

A store holds opaque byte objects under string keys. Each stored version has
an ETag, an opaque string that changes whenever the object changes, returned
in the *same* response as the data. Conditional writes are the only
concurrency primitive the engine relies on:

* ``put(key, data, if_match=etag)`` replaces the object only if its current
  ETag is ``etag``;
* ``put(key, data, if_none_match=True)`` creates the object only if absent.

A lost race raises :class:`~engine.errors.PreconditionFailed`. Transient
failures raise :class:`~engine.errors.StoreUnavailable`; for a write that is
ambiguous (it may have landed), and callers settle it by re-reading.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from engine.errors import StoreConfigError

# Keys are relative, slash-separated paths. Anything else (absolute paths,
# "..", empty segments, control characters) is refused so that the file
# backend can never escape its root.
# Segments may not start with "." (the file backend keeps its locks and
# temporary files under dot-folders).
_KEY_SEGMENT = re.compile(r"^[A-Za-z0-9_=+@,-][A-Za-z0-9_.=+@,-]*$")


@dataclass(frozen=True, slots=True, kw_only=True)
class Blob:
    """One version of an object: its bytes and the ETag of exactly those bytes."""

    data: bytes
    etag: str


class ObjectStore(abc.ABC):
    """A key-value object store with conditional writes. All methods do I/O
    (except on the memory backend) and are safe to call from several threads."""

    #: Whether the store is across a network (S3, GCS, Azure), where one request
    #: can stall while the next is quick: the app hedges writes there by default
    #: (QUEUE_STORE_HEDGE_SECONDS). A store that wraps another says what it says.
    remote: bool = False

    @abc.abstractmethod
    def get(self, key: str) -> Blob | None:
        """Return the current version of ``key``, or ``None`` if it does not exist.

        Raises StoreUnavailable on transient failure, StoreConfigError on bad
        configuration or credentials.
        """

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        """Up to ``length`` bytes of ``key`` from byte ``start`` (fewer where
        the object ends first, none past its end), or ``None`` if it does not
        exist. For immutable objects (segments, id indexes): no ETag comes
        back, so a reader cannot tell versions apart.

        Raises as :meth:`get`. Backends override it with a ranged request;
        the default reads the whole object.
        """
        check_range(start, length)
        blob = self.get(key)
        return None if blob is None else blob.data[start:start + length]

    def etag(self, key: str) -> str | None:
        """The current ETag of ``key`` without its bytes, or ``None`` if absent.

        Lets a watcher (a standby broker) check cheaply whether the object
        changed. Backends override it with a metadata-only request; the
        default reads the object.
        """
        blob = self.get(key)
        return None if blob is None else blob.etag

    @abc.abstractmethod
    def put(
        self,
        key: str,
        data: bytes,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
    ) -> str:
        """Write ``data`` to ``key`` and return the new ETag.

        With ``if_match``, replace only if the current ETag equals it; with
        ``if_none_match``, create only if absent; with neither, write
        unconditionally. Raises PreconditionFailed when the condition does not
        hold, StoreUnavailable when the outcome is unknown.
        """

    def put_parts(
        self,
        key: str,
        parts: Sequence[bytes],
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
    ) -> str:
        """Like :meth:`put` with ``data = b"".join(parts)``.

        Backends that can send pieces one after another (a file, a socket)
        override this to avoid copying a large document into one buffer.
        """
        return self.put(key, b"".join(parts), if_match=if_match, if_none_match=if_none_match)

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key``. Removing a missing key is not an error."""

    @abc.abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Return the keys that start with ``prefix``, sorted."""

    def close(self) -> None:  # noqa: B027 - optional hook, most stores hold nothing
        """Release connections. Idempotent."""

    def describe(self) -> str:
        """A short human description for logs and errors (never includes secrets)."""
        return type(self).__name__


def check_key(key: str) -> str:
    """Validate an object key and return it. Raises StoreConfigError."""
    if not isinstance(key, str) or not key:
        raise StoreConfigError(f"invalid object key {key!r}")
    for segment in key.split("/"):
        if not _KEY_SEGMENT.match(segment):
            raise StoreConfigError(f"invalid object key {key!r}")
    return key


def check_write_args(if_match: str | None, if_none_match: bool) -> None:
    """Refuse contradictory conditions, which no backend can honour."""
    if if_match is not None and if_none_match:
        raise StoreConfigError("put() takes if_match or if_none_match, not both")


def check_range(start: int, length: int) -> None:
    """Refuse a range that starts or runs below zero (``get_range``): a bug
    in the caller, never a store's answer. Raises ValueError."""
    if start < 0 or length < 0:
        raise ValueError(f"a range starts and runs at 0 or more bytes, not {start}, {length}")


def normalize_prefix(prefix: str, *, what: str) -> str:
    """``prefix`` as ``"a/b/"`` (or ``""``), checked like a key. Raises StoreConfigError naming ``what``."""
    stripped = prefix.strip("/")
    if not stripped:
        return ""
    try:
        check_key(stripped)
    except StoreConfigError:
        raise StoreConfigError(f"invalid {what} key prefix {prefix!r}") from None
    return stripped + "/"


def check_endpoint(endpoint_url: str, *, what: str, credentials_hint: str) -> str:
    """An http(s) endpoint URL without credentials in it. Raises StoreConfigError (never echoing the URL)."""
    parts = urlsplit(endpoint_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise StoreConfigError(f"{what} endpoint_url must look like http(s)://host[:port][/path]")
    if parts.username is not None or parts.password is not None:
        raise StoreConfigError(f"{what} endpoint_url must not contain credentials; {credentials_hint}")
    return urlunsplit(parts).rstrip("/")


def parse_options(
    options: Mapping[str, str], types: Mapping[str, Callable[[str], object]], *, scheme: str
) -> dict[str, Any]:
    """Translate URL query parameters into constructor keyword arguments, typed by ``types``.

    Raises StoreConfigError naming unknown parameters or bad values.
    """
    unknown = sorted(set(options) - types.keys())
    if unknown:
        raise StoreConfigError(
            f"unknown {scheme} store option(s) {', '.join(unknown)}; known: {', '.join(sorted(types))}"
        )
    kwargs: dict[str, Any] = {}
    for name, raw in options.items():
        if raw == "":
            raise StoreConfigError(f"{scheme} store option {name} is empty")
        kind = types[name]
        try:
            kwargs[name] = kind(raw)
        except ValueError as exc:
            raise StoreConfigError(f"{scheme} store option {name}={raw!r} is not valid") from exc
    return kwargs


def parse_bool(raw: str) -> bool:
    """``true``/``1``/``yes`` or ``false``/``0``/``no``; raises ValueError otherwise."""
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


def is_loopback(url: str) -> bool:
    """Whether ``url`` names this machine (an emulator), by its host."""
    host = urlsplit(url).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")
