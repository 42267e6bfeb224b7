"""The folder store against the memory store, step by step: creates, conditional
and unconditional writes, stale ETags, deletes, re-creates and listings, in any
order, on a few keys. Both must accept and refuse the same writes and hold the
same bytes; and on disk, a deleted object keeps nothing but its tombstone (a
delete, or the first listing after one, collects the versions below it), and
nothing at all once an hour has passed and a listing reclaimed its folder:
then created again, it must still refuse every ETag it handed out before."""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from engine import PreconditionFailed
from engine.stores import TOMBSTONE_SECONDS, FileStore, MemoryStore

KEYS = st.sampled_from(["a.json", "seg/q/s1.json", "seg/q/s2.json"])


class FolderAgainstMemory(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp()
        self.hours = 0.0  # how far the folder store's clock is ahead
        self.folder = FileStore(self.root, clock=lambda: time.time() + self.hours)
        self.memory = MemoryStore()
        # Per key and store, every ETag each store returned, newest last: the stale ones are tried too.
        self.etags: dict[str, list[tuple[str, str]]] = {}

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _both(self, key: str, data: bytes, *, cond: str, pick: int) -> None:
        outcomes = []
        history = self.etags.get(key, [])
        for n, store in enumerate((self.folder, self.memory)):
            kwargs: dict[str, object] = {}
            if cond == "create":
                kwargs["if_none_match"] = True
            elif cond == "match":
                if not history:
                    return
                kwargs["if_match"] = history[pick % len(history)][n]
            try:
                outcomes.append(store.put(key, data, **kwargs))  # type: ignore[arg-type]
            except PreconditionFailed:
                outcomes.append(None)
        assert (outcomes[0] is None) == (outcomes[1] is None), (key, cond, outcomes)
        if outcomes[0] is not None:
            self.etags.setdefault(key, []).append((outcomes[0], outcomes[1]))

    @rule(key=KEYS, data=st.binary(max_size=40), cond=st.sampled_from(["none", "create", "match"]),
          pick=st.integers(0, 20))
    def put(self, key: str, data: bytes, cond: str, pick: int) -> None:
        self._both(key, data, cond=cond, pick=pick)

    @rule(key=KEYS)
    def delete(self, key: str) -> None:
        self.folder.delete(key)
        self.memory.delete(key)

    @rule(prefix=st.sampled_from(["", "seg/", "seg/q/s2"]))
    def listing(self, prefix: str) -> None:
        assert self.folder.list(prefix) == self.memory.list(prefix)

    @rule()
    def an_hour_passes(self) -> None:
        # Every tombstone there is (and any made later) is old enough to go at the next listing.
        self.hours += TOMBSTONE_SECONDS + 1

    @invariant()
    def same_bytes(self) -> None:
        for key in ("a.json", "seg/q/s1.json", "seg/q/s2.json"):
            folder, memory = (None if b is None else b.data for b in (self.folder.get(key), self.memory.get(key)))
            assert folder == memory, key

    @invariant()
    def a_deleted_object_keeps_only_its_tombstone(self) -> None:
        for key in ("a.json", "seg/q/s1.json", "seg/q/s2.json"):
            parent, _, name = key.rpartition("/")
            folder = os.path.join(self.root, parent, f".{name}.versions")
            if self.folder.get(key) is None and os.path.isdir(folder):
                assert len(os.listdir(folder)) == 1, (key, sorted(os.listdir(folder)))


TestFolderAgainstMemory = FolderAgainstMemory.TestCase
