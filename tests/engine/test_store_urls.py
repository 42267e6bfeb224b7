"""``open_store``'s ``latency+`` URL: an inner store with added latency, for benchmarks."""

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
    assert isinstance(store.inner, FileStore)
    assert "(+50 ms)" in store.describe()


def test_latency_parameter_is_not_passed_to_the_inner_store() -> None:
    store = open_store("latency+memory://?latency_seconds=0")

    assert isinstance(store, LatencyStore)
    assert isinstance(store.inner, MemoryStore)
    assert store.latency == 0.0


@pytest.mark.parametrize(
    "url",
    [
        "latency+memory://x?latency_seconds=abc",
        "latency+memory://x?latency_seconds=-1",
        "latency+memory://x?latency_seconds=nan",
        "latency+memory://x?latency_seconds=3600",
        "latency+memory://x?latency_seconds=0.1&latency_seconds=0.2",
        "latency+nope://x",
    ],
)
def test_malformed_latency_urls_are_refused(url: str) -> None:
    with pytest.raises(StoreConfigError):
        open_store(url)
