"""``open_store``'s ``latency+`` URL: an inner store with added latency and a
bandwidth charge per byte, for benchmarks."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.errors import PreconditionFailed, StoreConfigError
from engine.stores import FileStore, LatencyStore, MemoryStore, open_store
from engine.stores.base import Blob


def test_latency_memory_url_wraps_the_named_memory_store() -> None:
    store = open_store("latency+memory://latency-url-test?latency_seconds=0.002")

    assert isinstance(store, LatencyStore)
    assert store.latency == 0.002
    assert store.inner is open_store("memory://latency-url-test")  # the same named store, shared in the process
    store.put("queue.json", b"x")
    assert open_store("memory://latency-url-test").get("queue.json") is not None


def test_latency_defaults_to_fifty_ms_and_wraps_any_inner_url(tmp_path: Path) -> None:
    store = open_store(f"latency+{(tmp_path / 'store').as_uri()}")

    assert isinstance(store, LatencyStore)
    assert store.latency == 0.050
    assert store.bandwidth == 100e6
    assert isinstance(store.inner, FileStore)
    assert "(+50 ms, 100 MB/s)" in store.describe()


def test_latency_parameters_are_not_passed_to_the_inner_store() -> None:
    store = open_store("latency+memory://?latency_seconds=0&bandwidth_mb_s=0")

    assert isinstance(store, LatencyStore)
    assert isinstance(store.inner, MemoryStore)
    assert store.latency == 0.0
    assert store.bandwidth is None
    assert "unlimited bandwidth" in store.describe()


class _Clock:
    """A fake ``time.monotonic`` that only ``time.sleep`` moves, and an inner
    store whose calls each take ``inner_seconds`` of it, recording when."""

    def __init__(self) -> None:
        self.now = 0.0
        self.inner_seconds = 0.0
        self.inner_calls: list[tuple[str, float]] = []

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.now += seconds

    def inner(self) -> MemoryStore:
        clock = self

        class Timed(MemoryStore):
            def get(self, key: str) -> Blob | None:
                clock.spend("get")
                return MemoryStore.get(self, key)

            def put(self, key: str, data: bytes, **conditions: Any) -> str:
                clock.spend("put")
                return MemoryStore.put(self, key, data, **conditions)

            def put_parts(self, key: str, parts: Sequence[bytes], **conditions: Any) -> str:
                clock.spend("put_parts")
                return MemoryStore.put_parts(self, key, parts, **conditions)

            def etag(self, key: str) -> str | None:
                clock.spend("etag")
                return MemoryStore.etag(self, key)

        return Timed()

    def spend(self, name: str) -> None:
        """An inner call starts now and takes ``inner_seconds``."""
        self.inner_calls.append((name, self.now))
        self.now += self.inner_seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    clock = _Clock()
    monkeypatch.setattr("engine.stores.wrappers.time.sleep", clock.sleep)
    monkeypatch.setattr("engine.stores.wrappers.time.monotonic", lambda: clock.now)
    return clock


def _timed(clock: _Clock, call) -> float:  # type: ignore[no-untyped-def]
    started = clock.now
    call()
    return clock.now - started


def test_each_get_and_put_is_charged_its_bytes_at_the_bandwidth(clock: _Clock) -> None:
    store = open_store("latency+memory://bandwidth-test?latency_seconds=0.05&bandwidth_mb_s=2")
    assert isinstance(store, LatencyStore)
    store.inner = clock.inner()

    # 1 MB at 2 MB/s: half a second more than the round trip.
    assert _timed(clock, lambda: store.put("a", b"x" * 1_000_000)) == pytest.approx(0.55)
    assert _timed(clock, lambda: store.put_parts("b", [b"x" * 500_000, b"y" * 500_000])) == pytest.approx(0.55)
    blob = store.get("a")
    assert blob is not None and len(blob.data) == 1_000_000
    assert clock.now == pytest.approx(1.65)  # the round trip, then the bytes read
    assert _timed(clock, lambda: store.etag("a")) == pytest.approx(0.05)  # metadata only: the latency alone
    assert _timed(clock, lambda: store.get("missing")) == pytest.approx(0.05)


def test_the_inner_stores_own_time_is_spent_inside_the_charge_not_added_to_it(clock: _Clock) -> None:
    store = LatencyStore(clock.inner(), latency=0.05, bandwidth=2e6)

    # A file store's write and fsyncs stand in for the remote store's work:
    # 20 ms of it inside a 550 ms put leaves the put at 550 ms...
    clock.inner_seconds = 0.020
    assert _timed(clock, lambda: store.put("a", b"x" * 1_000_000)) == pytest.approx(0.55)
    # ...and it is done half a round trip and the bytes in, as a remote store
    # takes a put once its bytes have arrived.
    assert clock.inner_calls[-1] == ("put", pytest.approx(0.525))
    # An inner store slower than the whole charge sets the time alone.
    clock.inner_seconds = 0.2
    assert _timed(clock, lambda: store.etag("a")) == pytest.approx(0.225)
    # A read's bytes are charged from its start too: 25 + 200 ms inside its 550.
    assert _timed(clock, lambda: store.get("a")) == pytest.approx(0.55)


def test_a_refused_condition_takes_its_whole_round_trip(clock: _Clock) -> None:
    store = LatencyStore(clock.inner(), latency=0.05, bandwidth=None)
    store.put("a", b"one")
    with pytest.raises(PreconditionFailed):
        _timed(clock, lambda: store.put("a", b"two", if_none_match=True))
    assert clock.now == pytest.approx(0.10)
    blob = store.get("a")
    assert blob is not None and blob.data == b"one"


@given(latency=st.sampled_from([0.0, 0.001, 0.05, 0.3]), bandwidth=st.sampled_from([None, 1e5, 1e8]),
       inner_seconds=st.sampled_from([0.0, 0.004, 0.03, 0.5]), size=st.integers(0, 3_000_000),
       kind=st.sampled_from(["put", "put_parts", "get"]))
def test_every_call_ends_at_its_charge_or_its_inner_calls_end_whichever_is_later(
    latency: float, bandwidth: float | None, inner_seconds: float, size: int, kind: str
) -> None:
    clock = _Clock()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("engine.stores.wrappers.time.sleep", clock.sleep)
        patch.setattr("engine.stores.wrappers.time.monotonic", lambda: clock.now)
        store = LatencyStore(clock.inner(), latency=latency, bandwidth=bandwidth)
        data = b"x" * size
        MemoryStore.put(store.inner, "read-me", data)  # what a get reads, set up outside the clock
        clock.inner_seconds = inner_seconds
        started = clock.now
        if kind == "put":
            store.put("k", data)
        elif kind == "put_parts":
            store.put_parts("k", [data[: size // 2], data[size // 2 :]])
        else:
            blob = store.get("read-me")
            assert blob is not None and blob.data == data
    bytes_time = size / bandwidth if bandwidth else 0.0
    # A put's bytes go out before the inner call; a read's come back after it.
    inner_start = latency / 2 + (bytes_time if kind != "get" else 0.0)
    assert clock.inner_calls == [(kind, pytest.approx(started + inner_start))]
    assert clock.now - started == pytest.approx(max(latency + bytes_time, inner_start + inner_seconds))


@pytest.mark.parametrize(
    "url",
    [
        "latency+memory://x?latency_seconds=abc",
        "latency+memory://x?latency_seconds=-1",
        "latency+memory://x?latency_seconds=nan",
        "latency+memory://x?latency_seconds=3600",
        "latency+memory://x?latency_seconds=0.1&latency_seconds=0.2",
        "latency+memory://x?bandwidth_mb_s=-1",
        "latency+memory://x?bandwidth_mb_s=fast",
        "latency+memory://x?bandwidth_mb_s=inf",
        "latency+memory://x?bandwidth_mb_s=1&bandwidth_mb_s=2",
        "latency+nope://x",
    ],
)
def test_malformed_latency_urls_are_refused(url: str) -> None:
    with pytest.raises(StoreConfigError):
        open_store(url)
