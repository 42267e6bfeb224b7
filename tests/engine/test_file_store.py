"""What only the file store can show: its layout of immutable versions, and
how it reads the layout of earlier releases.

The contract every store keeps is in test_store_contract.py; writers in other
processes, stopped or racing, are in tests/e2e/test_file_store_processes.py.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from engine.errors import PreconditionFailed, StoreUnavailable
from engine.stores import TOMBSTONE_SECONDS, FileStore


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


# -- layout ---------------------------------------------------------------------


def _versions(root: Path, key: str) -> list[str]:
    parent, _, name = key.rpartition("/")
    return sorted(os.listdir(root / parent / f".{name}.versions"))


def test_versions_are_immutable_files_and_a_delete_is_a_tombstone(root: Path) -> None:
    store = FileStore(root)
    etag = store.put("results/a.json", b"1", if_none_match=True)
    for n in range(2, 8):
        etag = store.put("results/a.json", str(n).encode(), if_match=etag)
    names = _versions(root, "results/a.json")
    assert names == [f"{g:020d}" for g in range(4, 8)]  # the newest KEEP_VERSIONS
    assert (root / "results" / ".a.json.versions" / names[-1]).read_bytes() == b"7"

    store.delete("results/a.json")

    assert store.get("results/a.json") is None
    assert store.list() == []
    # Only the tombstone is left: the bytes of every version below it are gone.
    assert _versions(root, "results/a.json") == [f"{8:020d}"]
    assert (root / "results" / ".a.json.versions" / f"{8:020d}").is_dir()
    # Generations go on counting after a delete: a stale ETag never matches again.
    again = store.put("results/a.json", b"new", if_none_match=True)
    assert again != etag
    assert _versions(root, "results/a.json")[-1] == f"{9:020d}"
    with pytest.raises(PreconditionFailed):
        store.put("results/a.json", b"stale", if_match=etag)


def test_an_old_layout_plain_file_is_generation_zero_and_migrates_on_first_write(root: Path) -> None:
    FileStore(root)
    (root / "queue.json").write_bytes(b"old layout")
    (root / "results").mkdir()
    (root / "results" / "r.json").write_bytes(b"old result")
    store = FileStore(root)

    blob = store.get("queue.json")
    assert blob is not None and blob.data == b"old layout"
    assert store.etag("queue.json") == blob.etag
    assert store.list() == ["queue.json", "results/r.json"]
    with pytest.raises(PreconditionFailed):
        store.put("queue.json", b"x", if_none_match=True)

    etag = store.put("queue.json", b"new layout", if_match=blob.etag)

    assert not (root / "queue.json").exists()  # migrated: no stale copy left behind
    new = store.get("queue.json")
    assert new is not None and (new.data, new.etag) == (b"new layout", etag)
    with pytest.raises(PreconditionFailed):
        store.put("queue.json", b"stale", if_match=blob.etag)
    store.delete("results/r.json")
    assert store.list() == ["queue.json"]
    assert not (root / "results" / "r.json").exists()


def test_an_etag_of_the_old_layout_is_refused_cleanly(root: Path) -> None:
    store = FileStore(root)
    store.put("doc", b"v1")
    with pytest.raises(PreconditionFailed):
        store.put("doc", b"v2", if_match='"18d2f-2a-2"')  # mtime-inode-size, as before
    with pytest.raises(PreconditionFailed):
        store.put("doc", b"v2", if_match="garbage")


def test_listing_reclaims_the_bytes_an_earlier_delete_left_below_its_tombstone(root: Path) -> None:
    # Deletes before the store collected at once added a tombstone on top
    # of the versions they kept: such a folder is what they left.
    store = FileStore(root)
    etag = store.put("seg/a.json", b"a" * 1000, if_none_match=True)
    store.put("seg/a.json", b"b" * 1000, if_match=etag)
    store.put("seg/live.json", b"live", if_none_match=True)
    (root / "seg" / ".a.json.versions" / f"{3:020d}").mkdir()
    assert store.get("seg/a.json") is None and len(_versions(root, "seg/a.json")) == 3

    assert store.list("seg/") == ["seg/live.json"]

    assert _versions(root, "seg/a.json") == [f"{3:020d}"]  # the tombstone alone
    again = store.put("seg/a.json", b"new", if_none_match=True)
    assert _versions(root, "seg/a.json")[-1] == f"{4:020d}" and again != etag
    blob = store.get("seg/live.json")
    assert blob is not None and blob.data == b"live"


# -- reclaiming deleted objects --------------------------------------------------


class _Clock:
    """Unix time, set ahead by ``ahead`` seconds: a store's clock an hour on."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def __call__(self) -> float:
        return time.time() + self.ahead


