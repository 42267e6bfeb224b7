"""What the cloud backends (S3, GCS, Azure) share, apart from their libraries.

Each cloud store keeps objects under ``prefix`` in one named bucket (or
container) and talks to the service through a client object that is made on
first use, once, under a lock, and shared by all threads. This module holds
that part: the key prefix, :meth:`~CloudStore.describe`, the client's
lifecycle (:meth:`~CloudStore.close`), and the ``parse_options`` wrapper.
Everything library-specific (how the client is made, what a request looks
like, how a failure maps to an engine error) stays in the backend's module.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

from engine.errors import StoreConfigError
from engine.stores.base import ObjectStore, check_key, normalize_prefix, parse_options


class CloudStore[Client](ObjectStore):
    """An :class:`ObjectStore` over one bucket of a cloud service, reached through a lazily made ``Client``.

    ``Client`` is whatever the backend needs to send requests (a boto3 client,
    or a service client with its container client). Subclasses set
    :attr:`scheme` and :attr:`option_types`, call ``super().__init__`` from
    their constructor, and implement :meth:`_connect` and :meth:`_disconnect`.
    """

    remote = True

    #: The URL scheme (``s3``, ``gs``, ``az``), used by :meth:`describe` and in option errors.
    scheme: ClassVar[str]
    #: The URL query parameters :meth:`parse_options` accepts, each with the function that parses it.
    option_types: ClassVar[Mapping[str, Callable[[str], object]]]

    #: Set by the subclass before it calls :meth:`describe` (or anything that does).
    endpoint_url: str | None

    def __init__(self, *, location: str, prefix: str, what: str) -> None:
        """Keep ``location`` (the bucket or container name, already checked) and the normalized ``prefix``.

        Raises StoreConfigError naming ``what`` (``"S3"``) for a bad prefix. Does no I/O.
        """
        self._location = location
        self.prefix = normalize_prefix(prefix, what=what)
        self._lock = threading.Lock()
        self._client: Client | None = None
        self._closed = False

    @classmethod
    def parse_options(cls, options: Mapping[str, str]) -> dict[str, Any]:
        """Translate URL query parameters into constructor keyword arguments.

        Raises StoreConfigError naming unknown parameters or bad values.
        """
        return parse_options(options, cls.option_types, scheme=cls.scheme)

    def describe(self) -> str:
        """``scheme://location/prefix``, and ``at endpoint_url`` when one was given (never a secret)."""
        where = f"{self.scheme}://{self._location}/{self.prefix.rstrip('/')}"
        if self.endpoint_url is not None:
            where += f" at {self.endpoint_url}"
        return where

    def close(self) -> None:
        """Close the client, if one was made. Idempotent; any later request raises StoreConfigError."""
        with self._lock:
            self._closed = True
            client, self._client = self._client, None
        if client is not None:
            self._disconnect(client)

    # -- for the backends -------------------------------------------------------

    def _key(self, key: str) -> str:
        """The object name for ``key``: checked (StoreConfigError), then prefixed."""
        return self.prefix + check_key(key)

    def _relative_keys(self, names: Iterable[str]) -> list[str]:
        """The keys of the object ``names`` a listing returned, without the prefix, sorted.

        Names outside the prefix are dropped. Iterates ``names`` here, so a
        library's paging requests (and their errors) happen inside this call.
        """
        return sorted(name[len(self.prefix) :] for name in names if name.startswith(self.prefix))

    def _get_client(self, key: str) -> Client:
        """The shared client, made by :meth:`_connect` on first use (under the lock, so only once).

        Raises StoreConfigError once the store is closed, and whatever
        :meth:`_connect` raises (it is retried on the next call).
        """
        with self._lock:
            if self._closed:
                raise StoreConfigError(f"{self.describe()} is closed")
            if self._client is None:
                self._client = self._connect(key)
            return self._client

    @abc.abstractmethod
    def _connect(self, key: str) -> Client:
        """Make the client. Called under the lock; ``key`` is for error messages. Raises engine errors only."""

    @abc.abstractmethod
    def _disconnect(self, client: Client) -> None:
        """Release the connections of a client :meth:`_connect` made. Called outside the lock."""
