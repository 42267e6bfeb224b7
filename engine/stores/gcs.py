"""Google Cloud Storage, through the official ``google-cloud-storage`` client.

Contract (see :mod:`engine.stores.base`):

* The ETag this store hands out is the object's **generation** (a decimal
  string). GCS gives every write a new generation, so rewriting the same
  bytes changes the ETag too.
* ``get`` is one media download; the generation comes from the same
  response (its ``x-goog-generation`` header) as the bytes. A missing object
  is ``None``.
* ``etag`` is one metadata request (``objects.get`` without ``alt=media``).
* ``put`` is one upload with ``ifGenerationMatch=<generation>`` (replace) or
  ``ifGenerationMatch=0`` (create), so GCS itself decides the race. A refused
  condition (412, or 409) raises :class:`~engine.errors.PreconditionFailed`.
  GCS answers 412, not 404, for a generation condition on a missing object.
* **Writes are never retried by the library.** google-cloud-storage retries a
  write whose generation is pinned, by default; if the first attempt had
  landed, the retry would come back 412 and look like a lost race. So every
  write is sent once (``retry=None``): a timeout, a connection error, 429 or
  5xx raises :class:`~engine.errors.StoreUnavailable` ("may have landed"),
  which the committer settles by re-reading (DESIGN.md, "Ambiguous writes").
  Reads, listing and delete are retried for up to ``read_retry_seconds``.
* Missing or rejected credentials and a missing bucket raise
  :class:`~engine.errors.StoreConfigError` naming the bucket.
* Keys map to ``prefix + key``; ``list`` strips the prefix again.

GCS allows about one write per second to one object name; faster writes get
429 (StoreUnavailable here), which group commit absorbs by batching.

Credentials come from ``google.auth.default()`` (``GOOGLE_APPLICATION_CREDENTIALS``,
``gcloud auth application-default login``, the metadata server), resolved on
first use, never in the constructor. An ``endpoint_url`` on this machine
(fake-gcs-server, ``gcp-storage-emulator``) uses anonymous credentials unless
``anonymous=false``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar, Final, NoReturn

import google.auth
import requests
from google.api_core import exceptions as gexc
from google.api_core.retry import Retry
from google.auth import exceptions as auth_exc
from google.auth.credentials import AnonymousCredentials, Credentials
from google.cloud import storage
from google.cloud.storage import exceptions as storage_exc
from google.cloud.storage.retry import DEFAULT_RETRY

from engine.errors import PreconditionFailed, StoreConfigError, StoreError, StoreUnavailable
from engine.stores.base import Blob, check_endpoint, check_range, check_write_args, is_loopback, parse_bool
from engine.stores.cloud import CloudStore

DEFAULT_CONNECT_TIMEOUT: Final = 5.0
DEFAULT_READ_TIMEOUT: Final = 10.0
#: How long reads, listing and delete may be retried (writes never are).
DEFAULT_READ_RETRY_SECONDS: Final = 10.0
#: The project stands in for none: object requests don't use it.
PLACEHOLDER_PROJECT: Final = "queueadmin"
_SCOPES: Final = ("https://www.googleapis.com/auth/devstorage.read_write",)
_NO_CREDENTIALS: Final = (
    "no Google Cloud credentials found: set GOOGLE_APPLICATION_CREDENTIALS or run "
    "`gcloud auth application-default login`"
)
# Transport failures: the request may or may not have reached the store.
_TRANSIENT_ERRORS: Final = (
    requests.exceptions.RequestException,
    auth_exc.TransportError,
    storage_exc.InvalidResponse,
    storage_exc.DataCorruption,
    gexc.RetryError,
    ConnectionError,
    TimeoutError,
)
_CAUGHT: Final = (gexc.GoogleAPICallError, auth_exc.GoogleAuthError, *_TRANSIENT_ERRORS)


class GCSStore(CloudStore[tuple[storage.Client, storage.Bucket]]):
    """Objects under ``prefix`` in a Google Cloud Storage bucket.

    Raises StoreConfigError for a bad bucket name, prefix, endpoint or option;
    does no network I/O.
    """

    scheme = "gs"
    option_types: ClassVar[Mapping[str, Callable[[str], object]]] = {
        "endpoint_url": str,
        "project": str,
        "anonymous": parse_bool,
        "connect_timeout": float,
        "read_timeout": float,
        "read_retry_seconds": float,
    }

    def __init__(
        self,
        *,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        project: str | None = None,
        anonymous: bool | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        read_retry_seconds: float = DEFAULT_READ_RETRY_SECONDS,
    ) -> None:
        self.bucket = _check_bucket(bucket)
        super().__init__(location=self.bucket, prefix=prefix, what="GCS")
        self.endpoint_url = (
            check_endpoint(
                endpoint_url, what="GCS", credentials_hint="use GOOGLE_APPLICATION_CREDENTIALS or gcloud auth"
            )
            if endpoint_url is not None
            else None
        )
        if project is not None and not project:
            raise StoreConfigError("GCS project must not be empty")
        self.project = project
        self.anonymous = anonymous if anonymous is not None else bool(endpoint_url and is_loopback(endpoint_url))
        if not connect_timeout > 0 or not read_timeout > 0:
            raise StoreConfigError("GCS connect_timeout and read_timeout must be positive")
        if not read_retry_seconds >= 0:
            raise StoreConfigError("GCS read_retry_seconds must be zero or more")
        self._timeout = (connect_timeout, read_timeout)
        self._read_retry: Retry | None = (
            DEFAULT_RETRY.with_timeout(read_retry_seconds) if read_retry_seconds > 0 else None
        )

    # -- the contract ---------------------------------------------------------

    def get(self, key: str) -> Blob | None:
        blob = self._get_bucket(key).blob(self._key(key))
        data = self._download(blob, key)
        if data is None:
            return None
        if blob.generation is None:
            raise StoreError(f"get {key} in {self.describe()}: the response carried no generation")
        return Blob(data=data, etag=str(blob.generation))

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        check_range(start, length)
        if length == 0:
            return None if self.etag(key) is None else b""
        try:
            return self._download(self._get_bucket(key).blob(self._key(key)), key, start=start,
                                  end=start + length - 1)
        except gexc.RequestRangeNotSatisfiable:
            return b""  # the object ends before ``start``

    def _download(self, blob: storage.Blob, key: str, **span: int) -> bytes | None:
        """``blob``'s bytes (``span``: ``start`` and ``end``, inclusive), or
        None if it does not exist. A missing bucket, and every other failure
        but a range past the end (RequestRangeNotSatisfiable), raise."""
        try:
            data: bytes = blob.download_as_bytes(timeout=self._timeout, retry=self._read_retry, **span)
        except gexc.RequestRangeNotSatisfiable:
            raise
        except gexc.NotFound as exc:
            if _names_bucket(exc):
                self._raise(exc, "get", key)
            return None
        except _CAUGHT as exc:
            self._raise(exc, "get", key)
        return data

    def etag(self, key: str) -> str | None:
        name = self._key(key)
        bucket = self._get_bucket(key)
        try:
            blob = bucket.get_blob(name, timeout=self._timeout, retry=self._read_retry)
        except _CAUGHT as exc:
            self._raise(exc, "head", key)
        if blob is None:
            return None
        return str(blob.generation)

    def put(
        self,
        key: str,
        data: bytes,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
    ) -> str:
        name = self._key(key)
        check_write_args(if_match, if_none_match)
        generation: int | None = None
        if if_match is not None:
            generation = _parse_generation(if_match)
            if generation is None:  # not an ETag this store handed out, so it matches nothing
                raise PreconditionFailed(f"{key} in {self.describe()}: {if_match!r} is not a GCS generation")
        elif if_none_match:
            generation = 0
        blob = self._get_bucket(key).blob(name)
        try:
            # retry=None: see the module docstring; a retried conditional write is ambiguous.
            blob.upload_from_string(
                bytes(data),
                content_type="application/octet-stream",
                if_generation_match=generation,
                timeout=self._timeout,
                retry=None,
            )
        except (gexc.PreconditionFailed, gexc.Conflict) as exc:
            if generation is None:
                self._raise(exc, "put", key)
            if generation == 0:
                raise PreconditionFailed(f"{key} in {self.describe()} already exists") from exc
            raise PreconditionFailed(f"{key} in {self.describe()} changed since it was read") from exc
        except _CAUGHT as exc:
            self._raise(exc, "put", key)
        if blob.generation is None:
            raise StoreUnavailable(f"put {key} in {self.describe()}: the response carried no generation")
        return str(blob.generation)

    def delete(self, key: str) -> None:
        name = self._key(key)
        bucket = self._get_bucket(key)
        try:
            bucket.delete_blob(name, timeout=self._timeout, retry=self._read_retry)
        except gexc.NotFound as exc:
            if _names_bucket(exc):
                self._raise(exc, "delete", key)
        except _CAUGHT as exc:
            self._raise(exc, "delete", key)

    def list(self, prefix: str = "") -> list[str]:
        client, _ = self._get_client(prefix)
        try:
            items = client.list_blobs(
                self.bucket, prefix=self.prefix + prefix, timeout=self._timeout, retry=self._read_retry
            )
            return self._relative_keys(item.name for item in items)
        except _CAUGHT as exc:
            self._raise(exc, "list", prefix)

    # -- helpers --------------------------------------------------------------

    def _get_bucket(self, key: str) -> storage.Bucket:
        _, bucket = self._get_client(key)
        return bucket

    def _connect(self, key: str) -> tuple[storage.Client, storage.Bucket]:
        credentials: Credentials
        project = self.project
        if self.anonymous:
            credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
        else:
            try:
                credentials, default_project = google.auth.default(scopes=_SCOPES)
            except auth_exc.GoogleAuthError as exc:
                self._raise(exc, "connect", key)
            project = project or default_project
        options = {"api_endpoint": self.endpoint_url} if self.endpoint_url is not None else None
        client = storage.Client(project=project or PLACEHOLDER_PROJECT, credentials=credentials, client_options=options)
        # google-cloud-storage 3.x fetches bucket metadata in a background
        # thread, for trace attributes only: an extra request (and an IAM
        # permission, storage.buckets.get) the engine neither needs nor
        # counts (I11). The library checks this attribute before fetching.
        client._bucket_metadata_cache = None
        return client, client.bucket(self.bucket)

    def _disconnect(self, client: tuple[storage.Client, storage.Bucket]) -> None:
        client[0].close()

    def _raise(self, exc: Exception, op: str, key: str) -> NoReturn:
        """Raise the engine error for a google-cloud-storage failure, chained to it."""
        where = f"{op} {key or '(all)'} in {self.describe()}"
        if isinstance(exc, auth_exc.DefaultCredentialsError):
            if self.anonymous:  # a 401 makes the session refresh anonymous credentials, which can't
                raise StoreConfigError(
                    f"{where}: the store refused anonymous access to bucket {self.bucket!r} "
                    "(anonymous=true is for emulators)"
                ) from exc
            raise StoreConfigError(f"{_NO_CREDENTIALS} ({where})") from exc
        if isinstance(exc, _TRANSIENT_ERRORS):
            landed = "; the write may have landed" if op == "put" else ""
            raise StoreUnavailable(f"{where}: {type(exc).__name__} (store unreachable or too slow){landed}") from exc
        if isinstance(exc, auth_exc.GoogleAuthError):  # RefreshError and kin: the credentials were refused
            raise StoreConfigError(f"{where}: the Google credentials were refused ({type(exc).__name__})") from exc
        if isinstance(exc, gexc.GoogleAPICallError):
            status = int(exc.code or 0)
            detail = f"HTTP {status} {exc.reason or type(exc).__name__}"
            if isinstance(exc, gexc.NotFound):
                raise StoreConfigError(f"{where}: bucket {self.bucket!r} does not exist ({detail})") from exc
            if status in (401, 403):
                raise StoreConfigError(
                    f"{where}: the store refused access to bucket {self.bucket!r} ({detail}); "
                    "check the credentials and the bucket"
                ) from exc
            if status in (408, 429) or status >= 500:
                landed = "; the write may have landed" if op == "put" else ""
                raise StoreUnavailable(f"{where}: {detail}{landed}") from exc
            raise StoreError(f"{where}: {detail}") from exc
        raise StoreError(f"{where}: {type(exc).__name__}") from exc


def _names_bucket(exc: gexc.NotFound) -> bool:
    """Whether a 404 is about the bucket (real GCS says so) rather than the object."""
    return "bucket does not exist" in str(exc.message).lower()


def _parse_generation(etag: str) -> int | None:
    text = etag.strip('"')
    if not text.isdigit() or text.startswith("0"):
        return None
    return int(text)


def _check_bucket(bucket: str) -> str:
    if not isinstance(bucket, str) or not bucket:
        raise StoreConfigError("GCS store needs a bucket: gs://bucket/prefix")
    if "@" in bucket or ":" in bucket:
        raise StoreConfigError("GCS bucket must be a plain name; credentials do not belong in the store URL")
    if not 3 <= len(bucket) <= 222 or not all(
        c.isascii() and (c.islower() or c.isdigit() or c in "._-") for c in bucket
    ):
        raise StoreConfigError(f"invalid GCS bucket name {bucket!r}")
    return bucket
