"""A folder on the local disk: the embedded default store, lock-free.

On-disk layout. Each object ``dir/name`` is a folder of immutable versions
next to where a plain file would be::

    <root>/dir/.name.versions/00000000000000000007      version 7 (a file)
    <root>/dir/.name.versions/00000000000000000008      version 8 (a file)
    <root>/dir/.name.versions/00000000000000000009/     version 9: a tombstone
                                                        (an empty folder: deleted)
    <root>/.tmp/<random>.tmp                            a write in progress

The object's current version is the highest-numbered entry; a tombstone
there means the object does not exist. Version numbers (generations) rise by
one on every write and delete and never restart, not even after a delete, so
an ETag is never reused (no ABA). The names of the versions folders start
with a dot, which no key segment may, so they cannot collide with keys.

Guarantees:

* **Atomic conditional writes without locks.** A write with ``if_match``
  naming generation *g* writes and fsyncs a temporary file, then
  ``os.link``s it as generation *g+1*. ``link`` creates a name only if it is
  absent, atomically, across processes: of several writers racing on one
  version exactly one wins, and the others get PreconditionFailed. Nothing is
  ever locked, so a writer stopped at any instruction (SIGSTOP, a frozen VM)
  blocks nobody; when it resumes, its ``link`` fails because *g+1* exists.
  ``if_none_match`` creates the next generation only if the current one is a
  tombstone or there is none; ``delete`` adds a tombstone (``mkdir``, which is
  just as exclusive).
* **Old versions are collected.** After each write the writer removes all
  but the newest ``keep_versions`` generations, lowest first. A writer that
  was stopped for longer than that many writes could find its target name
  free again; it then sees, before answering, that its generation is not the
  newest and its base is gone, and answers StoreUnavailable ("may have
  landed"): never a false success, and the newest version is untouched.
* **Crash safety.** A version appears whole or not at all: its bytes are
  fsynced before the ``link``, and the folder is fsynced after it. After
  ``kill -9`` or a power cut at any moment, the object is the old version or
  the new one, never torn or empty.
* **ETags without hashing.** An ETag is ``g<generation>-<inode>-<mtime_ns>-
  <size>`` of the version file, read with ``fstat`` on the descriptor the
  data came from, so it always matches the bytes returned. ``etag()`` lists
  one small folder and stats one file.
* **Old layout.** Before this layout, an object was a plain file at
  ``<root>/dir/name``. Such a file is read as generation 0; the first write
  creates generation 1 on top of it and then removes the plain file.

A deleted object keeps its versions folder, holding just its tombstone, for
an hour: the generation count is what keeps ETags unique. The delete
collects every version below the tombstone at once (a used segment's bytes
go with it), by the rule above: a writer stopped on a base it collected
finds, when it resumes, that its base is gone, and answers
PreconditionFailed or "may have landed"; never a false success.

**Deleted objects are reclaimed whole.** A listing removes the folder of an
object deleted more than :data:`TOMBSTONE_SECONDS` ago (the lane keeper lists
its segments' and indexes' prefixes hourly), so that a used segment leaves
not even its two folders behind (two inodes each: a busy node's disk would
run out of them before its bytes). The generation count moves to the
folder's **floor** first: ``<dir>/.floor/<generation>``, an empty marker, whose
highest name is where every object created from nothing in ``<dir>`` starts
counting. So:

* an object deleted, reclaimed and created again starts above every
  generation it had before: an ETag is still never reused, and two creators
  racing still race for one name;
* the floor is made durable before the tombstone goes, and the tombstone
  goes before the folder (``rmdir``, which fails on a folder not empty): a
  version linked meanwhile above the tombstone is a create that landed, and
  stays; one at or below it can only be a writer's that read the object
  before its delete and was stopped across the hour (SIGSTOP, a frozen VM).
  Such a version is taken back: by the reclaim if it is there first, by the
  writer itself otherwise (its base gone and its generation below the floor,
  it unlinks it and answers "may have landed"; so does a create built on
  the tombstone that another object's reclaim left below the floor, which
  may race a create from nothing: one of them must fail). For the instant between its
  link and its removal it can be read, as the object's last version: the one
  exception to the rules above, for a writer stopped for an hour between two
  instructions. No key the engine deletes (segments, their indexes, store
  check probes) is ever written again after its delete, nor the document
  listed; a Django task's result (``queueadmin.tasks``), deleted at its
  expiry, may be created again by a late attempt: a create, which the floor
  keeps exact.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from engine.errors import PreconditionFailed, StoreConfigError, StoreUnavailable
from engine.stores.base import Blob, ObjectStore, check_key, check_range, check_write_args

TMP_DIR = ".tmp"
VERSIONS_SUFFIX = ".versions"
# Where a folder's generation floor is kept (see the module docstring).
FLOOR_DIR = ".floor"
# A deleted object's folder is reclaimed by a listing once its tombstone is
# this old (and an empty versions folder, a creator's or a reclaim's that died
# half-way, once the folder is).
TOMBSTONE_SECONDS = 3600.0
# Generations kept per object. A writer stopped for fewer writes than this
# gets a clean PreconditionFailed; after more, StoreUnavailable (see above).
KEEP_VERSIONS = 4
# Temporary files older than this are leftovers of a killed writer.
STALE_TMP_SECONDS = 600.0
# A reader retries when the version it found is collected before it opens it
# (other writers made keep_versions writes in between); this bounds the retries.
MAX_READ_RETRIES = 1000
_GENERATION_DIGITS = 20


class _Version(NamedTuple):
    """One entry of an object's versions: its generation, where it is, and
    whether it is a tombstone."""

    generation: int
    path: str
    tombstone: bool


def _etag(generation: int, st: os.stat_result) -> str:
    return f'"g{generation:x}-{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"'


def _etag_generation(etag: str) -> int | None:
    """The generation an ETag of this store names, or None if it is not one."""
    head = etag.strip('"').split("-", 1)[0]
    if not head.startswith("g"):
        return None
    try:
        return int(head[1:], 16)
    except ValueError:
        return None


def _generation_name(generation: int) -> str:
    return f"{generation:0{_GENERATION_DIGITS}d}"


class FileStore(ObjectStore):
    """Objects as folders of versions under ``root`` (see the module docstring)."""

    def __init__(
        self, root: str | os.PathLike[str], *, keep_versions: int = KEEP_VERSIONS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        path = Path(root)
        if not path.is_absolute():
            raise StoreConfigError(f"file store root must be an absolute path, got {str(root)!r}")
        if keep_versions < 2:
            # The newest and the one below it: a writer checks its base is
            # still there to tell a fresh name from a collected one.
            raise StoreConfigError(f"keep_versions must be at least 2, got {keep_versions}")
        try:
            (path / TMP_DIR).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreConfigError(f"cannot use {path} as a store: {exc}") from exc
        self.root = path
        self._root = str(path)
        self.keep_versions = keep_versions
        self._clock = clock  # Unix time: a tombstone's age is its folder's mtime against it
        self._sweep_stale_temporaries()

    def describe(self) -> str:
        return f"file://{self.root}"

    # -- where things are ----------------------------------------------------------

    def _paths(self, key: str) -> tuple[str, str]:
        """The old-layout plain file of ``key`` and its versions folder.
        (Strings, not Paths: a read builds them, and pathlib costs more than the I/O.)"""
        parent, _, name = check_key(key).rpartition("/")
        folder = f"{self._root}/{parent}" if parent else self._root
        return f"{folder}/{name}", f"{folder}/.{name}{VERSIONS_SUFFIX}"

    def _versions(self, plain: str, versions: str) -> list[_Version]:
        """Every version of one object, lowest generation first. Does I/O."""
        found: list[_Version] = []
        try:
            with os.scandir(versions) as entries:
                for entry in entries:
                    name = entry.name
                    if len(name) == _GENERATION_DIGITS and name.isdigit():
                        tombstone = entry.is_dir(follow_symlinks=False)
                        found.append(_Version(int(name), entry.path, tombstone))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StoreUnavailable(f"cannot list {versions}: {exc}") from exc
        try:
            if stat.S_ISREG(os.lstat(plain).st_mode):
                found.append(_Version(0, plain, False))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StoreUnavailable(f"cannot stat {plain}: {exc}") from exc
        found.sort()
        return found

    def _head(self, plain: str, versions: str) -> tuple[_Version, str] | None:
        """The current version and its ETag, or None if the object does not
        exist (no versions, or a tombstone on top)."""
        return self._at_head(plain, versions, lambda head: _etag(head.generation, os.stat(head.path)), "stat")

    def _at_head[T](
        self, plain: str, versions: str, use: Callable[[_Version], T], verb: str
    ) -> tuple[_Version, T] | None:
        """The current version and what ``use`` made of it, or None if the
        object does not exist. Looks again when ``use`` finds the version
        gone (FileNotFoundError); another OSError is StoreUnavailable,
        "cannot ``verb`` <path>". Does I/O."""
        for _ in range(MAX_READ_RETRIES):
            found = self._versions(plain, versions)
            if not found or found[-1].tombstone:
                return None
            head = found[-1]
            try:
                return head, use(head)
            except FileNotFoundError:
                continue  # collected under us: newer versions exist, look again
            except OSError as exc:
                raise StoreUnavailable(f"cannot {verb} {head.path}: {exc}") from exc
        raise StoreUnavailable(f"{versions}: versions kept changing while being read")

    # -- reading -------------------------------------------------------------------

    def get(self, key: str) -> Blob | None:
        opened = self._at_head(*self._paths(key), lambda head: os.open(head.path, os.O_RDONLY), "read")
        if opened is None:
            return None
        head, fd = opened
        try:
            # Versions are immutable, and fstat on the descriptor we read
            # from ties the ETag to exactly these bytes.
            st = os.fstat(fd)
            with open(fd, "rb", buffering=0, closefd=False) as f:
                data = f.read()
        except OSError as exc:
            raise StoreUnavailable(f"cannot read {head.path}: {exc}") from exc
        finally:
            os.close(fd)
        return Blob(data=data, etag=_etag(head.generation, st))

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        check_range(start, length)
        opened = self._at_head(*self._paths(key), lambda head: os.open(head.path, os.O_RDONLY), "read")
        if opened is None:
            return None
        head, fd = opened
        try:
            return os.pread(fd, length, start)
        except OSError as exc:
            raise StoreUnavailable(f"cannot read {head.path}: {exc}") from exc
        finally:
            os.close(fd)

    def etag(self, key: str) -> str | None:
        head = self._head(*self._paths(key))
        return None if head is None else head[1]

    def list(self, prefix: str = "") -> list[str]:
        candidates: set[str] = set()
        self._collect(self.root, "", prefix, candidates)
        keys = []
        gone: list[tuple[str, str, _Version | None]] = []  # deleted objects whose folders may be reclaimed
        for key in sorted(candidates):
            try:
                paths = self._paths(key)
            except StoreConfigError:
                continue  # a stray file no key can name
            if not key.startswith(prefix):
                continue
            found = self._versions(*paths)  # one folder read decides, and serves the collection below
            if found and not found[-1].tombstone:
                keys.append(key)
            elif len(found) > 1:
                # Deleted, with versions below its tombstone: a delete removes
                # them itself, but deletes before it did not (a used segment's
                # bytes), and listing reclaims them (the lane keeper lists its
                # segments' prefixes after a takeover and hourly).
                self._collect_garbage(found, 1)
            else:  # its tombstone alone, or an empty folder: gone whole once old enough
                gone.append((*paths, found[0] if found else None))
        self._reclaim(gone)
        return keys

    def _collect(self, folder: Path, rel: str, prefix: str, into: set[str]) -> None:
        """Add every name under ``folder`` that may be a key (a versions
        folder or an old-layout plain file) to ``into``."""
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StoreUnavailable(f"cannot list {folder}: {exc}") from exc
        for entry in entries:
            name = entry.name
            if name.startswith("."):
                if name.endswith(VERSIONS_SUFFIX) and entry.is_dir(follow_symlinks=False):
                    into.add(rel + name[1 : -len(VERSIONS_SUFFIX)])
            elif entry.is_dir(follow_symlinks=False):
                below = f"{rel}{name}/"
                if below.startswith(prefix) or prefix.startswith(below):
                    self._collect(Path(entry.path), below, prefix, into)
            elif entry.is_file(follow_symlinks=False):
                into.add(rel + name)

    # -- writing -------------------------------------------------------------------

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
        plain, versions = self._paths(key)
        check_write_args(if_match, if_none_match)
        conditional = if_match is not None or if_none_match
        if if_match is not None and _etag_generation(if_match) is None:
            raise PreconditionFailed(f"{versions}: {if_match} is not an ETag of this store")
        # Cheap checks first, so that a writer that already lost neither
        # writes nor syncs its bytes; the real decision is the link below.
        def check() -> None:
            self._check_condition(versions, self._head(plain, versions), if_match, if_none_match)

        check()
        tmp, st = self._write_temporary(parts, versions, check)
        try:
            for _ in range(MAX_READ_RETRIES):
                found = self._versions(plain, versions)
                base = found[-1] if found else None
                base_etag = self._version_etag(base)
                if base is not None and base_etag is None:
                    continue  # collected under us: look again
                current = None if base is None or base.tombstone else (base, base_etag or "")
                self._check_condition(versions, current, if_match, if_none_match)
                # From nothing, at the folder's floor: above any generation of
                # an object of this name whose folder was reclaimed.
                generation = base.generation + 1 if base is not None else max(1, self._floor(versions))
                target = f"{versions}/{_generation_name(generation)}"
                self._ensure_folder(versions)
                try:
                    os.link(tmp, target)
                except FileExistsError:
                    if conditional:
                        raise PreconditionFailed(f"{versions}: another write won generation {generation}") from None
                    continue  # an unconditional write goes on top of whoever won
                except OSError as exc:
                    raise StoreUnavailable(f"cannot write {target}: {exc}") from exc
                if self._settle(plain, versions, generation, base, base_etag):
                    return _etag(generation, st)
                if conditional:
                    raise self._unsure(versions, generation)
                # Unconditional: whatever became of that version, this one
                # goes on top of the newest, which is all "last writer wins" asks.
            raise StoreUnavailable(f"{versions}: lost {MAX_READ_RETRIES} races in a row; nothing written")
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()

    def delete(self, key: str) -> None:
        plain, versions = self._paths(key)
        for _ in range(MAX_READ_RETRIES):
            found = self._versions(plain, versions)
            if not found or found[-1].tombstone:
                return
            base = found[-1]
            base_etag = self._version_etag(base)
            if base_etag is None:
                continue
            target = f"{versions}/{_generation_name(base.generation + 1)}"
            self._ensure_folder(versions)
            try:
                os.mkdir(target)
            except FileExistsError:
                continue  # someone else wrote first; delete what is there now
            except OSError as exc:
                raise StoreUnavailable(f"cannot delete {versions}: {exc}") from exc
            # A deleted object keeps only its tombstone (its generation count);
            # the bytes of its versions below go (a used segment's, say).
            if self._settle(plain, versions, base.generation + 1, base, base_etag, keep=1):
                return
            # Unsure whether that tombstone counts: delete what is newest now.
        raise StoreUnavailable(f"{versions}: lost {MAX_READ_RETRIES} races in a row; nothing deleted")

    @staticmethod
    def _check_condition(
        versions: str, current: tuple[_Version, str] | None, if_match: str | None, if_none_match: bool
    ) -> None:
        if if_none_match and current is not None:
            raise PreconditionFailed(f"{versions} already exists")
        if if_match is not None and (current is None or current[1] != if_match):
            raise PreconditionFailed(f"{versions} changed since it was read")

    @staticmethod
    def _version_etag(version: _Version | None) -> str | None:
        """The ETag-like identity of ``version`` (a tombstone too), or None
        if it is gone."""
        if version is None:
            return None
        try:
            return _etag(version.generation, os.lstat(version.path))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreUnavailable(f"cannot stat {version.path}: {exc}") from exc

    def _settle(
        self, plain: str, versions: str, generation: int, base: _Version | None, base_etag: str | None,
        *, keep: int | None = None,
    ) -> bool:
        """After creating ``generation``: check that it was a fresh name (not
        one collected while this writer was stopped), make it durable and, if
        fresh, collect old generations (all but the newest ``keep``, default
        ``keep_versions``) and return True. False means unsure: the version
        may be a stray below newer ones, or may have landed."""
        # Checked at once, before the slow folder sync, while other writers
        # have had no time to build on top of ours. Collection removes
        # generations lowest first and never the newest, so if our base is
        # still the very version we built on, or ours is the newest, the name
        # was fresh when we created it.
        fresh = base is not None and self._version_etag(base) == base_etag
        if not fresh:
            found = self._versions(plain, versions)
            fresh = bool(found) and found[-1].generation == generation
            if fresh and base is not None and generation < self._floor(versions):
                # Built on a version of an object deleted and reclaimed since
                # (this writer was stopped across the hour): not a write of
                # the object there is now. Taken back, and unsure.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{versions}/{_generation_name(generation)}")
                return False
        try:
            self._fsync_dir(versions)
        except OSError as exc:
            raise StoreUnavailable(f"cannot sync {versions}: {exc}") from exc
        if fresh:
            self._collect_garbage(self._versions(plain, versions), self.keep_versions if keep is None else keep)
        return fresh

    @staticmethod
    def _unsure(versions: str, generation: int) -> StoreUnavailable:
        return StoreUnavailable(
            f"{versions}: generation {generation} may have landed, but newer versions were written "
            "meanwhile and its base is gone (was this writer stopped?); re-read to settle"
        )

    @staticmethod
    def _collect_garbage(found: Sequence[_Version], keep: int) -> None:
        # Lowest first, stopping at the first failure: a writer that finds its
        # base still there can then rely on the name above it not having been
        # collected. The old-layout plain file (generation 0) goes at once.
        doomed = found[: max(len(found) - keep, 0)]
        if found and found[0].generation == 0 and not doomed:
            doomed = [found[0]]
        for version in doomed:
            try:
                if version.tombstone:
                    os.rmdir(version.path)
                else:
                    os.unlink(version.path)
            except FileNotFoundError:
                continue
            except OSError:
                return

    # -- reclaiming deleted objects (see the module docstring) ---------------------

    def _floor(self, versions: str) -> int:
        """The generation an object created from nothing beside the versions
        folder ``versions`` starts at, at the lowest: above every generation
        of an object reclaimed in that folder (0: none was). Does I/O."""
        return self._floor_of(os.path.dirname(versions))

    @staticmethod
    def _floor_of(parent: str) -> int:
        """:meth:`_floor` of the folder ``parent``."""
        folder = f"{parent}/{FLOOR_DIR}"
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise StoreUnavailable(f"cannot list {folder}: {exc}") from exc
        return max((int(n) for n in names if len(n) == _GENERATION_DIGITS and n.isdigit()), default=0)

    def _raise_floor(self, parent: str, generation: int) -> None:
        """Make ``generation`` the floor of the folder ``parent``, durably, if it
        is not above it already. Raises OSError or StoreUnavailable."""
        folder = f"{parent}/{FLOOR_DIR}"
        if self._floor_of(parent) >= generation:
            return
        made = not os.path.isdir(folder)
        if made:
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder)
        mine = _generation_name(generation)
        os.close(os.open(f"{folder}/{mine}", os.O_WRONLY | os.O_CREAT, 0o644))
        self._fsync_dir(folder)
        if made:
            self._fsync_dir(parent)
        # Only the highest marker counts; lower ones (a concurrent reclaim's
        # too) go, once this one is durable.
        for name in os.listdir(folder):
            if name < mine:
                with contextlib.suppress(OSError):
                    os.unlink(f"{folder}/{name}")

    def _reclaim(self, gone: Sequence[tuple[str, str, _Version | None]]) -> None:
        """Remove the folders of objects deleted :data:`TOMBSTONE_SECONDS` ago
        (``(plain, versions, tombstone)``, the tombstone their only entry), and
        empty versions folders that old (tombstone None). Each folder's floor
        is raised once, above all of its tombstones, before any goes. Best
        effort: what fails is left for a later listing."""
        now = self._clock()
        old: dict[str, list[tuple[str, str, _Version | None]]] = {}
        for plain, versions, tombstone in gone:
            try:
                changed = os.lstat(tombstone.path if tombstone is not None else versions).st_mtime
            except OSError:
                continue
            if now - changed >= TOMBSTONE_SECONDS:
                old.setdefault(os.path.dirname(versions), []).append((plain, versions, tombstone))
        for parent, doomed in old.items():
            tops = [tombstone.generation for _, _, tombstone in doomed if tombstone is not None]
            try:
                if tops:
                    self._raise_floor(parent, max(tops) + 1)
            except (OSError, StoreUnavailable):
                continue
            for plain, versions, tombstone in doomed:
                self._remove_folder(plain, versions, tombstone)
        # No folder sync: a removal a crash undoes leaves the tombstone, or an
        # empty folder, for a later listing; the floor is already durable.

    def _remove_folder(self, plain: str, versions: str, tombstone: _Version | None) -> None:
        """The tombstone, then the folder, which ``rmdir`` removes only if empty."""
        try:
            if tombstone is not None:
                os.rmdir(tombstone.path)
            os.rmdir(versions)
        except OSError:
            # Not empty: a version was linked since the read. Above the
            # tombstone, a create that landed: it stays (one from nothing
            # starts at the floor, raised above the tombstone first). At or
            # below it, a stopped writer's, built on the object before its
            # delete (see _settle): it goes. Not compared with the floor: it
            # is the folder's, and another object's reclaim may raise it
            # above a create that landed here.
            if tombstone is not None:
                with contextlib.suppress(OSError, StoreUnavailable):
                    for version in self._versions(plain, versions):
                        if not version.tombstone and version.generation <= tombstone.generation:
                            os.unlink(version.path)

    def _write_temporary(
        self, parts: Sequence[bytes], versions: str, check: Callable[[], None]
    ) -> tuple[Path, os.stat_result]:
        """Write ``parts`` to a new temporary file and fsync it. ``check`` runs
        before the fsync: a writer that lost meanwhile stops there, without
        paying for a sync (under contention most writers lose)."""
        tmp = self.root / TMP_DIR / f"{uuid.uuid4().hex}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                for part in parts:
                    view = memoryview(part)
                    while view:
                        view = view[os.write(fd, view) :]
                check()
                os.fsync(fd)
                st = os.fstat(fd)
            finally:
                os.close(fd)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            if isinstance(exc, OSError):
                raise StoreUnavailable(f"cannot write a new version of {versions}: {exc}") from exc
            raise
        return tmp, st

    def _ensure_folder(self, versions: str) -> None:
        if os.path.isdir(versions):
            return
        try:
            parent = os.path.dirname(versions)
            os.makedirs(parent, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.mkdir(versions)
            self._fsync_dir(parent)
        except OSError as exc:
            raise StoreUnavailable(f"cannot create {versions}: {exc}") from exc

    @staticmethod
    def _fsync_dir(path: str) -> None:
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
