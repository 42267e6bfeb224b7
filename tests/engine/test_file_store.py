"""What only the file store can show: its layout of immutable versions, and
how it reads the layout of earlier releases.

The contract every store keeps is in test_store_contract.py; writers in other
processes, stopped or racing, are in tests/e2e/test_file_store_processes.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.errors import PreconditionFailed
from engine.stores import FileStore


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
