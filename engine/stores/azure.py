"""Azure Blob Storage, through the official ``azure-storage-blob`` client.

Contract (see :mod:`engine.stores.base`):

* ``get`` is one download (``Get Blob``); the ETag comes from the same
  response as the bytes. A missing blob is ``None``.
* ``etag`` is one ``Get Blob Properties`` (a HEAD): metadata only.
* ``put`` is one ``Put Blob`` with ``If-Match: <etag>`` (replace) or
  ``If-None-Match: *`` (create), so the service decides the race. A refused
  condition (412 ConditionNotMet, or 409 BlobAlreadyExists for a create)
  raises :class:`~engine.errors.PreconditionFailed`. Azure answers 412 for
  ``If-Match`` on a blob that does not exist. Every write to a blob gets a
  new ETag, even with the same bytes.
* **Writes are never retried by the library** (``retry_total=0`` on each
  write): if a first attempt had landed, a retry would be refused by our own
  write and look like a lost race. A timeout, a connection error, 429 or 5xx
  raises :class:`~engine.errors.StoreUnavailable` ("may have landed"), which
  the committer settles by re-reading (DESIGN.md, "Ambiguous writes"). Reads,
  listing and delete get up to ``max_attempts`` attempts.
* Rejected or missing credentials and a missing container raise
  :class:`~engine.errors.StoreConfigError` naming the container.
* Keys map to ``prefix + key``; ``list`` strips the prefix again.

Where the account is and how to sign in:

* ``connection_string`` (the caller reads it, for example from
  ``AZURE_STORAGE_CONNECTION_STRING``; the engine never reads the
  environment): its account key or SAS token, and its blob endpoint unless
  ``endpoint_url`` overrides it (an emulator on another port).
* Otherwise ``endpoint_url`` (``https://<account>.blob.core.windows.net``) or
  ``account`` names the account, and ``DefaultAzureCredential`` from
  ``azure-identity`` signs in (environment, workload or managed identity,
  ``az login``).

The constructor does no I/O; the client is made on first use, once, and is
shared by all threads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final, NoReturn

from azure.core import MatchConditions
from azure.core.credentials import AzureSasCredential
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.blob import BlobServiceClient, ContainerClient, LinearRetry

from engine.errors import PreconditionFailed, StoreConfigError, StoreError, StoreUnavailable
from engine.stores.base import Blob, check_endpoint, check_range, check_write_args
from engine.stores.cloud import CloudStore

DEFAULT_CONNECT_TIMEOUT: Final = 5.0
DEFAULT_READ_TIMEOUT: Final = 10.0
#: Attempts for reads, listing and delete (writes get exactly one).
DEFAULT_MAX_ATTEMPTS: Final = 3
#: Seconds between read attempts, give or take the jitter (the library takes whole seconds).
RETRY_BACKOFF_SECONDS: Final = 1
RETRY_JITTER_SECONDS: Final = 1
_CONTAINER_MISSING: Final = "ContainerNotFound"
_CONDITION_CODES: Final = frozenset({"ConditionNotMet", "BlobAlreadyExists", "TargetConditionNotMet"})
_TRANSIENT_ERRORS: Final = (ServiceRequestError, ServiceResponseError, ConnectionError, TimeoutError)


class AzureBlobStore(CloudStore[tuple[BlobServiceClient, ContainerClient]]):
    """Blobs under ``prefix`` in an Azure Blob Storage container.

    Raises StoreConfigError for a bad container name, prefix, endpoint,
    option, or no way to find the account; does no network I/O.
    """

    scheme = "az"
    option_types: ClassVar[Mapping[str, Callable[[str], object]]] = {
        "endpoint_url": str,
        "account": str,
        "connect_timeout": float,
        "read_timeout": float,
        "max_attempts": int,
    }

    def __init__(
        self,
        *,
        container: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        account: str | None = None,
        connection_string: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> None:
        self.container = _check_container(container)
        super().__init__(location=self.container, prefix=prefix, what="Azure")
        hint = "use a connection string (AZURE_STORAGE_CONNECTION_STRING) or DefaultAzureCredential"
        self.endpoint_url = (
            check_endpoint(endpoint_url, what="Azure", credentials_hint=hint) if endpoint_url is not None else None
        )
        if account is not None:
            if not account.isascii() or not account.isalnum() or not 3 <= len(account) <= 24:
                raise StoreConfigError(f"invalid Azure storage account name {account!r}")
            if self.endpoint_url is not None:
                raise StoreConfigError("Azure store takes account or endpoint_url, not both")
            self.endpoint_url = f"https://{account.lower()}.blob.core.windows.net"
        self._connection = _parse_connection_string(connection_string) if connection_string else None
        if self.endpoint_url is None and self._connection is None:
            raise StoreConfigError(
                f"az://{self.container}: name the account (?account=NAME or ?endpoint_url=https://...) "
                "or give a connection string (AZURE_STORAGE_CONNECTION_STRING)"
            )
        if self.endpoint_url is None and self._connection is not None:
            endpoint = _setting(self._connection, "BlobEndpoint")
            if endpoint:
                self.endpoint_url = endpoint.rstrip("/")
        if not connect_timeout > 0 or not read_timeout > 0:
            raise StoreConfigError("Azure connect_timeout and read_timeout must be positive")
        if max_attempts < 1:
            raise StoreConfigError(f"Azure max_attempts must be at least 1, got {max_attempts}")
        self._client_args: dict[str, Any] = {
            # The library's default waits 15 s and more between attempts, far
            # beyond a standby's takeover interval; reads retry after about a second.
            "retry_policy": LinearRetry(
                backoff=RETRY_BACKOFF_SECONDS, random_jitter_range=RETRY_JITTER_SECONDS, retry_total=max_attempts - 1
            ),
            "connection_timeout": connect_timeout,
            "read_timeout": read_timeout,
        }

    # -- the contract ---------------------------------------------------------

    def get(self, key: str) -> Blob | None:
        name = self._key(key)
        container = self._get_container(key)
        try:
            downloader = container.download_blob(name, max_concurrency=1)
            data = downloader.readall()
        except ResourceNotFoundError as exc:
            if _error_code(exc) == _CONTAINER_MISSING:
                self._raise(exc, "get", key)
            return None
        except AzureError as exc:
            self._raise(exc, "get", key)
        etag = downloader.properties.etag
        if not etag:
            raise StoreError(f"get {key} in {self.describe()}: the response carried no ETag")
        return Blob(data=data, etag=str(etag))

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        check_range(start, length)
        if length == 0:
            return None if self.etag(key) is None else b""
        container = self._get_container(key)
        try:
            data: bytes = container.download_blob(self._key(key), offset=start, length=length,
                                                  max_concurrency=1).readall()
        except ResourceNotFoundError as exc:
            if _error_code(exc) == _CONTAINER_MISSING:
                self._raise(exc, "get", key)
            return None
        except HttpResponseError as exc:
            if exc.status_code == 416:
                return b""  # the object ends before ``start``
            self._raise(exc, "get", key)
        except AzureError as exc:
            self._raise(exc, "get", key)
        return data

    def etag(self, key: str) -> str | None:
        name = self._key(key)
        container = self._get_container(key)
        try:
            properties = container.get_blob_client(name).get_blob_properties()
        except ResourceNotFoundError as exc:
            if _error_code(exc) == _CONTAINER_MISSING:
                self._raise(exc, "head", key)
            return None
        except AzureError as exc:
            self._raise(exc, "head", key)
        return str(properties.etag)

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
        blob = self._get_container(key).get_blob_client(name)
        conditions: dict[str, Any] = {}
        if if_match is not None:
            conditions = {"etag": if_match, "match_condition": MatchConditions.IfNotModified}
        try:
            # overwrite=False sends If-None-Match: *. retry_total=0: a retried
            # conditional write is ambiguous (see the module docstring).
            response = blob.upload_blob(
                bytes(data), overwrite=not if_none_match, max_concurrency=1, retry_total=0, **conditions
            )
        except (ResourceModifiedError, ResourceExistsError) as exc:
            conditional = if_match is not None or if_none_match
            if conditional and (isinstance(exc, ResourceModifiedError) or _error_code(exc) in _CONDITION_CODES):
                what = "already exists" if if_none_match else "changed since it was read"
                raise PreconditionFailed(f"{key} in {self.describe()} {what}") from exc
            self._raise(exc, "put", key)
        except AzureError as exc:
            self._raise(exc, "put", key)
        etag = response.get("etag")
        if not etag:
            raise StoreUnavailable(f"put {key} in {self.describe()}: the response carried no ETag")
        return str(etag)

    def delete(self, key: str) -> None:
        name = self._key(key)
        container = self._get_container(key)
        try:
            container.delete_blob(name)
        except ResourceNotFoundError as exc:
            if _error_code(exc) == _CONTAINER_MISSING:
                self._raise(exc, "delete", key)
        except AzureError as exc:
            self._raise(exc, "delete", key)

    def list(self, prefix: str = "") -> list[str]:
        container = self._get_container(prefix)
        try:
            return self._relative_keys(container.list_blob_names(name_starts_with=self.prefix + prefix))
        except AzureError as exc:
            self._raise(exc, "list", prefix)

    # -- helpers --------------------------------------------------------------

    def _get_container(self, key: str) -> ContainerClient:
        _, container = self._get_client(key)
        return container

    def _connect(self, key: str) -> tuple[BlobServiceClient, ContainerClient]:
        service = self._make_service(key)
        return service, service.get_container_client(self.container)

    def _disconnect(self, client: tuple[BlobServiceClient, ContainerClient]) -> None:
        client[0].close()

    def _make_service(self, key: str) -> BlobServiceClient:
        try:
            if self._connection is not None:
                text = ";".join(f"{k}={v}" for k, v in self._connection.items())
                base = BlobServiceClient.from_connection_string(text, **self._client_args)
                if self.endpoint_url is None or base.url.rstrip("/") == self.endpoint_url:
                    return base
                # endpoint_url overrides where the connection string points (an
                # emulator on another port); its key or SAS still signs in.
                credential: Any = base.credential
                base.close()
                sas = _setting(self._connection, "SharedAccessSignature")
                if credential is None and sas:
                    credential = AzureSasCredential(sas)
                return BlobServiceClient(self.endpoint_url, credential=credential, **self._client_args)
            try:
                from azure.identity import DefaultAzureCredential
            except ImportError as exc:
                raise StoreConfigError(
                    f"{self.describe()}: no connection string, and azure-identity is not installed for "
                    "DefaultAzureCredential: pip install 'queueadmin[azure]'"
                ) from exc
            assert self.endpoint_url is not None
            return BlobServiceClient(self.endpoint_url, credential=DefaultAzureCredential(), **self._client_args)
        except (ValueError, AzureError) as exc:
            # Never echo the connection string: it holds the account key.
            raise StoreConfigError(
                f"connect {key or '(all)'} in {self.describe()}: the Azure connection settings are invalid "
                f"({type(exc).__name__})"
            ) from exc

    def _raise(self, exc: Exception, op: str, key: str) -> NoReturn:
        """Raise the engine error for an azure-core failure, chained to it."""
        where = f"{op} {key or '(all)'} in {self.describe()}"
        landed = "; the write may have landed" if op == "put" else ""
        if isinstance(exc, _TRANSIENT_ERRORS):
            raise StoreUnavailable(f"{where}: {type(exc).__name__} (store unreachable or too slow){landed}") from exc
        if isinstance(exc, ClientAuthenticationError):
            raise StoreConfigError(
                f"{where}: the store refused access to container {self.container!r} ({type(exc).__name__}); "
                "check the connection string or the identity's role"
            ) from exc
        if isinstance(exc, HttpResponseError):
            status, code = exc.status_code, _error_code(exc)
            detail = f"{code or type(exc).__name__} (HTTP {status})"
            if code == _CONTAINER_MISSING:
                raise StoreConfigError(f"{where}: container {self.container!r} does not exist: {detail}") from exc
            if status is None or status in (408, 429) or status >= 500:
                raise StoreUnavailable(f"{where}: {detail}{landed}") from exc
            if status in (401, 403):
                raise StoreConfigError(
                    f"{where}: the store refused access to container {self.container!r}: {detail}; "
                    "check the connection string or the identity's role"
                ) from exc
            raise StoreError(f"{where}: {detail}") from exc
        raise StoreError(f"{where}: {type(exc).__name__}") from exc


def _error_code(exc: HttpResponseError) -> str:
    # Set by azure-storage-blob's error handling, not declared on azure-core's class.
    code = getattr(exc, "error_code", None)
    return str(getattr(code, "value", code) or "")  # a StorageErrorCode (a str enum) or a plain string


def _setting(connection: dict[str, str], name: str) -> str | None:
    """A connection string setting by name, ignoring case as Azure does."""
    for key, value in connection.items():
        if key.lower() == name.lower():
            return value
    return None


def _parse_connection_string(text: str) -> dict[str, str]:
    """``Key=Value;...`` pairs; raises StoreConfigError without echoing the (secret) text."""
    pairs: dict[str, str] = {}
    for part in text.strip().strip(";").split(";"):
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise StoreConfigError("the Azure connection string is malformed (expected Key=Value;...)")
        pairs[name.strip()] = value.strip()
    return pairs


def _check_container(container: str) -> str:
    if not isinstance(container, str) or not container:
        raise StoreConfigError("Azure store needs a container: az://container/prefix")
    if "@" in container or ":" in container:
        raise StoreConfigError("Azure container must be a plain name; credentials do not belong in the store URL")
    if (
        not 3 <= len(container) <= 63
        or not all(c.isascii() and (c.islower() or c.isdigit() or c == "-") for c in container)
        or container.startswith("-")
        or "--" in container
    ):
        raise StoreConfigError(f"invalid Azure container name {container!r}")
    return container