def _versions_folder(root: Path, key: str) -> Path:
    parent, _, name = key.rpartition("/")
    return root / parent / f".{name}.versions"


def test_an_hour_after_a_delete_a_listing_reclaims_the_folder_and_the_generations_go_on(root: Path) -> None:
    clock = _Clock()
    store = FileStore(root, clock=clock)
    first = store.put("seg/a.json", b"one", if_none_match=True)
    second = store.put("seg/a.json", b"two", if_match=first)
    store.put("seg/live.json", b"live", if_none_match=True)
    store.delete("seg/a.json")  # its tombstone is generation 3

    assert store.list("seg/") == ["seg/live.json"]
    assert _versions(root, "seg/a.json") == [f"{3:020d}"]  # under an hour: the tombstone stays

    clock.ahead = TOMBSTONE_SECONDS + 1
    assert store.list("seg/") == ["seg/live.json"]

    assert not _versions_folder(root, "seg/a.json").exists()
    assert os.listdir(root / "seg" / ".floor") == [f"{4:020d}"]  # the count goes on from here
    again = store.put("seg/a.json", b"again", if_none_match=True)
    assert _versions(root, "seg/a.json") == [f"{4:020d}"]
    for stale in (first, second):
        with pytest.raises(PreconditionFailed):
            store.put("seg/a.json", b"stale", if_match=stale)
    blob = store.get("seg/a.json")
    assert blob is not None and (blob.data, blob.etag) == (b"again", again)
    live = store.get("seg/live.json")
    assert live is not None and live.data == b"live"
    # A new name in that folder starts at the floor too.
    store.put("seg/b.json", b"b", if_none_match=True)
    assert _versions(root, "seg/b.json") == [f"{4:020d}"]


def _stopped_before_linking(store: FileStore) -> tuple[threading.Event, threading.Event]:
    """Stop the next writer of ``store`` just before it makes sure its versions
    folder exists and links its version: (stopped, resume)."""
    stopped, resume = threading.Event(), threading.Event()
    ensure = store._ensure_folder

    def stop_once(versions: str) -> None:
        if not stopped.is_set():
            stopped.set()
            assert resume.wait(10)
        ensure(versions)

    store._ensure_folder = stop_once  # type: ignore[method-assign]
    return stopped, resume


def test_a_writer_stopped_across_a_delete_and_its_reclaim_does_not_bring_the_object_back(root: Path) -> None:
    clock = _Clock()
    store = FileStore(root, clock=clock)
    etag = store.put("seg/a.json", b"one", if_none_match=True)
    stopped, resume = _stopped_before_linking(store)
    outcome: list[BaseException | str] = []

    def stale_write() -> None:
        try:
            outcome.append(store.put("seg/a.json", b"stale", if_match=etag))  # its condition holds now
        except Exception as exc:
            outcome.append(exc)

    writer = threading.Thread(target=stale_write)
    writer.start()
    assert stopped.wait(10)
    store.delete("seg/a.json")  # a tombstone at generation 2, the name the writer will link
    clock.ahead = TOMBSTONE_SECONDS + 1
    assert store.list("seg/") == []
    assert not _versions_folder(root, "seg/a.json").exists()
    resume.set()
    writer.join(10)

    assert len(outcome) == 1 and isinstance(outcome[0], StoreUnavailable)  # "may have landed": it did not
    assert store.get("seg/a.json") is None
    assert not os.listdir(_versions_folder(root, "seg/a.json"))  # its version was taken back
    assert store.list("seg/") == []
    assert not _versions_folder(root, "seg/a.json").exists()  # and the empty folder it made goes too


def test_a_create_planned_on_the_tombstone_lands_though_the_folder_was_reclaimed_meanwhile(root: Path) -> None:
    clock = _Clock()
    store = FileStore(root, clock=clock)
    store.put("seg/a.json", b"one", if_none_match=True)
    store.delete("seg/a.json")
    clock.ahead = TOMBSTONE_SECONDS + 1
    stopped, resume = _stopped_before_linking(store)
    outcome: list[BaseException | str] = []

    def create() -> None:
        try:
            outcome.append(store.put("seg/a.json", b"again", if_none_match=True))
        except Exception as exc:
            outcome.append(exc)

    creator = threading.Thread(target=create)
    creator.start()
    assert stopped.wait(10)  # it plans generation 3, above the tombstone
    assert store.list("seg/") == []
    assert not _versions_folder(root, "seg/a.json").exists()
    resume.set()
    creator.join(10)

    assert len(outcome) == 1 and isinstance(outcome[0], str)
    blob = store.get("seg/a.json")
    assert blob is not None and (blob.data, blob.etag) == (b"again", outcome[0])
    assert _versions(root, "seg/a.json") == [f"{3:020d}"]


