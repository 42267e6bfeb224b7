"""The lane keeper's id index writes (:mod:`engine.idindex`): writing a
segment's index as the segment is sealed, merged or rewritten, and writing
it again when that failed or a segment was found without one
(:mod:`engine.indexrepair`).

:class:`IndexWrites` is a base class of :class:`~engine.lanes.LaneKeeper`,
split from :mod:`engine.lanes`; it runs on the keeper's threads.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from engine.errors import SegmentUnreadable, StoreError
from engine.idindex import IndexCache, build_index, index_key
from engine.indexrepair import IndexRepairs
from engine.reaper import SegmentReaper
from engine.segments import SegmentRef, delete_quietly, read_segment_parts
from engine.stores.base import ObjectStore

__all__ = ["IndexWrites"]

log = logging.getLogger(__name__)


class IndexWrites:
    """The lane keeper's id index writes and repairs (see the module)."""

    # The keeper's fields this half reads (see LaneKeeper.__init__).
    store: ObjectStore
    key: str
    reaper: SegmentReaper
    repairs: IndexRepairs
    _indexes: IndexCache

    def _write_index(self, ref: SegmentRef, parts: Sequence[bytes]) -> None:
        """Write the id index of the segment ``ref`` (engine.idindex), made
        of its encoded jobs ``parts`` as the object holds them, and keep it.
        A failed write is logged and owed (:attr:`repairs`): retried later
        from the segment's bytes, while a lookup reads the segment itself. A
        seal's index is written after its Seal was queued, so the segment may
        have been refused and deleted already: then nothing is written or owed
        (see :meth:`_put_index`)."""
        if self._put_index(ref, parts) is False:
            self.repairs.owe(ref)

    def _put_index(self, ref: SegmentRef, parts: Sequence[bytes]) -> bool | None:
        """Write and keep the id index of segment ``ref``: True once it is
        stored (written, or found there with the same bytes), False if the
        write failed (logged), None if the segment is gone. Deleted with the segment
        (:meth:`SegmentReaper.delete_segment`). A deletion marks its segment
        gone before deleting the index; the write checks the mark before and
        after its put, and deletes what it wrote if the segment went
        meanwhile, so that no index outlives its segment (the collector
        never takes this keeper's own objects): None then, as no index is
        owed for a segment that is gone."""
        data, built = build_index(ref.sha256, parts, ref.size)
        key = index_key(self.key, ref.key)
        if self.reaper.gone(ref.key):
            return None
        try:
            self.store.put(key, data, if_none_match=True)
        except StoreError as exc:
            # A write whose answer was lost may have landed whole (or an earlier
            # attempt did, or an older leader's write of the same bytes): kept
            # then. Deleted, its segment would be one a lookup
            # by id reads whole, within JOB_LOOKUP_READS: chaos seed 107 (lost
            # answers on every put for 1.8 s) ended with a pending job answered
            # 404, its segment among too many a lost answer had left unindexed.
            if not self._holds(key, data):
                log.warning("writing the id index %s failed: %s", key, exc)
                # It may have landed in part (ambiguous), or the key holds a
                # damaged index (other bytes: the same segment's index is
                # always the same bytes). Either way no lookup can use it, and
                # with it gone, a repair can write the index.
                delete_quietly(self.store, key)
                return False
        if self.reaper.gone(ref.key):  # deleted while the index was written: it may have missed this one
            delete_quietly(self.store, key)
            return None
        self._indexes.put(ref.key, built)
        return True

    def _repair_due(self) -> None:
        """Write the id index of the owed segment due first, if one is due
        and no other thread is repairing (engine.indexrepair), from the
        segment's bytes as stored. Nothing is owed any more once the segment
        is gone or has an index after all; a segment that is missing or does
        not verify is left (refills report it, I6); a store error or a failed
        write is tried again later."""
        taken = self.repairs.take()
        if taken is None:
            return
        ref, tries = taken
        again = wrote = False
        try:
            if self.reaper.gone(ref.key):
                return
            self._indexes.forget(ref.key)  # a cached absence: ask the store again
            if self._indexes.get(ref) is not None:
                return  # written after all (a late write, or another tenure's)
            parts = read_segment_parts(self.store, ref)
            if parts is None:
                log.warning("segment %s has no sizes in its header: its id index cannot be rebuilt", ref.key)
                return
            stored = self._put_index(ref, parts)
            wrote, again = stored is True, stored is False
            if wrote:
                log.info("wrote the id index of segment %s again (try %d)", ref.key, tries + 1)
        except SegmentUnreadable as exc:
            log.warning("not rebuilding the id index of segment %s: %s", ref.key, exc.problem)
        except StoreError as exc:
            log.warning("rebuilding the id index of segment %s: %s", ref.key, exc)
            again = True
        finally:
            if self.repairs.done(ref, tries, again=again, wrote=wrote):
                log.warning("gave up rebuilding the id index of segment %s after %d tries", ref.key, tries + 1)

    def _holds(self, key: str, data: bytes) -> bool:
        """Whether ``key`` holds exactly ``data``: a write refused because
        the key exists is this very write landing on an earlier attempt
        (deletable, as nothing references it) only then. Otherwise another
        object drew the same key, and it may be referenced."""
        try:
            blob = self.store.get(key)
        except StoreError:
            return False
        return blob is not None and blob.data == data
