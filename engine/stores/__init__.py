"""Object stores: one contract (:class:`ObjectStore`), three backends, chosen by URL.

A public module of the engine (see :mod:`engine`). ``S3Store`` lives in
:mod:`engine.stores.s3` and is opened through :func:`open_store` (boto3 is
slow to import, so only an ``s3://`` URL imports it); the fault-injecting
wrapper for chaos runs is named by :func:`fault_store_url`.
"""

from __future__ import annotations

import threading
from urllib.parse import parse_qs, unquote, urlsplit

from engine.errors import StoreConfigError
from engine.stores.base import Blob, ObjectStore, check_key
from engine.stores.faults import STATS_SUFFIX, fault_store_url
from engine.stores.file import FileStore
from engine.stores.memory import MemoryStore, StoreStats
from engine.stores.wrappers import FaultyStore, LatencyStore, open_latency_store

__all__ = [
    "STATS_SUFFIX",
    "Blob",
    "FaultyStore",
    "FileStore",
    "LatencyStore",
    "MemoryStore",
    "ObjectStore",
    "StoreStats",
    "check_key",
    "fault_store_url",
    "open_store",
]

_named_memory: dict[str, MemoryStore] = {}
_named_memory_lock = threading.Lock()


def open_store(url: str) -> ObjectStore:
    """Open the store named by ``url``. Does no I/O except creating a folder.

    * ``memory://`` — a new in-process store; ``memory://name`` — the store
      shared under ``name`` in this process.
    * ``file:///abs/dir`` — a folder on this machine.
    * ``s3://bucket/prefix?endpoint_url=…&region=…`` — S3 or a compatible
      store; credentials come from boto3's usual chain.
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

        return open_fault_store(url, open_store)
    if url.startswith("latency+"):
        return open_latency_store(url, open_store)
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
    if parts.scheme == "s3":
        from engine.stores.s3 import S3Store  # boto3 is slow to import; only when used

        options = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        return S3Store(bucket=parts.netloc, prefix=parts.path.lstrip("/"), **S3Store.parse_options(options))
    raise StoreConfigError(
        f"unknown store scheme {parts.scheme!r} in {url!r}; use memory://, file:// or s3://"
        " (optionally behind faults+ or latency+)"
    )
