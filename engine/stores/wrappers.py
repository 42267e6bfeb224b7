"""Stores that wrap another store: added latency (benchmarks) and scripted faults (tests)."""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Literal, TypeVar
from urllib.parse import parse_qsl, urlencode

from engine.errors import PreconditionFailed, StoreConfigError, StoreUnavailable
from engine.stores.base import Blob, ObjectStore

DEFAULT_LATENCY_SECONDS = 0.050  # close to an S3 PUT in the same region
# Roughly what one S3 stream moves in the same region. A real store charges
# latency + size / bandwidth per request, so a large document costs more
# than its round trip; without this term a benchmark hides that.
DEFAULT_BANDWIDTH_BYTES_PER_SECOND = 100e6
LATENCY_PREFIX = "latency+"
LATENCY_PARAMETER = "latency_seconds"
BANDWIDTH_PARAMETER = "bandwidth_mb_s"  # MB/s (10**6 bytes); 0 means unlimited
MAX_LATENCY_SECONDS = 60.0  # a typo (ms for s) should fail loudly, not hang every request

Fault = Literal["conflict", "lost", "landed"]
_T = TypeVar("_T")


def _sleep_until(deadline: float) -> None:
    """Sleep until ``deadline`` (on ``time.monotonic``'s clock) if it is still ahead."""
    left = deadline - time.monotonic()
    if left > 0:
        time.sleep(left)


