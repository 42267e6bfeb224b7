"""What the leader's lane keeper deletes: segments a landed commit dropped,
after a grace, and orphans no version references.

A :class:`SegmentReaper` belongs to one :class:`~engine.lanes.LaneKeeper`
(one tenure) and runs on its threads, sharing its condition: the keeper's
threads sleep until :meth:`SegmentReaper.deadline` and call
:meth:`SegmentReaper.delete_due` and :meth:`SegmentReaper.collect` after
every task.

* **Deleting** (:meth:`dropped`): a segment a landed commit stopped
  referencing (refilled to its end, merged away, purged) is deleted
  ``grace_seconds`` later, so that readers of the version before
  (dashboards, standbys) can finish reading it, and its id index
  (:mod:`engine.idindex`) with it. At most ``DELETE_THREADS`` threads
  delete at once, ``DELETE_BATCH`` keys a turn.
* **Collecting** (:meth:`collect`): an object under the segment prefix
  written at an epoch below the leader's, or at its own epoch by another
  lane keeper (an earlier tenure of this broker, which led again without a
  takeover write), and referenced by no version this keeper saw since its
  first landed commit, is an orphan. See docs/format.md, "Orphans", for why
  such an object can never be referenced again. An id index whose segment
  is gone is collected by the same rule.

Thread-safety: the deletion queue, the known keys and the collector's
schedule are guarded by the keeper's condition; the marks of deleted
segments (:meth:`gone`) by a lock of their own, taken by id index writes.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable

from engine.errors import StoreError
from engine.idindex import IndexCache, index_key, index_prefix, segment_of_index
from engine.lanecache import HeldSegments
from engine.segments import delete_quietly, epoch_of_key, keeper_of_key, segment_prefix
from engine.stores.base import ObjectStore

__all__ = ["DELETE_BATCH", "DELETE_THREADS", "IDLE_COLLECT_SECONDS", "SEGMENTS_GONE_KEPT", "SegmentReaper"]

log = logging.getLogger(__name__)

# How often the collector lists the segments when its last pass found no
# suspect (it lists every collect_seconds while it has some).
IDLE_COLLECT_SECONDS = 3600.0
# Deleting the segments a landed commit dropped is the keeper's least
# urgent work (their grace is a minimum): at most DELETE_THREADS threads
# delete at once, DELETE_BATCH keys per turn, each going back to the task
# queue in between. A merge wave drops hundreds of segments at once (at 1M
# jobs over ten queues, ~1,000 from seeding), each two requests (the
# segment and its index); every thread that finished a task took the due
# ones and worked through them, all 16 were soon deleting, and seals waited
# for a thread while 2,048 producers pushed: the push commits' 90th
# percentile went from 1.7 MB to 2.8-3.2 MB (python -m bench backlog
# --depths 1000000 --queues 10).
DELETE_THREADS = 2
DELETE_BATCH = 8
# How many deleted segment keys are remembered, so that an id index
# written late (after its seal was queued) is not written for one of them.
SEGMENTS_GONE_KEPT = 4096


class SegmentReaper:
    """Deletes one keeper's dropped segments after a grace, and collects
    orphans (see the module). ``cond`` is the keeper's condition: every
    method that says so must be called holding it; the others take it."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        key: str,
        epoch: int,
        tag: str,
        cond: threading.Condition,
        monotonic: Callable[[], float],
        grace_seconds: float,
        collect_seconds: float,
        held: HeldSegments,
        indexes: IndexCache,
    ) -> None:
        self.store = store
        self.key = key
        self.epoch = epoch
        self.tag = tag
        self.grace_seconds = grace_seconds
        self.collect_seconds = collect_seconds
        self.monotonic = monotonic
        self._cond = cond
        self._held = held
        self._indexes = indexes
        self.deleted = 0
        self.collected = 0
        self._deletions: list[tuple[float, str]] = []  # (monotonic deadline, key), in deadline order
        self._deleting = 0  # threads deleting now (at most DELETE_THREADS)
        # Set by the first landed commit of this tenure: the collector runs
        # only after it (see _may_be_orphan).
        self.landed = False
        # Set when the keeper stops (see stop): no collector pass after it.
        self._stopped = False
        # Every key a version seen by this keeper referenced, until it
        # deletes it: the collector never touches them (see collect).
        self._known: set[str] = set()
        # Segments whose reference depends on a commit answered with an error
        # that does not say whether it landed: the next landed version
        # decides (see doubtful).
        self._doubtful: set[str] = set()
        self._suspects: dict[str, float] = {}  # orphan candidates -> monotonic time first seen
        self.next_collect = 0.0
        # Held to check or mark a segment gone (see gone): the keys of
        # segments deleted lately.
        self._gone_lock = threading.Lock()
        self._segments_gone: OrderedDict[str, None] = OrderedDict()

    # -- under the keeper's condition ---------------------------------------------------

    def seen(self, referenced: frozenset[str]) -> None:
        """A landed version references ``referenced`` (under the condition).
        The first one gives the collector its first deadline: the keeper's
        threads asleep without one are told."""
        if not self.landed:
            self.landed = True
            self._cond.notify_all()
        self._known |= referenced
        if self._doubtful:
            # Settled by this version (see doubtful): referenced, the swap
            # landed and the segment lives as any other; if not, no version
            # can ever reference it, and it goes after the grace, as a
            # dropped one does (a reader of an older version is never cut short).
            deadline = self.monotonic() + self.grace_seconds
            for key in sorted(self._doubtful - referenced):
                self._deletions.append((deadline, key))  # the latest deadline yet: the order holds
            self._doubtful.clear()
            self._cond.notify_all()

    def due_now(self) -> bool:
        """Whether a deletion or a collector pass is due and a thread may
        take it (under the condition)."""
        now = self.monotonic()
        return bool(self._may_delete() and self._deletions[0][0] <= now) or (self.landed and now >= self.next_collect)

    def deadline(self) -> float | None:
        """The monotonic time of the next due deletion a thread may take, or
        of the collector's next pass (only after a landed commit, since it
        needs the references); None when neither is pending (under the
        condition). Deletions count only while a thread may take them: a
        deleting thread notifies when it is done."""
        deadlines = [self._deletions[0][0]] if self._may_delete() else []
        if self.landed:
            deadlines.append(self.next_collect)
        return min(deadlines) if deadlines else None

    def _may_delete(self) -> bool:
        return bool(self._deletions) and self._deleting < DELETE_THREADS

    # -- scheduling -----------------------------------------------------------------------

    def stop(self) -> None:
        """The keeper stopped: no collector pass starts after this. (A pass
        under way then deletes only suspects of its earlier passes, all
        listed before the next tenure began.) Its threads are not waited for, and one may finish a slow task
        long after the next tenure began. To this reaper, that tenure's
        objects are another keeper's of its own epoch that no version it saw
        referenced: a pass then could delete segments the new leader
        references. (Deletions it owes stay: they are of objects a landed
        commit dropped, which no later version references again.)"""
        with self._cond:
            self._stopped = True

    def dropped(self, keys: list[str]) -> None:
        """A landed commit stopped referencing ``keys``: delete them after the grace."""
        deadline = self.monotonic() + self.grace_seconds
        with self._cond:
            self._deletions.extend((deadline, key) for key in keys)
            self._cond.notify_all()

    def doubtful(self, *keys: str) -> None:
        """Segments ``keys`` are referenced or not depending on a commit whose
        caller was answered with an error that does not say whether it
        landed (its write's outcome unknown, then the document unreadable,
        say): a Seal or swap that would reference a segment this keeper
        wrote, or a write that would stop referencing one (a refill to its
        end, a merge, a purge). The collector never takes this keeper's own
        objects, and a drop is reported only by a write known to have
        landed, so until now such a segment stayed until the next leader's
        collector. The next version this keeper's committer lands settles
        it: that version was built on a read made after the failure, so it
        references the segment if the commit that adds it landed, or if the
        one that drops it did not; if it does not reference it, no later
        version can (the failed write was conditioned on a version this one
        replaced, and a reference is only ever added by the leader that
        wrote the object), and the segment is deleted after the grace. If
        the keeper stops first, the next leader's collector takes it as
        before."""
        with self._cond:
            self._doubtful.update(keys)

    def delete_now(self, key: str) -> None:
        """Have a keeper thread delete ``key``, which no version references, without a grace."""
        with self._cond:
            self._deletions.insert(0, (self.monotonic(), key))
            self._cond.notify_all()

    # -- on the keeper's threads ----------------------------------------------------------

    def gone(self, key: str) -> bool:
        """Whether segment ``key`` was deleted lately. An id index writer
        checks it before and after its put (see LaneKeeper._write_index):
        a deletion marks the segment before it deletes the index."""
        with self._gone_lock:
            return key in self._segments_gone

    def delete_segment(self, key: str) -> bool:
        """Delete segment ``key`` and then its id index, if it has one (a
        failure to delete the index is retried after a grace, see
        delete_due). False if the segment could not be deleted (the index
        is then kept)."""
        if not delete_quietly(self.store, key):
            return False
        with self._gone_lock:
            self._segments_gone[key] = None  # before the index goes: see gone
            while len(self._segments_gone) > SEGMENTS_GONE_KEPT:
                self._segments_gone.popitem(last=False)
        self._indexes.forget(key)
        index = index_key(self.key, key)
        if not delete_quietly(self.store, index):
            # Not left to the collector: it never takes this keeper's own
            # objects, so the index would outlive its segment until the
            # next tenure (chaos seed 52, a store error on the delete).
            self.dropped([index])
        return True

    def delete_due(self) -> bool:
        """Delete up to DELETE_BATCH segments whose grace is over, unless
        DELETE_THREADS threads are deleting already (see DELETE_THREADS).
        Returns whether it took any."""
        now = self.monotonic()
        with self._cond:
            if not self._may_delete():
                return False
            due: list[str] = []
            for deadline, key in self._deletions[:DELETE_BATCH]:
                if deadline > now:
                    break
                due.append(key)
            if not due:
                return False
            del self._deletions[:len(due)]  # in deadline order: the due ones lead
            self._deleting += 1
        try:
            self._delete_keys(due)
        finally:
            with self._cond:
                self._deleting -= 1
                self._cond.notify_all()  # the rest may be due: another turn, on any thread
        return True

    def _delete_keys(self, due: list[str]) -> None:
        """Delete ``due``: segments with their indexes, and indexes left over
        by a failed delete; a key that fails goes back for another grace."""
        for key in due:
            if segment_of_index(self.key, key) is not None:
                # An index whose delete failed after its segment went (see delete_segment).
                if not delete_quietly(self.store, key):
                    self.dropped([key])
                continue
            self._held.forget(key)
            if self.delete_segment(key):
                with self._cond:  # deletions run on several keeper threads at once
                    self.deleted += 1
                    self._known.discard(key)
            else:
                self.dropped([key])  # try again after another grace

    def _may_be_orphan(self, segment: str) -> bool:
        """Whether no version after this keeper's first landed commit can
        ever reference ``segment`` (an object no version it saw referenced;
        see docs/format.md, "Orphans"): written at an older epoch, or at this
        epoch by another lane keeper, one of this broker's earlier tenures
        (it stepped down, for a lost document or a failed heartbeat, and led
        again without a takeover write). Such a keeper commits only through
        its own committer, which was stopped, and that committer's last write
        cannot land over this one's first landed write (the collector runs
        only after it: ``landed``). A key without a keeper tag, of this
        epoch, is never one (it predates the tags)."""
        epoch = epoch_of_key(segment)
        if epoch is None or epoch > self.epoch:
            return False
        if epoch < self.epoch:
            return True
        tag = keeper_of_key(segment)
        return tag is not None and tag != self.tag

    def collect(self) -> None:
        """One pass of the orphan collector, if one is due (see the module)."""
        now = self.monotonic()
        with self._cond:
            if self._stopped or not self.landed or now < self.next_collect:
                return
            self.next_collect = now + self.collect_seconds
            # Not just the latest version's references: the committer hands
            # the keeper versions with staged, unlanded changes, and a merge
            # that drops references may yet fail. A key any version showed is
            # this keeper's to delete (after its drop lands), never an orphan.
            known = frozenset(self._known)
        try:
            keys = self.store.list(segment_prefix(self.key))
            # Listed after the segments: an index is written after its
            # segment, so an index whose segment is in neither listing nor
            # known lost its segment (or belongs to a fenced writer's).
            indexes = self.store.list(index_prefix(self.key))
        except StoreError as exc:
            log.warning("collecting orphan segments of %s: %s", self.key, exc)
            return
        listed = frozenset(keys)
        candidates = [(key, key) for key in keys]
        for key in indexes:
            segment = segment_of_index(self.key, key)
            if segment is not None and segment not in listed:
                candidates.append((key, segment))
        suspects: dict[str, float] = {}
        for key, segment in candidates:
            if segment in known or not self._may_be_orphan(segment):
                continue
            first_seen = self._suspects.get(key, now)
            # Seen unreferenced in two passes at least collect_seconds apart:
            # defence in depth on top of the epoch rule.
            if now - first_seen >= self.collect_seconds:
                if key != segment:
                    if delete_quietly(self.store, key):  # an index: not counted as a segment
                        continue
                elif self.delete_segment(key):
                    self.collected += 1
                    continue
            suspects[key] = first_seen
        self._suspects = suspects
        if not suspects:
            # Orphans of older tenures come from before this one began,
            # found by the passes so far; after that only a writer paused
            # through the takeover can add one. Listing rarely keeps an idle
            # leader's requests flat (I11).
            with self._cond:
                self.next_collect = now + IDLE_COLLECT_SECONDS
