"""I10: a queue document that was seen is never re-created.

A store cannot tell "``queue.json`` never existed" from "it was deleted": both
read as absent. So whoever creates the document also writes a small marker
object beside it, ``queue.json.created`` (:func:`marker_key`), and whoever
reads a document makes sure the marker exists (stores from before the marker
get one on their first read). From then on:

* a missing document *and* no marker: a fresh store; the first node creates
  the document, as it always did;
* a missing document, and the marker present or this node having read the
  document itself: the document was lost. Nothing re-creates it; the node
  refuses with :class:`~engine.errors.DocumentMissing` until an operator
  restores it or re-initialises the store (``manage.py queueinit``).

The marker also carries the highest ``seq`` and broker epoch that the nodes
knew when they found the document gone (``seq_floor``, ``epoch_floor``), so
that a re-initialised document starts above them: seq and epoch never go back.
See docs/format.md, "The creation marker".
"""

from __future__ import annotations

import logging
import secrets
import threading
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import orjson

from engine.document import QueueState
from engine.errors import DocumentMissing, InitRefused, PreconditionFailed, StoreError, StoreUnavailable
from engine.model import BrokerInfo, utc_now
from engine.policy import Policy
from engine.stores.base import ObjectStore

log = logging.getLogger(__name__)

MARKER_SUFFIX = ".created"
MARKER_FORMAT = 1
# Raising the floors is a compare-and-set on a tiny object that only nodes
# which just lost the document write: a few attempts settle any race.
FLOOR_ATTEMPTS = 5


def marker_key(key: str) -> str:
    """The key of the creation marker of document ``key``."""
    return f"{key}{MARKER_SUFFIX}"


def new_lineage() -> str:
    """A fresh lineage id: one per creation or re-initialisation of a document."""
    return secrets.token_hex(8)


@dataclass(frozen=True, slots=True, kw_only=True)
class Marker:
    """The content of a creation marker. Every field is informative except
    the floors, which a re-initialised document starts above."""

    lineage: str
    created_at: datetime | None = None
    created_by: str | None = None
    seq_floor: int = 0
    epoch_floor: int = 0
    reinitialised: int = 0

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "format": MARKER_FORMAT,
                "lineage": self.lineage,
                "created_at": self.created_at,
                "created_by": self.created_by,
                "seq_floor": self.seq_floor,
                "epoch_floor": self.epoch_floor,
                "reinitialised": self.reinitialised,
            },
            option=orjson.OPT_UTC_Z | orjson.OPT_INDENT_2,
        )


def parse_marker(data: bytes) -> Marker:
    """Read a marker leniently: its existence is what counts, so a marker
    that does not parse still means "the document existed" (with floors 0)."""
    try:
        raw: Any = orjson.loads(data)
    except orjson.JSONDecodeError:
        raw = None
    if not isinstance(raw, dict):
        return Marker(lineage="unreadable")

    def count(name: str) -> int:
        value = raw.get(name)
        return value if type(value) is int and value >= 0 else 0

    created_at = None
    if isinstance(raw.get("created_at"), str):
        try:
            created_at = datetime.fromisoformat(raw["created_at"])
        except ValueError:
            created_at = None
    lineage, created_by = raw.get("lineage"), raw.get("created_by")
    return Marker(
        lineage=lineage if isinstance(lineage, str) else "unknown",
        created_at=created_at,
        created_by=created_by if isinstance(created_by, str) else None,
        seq_floor=count("seq_floor"),
        epoch_floor=count("epoch_floor"),
        reinitialised=count("reinitialised"),
    )


def read_marker(store: ObjectStore, key: str) -> tuple[Marker, str] | None:
    """The marker of document ``key`` and its ETag, or None. One read; raises StoreError."""
    blob = store.get(marker_key(key))
    return None if blob is None else (parse_marker(blob.data), blob.etag)


