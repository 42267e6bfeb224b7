"""In-process store: the exact store contract, plus counters for tests and benchmarks."""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass

from engine.errors import PreconditionFailed
from engine.stores.base import Blob, ObjectStore, check_key, check_write_args


@dataclass(slots=True)
class StoreStats:
    """Counts of calls to a store. ``writes`` counts puts that landed;
    ``conflicts`` counts puts refused by their condition."""

    reads: int = 0
    writes: int = 0
    conflicts: int = 0
    deletes: int = 0


class MemoryStore(ObjectStore):
    """A dict behind a lock. ETags are unique per write, never reused (no ABA).

    Several clients in one process share state by sharing the instance;
    ``open_store("memory://name")`` returns the same instance for the same name.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[str, Blob] = {}
        self._etags = itertools.count(1)
        self.stats = StoreStats()

    @property
    def reads(self) -> int:
        return self.stats.reads

    @property
    def writes(self) -> int:
        return self.stats.writes

    def get(self, key: str) -> Blob | None:
        check_key(key)
        with self._lock:
            self.stats.reads += 1
            return self._objects.get(key)

    def put(
        self,
        key: str,
        data: bytes,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
    ) -> str:
        check_key(key)
        check_write_args(if_match, if_none_match)
        data = bytes(data)
        with self._lock:
            current = self._objects.get(key)
            if if_none_match and current is not None:
                self.stats.conflicts += 1
                raise PreconditionFailed(f"{key} already exists")
            if if_match is not None and (current is None or current.etag != if_match):
                self.stats.conflicts += 1
                raise PreconditionFailed(f"{key} changed since it was read")
            etag = f'"m{next(self._etags)}"'
            self._objects[key] = Blob(data=data, etag=etag)
            self.stats.writes += 1
            return etag

    def delete(self, key: str) -> None:
        check_key(key)
        with self._lock:
            self.stats.deletes += 1
            self._objects.pop(key, None)

    def list(self, prefix: str = "") -> list[str]:
        with self._lock:
            return sorted(k for k in self._objects if k.startswith(prefix))

    def describe(self) -> str:
        return "memory://"
