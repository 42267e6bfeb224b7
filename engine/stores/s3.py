"""S3 and S3-compatible object stores (MinIO, Cloudflare R2), through boto3.

Contract (see :mod:`engine.stores.base`):

* ``get`` is one ``GetObject``; the ETag comes from the same response as the
  bytes, never from a separate ``HEAD``, so it always describes exactly the
  data returned. A missing object is ``None``.
* ``put`` is one ``PutObject`` with ``If-Match: <etag>`` (replace) or
  ``If-None-Match: *`` (create). A refused condition, whether 412
  PreconditionFailed, 409 ConditionalRequestConflict, or 404 for ``If-Match``
  on an object that no longer exists, raises
  :class:`~engine.errors.PreconditionFailed`.
* A put whose outcome is unknown raises
  :class:`~engine.errors.StoreUnavailable`: timeouts, connection errors, 5xx,
  throttling, and also a 412/409 that arrives after botocore had already
  retried the request. An earlier attempt may have landed, and then our own
  write is what makes the retry's condition fail. Settle it by re-reading.
* Missing or rejected credentials, a missing bucket or a wrong region raise
  :class:`~engine.errors.StoreConfigError`. Messages name the bucket and the
  endpoint, never a secret.
* Keys map to ``prefix + key``; ``list`` strips the prefix again.

The constructor does no I/O. It makes the boto3 session; the client (which
resolves credentials, possibly by asking the instance metadata service) is
made on first use, once, and is shared by all threads.

ETags on S3 are content hashes (MD5 for a single-part upload), so rewriting
the same bytes keeps the same ETag. The queue document carries a commit
sequence number, so two different states never share an ETag (I5).

Compatible stores:

* **MinIO**: ``s3://bucket/prefix?endpoint_url=http://127.0.0.1:9000``. With
  an ``endpoint_url``, path-style addressing is the default.
* **Cloudflare R2**:
  ``s3://bucket/prefix?endpoint_url=https://<account>.r2.cloudflarestorage.com&region=auto``.
  R2 needs region ``auto``.
* With a custom ``endpoint_url``, checksums are only sent and checked when an
  operation requires them (botocore's pre-2025 behaviour), because several
  S3-compatible stores reject the newer default checksum headers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Final, NoReturn

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    CredentialRetrievalError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    PartialCredentialsError,
    ProfileNotFound,
)

from engine.errors import PreconditionFailed, StoreConfigError, StoreError, StoreUnavailable, StoreUnsafe
from engine.stores.base import Blob, check_endpoint, check_range, check_write_args
from engine.stores.cloud import CloudStore

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

DEFAULT_CONNECT_TIMEOUT: Final = 5.0
DEFAULT_READ_TIMEOUT: Final = 10.0
DEFAULT_MAX_ATTEMPTS: Final = 3
ADDRESSING_STYLES: Final = ("auto", "path", "virtual")

_NO_CREDENTIALS: Final = "no AWS credentials found: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile"

# Error codes that mean "the request was refused as configured": retrying with
# the same settings cannot help.
_CONFIG_CODES: Final = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "AuthorizationHeaderMalformed",  # usually the wrong region
        "ExpiredToken",
        "InvalidAccessKeyId",
        "InvalidBucketName",
        "InvalidToken",
        "NoSuchBucket",
        "PermanentRedirect",  # the bucket is in another region
        "RequestTimeTooSkewed",
        "SignatureDoesNotMatch",
    }
)
# Transient codes: the store is overloaded or timed out; the request may be retried.
_TRANSIENT_CODES: Final = frozenset(
    {
        "InternalError",
        "RequestLimitExceeded",
        "RequestTimeout",
        "ServiceUnavailable",
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "TooManyRequests",
    }
)
_CONDITION_CODES: Final = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})
# Transport failures: the request may or may not have reached the store.
_TRANSIENT_ERRORS: Final = (HTTPClientError, ConnectionError, IncompleteReadError)
_CREDENTIAL_ERRORS: Final = (NoCredentialsError, PartialCredentialsError, CredentialRetrievalError, ProfileNotFound)


class S3Store(CloudStore["S3Client"]):
    """Objects under ``prefix`` in an S3 (or S3-compatible) bucket.

    Credentials come from boto3's usual chain (environment, profile, instance
    role). Raises StoreConfigError for a bad bucket name, prefix, endpoint or
    option; does no network I/O.
    """

    scheme = "s3"
    option_types: ClassVar[Mapping[str, Callable[[str], object]]] = {
        "endpoint_url": str,
        "region": str,
        "addressing_style": str,
        "connect_timeout": float,
        "read_timeout": float,
        "max_attempts": int,
    }

    def __init__(
        self,
        *,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str | None = None,
        addressing_style: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> None:
        self.bucket = _check_bucket(bucket)
        super().__init__(location=self.bucket, prefix=prefix, what="S3")
        self.endpoint_url = (
            check_endpoint(endpoint_url, what="S3", credentials_hint="use the AWS_* variables or a profile")
            if endpoint_url is not None
            else None
        )
        if region is not None and not region:
            raise StoreConfigError("S3 region must not be empty")
        self.region = region
        if addressing_style is None and endpoint_url is not None:
            addressing_style = "path"  # MinIO, moto and R2 all accept it; virtual needs DNS
        if addressing_style is not None and addressing_style not in ADDRESSING_STYLES:
            raise StoreConfigError(
                f"S3 addressing_style must be one of {', '.join(ADDRESSING_STYLES)}, got {addressing_style!r}"
            )
        if not connect_timeout > 0 or not read_timeout > 0:
            raise StoreConfigError("S3 connect_timeout and read_timeout must be positive")
        if max_attempts < 1:
            raise StoreConfigError(f"S3 max_attempts must be at least 1, got {max_attempts}")

        config_args: dict[str, Any] = {
            # total_max_attempts counts the first request; botocore's "max_attempts" counts only retries.
            "retries": {"mode": "standard", "total_max_attempts": max_attempts},
            "connect_timeout": connect_timeout,
            "read_timeout": read_timeout,
        }
        if addressing_style is not None:
            config_args["s3"] = {"addressing_style": addressing_style}
        if self.endpoint_url is not None:
            config_args["request_checksum_calculation"] = "when_required"
            config_args["response_checksum_validation"] = "when_required"
        self._config = Config(**config_args)
        try:
            # Sessions are not thread-safe, so this one is used only under _lock.
            self._session = boto3.Session()
        except ProfileNotFound as exc:
            raise StoreConfigError(f"S3 store: {exc}") from exc

    # -- the contract ---------------------------------------------------------

    def get(self, key: str) -> Blob | None:
        object_key = self._key(key)
        client = self._get_client(key)
        try:
            response = client.get_object(Bucket=self.bucket, Key=object_key)
        except ClientError as exc:
            if _code(exc) == "NoSuchKey" or (_status(exc) == 404 and _code(exc) != "NoSuchBucket"):
                return None
            self._raise(exc, "get", key)
        except (BotoCoreError, *_TRANSIENT_ERRORS) as exc:
            self._raise(exc, "get", key)
        body = response["Body"]
        try:
            data = body.read()
        except (BotoCoreError, *_TRANSIENT_ERRORS) as exc:
            self._raise(exc, "get", key)
        finally:
            body.close()
        return Blob(data=data, etag=response["ETag"])

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        check_range(start, length)
        if length == 0:
            return None if self.etag(key) is None else b""
        object_key = self._key(key)
        client = self._get_client(key)
        try:
            response = client.get_object(Bucket=self.bucket, Key=object_key,
                                         Range=f"bytes={start}-{start + length - 1}")
        except ClientError as exc:
            if _code(exc) == "NoSuchKey" or (_status(exc) == 404 and _code(exc) != "NoSuchBucket"):
                return None
            if _code(exc) == "InvalidRange" or _status(exc) == 416:
                return b""  # the object ends before ``start``
            self._raise(exc, "get", key)
        except (BotoCoreError, *_TRANSIENT_ERRORS) as exc:
            self._raise(exc, "get", key)
        body = response["Body"]
        try:
            data: bytes = body.read()
        except (BotoCoreError, *_TRANSIENT_ERRORS) as exc:
            self._raise(exc, "get", key)
        finally:
            body.close()
        return data

    def etag(self, key: str) -> str | None:
        object_key = self._key(key)
        client = self._get_client(key)
        try:
            response = client.head_object(Bucket=self.bucket, Key=object_key)
        except ClientError as exc:
            if _status(exc) == 404:  # HEAD has no body, so a missing bucket looks the same; get() tells
                return None
            self._raise(exc, "head", key)
        except (BotoCoreError, *_TRANSIENT_ERRORS) as exc:
            self._raise(exc, "head", key)
        etag: str = response["ETag"]
        return etag

    def put(
        self,
        key: str,
        data: bytes,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
    ) -> str:
        object_key = self._key(key)
        check_write_args(if_match, if_none_match)
        client = self._get_client(key)
        body = data if isinstance(data, bytes) else bytes(data)
        try:
            if if_match is not None:
                response = client.put_object(Bucket=self.bucket, Key=object_key, Body=body, IfMatch=if_match)
            elif if_none_match:
                response = client.put_object(Bucket=self.bucket, Key=object_key, Body=body, IfNoneMatch="*")
            else:
                response = client.put_object(Bucket=self.bucket, Key=object_key, Body=body)
        except ClientError as exc:
            conditional = if_match is not None or if_none_match
            if conditional and _is_condition_failure(exc, if_match=if_match is not None):
                if _retry_attempts(exc) > 0:
                    # An earlier attempt failed transiently and may have
                    # landed; if it did, our own write fails this condition.
                    raise StoreUnavailable(
                        f"put {key} in {self.describe()}: condition failed after {_retry_attempts(exc)} "
                        "retried attempt(s), so an earlier attempt may have landed; re-read to settle"
                    ) from exc
                if _code(exc) == "NoSuchKey":
                    raise PreconditionFailed(f"{key} in {self.describe()} no longer exists") from exc
                raise PreconditionFailed(f"{key} in {self.describe()} changed since it was read") from exc
            if conditional and _code(exc) == "NotImplemented":
                # What S3 itself answered before it had conditional writes, and
                # what a compatible store without them answers: never retried.
                header = "If-Match" if if_match is not None else "If-None-Match"
                raise StoreUnsafe(f"a put with {header} was answered NotImplemented (HTTP {_status(exc)})",
                                  self.describe()) from exc
            self._raise(exc, "put", key)
        except (BotoCoreError, *_TRANSIENT_ERRORS) as exc:
            self._raise(exc, "put", key)
        return response["ETag"]

    def delete(self, key: str) -> None:
        object_key = self._key(key)
        client = self._get_client(key)
        try:
            client.delete_object(Bucket=self.bucket, Key=object_key)
        except ClientError as exc:
            if _code(exc) == "NoSuchKey":  # S3 answers 204 anyway; some compatibles don't
                return
            self._raise(exc, "delete", key)
        except (BotoCoreError, *_TRANSIENT_ERRORS) as exc:
            self._raise(exc, "delete", key)

    def list(self, prefix: str = "") -> list[str]:
        client = self._get_client(prefix)
        try:
            pages = client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix + prefix)
            return self._relative_keys(item.get("Key", "") for page in pages for item in page.get("Contents", []))
        except (ClientError, BotoCoreError, *_TRANSIENT_ERRORS) as exc:
            self._raise(exc, "list", prefix)

    # -- helpers --------------------------------------------------------------

    def _connect(self, key: str) -> S3Client:
        try:
            return self._session.client(
                "s3", endpoint_url=self.endpoint_url, region_name=self.region, config=self._config
            )
        except (ClientError, BotoCoreError, *_TRANSIENT_ERRORS) as exc:
            self._raise(exc, "connect", key)

    def _disconnect(self, client: S3Client) -> None:
        client.close()

    def _raise(self, exc: Exception, op: str, key: str) -> NoReturn:
        """Raise the engine error for a botocore failure, chained to it."""
        where = f"{op} {key or '(all)'} in {self.describe()}"
        if isinstance(exc, ProfileNotFound):
            raise StoreConfigError(f"{where}: {exc}") from exc
        if isinstance(exc, _CREDENTIAL_ERRORS):
            raise StoreConfigError(f"{_NO_CREDENTIALS} ({type(exc).__name__}; {where})") from exc
        if isinstance(exc, _TRANSIENT_ERRORS):
            landed = "; the write may have landed" if op == "put" else ""
            raise StoreUnavailable(f"{where}: {type(exc).__name__} (store unreachable or too slow){landed}") from exc
        if isinstance(exc, ClientError):
            code, status = _code(exc), _status(exc)
            detail = f"{code} (HTTP {status})"
            if code == "NoSuchBucket":
                raise StoreConfigError(f"{where}: bucket {self.bucket!r} does not exist: {detail}") from exc
            if code in _CONFIG_CODES or status in (301, 401, 403):
                raise StoreConfigError(
                    f"{where}: the store refused access to bucket {self.bucket!r}: {detail}; "
                    "check the credentials, region and bucket"
                ) from exc
            if code in _TRANSIENT_CODES or status == 429 or status >= 500:
                raise StoreUnavailable(f"{where}: {detail}") from exc
            raise StoreError(f"{where}: {detail}") from exc
        raise StoreError(f"{where}: {type(exc).__name__}") from exc


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def _retry_attempts(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0))


def _is_condition_failure(exc: ClientError, *, if_match: bool) -> bool:
    code, status = _code(exc), _status(exc)
    if code in _CONDITION_CODES or status == 412:
        return True
    if status == 409 and code not in _CONFIG_CODES:
        return True
    # If-Match on an object that no longer exists: S3 answers 404 NoSuchKey.
    return if_match and code == "NoSuchKey"


def _check_bucket(bucket: str) -> str:
    if not isinstance(bucket, str) or not bucket:
        raise StoreConfigError("S3 store needs a bucket: s3://bucket/prefix")
    if "@" in bucket or ":" in bucket:
        # Don't echo it: this is likely user:secret@bucket.
        raise StoreConfigError("S3 bucket must be a plain name; credentials do not belong in the store URL")
    if not 3 <= len(bucket) <= 255 or not all(c.isascii() and (c.isalnum() or c in "._-") for c in bucket):
        raise StoreConfigError(f"invalid S3 bucket name {bucket!r}")
    return bucket
