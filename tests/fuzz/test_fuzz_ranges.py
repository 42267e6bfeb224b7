"""``ObjectStore.get_range`` against the bytes themselves: any object, written
whole or in parts, and any range, on the stores whose ranges are their own
code (memory: the base class's default; a folder: ``pread``), and through
the latency and fault wrappers that pass ranges on. A lookup by id trusts
these bytes after one CRC-32 check (engine.lookup.ranged_job)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from engine.stores import FaultyStore, FileStore, LatencyStore, MemoryStore, ObjectStore

STORES: dict[str, Callable[[str], ObjectStore]] = {
    "memory": lambda _: MemoryStore(),
    "file": FileStore,
    "latency(file)": lambda root: LatencyStore(FileStore(root), latency=0, bandwidth=None),
    "faulty(memory)": lambda _: FaultyStore(MemoryStore()),
}


@given(kind=st.sampled_from(sorted(STORES)), data=st.binary(max_size=3_000), draw=st.data())
def test_a_range_is_the_slice_of_the_object(kind: str, data: bytes, draw: st.DataObject) -> None:
    # Ranges drawn around the object's own length: inside it, across its end, past it.
    cuts = draw.draw(st.lists(st.integers(0, len(data)), max_size=4), label="cuts")
    start = draw.draw(st.integers(0, len(data) + 10), label="start")
    length = draw.draw(st.integers(0, len(data) + 10), label="length")
    with tempfile.TemporaryDirectory() as root:
        store = STORES[kind](root)
        bounds = sorted({0, len(data), *cuts})
        store.put_parts("o/b.bin", [data[a:b] for a, b in pairwise(bounds)] or [b""], if_none_match=True)
        assert store.get_range("o/b.bin", start, length) == data[start:start + length]
        assert store.get_range("o/missing.bin", start, length) is None
