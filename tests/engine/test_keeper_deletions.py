"""The lane keeper deletes dropped segments without starving its other work.

A merge wave drops hundreds of segments at once, each two store requests
(the segment and its id index). Every keeper thread that finished a task
took whatever deletions were due and worked through them, so under a wave
all its threads were soon deleting while seals waited for one, and the
document grew with unsealed pushes (``engine.reaper.DELETE_THREADS``).
"""

from __future__ import annotations

import threading
from pathlib import Path

from engine import Blob, FileStore, MemoryStore, Policy
from engine.idindex import index_key
from engine.lanes import LaneKeeper
from engine.lanetasks import WarmTask
from engine.model import utc_now
from engine.reaper import DELETE_THREADS
from engine.segments import SegmentRef
from tests.helpers import wait_for


class BlockingDeletes(MemoryStore):
    """Deletes wait for ``release``; counts how many are waiting at once, and every get."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.waiting = 0
        self.most = 0
        self.gets: list[str] = []

    def delete(self, key: str) -> None:
        with self.lock:
            self.waiting += 1
            self.most = max(self.most, self.waiting)
        self.release.wait(10)
        with self.lock:
            self.waiting -= 1
        super().delete(key)

    def get(self, key: str) -> Blob | None:
        self.gets.append(key)
        return super().get(key)


def test_a_wave_of_deletions_leaves_threads_for_the_keepers_other_work() -> None:
    store = BlockingDeletes()
    keeper = LaneKeeper(store, key="queue.json", policy=Policy(segment_jobs=10), execute=lambda op: None, epoch=1,
                        clock=utc_now, grace_seconds=0, collect_seconds=3600, retry_seconds=1, threads=3).start()
    try:
        keys = [f"queue.json.seg/q/e00000001-p{n:014d}-0000abcd.json" for n in range(30)]
        for key in keys:
            store.put(key, b"{}")
        # Three drops in a row, as three commits' merges land: without a
        # limit, each of the three threads took one and blocked in it.
        for at in range(0, 30, 10):
            keeper.reaper.dropped(keys[at:at + 10])
            wait_for(lambda: store.waiting >= 1, what="a thread deleting")
            threading.Event().wait(0.2)
        ref = SegmentRef(key=keys[0].replace("-p", "-x"), total=1, consumed=0, front=0, last_pos=0, size=2,
                         sha256="0" * 64, oldest_enqueued_at=utc_now(), epoch=1, sealed_at=utc_now())
        with keeper._cond:
            keeper._tasks.append(WarmTask((ref,)))
            keeper._cond.notify_all()

        # A thread is left for it while the deletions are still stuck.
        wait_for(lambda: index_key("queue.json", ref.key) in store.gets, timeout=5, what="the task run")
        assert store.most <= DELETE_THREADS and store.waiting <= DELETE_THREADS
    finally:
        store.release.set()
        wait_for(lambda: not any(store.get(key) for key in keys), timeout=10, what="every dropped segment deleted")
        keeper.stop(timeout=5)
    assert keeper.deleted == 30


def test_a_dropped_segment_leaves_no_bytes_on_the_folder_store(tmp_path: Path) -> None:
    """On the embedded default store a deleted object keeps only its
    tombstone: a used segment's and its index's bytes leave the disk (they
    stayed, as versions below the tombstone, before)."""
    root = tmp_path / "store"
    store = FileStore(root)
    keeper = LaneKeeper(store, key="queue.json", policy=Policy(segment_jobs=10), execute=lambda op: None, epoch=1,
                        clock=utc_now, grace_seconds=0, collect_seconds=3600, retry_seconds=1, threads=2).start()
    try:
        keys = [f"queue.json.seg/q/e00000001-p{n:014d}-0000abcd.json" for n in range(3)]
        for key in keys:
            store.put(key, b'{"jobs": "' + b"x" * 100_000 + b'"}', if_none_match=True)
            store.put(index_key("queue.json", key), b"an index", if_none_match=True)
        keeper.reaper.dropped(keys)
        wait_for(lambda: store.list() == [], timeout=10, what="the segments and their indexes deleted")
    finally:
        keeper.stop(timeout=5)
    left = [path for path in root.rglob("*") if path.is_file() and ".tmp" not in path.parts]
    assert left == [], left
