"""A folder on the local disk: the embedded default store.

Guarantees:

* **Atomic conditional writes across processes.** The condition check and the
  replacement run under an exclusive ``flock`` on a per-key lock file, so two
  processes (or threads) can never both win against one version.
* **Crash safety.** New contents go to a temporary file that is written,
  fsynced and renamed over the object, then the folder is fsynced. ``rename``
  is atomic, so after ``kill -9`` or a power cut at any moment the object is
  either the old version or the new one, never torn or empty.
* **ETags without hashing.** An ETag is ``mtime_ns-inode-size`` of the file,
  read with ``fstat`` on the same descriptor as the data, so it always
  matches the bytes returned. Under the lock each write stamps an mtime
  strictly above the previous version's, so a version's ETag is never reused
  even if the file system recycles the inode number (no ABA).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import quote

from engine.errors import PreconditionFailed, StoreConfigError, StoreUnavailable
from engine.stores.base import Blob, ObjectStore, check_key, check_write_args

LOCK_DIR = ".locks"
TMP_DIR = ".tmp"
# Temporary files older than this are leftovers of a killed writer.
STALE_TMP_SECONDS = 600.0


def _etag(st: os.stat_result) -> str:
    return f'"{st.st_mtime_ns:x}-{st.st_ino:x}-{st.st_size:x}"'


class FileStore(ObjectStore):
    """Objects as files under ``root``; keys map to relative paths."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        path = Path(root)
        if not path.is_absolute():
            raise StoreConfigError(f"file store root must be an absolute path, got {str(root)!r}")
        try:
            (path / LOCK_DIR).mkdir(parents=True, exist_ok=True)
            (path / TMP_DIR).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreConfigError(f"cannot use {path} as a store: {exc}") from exc
        self.root = path
        self._sweep_stale_temporaries()

    def describe(self) -> str:
        return f"file://{self.root}"

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def get(self, key: str) -> Blob | None:
        path = self._path(key)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreUnavailable(f"cannot read {path}: {exc}") from exc
        try:
            # fstat on the descriptor we read from: the ETag describes exactly
            # these bytes even if a writer renames a new version in meanwhile.
            st = os.fstat(fd)
            with open(fd, "rb", buffering=0, closefd=False) as f:
                data = f.read()
        except OSError as exc:
            raise StoreUnavailable(f"cannot read {path}: {exc}") from exc
        finally:
            os.close(fd)
        return Blob(data=data, etag=_etag(st))

    def etag(self, key: str) -> str | None:
        path = self._path(key)
        try:
            return _etag(os.stat(path))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreUnavailable(f"cannot stat {path}: {exc}") from exc

    def put(
        self,
        key: str,
        data: bytes,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
    ) -> str:
        return self.put_parts(key, (data,), if_match=if_match, if_none_match=if_none_match)

    def put_parts(
        self,
        key: str,
        parts: Sequence[bytes],
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
    ) -> str:
        path = self._path(key)
        check_write_args(if_match, if_none_match)
        with self._locked(key):
            try:
                current: os.stat_result | None = os.stat(path)
            except FileNotFoundError:
                current = None
            if if_none_match and current is not None:
                raise PreconditionFailed(f"{path} already exists")
            if if_match is not None and (current is None or _etag(current) != if_match):
                raise PreconditionFailed(f"{path} changed since it was read")
            floor = current.st_mtime_ns + 1 if current is not None else 0
            return self._replace(path, parts, mtime_ns=max(time.time_ns(), floor))

    def _replace(self, path: Path, parts: Sequence[bytes], *, mtime_ns: int) -> str:
        tmp = self.root / TMP_DIR / f"{uuid.uuid4().hex}.tmp"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                for part in parts:
                    view = memoryview(part)
                    while view:
                        view = view[os.write(fd, view) :]
                os.utime(fd, ns=(mtime_ns, mtime_ns))
                os.fsync(fd)
                st = os.fstat(fd)
            finally:
                os.close(fd)
            os.rename(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise StoreUnavailable(f"cannot write {path}: {exc}") from exc
        # The rename is durable only once the folder entry is on disk. If this
        # fsync fails the new version is visible but maybe not durable: report
        # it as ambiguous so the caller settles by re-reading.
        try:
            self._fsync_dir(path.parent)
        except OSError as exc:
            raise StoreUnavailable(f"cannot sync folder of {path}: {exc}") from exc
        return _etag(st)

    def delete(self, key: str) -> None:
        path = self._path(key)
        with self._locked(key):
            try:
                path.unlink()
            except FileNotFoundError:
                return
            except OSError as exc:
                raise StoreUnavailable(f"cannot delete {path}: {exc}") from exc
            self._fsync_dir(path.parent)

    def list(self, prefix: str = "") -> list[str]:
        keys: list[str] = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            # Skip the store's own dot-folders (and anything hidden).
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            rel = Path(dirpath).relative_to(self.root)
            for name in filenames:
                if name.startswith("."):
                    continue
                key = (rel / name).as_posix() if rel.parts else name
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        # One lock file per key; flock locks belong to the open file
        # description, so this excludes other threads and other processes.
        lock_path = self.root / LOCK_DIR / (quote(key, safe="") + ".lock")
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreUnavailable(f"cannot open lock {lock_path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the flock

    @staticmethod
    def _fsync_dir(path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _sweep_stale_temporaries(self) -> None:
        cutoff = time.time() - STALE_TMP_SECONDS
        with os.scandir(self.root / TMP_DIR) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.stat().st_mtime < cutoff:
                        os.unlink(entry.path)
