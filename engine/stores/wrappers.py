"""Stores that wrap another store: added latency (benchmarks) and scripted faults (tests)."""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Literal
from urllib.parse import parse_qsl, urlencode

from engine.errors import PreconditionFailed, StoreConfigError, StoreUnavailable
from engine.stores.base import Blob, ObjectStore

DEFAULT_LATENCY_SECONDS = 0.050  # close to an S3 PUT in the same region
LATENCY_PREFIX = "latency+"
LATENCY_PARAMETER = "latency_seconds"
MAX_LATENCY_SECONDS = 60.0  # a typo (ms for s) should fail loudly, not hang every request

Fault = Literal["conflict", "lost", "landed"]


class LatencyStore(ObjectStore):
    """Adds a fixed delay to every get and put, like a remote object store.

    The delay is a plain ``time.sleep`` in the calling thread, so it releases
    the GIL exactly as real network I/O would.
    """

    def __init__(self, inner: ObjectStore, *, latency: float = DEFAULT_LATENCY_SECONDS) -> None:
        self.inner = inner
        self.latency = latency

    def get(self, key: str) -> Blob | None:
        time.sleep(self.latency)
        return self.inner.get(key)

    def etag(self, key: str) -> str | None:
        time.sleep(self.latency)
        return self.inner.etag(key)

    def put(self, key: str, data: bytes, *, if_match: str | None = None, if_none_match: bool = False) -> str:
        time.sleep(self.latency)
        return self.inner.put(key, data, if_match=if_match, if_none_match=if_none_match)

    def put_parts(
        self, key: str, parts: Sequence[bytes], *, if_match: str | None = None, if_none_match: bool = False
    ) -> str:
        time.sleep(self.latency)
        return self.inner.put_parts(key, parts, if_match=if_match, if_none_match=if_none_match)

    def delete(self, key: str) -> None:
        time.sleep(self.latency)
        self.inner.delete(key)

    def list(self, prefix: str = "") -> list[str]:
        time.sleep(self.latency)
        return self.inner.list(prefix)

    def describe(self) -> str:
        return f"{self.inner.describe()} (+{self.latency * 1000:.0f} ms)"


def open_latency_store(url: str, open_inner: Callable[[str], ObjectStore]) -> LatencyStore:
    """Open ``latency+<inner URL>[?latency_seconds=s]``: the inner store (opened
    with ``open_inner``, without ``latency_seconds``) with ``s`` seconds (default
    :data:`DEFAULT_LATENCY_SECONDS`) added to each call. Does no I/O beyond the
    inner store's opening. Raises StoreConfigError for a malformed URL or a
    latency outside 0 to :data:`MAX_LATENCY_SECONDS`."""
    if not url.startswith(LATENCY_PREFIX):
        raise StoreConfigError(f"a latency store URL starts with {LATENCY_PREFIX}, got {url!r}")
    base, _, raw_query = url[len(LATENCY_PREFIX) :].partition("?")
    query = parse_qsl(raw_query, keep_blank_values=True)
    values = [value for name, value in query if name == LATENCY_PARAMETER]
    if len(values) > 1:
        raise StoreConfigError(f"a latency store URL takes {LATENCY_PARAMETER} at most once, got {url!r}")
    latency = DEFAULT_LATENCY_SECONDS
    if values:
        try:
            latency = float(values[0])
        except ValueError:
            latency = math.nan
        if not (math.isfinite(latency) and 0 <= latency <= MAX_LATENCY_SECONDS):
            raise StoreConfigError(
                f"{LATENCY_PARAMETER} must be seconds between 0 and {MAX_LATENCY_SECONDS:g}, got {values[0]!r}"
            )
    rest = [(name, value) for name, value in query if name != LATENCY_PARAMETER]
    # Plain string work: urlunsplit would drop the "//" of schemes it does not know (memory://).
    return LatencyStore(open_inner(f"{base}?{urlencode(rest)}" if rest else base), latency=latency)


class FaultyStore(ObjectStore):
    """Plays scripted faults on the next puts, for tests of the hard cases.

    ``inject(*faults)`` queues faults consumed one per put:

    * ``"conflict"`` — raise PreconditionFailed without writing (a lost race);
    * ``"lost"`` — raise StoreUnavailable without writing (timeout before landing);
    * ``"landed"`` — write, then raise StoreUnavailable (the ambiguous case:
      the response was lost but the write happened).

    ``fail_gets`` makes the next N gets raise StoreUnavailable.
    """

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self._faults: deque[Fault] = deque()
        self.fail_gets = 0
        self.puts = 0

    def inject(self, *faults: Fault) -> None:
        with self._lock:
            self._faults.extend(faults)

    def _next_fault(self) -> Fault | None:
        with self._lock:
            self.puts += 1
            return self._faults.popleft() if self._faults else None

    def get(self, key: str) -> Blob | None:
        with self._lock:
            if self.fail_gets > 0:
                self.fail_gets -= 1
                raise StoreUnavailable("injected: get timed out")
        return self.inner.get(key)

    def put(self, key: str, data: bytes, *, if_match: str | None = None, if_none_match: bool = False) -> str:
        return self.put_parts(key, (data,), if_match=if_match, if_none_match=if_none_match)

    def put_parts(
        self, key: str, parts: Sequence[bytes], *, if_match: str | None = None, if_none_match: bool = False
    ) -> str:
        fault = self._next_fault()
        if fault == "conflict":
            raise PreconditionFailed("injected: lost race")
        if fault == "lost":
            raise StoreUnavailable("injected: put timed out before landing")
        etag = self.inner.put_parts(key, parts, if_match=if_match, if_none_match=if_none_match)
        if fault == "landed":
            raise StoreUnavailable("injected: put landed but the response was lost")
        return etag

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def list(self, prefix: str = "") -> list[str]:
        return self.inner.list(prefix)

    def describe(self) -> str:
        return f"faulty({self.inner.describe()})"
