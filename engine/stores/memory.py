"""In-process store: the exact store contract, plus counters for tests and benchmarks."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
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
        self._pieces: dict[str, tuple[bytes, ...]] = {}  # objects written with put_parts, not yet joined
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
            blob = self._objects.get(key)
            if blob is not None and key in self._pieces:
                # Written with put_parts: assemble once, on first read.
                blob = self._objects[key] = Blob(data=b"".join(self._pieces.pop(key)), etag=blob.etag)
            return blob

    def etag(self, key: str) -> str | None:
        check_key(key)
        with self._lock:
            self.stats.reads += 1
            blob = self._objects.get(key)
            return None if blob is None else blob.etag

    def put(
        self,
        key: str,
        data: bytes,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
    ) -> str:
        return self._store(key, bytes(data), (), if_match=if_match, if_none_match=if_none_match)

    def put_parts(
        self,
        key: str,
        parts: Sequence[bytes],
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
    ) -> str:
        # Keep the pieces and join them only if someone reads the object, as a
        # network store would stream them without building one buffer.
        return self._store(key, b"", tuple(parts), if_match=if_match, if_none_match=if_none_match)

    def _store(
        self, key: str, data: bytes, pieces: tuple[bytes, ...], *, if_match: str | None, if_none_match: bool
    ) -> str:
        check_key(key)
        check_write_args(if_match, if_none_match)
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
            if pieces:
                self._pieces[key] = pieces
            else:
                self._pieces.pop(key, None)
            self.stats.writes += 1
            return etag

    def delete(self, key: str) -> None:
        check_key(key)
        with self._lock:
            self.stats.deletes += 1
            self._objects.pop(key, None)
            self._pieces.pop(key, None)

    def list(self, prefix: str = "") -> list[str]:
        with self._lock:
            return sorted(k for k in self._objects if k.startswith(prefix))

    def describe(self) -> str:
        return "memory://"
