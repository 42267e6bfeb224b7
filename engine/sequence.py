"""An ordered collection of encoded JSON items, cached in chunks.

The document's ``jobs`` and ``dead`` lists are written on every commit, but
each commit changes only a few items. ``EncodedSequence`` keeps every item's
encoded bytes and groups consecutive items into chunks whose joined bytes are
cached, so encoding a commit rebuilds only the chunks that changed and hands
the store a short list of large parts instead of copying the whole document.
"""

from __future__ import annotations

from collections.abc import Iterator

CHUNK_ITEMS = 512


class EncodedSequence:
    """Items in order, each a key and its encoded bytes.

    Every item has a *slot*, a number that grows with each append, so slots
    give the items' order. ``append`` always puts an item at the back (moving
    it if present); ``update`` changes an item in place.
    """

    def __init__(self) -> None:
        self._slot: dict[str, int] = {}
        self._chunks: dict[int, dict[str, bytes]] = {}  # chunk number -> items, in slot order
        self._joined: dict[int, bytes] = {}  # chunk number -> its items joined with commas
        self._next = 0

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, key: object) -> bool:
        return key in self._slot

    def slot(self, key: str) -> int:
        """The item's position number; larger means later in the order."""
        return self._slot[key]

    def get(self, key: str) -> bytes:
        """The item's encoded bytes."""
        return self._chunks[self._slot[key] // CHUNK_ITEMS][key]

    def append(self, key: str, data: bytes) -> int:
        """Put ``key`` at the back with ``data``; return its new slot."""
        if key in self._slot:
            self.remove(key)
        slot = self._next
        self._next += 1
        chunk = slot // CHUNK_ITEMS
        # Chunks are created in increasing order and a chunk number is never
        # reused below the current one, so dict order is chunk order.
        self._chunks.setdefault(chunk, {})[key] = data
        self._joined.pop(chunk, None)
        self._slot[key] = slot
        return slot

    def update(self, key: str, data: bytes) -> None:
        chunk = self._slot[key] // CHUNK_ITEMS
        self._chunks[chunk][key] = data
        self._joined.pop(chunk, None)

    def remove(self, key: str) -> None:
        chunk = self._slot.pop(key) // CHUNK_ITEMS
        items = self._chunks[chunk]
        del items[key]
        self._joined.pop(chunk, None)
        if not items:
            del self._chunks[chunk]

    def parts(self) -> Iterator[bytes]:
        """The items as JSON array contents, comma-separated, in a few large pieces."""
        first = True
        for chunk, items in self._chunks.items():
            joined = self._joined.get(chunk)
            if joined is None:
                joined = self._joined[chunk] = b",".join(items.values())
            if not first:
                yield b","
            first = False
            yield joined
