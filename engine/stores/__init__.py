"""Object stores: one contract (:class:`ObjectStore`), five backends, chosen by URL.

A public module of the engine (see :mod:`engine`). ``S3Store``
(:mod:`engine.stores.s3`), ``GCSStore`` (:mod:`engine.stores.gcs`) and
``AzureBlobStore`` (:mod:`engine.stores.azure`) are opened through
:func:`open_store`, which imports each only for its own URL scheme (their
libraries are slow to import, and the GCS and Azure ones are optional
extras); the fault-injecting
wrapper for chaos runs is named by :func:`fault_store_url`.
"""

from __future__ import annotations

import functools
import threading
from urllib.parse import parse_qs, unquote, urlsplit

from engine.errors import StoreConfigError
from engine.stores.base import Blob, ObjectStore, check_key
from engine.stores.faults import STATS_SUFFIX, FaultStore, fault_store_url
from engine.stores.file import TOMBSTONE_SECONDS, FileStore
from engine.stores.memory import MemoryStore, StoreStats
from engine.stores.wrappers import FaultyStore, LatencyStore, WrappedStore, open_latency_store

__all__ = [
    "STATS_SUFFIX",
    "TOMBSTONE_SECONDS",
    "Blob",
    "FaultStore",
    "FaultyStore",
    "FileStore",
    "LatencyStore",
    "MemoryStore",
    "ObjectStore",
    "StoreStats",
    "WrappedStore",
    "check_key",
    "fault_store_url",
    "open_store",
]

_named_memory: dict[str, MemoryStore] = {}
_named_memory_lock = threading.Lock()


def open_store(url: str, *, azure_connection_string: str | None = None) -> ObjectStore:
    """Open the store named by ``url``. Does no I/O except creating a folder.

    * ``memory://`` — a new in-process store; ``memory://name`` — the store
      shared under ``name`` in this process.
    * ``file:///abs/dir`` — a folder on this machine.
    * ``s3://bucket/prefix?endpoint_url=…&region=…`` — S3 or a compatible
      store; credentials come from boto3's usual chain.
    * ``gs://bucket/prefix?endpoint_url=…&project=…`` — Google Cloud Storage
      (the ``gcs`` extra); credentials from ``google.auth.default()``.
    * ``az://container/prefix?account=…`` or ``?endpoint_url=…`` — Azure Blob
      Storage (the ``azure`` extra); credentials from
      ``azure_connection_string`` when given (the caller reads it, e.g. from
      ``AZURE_STORAGE_CONNECTION_STRING``; the engine never reads the
      environment), else ``DefaultAzureCredential``.
    * ``faults+<one of the above>&fault_control=/abs/file`` — that store,
      with faults injected as the control file says (for chaos tests).
    * ``latency+<one of the above>[?latency_seconds=0.05]`` — that store, with
      the given seconds (default 0.05) added to each call, like a remote store
      (for benchmarks: ``latency+memory://name`` lets one daphne node behave as
      if it wrote to S3).

    Raises StoreConfigError for an unknown scheme or a malformed URL.
    """
    if not isinstance(url, str) or "://" not in url:
        raise StoreConfigError(f"store URL must look like scheme://..., got {url!r}")
    if url.startswith("faults+"):  # the chaos harness's fault-injecting wrapper (engine/stores/faults.py)
        from engine.stores.faults import open_fault_store

        return open_fault_store(url, functools.partial(open_store, azure_connection_string=azure_connection_string))
    if url.startswith("latency+"):
        return open_latency_store(url, functools.partial(open_store, azure_connection_string=azure_connection_string))
    parts = urlsplit(url)
    if parts.scheme == "memory":
        name = parts.netloc + parts.path
        if not name:
            return MemoryStore()
        with _named_memory_lock:
            return _named_memory.setdefault(name, MemoryStore())
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise StoreConfigError(f"file store URL must be file:///absolute/path, got {url!r}")
        return FileStore(unquote(parts.path))
    options = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    if parts.scheme == "gs":
        try:
            from engine.stores.gcs import GCSStore  # an optional extra; only when used
        except ImportError as exc:
            raise StoreConfigError(f"gs:// needs google-cloud-storage: pip install 'queueadmin[gcs]' ({exc})") from exc
        return GCSStore(bucket=parts.netloc, prefix=parts.path.lstrip("/"), **GCSStore.parse_options(options))
    if parts.scheme == "az":
        try:
            from engine.stores.azure import AzureBlobStore  # an optional extra; only when used
        except ImportError as exc:
            raise StoreConfigError(f"az:// needs azure-storage-blob: pip install 'queueadmin[azure]' ({exc})") from exc
        return AzureBlobStore(
            container=parts.netloc,
            prefix=parts.path.lstrip("/"),
            connection_string=azure_connection_string,
            **AzureBlobStore.parse_options(options),
        )
    if parts.scheme == "s3":
        from engine.stores.s3 import S3Store  # boto3 is slow to import; only when used

        return S3Store(bucket=parts.netloc, prefix=parts.path.lstrip("/"), **S3Store.parse_options(options))
    raise StoreConfigError(
        f"unknown store scheme {parts.scheme!r} in {url!r}; use memory://, file://, s3://, gs:// or az://"
        " (optionally behind faults+ or latency+)"
    )