class WrappedStore(ObjectStore):
    """Passes every call to ``inner``: a base for a store that changes some
    calls of another (a subclass overrides those, typically ``put_parts``:
    ``put`` goes through it). ``describe`` names both."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.remote = inner.remote

    def get(self, key: str) -> Blob | None:
        return self.inner.get(key)

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        return self.inner.get_range(key, start, length)

    def etag(self, key: str) -> str | None:
        return self.inner.etag(key)

    def put(self, key: str, data: bytes, *, if_match: str | None = None, if_none_match: bool = False) -> str:
        return self.put_parts(key, (data,), if_match=if_match, if_none_match=if_none_match)

    def put_parts(
        self, key: str, parts: Sequence[bytes], *, if_match: str | None = None, if_none_match: bool = False
    ) -> str:
        return self.inner.put_parts(key, parts, if_match=if_match, if_none_match=if_none_match)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def list(self, prefix: str = "") -> list[str]:
        return self.inner.list(prefix)

    def close(self) -> None:
        self.inner.close()

    def describe(self) -> str:
        return f"{type(self).__name__}({self.inner.describe()})"


class LatencyStore(WrappedStore):
    """Delays every call like a remote object store: ``latency`` seconds per
    request, plus, for a get or put, the bytes moved ÷ ``bandwidth`` (bytes
    per second; None or 0: unlimited). Metadata calls (etag, delete, list)
    pay the latency only.

    The inner store stands in for the remote one, so its own time (a
    ``file://`` store's write and fsyncs, a few ms a commit) is spent while
    the request is on the wire, not added after it. As on a real store, the
    inner call happens half a round trip in (after a put's bytes have been
    sent), so what it changes is visible to others before the caller hears
    back; the call then ends when its charge is spent, or when the inner call
    ends if that is later (an inner call longer than half the latency).

    The delay is a plain ``time.sleep`` in the calling thread, so it releases
    the GIL exactly as real network I/O would.
    """

    def __init__(
        self,
        inner: ObjectStore,
        *,
        latency: float = DEFAULT_LATENCY_SECONDS,
        bandwidth: float | None = DEFAULT_BANDWIDTH_BYTES_PER_SECOND,
    ) -> None:
        if bandwidth is not None and not (math.isfinite(bandwidth) and bandwidth >= 0):
            raise ValueError(f"bandwidth must be bytes per second >= 0 or None, got {bandwidth!r}")
        super().__init__(inner)
        self.latency = latency
        self.bandwidth = bandwidth or None

    def transfer_seconds(self, size: int) -> float:
        """What moving ``size`` bytes costs on top of the latency."""
        return size / self.bandwidth if self.bandwidth else 0.0

    def _round_trip(self, call: Callable[[], _T], sent: int = 0, received: Callable[[_T], int] | None = None) -> _T:
        """Make ``call`` to the inner store as one request of ``sent`` bytes
        whose answer carries ``received(result)`` bytes: it happens half the
        round trip and the sent bytes in, and returns (or raises, as a refused
        condition does) once the whole charge is spent, or when the inner call
        ends if that is later."""
        started = time.monotonic()
        _sleep_until(started + self.latency / 2 + self.transfer_seconds(sent))
        due = started + self.latency + self.transfer_seconds(sent)
        try:
            result = call()
        except Exception:
            _sleep_until(due)
            raise
        _sleep_until(due + (self.transfer_seconds(received(result)) if received is not None else 0.0))
        return result

    def get(self, key: str) -> Blob | None:
        return self._round_trip(lambda: self.inner.get(key),
                                received=lambda blob: len(blob.data) if blob is not None else 0)

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        return self._round_trip(lambda: self.inner.get_range(key, start, length),
                                received=lambda data: len(data) if data is not None else 0)

    def etag(self, key: str) -> str | None:
        return self._round_trip(lambda: self.inner.etag(key))

    def put(self, key: str, data: bytes, *, if_match: str | None = None, if_none_match: bool = False) -> str:
        return self._round_trip(lambda: self.inner.put(key, data, if_match=if_match, if_none_match=if_none_match),
                                sent=len(data))

    def put_parts(
        self, key: str, parts: Sequence[bytes], *, if_match: str | None = None, if_none_match: bool = False
    ) -> str:
        return self._round_trip(
            lambda: self.inner.put_parts(key, parts, if_match=if_match, if_none_match=if_none_match),
            sent=sum(map(len, parts)))

    def delete(self, key: str) -> None:
        self._round_trip(lambda: self.inner.delete(key))

    def list(self, prefix: str = "") -> list[str]:
        return self._round_trip(lambda: self.inner.list(prefix))

    def describe(self) -> str:
        rate = f"{self.bandwidth / 1e6:g} MB/s" if self.bandwidth else "unlimited bandwidth"
        return f"{self.inner.describe()} (+{self.latency * 1000:.0f} ms, {rate})"


def open_latency_store(url: str, open_inner: Callable[[str], ObjectStore]) -> LatencyStore:
    """Open ``latency+<inner URL>[?latency_seconds=s][&bandwidth_mb_s=b]``: the
    inner store (opened with ``open_inner``, without those two parameters)
    with ``s`` seconds (default :data:`DEFAULT_LATENCY_SECONDS`) added to each
    call, and each get and put also charged its bytes at ``b`` MB/s (default
    :data:`DEFAULT_BANDWIDTH_BYTES_PER_SECOND`; 0: unlimited). Does no I/O
    beyond the inner store's opening. Raises StoreConfigError for a malformed
    URL, a latency outside 0 to :data:`MAX_LATENCY_SECONDS` or a negative
    bandwidth."""
    if not url.startswith(LATENCY_PREFIX):
        raise StoreConfigError(f"a latency store URL starts with {LATENCY_PREFIX}, got {url!r}")
    base, _, raw_query = url[len(LATENCY_PREFIX) :].partition("?")
    query = parse_qsl(raw_query, keep_blank_values=True)
    latency = _number_parameter(url, query, LATENCY_PARAMETER, DEFAULT_LATENCY_SECONDS, MAX_LATENCY_SECONDS,
                                "seconds between 0 and")
    mb_s = _number_parameter(url, query, BANDWIDTH_PARAMETER, DEFAULT_BANDWIDTH_BYTES_PER_SECOND / 1e6, math.inf,
                             "MB/s, 0 (unlimited) or more, below")
    rest = [(name, value) for name, value in query if name not in (LATENCY_PARAMETER, BANDWIDTH_PARAMETER)]
    # Plain string work: urlunsplit would drop the "//" of schemes it does not know (memory://).
    inner = open_inner(f"{base}?{urlencode(rest)}" if rest else base)
    return LatencyStore(inner, latency=latency, bandwidth=mb_s * 1e6)


def _number_parameter(url: str, query: list[tuple[str, str]], name: str, default: float, most: float,
                      what: str) -> float:
    """The value of query parameter ``name`` (at most once; ``default`` when
    absent), a finite number from 0 to ``most``; StoreConfigError otherwise."""
    values = [value for key, value in query if key == name]
    if len(values) > 1:
        raise StoreConfigError(f"a latency store URL takes {name} at most once, got {url!r}")
    if not values:
        return default
    try:
        number = float(values[0])
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and 0 <= number <= most):
        raise StoreConfigError(f"{name} must be {what} {most:g}, got {values[0]!r}")
    return number


class FaultyStore(WrappedStore):
    """Plays scripted faults on the next puts, for tests of the hard cases.

    ``inject(*faults)`` queues faults consumed one per put:

    * ``"conflict"`` — raise PreconditionFailed without writing (a lost race);
    * ``"lost"`` — raise StoreUnavailable without writing (timeout before landing);
    * ``"landed"`` — write, then raise StoreUnavailable (the ambiguous case:
      the response was lost but the write happened).

    ``fail_gets`` makes the next N gets raise StoreUnavailable.
    """

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
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

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        with self._lock:
            if self.fail_gets > 0:
                self.fail_gets -= 1
                raise StoreUnavailable("injected: get timed out")
        return self.inner.get_range(key, start, length)

    def etag(self, key: str) -> str | None:
        """As a get, so that ``fail_gets`` applies (as before it was a WrappedStore)."""
        return ObjectStore.etag(self, key)

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