def test_a_stray_version_linked_under_the_tombstone_as_it_is_reclaimed_is_removed(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer stopped since before the delete links a collected name below
    the tombstone just as a listing removes the tombstone: the folder is then
    not empty, and the stray, the object's only version, must not read as the
    object come back."""
    clock = _Clock()
    store = FileStore(root, clock=clock)
    etag = store.put("seg/a.json", b"one", if_none_match=True)
    store.put("seg/a.json", b"two", if_match=etag)
    store.delete("seg/a.json")  # the tombstone is generation 3; 1 and 2 are collected
    clock.ahead = TOMBSTONE_SECONDS + 1
    folder = _versions_folder(root, "seg/a.json")
    tombstone = str(folder / f"{3:020d}")
    rmdir = os.rmdir

    def stray_first(path: str) -> None:
        if str(path) == tombstone:
            (folder / f"{1:020d}").write_bytes(b"stale")
        rmdir(path)

    monkeypatch.setattr(os, "rmdir", stray_first)
    assert store.list("seg/") == []
    monkeypatch.setattr(os, "rmdir", rmdir)

    assert store.get("seg/a.json") is None
    assert not (folder / f"{1:020d}").exists()


def test_a_create_from_nothing_during_a_reclaim_stays_though_another_reclaim_raised_the_floor(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the tombstone's removal and the folder's, a creator finds no
    version, creates the object at the floor and is answered; another
    object's reclaim then raises the folder's floor above it. The reclaim,
    finding the folder not empty, must keep that create: only what is at or
    below its own tombstone is a stopped writer's."""
    clock = _Clock()
    store = FileStore(root, clock=clock)
    store.put("seg/a.json", b"one", if_none_match=True)
    store.delete("seg/a.json")  # the tombstone is generation 2
    clock.ahead = TOMBSTONE_SECONDS + 1
    folder = _versions_folder(root, "seg/a.json")
    tombstone = str(folder / f"{2:020d}")
    rmdir = os.rmdir
    created: list[str] = []

    def create_meanwhile(path: str) -> None:
        rmdir(path)
        if str(path) == tombstone:
            created.append(store.put("seg/a.json", b"created", if_none_match=True))  # at the floor, 3
            (root / "seg" / ".floor" / f"{50:020d}").touch()  # another object's reclaim

    monkeypatch.setattr(os, "rmdir", create_meanwhile)
    assert store.list("seg/") == []  # as it read the folder: deleted
    monkeypatch.setattr(os, "rmdir", rmdir)

    blob = store.get("seg/a.json")
    assert blob is not None and (blob.data, blob.etag) == (b"created", created[0])
    assert _versions(root, "seg/a.json") == [f"{3:020d}"]


def test_a_reclaim_that_died_half_way_leaves_the_object_deleted_and_is_finished_later(root: Path) -> None:
    """Killed after the floor was raised and the tombstone removed, before its
    folder went: an empty versions folder is a deleted object, a create
    starts above the old generations, and a later listing removes what is
    left once it is an hour old."""
    clock = _Clock()
    store = FileStore(root, clock=clock)
    old = store.put("seg/a.json", b"one", if_none_match=True)
    store.delete("seg/a.json")  # the tombstone is generation 2
    (root / "seg" / ".floor").mkdir()
    (root / "seg" / ".floor" / f"{3:020d}").touch()
    (_versions_folder(root, "seg/a.json") / f"{2:020d}").rmdir()

    assert store.get("seg/a.json") is None and store.etag("seg/a.json") is None
    assert store.list("seg/") == []
    assert _versions_folder(root, "seg/a.json").is_dir()  # an empty folder under an hour old stays
    clock.ahead = TOMBSTONE_SECONDS + 1
    assert store.list("seg/") == []
    assert not _versions_folder(root, "seg/a.json").exists()

    store.put("seg/a.json", b"again", if_none_match=True)
    assert _versions(root, "seg/a.json") == [f"{3:020d}"]
    with pytest.raises(PreconditionFailed):
        store.put("seg/a.json", b"stale", if_match=old)
