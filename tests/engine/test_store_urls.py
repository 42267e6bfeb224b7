"""``open_store``'s ``latency+`` URL: an inner store with added latency and a
bandwidth charge per byte, for benchmarks."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import StoreConfigError
from engine.stores import FileStore, LatencyStore, MemoryStore, open_store


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


def test_each_get_and_put_is_charged_its_bytes_at_the_bandwidth(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr("engine.stores.wrappers.time.sleep", slept.append)
    store = open_store("latency+memory://bandwidth-test?latency_seconds=0.05&bandwidth_mb_s=2")
    assert isinstance(store, LatencyStore)

    store.put("a", b"x" * 1_000_000)  # 1 MB at 2 MB/s: half a second more
    store.put_parts("b", [b"x" * 500_000, b"y" * 500_000])
    blob = store.get("a")
    assert blob is not None and len(blob.data) == 1_000_000
    store.etag("a")  # metadata only: the latency alone
    assert store.get("missing") is None

    assert sum(slept[:1]) == pytest.approx(0.55)
    assert sum(slept[1:2]) == pytest.approx(0.55)
    assert sum(slept[2:4]) == pytest.approx(0.55)  # the round trip, then the bytes read
    assert slept[4:] == [pytest.approx(0.05), pytest.approx(0.05)]


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