def write_marker(store: ObjectStore, key: str, marker: Marker, *, if_match: str | None = None) -> str:
    """Write ``marker``: create it (raising PreconditionFailed if one exists),
    or replace the version ``if_match``. One write; raises StoreError."""
    if if_match is None:
        return store.put(marker_key(key), marker.to_json(), if_none_match=True)
    return store.put(marker_key(key), marker.to_json(), if_match=if_match)


def raise_floors(store: ObjectStore, key: str, *, seq: int, epoch: int) -> None:
    """Make the marker's floors at least ``seq`` and ``epoch`` (compare-and-set,
    retried a few times). Creates the marker if it is missing. Raises StoreError."""
    for _ in range(FLOOR_ATTEMPTS):
        found = read_marker(store, key)
        if found is None:
            marker, etag = Marker(lineage=new_lineage(), created_at=utc_now()), None
        else:
            marker, etag = found
        if found is not None and marker.seq_floor >= seq and marker.epoch_floor >= epoch:
            return
        raised = replace(marker, seq_floor=max(marker.seq_floor, seq), epoch_floor=max(marker.epoch_floor, epoch))
        try:
            write_marker(store, key, raised, if_match=etag)
            return
        except PreconditionFailed:
            continue
    log.warning("%s: could not record seq %d / epoch %d in its marker: too many concurrent changes", key, seq, epoch)


class Presence:
    """What one node knows about whether its document exists (I10).

    Shared by a broker and each committer it runs; thread-safe. Its methods
    do I/O only on the rare paths: the first read of a document (to make sure
    the marker exists), the creation of one, and its disappearance.
    """

    def __init__(self, store: ObjectStore, key: str, *, writer: str) -> None:
        self.store = store
        self.key = key
        self.writer = writer
        self._lock = threading.Lock()
        self._seen = False  # this node read or wrote a version of the document
        self._marked = False  # the marker is known to exist
        self._seq = 0  # the highest seq and epoch this node knew
        self._epoch = 0
        self._missing: DocumentMissing | None = None

    @property
    def missing(self) -> DocumentMissing | None:
        """The error to answer with while the document is known to be lost, else None. No I/O."""
        return self._missing

    def found(self, *, seq: int, epoch: int = 0) -> None:
        """The document exists: this node read or wrote version ``seq``.

        Clears a "missing" state (an operator restored or re-initialised the
        document). The first call makes sure the marker exists (one read, and
        one write if it does not); a store error then is logged and the next
        call tries again.
        """
        with self._lock:
            self._seen = True
            self._seq = max(self._seq, seq)
            self._epoch = max(self._epoch, epoch)
            was_missing, self._missing = self._missing, None
            marked = self._marked
        if was_missing is not None:
            log.warning("%s is back (seq %d): resuming", self.key, seq)
        if not marked:
            self._mark()

    def _mark(self) -> None:
        try:
            if read_marker(self.store, self.key) is None:
                write_marker(self.store, self.key, Marker(
                    lineage=new_lineage(), created_at=utc_now(), created_by=self.writer,
                ))
        except PreconditionFailed:
            pass  # another node wrote it first: it exists
        except StoreError as exc:
            log.warning("%s: could not make sure its creation marker exists (will retry): %s", self.key, exc)
            return
        with self._lock:
            self._marked = True

    def gone(self, *, seq: int = 0, epoch: int = 0) -> DocumentMissing | None:
        """The store says the document does not exist. Returns the error to
        refuse with if it existed (this node saw it, or the marker says so),
        or None for a fresh store, where the caller may create the document.

        The first time it is found lost, the loss is logged and the marker's
        floors are raised to what this node knew. Reads the marker unless this
        node saw the document; raises StoreError if that read fails (a store
        we cannot read is no proof that the document never existed). Before
        it declares a loss it checks once more that the document is absent,
        and raises StoreUnavailable if it is there after all (retry).
        """
        with self._lock:
            if self._missing is not None:
                return self._missing
            seen, known_seq, known_epoch = self._seen, max(self._seq, seq), max(self._epoch, epoch)
        if seen:
            why = f"this node read or wrote it, up to seq {known_seq}"
        else:
            found = read_marker(self.store, self.key)
            if found is None:
                return None
            marker = found[0]
            when = f" at {marker.created_at.isoformat()}" if marker.created_at else ""
            why = f"its marker {marker_key(self.key)} records that it was created{when}"
        # A loss stops every node until an operator acts, so a single "absent"
        # answer is not proof enough: look once more. A store that reported
        # an existing object absent for a moment gets the benefit of the
        # doubt (the callers retry StoreUnavailable).
        if self.store.etag(self.key) is not None:
            raise StoreUnavailable(f"{self.key} read as absent, then as present; retrying")
        missing = DocumentMissing(self.key, why)
        log.error("%s; this node stops writing it until an operator acts", missing)
        if known_seq or known_epoch:
            try:
                raise_floors(self.store, self.key, seq=known_seq, epoch=known_epoch)
            except StoreError as exc:
                log.warning("%s: could not record the lost document's seq in its marker: %s", self.key, exc)
        with self._lock:
            self._missing = missing
        return missing


