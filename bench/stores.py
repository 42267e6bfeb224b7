"""Store plumbing for the benchmark: a kill switch and jqueue's storage port.

Every system runs on an :class:`engine.MemoryStore`. The engine's clients see
``LatencyStore(AbortableStore(memory))``; jqueue sees :class:`JQueueStorage`,
which sleeps on the event loop and then calls the same kind of MemoryStore.
The MemoryStore's counters (``stats.writes``, ``stats.conflicts``) are what
the benchmark reports as writes, for every system alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from jqueue import CASConflictError  # type: ignore[import-untyped]

from engine import Blob, MemoryStore, ObjectStore, PreconditionFailed


class RunAborted(Exception):
    """Raised by a store once its run has been aborted (an operation timed out).

    It is deliberately not an engine or jqueue error, so no client retries it.
    """


class AbortableStore(ObjectStore):
    """Passes every call to ``inner`` until :meth:`abort`; then raises RunAborted.

    Lets the benchmark stop submitters it cannot cancel (OS threads inside
    DirectClient's retry loop) at their next store call.
    """

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True

    def _check(self) -> None:
        if self.aborted:
            raise RunAborted("the benchmark run was aborted")

    def get(self, key: str) -> Blob | None:
        self._check()
        return self.inner.get(key)

    def put(self, key: str, data: bytes, *, if_match: str | None = None, if_none_match: bool = False) -> str:
        self._check()
        return self.inner.put(key, data, if_match=if_match, if_none_match=if_none_match)

    def put_parts(
        self, key: str, parts: Sequence[bytes], *, if_match: str | None = None, if_none_match: bool = False
    ) -> str:
        self._check()
        return self.inner.put_parts(key, parts, if_match=if_match, if_none_match=if_none_match)

    def delete(self, key: str) -> None:
        self._check()
        self.inner.delete(key)

    def list(self, prefix: str = "") -> list[str]:
        self._check()
        return self.inner.list(prefix)

    def describe(self) -> str:
        return f"abortable({self.inner.describe()})"


class JQueueStorage:
    """jqueue 1.0's ``ObjectStoragePort`` over one key of an engine MemoryStore.

    Each call awaits ``asyncio.sleep(latency)`` (jqueue is asyncio-native),
    then calls the store, and a read or write also sleeps its bytes ÷
    ``bandwidth`` (0: unlimited), as the engine's LatencyStore charges them.
    ``write(if_match=None)`` means "create only if absent", as jqueue's own
    InMemoryStorage treats it; a refused condition
    raises jqueue's CASConflictError. After :meth:`abort`, calls raise RunAborted.
    """

    def __init__(self, store: MemoryStore, key: str, *, latency: float, bandwidth: float = 0) -> None:
        self.store = store
        self.key = key
        self.latency = latency
        self.bandwidth = bandwidth
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True

    async def _delay(self, size: int = 0) -> None:
        seconds = self.latency + (size / self.bandwidth if self.bandwidth > 0 else 0)
        if seconds > 0:
            await asyncio.sleep(seconds)
        if self.aborted:
            raise RunAborted("the benchmark run was aborted")

    async def read(self) -> tuple[bytes, str | None]:
        await self._delay()
        blob = self.store.get(self.key)
        if blob is not None and self.bandwidth > 0:
            await self._delay_bytes(len(blob.data))
        # One more hop through the event loop, then look at the abort flag
        # again: when many tasks queue up to decode a large document, an
        # aborted run then stops them here instead of after every decode.
        await asyncio.sleep(0)
        if self.aborted:
            raise RunAborted("the benchmark run was aborted")
        return (b"", None) if blob is None else (blob.data, blob.etag)

    async def _delay_bytes(self, size: int) -> None:
        await asyncio.sleep(size / self.bandwidth)

    async def write(self, content: bytes, if_match: str | None = None) -> str:
        await self._delay(len(content))
        try:
            if if_match is None:
                return self.store.put(self.key, content, if_none_match=True)
            return self.store.put(self.key, content, if_match=if_match)
        except PreconditionFailed as exc:
            raise CASConflictError(str(exc)) from exc
