"""A third party that reclaims deleted objects' folders on a folder store as
early as it may, while the nodes run (``file`` runs only).

The folder store removes a deleted object's folder at a listing once its
tombstone is :data:`~engine.stores.TOMBSTONE_SECONDS` old (the lane keeper
lists hourly), which a run of minutes never reaches. This thread lists
everything beside the document (``queue.json.`` : segments, their indexes,
store check probes; never the document itself) every
:data:`RECLAIM_SECONDS` through a folder store whose clock runs that long
ahead, so that every tombstone is old at once: its reclaims race the nodes'
seals, merges, refills and deletes, and the checks (a lost push, a segment
or index not found, a lookup that misses) find any live object it took.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from chaos.history import History
from engine import DOCUMENT_KEY, EngineError
from engine.stores import TOMBSTONE_SECONDS, FileStore

RECLAIM_SECONDS = 2.0
PREFIX = f"{DOCUMENT_KEY}."


def deleted_folders(root: Path) -> set[str]:
    """The versions folders under ``root``'s :data:`PREFIX` folders that hold
    a tombstone alone (a deleted object), by path."""
    found = set()
    for top in root.glob(f"{PREFIX}*"):
        for folder, dirs, files in os.walk(top):
            if folder.endswith(".versions") and len(dirs) == 1 and not files:
                found.add(folder)
    return found


class Reclaimer(threading.Thread):
    """Lists :data:`PREFIX` on the folder store at ``root`` every
    :data:`RECLAIM_SECONDS`, an hour ahead; counts the deleted objects whose
    folders went, and records that count when stopped."""

    def __init__(self, root: Path, history: History, stop: threading.Event) -> None:
        super().__init__(name="reclaimer", daemon=True)
        self.root = root
        self.store = FileStore(root, clock=lambda: time.time() + TOMBSTONE_SECONDS + 1)
        self.history = history
        self.stop_event = stop
        self.reclaimed = 0
        self.listings = 0

    def run(self) -> None:
        while not self.stop_event.wait(RECLAIM_SECONDS):
            before = deleted_folders(self.root)
            try:
                self.store.list(PREFIX)
            except EngineError as exc:  # a listing that fails reclaims nothing; the next one tries again
                self.history.event(f"reclaimer: listing failed: {exc}")
                continue
            self.listings += 1
            self.reclaimed += sum(1 for folder in before if not os.path.isdir(folder))
        self.history.event(f"reclaimer: {self.reclaimed} deleted objects' folders reclaimed in "
                           f"{self.listings} listings")