@dataclass(frozen=True, slots=True, kw_only=True)
class Initialised:
    """What :func:`initialise` wrote: the new document's seq and broker epoch,
    the new lineage, and the marker it replaced (None on a fresh store)."""

    seq: int
    epoch: int
    lineage: str
    previous: Marker | None


def initialise(
    store: ObjectStore, key: str, *, policy: Policy, writer: str, force: bool = False, now: datetime | None = None,
) -> Initialised:
    """Create a fresh, empty document ``key`` and its creation marker.

    * a document exists: refused, whatever ``force`` says (restore or move it
      aside by hand; this never overwrites one);
    * no document and no marker (a fresh store): creates both;
    * no document but a marker (the document was lost): refused unless
      ``force``; with it, the new document starts above the marker's floors
      (seq ``seq_floor + 1``, broker epoch ``epoch_floor``, so the next
      leader's epoch is higher than any before), under a new lineage.

    Nodes watching the store resume by themselves once the document exists.
    Raises InitRefused, or StoreError (a lost race with another writer
    surfaces as InitRefused: the document exists then).
    """
    now = now or utc_now()
    if store.etag(key) is not None:
        raise InitRefused(f"{key} exists; refusing to overwrite it (move it aside by hand first)")
    found = read_marker(store, key)
    previous, marker_etag = found if found is not None else (None, None)
    if previous is not None and not force:
        when = f" at {previous.created_at.isoformat()}" if previous.created_at else ""
        raise InitRefused(
            f"{key} is missing but it existed (its marker {marker_key(key)} records it was created{when}); "
            "re-initialising loses every job it held: pass --force (and a reason) to do it"
        )
    state = QueueState(policy=policy)
    seq_floor = previous.seq_floor if previous is not None else 0
    epoch_floor = previous.epoch_floor if previous is not None else 0
    state.seq = seq_floor
    state.broker = BrokerInfo(epoch=epoch_floor)
    seq = seq_floor + 1
    try:
        store.put_parts(key, state.encode(seq=seq, writer=writer, now=now), if_none_match=True)
    except PreconditionFailed:
        raise InitRefused(f"{key} was created meanwhile by another writer; nothing was changed") from None
    lineage = new_lineage()
    marker = Marker(
        lineage=lineage, created_at=now, created_by=writer, seq_floor=seq_floor, epoch_floor=epoch_floor,
        reinitialised=previous.reinitialised + 1 if previous is not None else 0,
    )
    try:
        write_marker(store, key, marker, if_match=marker_etag)
    except PreconditionFailed:  # a node raised the floors meanwhile: keep theirs, take the rest
        again = read_marker(store, key)
        if again is not None:
            write_marker(store, key, replace(marker, seq_floor=max(seq_floor, again[0].seq_floor),
                                             epoch_floor=max(epoch_floor, again[0].epoch_floor)),
                         if_match=again[1])
    return Initialised(seq=seq, epoch=epoch_floor, lineage=lineage, previous=previous)
