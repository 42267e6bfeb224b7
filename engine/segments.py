"""Segment objects: immutable runs of one queue's pending jobs (format 2).

A queue's pending jobs beyond a window in the document are sealed, in FIFO
order, into *segment* objects next to ``queue.json``; the document keeps a
:class:`SegmentRef` per segment (see ``docs/format.md``, "Format 2"). This
module names, encodes, writes, reads and verifies segments. It knows nothing
of the committer: the leader's :mod:`engine.lanes` decides when to seal and
refill, and the transitions (:mod:`engine.transitions`) change the document.

A segment is written once with ``If-None-Match: *`` and never changed. Its
reference carries its size and SHA-256, so a truncated or altered object is
refused (:class:`~engine.errors.SegmentUnreadable`), never decoded: the
node stops that queue and reports the object, as it does for an unreadable
document (I6).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import orjson

from engine.errors import SegmentUnreadable, StoreError
from engine.stores.base import ObjectStore

#: The ``kind`` of a segment of pending jobs.
PENDING_KIND = "pending"
#: The ``kind`` of a segment of delayed jobs (format 3), sorted by due time.
DELAYED_KIND = "delayed"
#: Every kind a segment object may be of.
SEGMENT_KINDS = (PENDING_KIND, DELAYED_KIND)


class SegmentRef(NamedTuple):
    """The document's reference to one segment object.

    ``total`` jobs are in the object, oldest first; the first ``consumed`` of
    them have been moved back into the document (refilled). ``front`` is the
    ``pos`` of the first job not yet consumed, ``last_pos`` that of the last
    job: every pending job of the queue in the document whose ``pos`` is
    below ``front`` (of the first reference) comes before it in FIFO order,
    every one above the last reference's ``last_pos`` after it.
    ``oldest_enqueued_at`` is the ``enqueued_at`` of the job at ``front``.
    ``size`` and ``sha256`` describe the object's bytes exactly; ``epoch`` is
    the broker epoch of the leader that wrote it (see the collector in
    :mod:`engine.lanes`).
    """

    key: str
    total: int
    consumed: int
    front: int
    last_pos: int
    size: int
    sha256: str
    oldest_enqueued_at: datetime
    epoch: int
    sealed_at: datetime

    @property
    def remaining(self) -> int:
        """Jobs still in the object, not yet refilled into the document."""
        return self.total - self.consumed

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "total": self.total,
            "consumed": self.consumed,
            "front": self.front,
            "last_pos": self.last_pos,
            "size": self.size,
            "sha256": self.sha256,
            "oldest_enqueued_at": self.oldest_enqueued_at,
            "epoch": self.epoch,
            "sealed_at": self.sealed_at,
        }


class DelayedRef(NamedTuple):
    """The document's reference to one *delayed* segment (format 3): a run
    of a queue's delayed jobs, sorted by (``not_before``, ``pos``), outside
    the FIFO order. It comes back into the document whole, once
    ``first_due`` is near (no ``consumed``). ``min_pos`` and ``max_pos`` are
    the smallest and largest ``pos`` of its jobs (a purge bounded by a
    ``pos`` drops it only when all of them are below the bound);
    ``first_due`` and ``last_due`` the earliest and latest ``not_before``.
    ``size``, ``sha256``, ``epoch`` and ``sealed_at`` as in
    :class:`SegmentRef`. See docs/format.md, "Delayed jobs beyond a window".
    """

    key: str
    total: int
    size: int
    sha256: str
    epoch: int
    sealed_at: datetime
    first_due: datetime
    last_due: datetime
    min_pos: int
    max_pos: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "total": self.total,
            "size": self.size,
            "sha256": self.sha256,
            "epoch": self.epoch,
            "sealed_at": self.sealed_at,
            "first_due": self.first_due,
            "last_due": self.last_due,
            "min_pos": self.min_pos,
            "max_pos": self.max_pos,
        }

    def as_segment(self) -> SegmentRef:
        """The object as a :class:`SegmentRef` describes one: for what reads
        and verifies segment objects whatever their kind (the size and
        SHA-256 checks, id indexes, lookups by id). Nothing consumed, its
        ``front`` its smallest ``pos``: every job in it is still there."""
        return SegmentRef(
            key=self.key, total=self.total, consumed=0, front=self.min_pos, last_pos=self.max_pos, size=self.size,
            sha256=self.sha256, oldest_enqueued_at=self.sealed_at, epoch=self.epoch, sealed_at=self.sealed_at,
        )


def segment_prefix(document_key: str) -> str:
    """Where the segments of ``document_key`` live: every key under it."""
    return f"{document_key}.seg/"


def segment_key(document_key: str, *, queue: str, epoch: int, first_pos: int, keeper: str | None = None) -> str:
    """A new, unique key for a segment of ``queue`` starting at ``first_pos``.

    The key names the writer's broker epoch (read back by
    :func:`epoch_of_key` for the collector's rule), a random suffix, so two
    writers never pick the same key (``If-None-Match`` makes sure of it),
    and, when given, the writing lane keeper's tag (read back by
    :func:`keeper_of_key`: a leader that leads again in its own epoch tells
    the objects its earlier keeper left from its own). Queue names are
    key-safe (letters, digits, ``_ . : -``); ``keeper`` must be lowercase hex.
    """
    tag = f"-k{keeper}" if keeper is not None else ""
    return f"{segment_prefix(document_key)}{queue}/e{epoch:08d}-p{first_pos:014d}-{secrets.token_hex(4)}{tag}.json"


def delayed_segment_key(document_key: str, *, queue: str, epoch: int, first_pos: int, keeper: str | None = None) -> str:
    """A new, unique key for a delayed segment of ``queue`` (format 3): the
    name :func:`segment_key` makes, under ``<queue>/delayed/``, so that a
    listing tells the two kinds apart while :func:`epoch_of_key` and
    :func:`keeper_of_key`, which read only the name, and so the collector's
    rules, apply unchanged. (A queue's name holds no ``/``: a queue named
    ``delayed`` has its pending segments directly under ``delayed/``.)"""
    name = segment_key(document_key, queue=queue, epoch=epoch, first_pos=first_pos, keeper=keeper)
    folder, _, leaf = name.rpartition("/")
    return f"{folder}/delayed/{leaf}"


def is_delayed_key(document_key: str, key: str) -> bool:
    """Whether ``key`` names a delayed segment of ``document_key`` (made by
    :func:`delayed_segment_key`): ``<queue>/delayed/<name>`` under the
    segment prefix, where a pending segment is ``<queue>/<name>`` (a queue's
    name holds no ``/``)."""
    prefix = segment_prefix(document_key)
    if not key.startswith(prefix):
        return False
    folders = key[len(prefix):].split("/")
    return len(folders) == 3 and folders[1] == "delayed"


def epoch_of_key(key: str) -> int | None:
    """The broker epoch written in a segment key, or None for a key this
    module did not make (the collector leaves such objects alone)."""
    name = key.rsplit("/", 1)[-1]
    if not name.startswith("e") or "-" not in name:
        return None
    digits = name[1:].split("-", 1)[0]
    return int(digits) if digits.isdigit() else None


def keeper_of_key(key: str) -> str | None:
    """The lane keeper tag written in a segment key (``…-k<tag>.json``), or
    None for a key written without one (before keys carried it) or not made
    by :func:`segment_key`."""
    fields = key.rsplit("/", 1)[-1].removesuffix(".json").split("-")
    if len(fields) != 4 or epoch_of_key(key) is None or not fields[3].startswith("k") or len(fields[3]) < 2:
        return None
    return fields[3][1:]


# Where a segment's jobs start: the header before it holds only numbers, a
# list of numbers and the queue's name (a JSON string, in which an unescaped
# quote cannot occur), so the first occurrence is this one.
_JOBS_AT = b',"jobs":['


def encode_segment(queue: str, first_pos: int, jobs: Sequence[bytes], *, kind: str = PENDING_KIND) -> bytes:
    """A segment's bytes: ``jobs`` are the jobs' encoded JSON objects (each
    with its ``pos``), in FIFO order (a delayed segment, ``kind``
    :data:`DELAYED_KIND`: in due order, ``first_pos`` its smallest ``pos``).
    The header's ``sizes`` gives each one's length in bytes, so that a
    window of jobs can be decoded without decoding the others
    (:func:`decode_segment_window`)."""
    head = orjson.dumps({"format": 2, "kind": kind, "queue": queue, "first_pos": first_pos,
                         "count": len(jobs), "sizes": [len(job) for job in jobs]})
    return b"".join((head[:-1], _JOBS_AT, b",".join(jobs), b"]}"))


def job_offsets(size: int, jobs: Sequence[bytes]) -> list[int]:
    """Where each of ``jobs`` starts in the segment :func:`encode_segment`
    made of them, ``size`` bytes long: its jobs are the object's last bytes
    but the closing ``]}``, joined by commas. For reading one job with a
    ranged get (an id index's entries, :mod:`engine.idindex`)."""
    at = size - 2 - sum(map(len, jobs)) - max(0, len(jobs) - 1)
    offsets = []
    for job in jobs:
        offsets.append(at)
        at += len(job) + 1
    return offsets


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_segment(store: ObjectStore, key: str, data: bytes) -> None:
    """Create ``key`` with ``data``, never overwriting: a key that exists
    raises :class:`~engine.errors.PreconditionFailed` (keys are unique, so it
    means a bug or an ambiguous earlier attempt of this very write). Other
    store errors propagate."""
    store.put(key, data, if_none_match=True)


def read_segment(store: ObjectStore, ref: SegmentRef, *, kind: str | tuple[str, ...] = PENDING_KIND) -> list[Any]:
    """The jobs of the segment ``ref`` names, as decoded JSON objects, after
    checking the object's size and SHA-256 against the reference and its
    shape (a segment of ``kind``, or of one of them). Raises
    :class:`~engine.errors.SegmentUnreadable` naming the object when it is
    missing, altered or malformed, and StoreError subclasses for transient
    store trouble (worth retrying)."""
    blob = store.get(ref.key)
    if blob is None:
        raise SegmentUnreadable(ref.key, "the object is missing")
    return decode_segment(ref, blob.data, kind=kind)


def _verify(ref: SegmentRef, data: bytes) -> None:
    """The object is the one ``ref`` describes: its size and SHA-256 (I6)."""
    if len(data) != ref.size:
        raise SegmentUnreadable(ref.key, f"its size is {len(data)} bytes, the document says {ref.size}")
    if digest(data) != ref.sha256:
        raise SegmentUnreadable(ref.key, "its SHA-256 does not match the document's reference")


def decode_segment(ref: SegmentRef, data: bytes, *, kind: str | tuple[str, ...] = PENDING_KIND) -> list[Any]:
    """Verify ``data`` against ``ref`` and return its jobs (see :func:`read_segment`)."""
    _verify(ref, data)
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:  # a matching hash makes this a writer's bug; still refuse it
        raise SegmentUnreadable(ref.key, f"not valid JSON ({exc})") from exc
    jobs = raw.get("jobs") if isinstance(raw, dict) else None
    kinds = (kind,) if isinstance(kind, str) else kind
    if not isinstance(jobs, list) or raw.get("kind") not in kinds or len(jobs) != ref.total:
        raise SegmentUnreadable(ref.key, f"not a segment of {' or '.join(kinds)} jobs with the referenced count")
    return jobs


def read_segment_window(store: ObjectStore, ref: SegmentRef, start: int, count: int) -> list[Any]:
    """Jobs ``start`` to ``start + count`` (fewer at the end) of the segment
    ``ref`` names, as decoded JSON objects, after the same checks as
    :func:`read_segment`; see :func:`decode_segment_window`."""
    blob = store.get(ref.key)
    if blob is None:
        raise SegmentUnreadable(ref.key, "the object is missing")
    return decode_segment_window(ref, blob.data, start, count)


def decode_segment_window(ref: SegmentRef, data: bytes, start: int, count: int) -> list[Any]:
    """Verify ``data`` against ``ref`` (size and SHA-256 of the whole object)
    and decode only the jobs whose index is in ``[start, start + count)``
    (clipped to the segment, so a negative ``start`` is no index from the
    end), using the header's
    ``sizes``: a refill that takes a few thousand jobs of a 16,384-job
    segment then parses those, not 7 MB of JSON. A segment written without
    ``sizes`` is decoded whole, then sliced. Raises SegmentUnreadable."""
    _verify(ref, data)
    layout = _jobs_layout(ref, data)
    if layout is None:
        return decode_segment(ref, data)[max(start, 0):max(start + count, 0)]
    at, sizes = layout
    start, end = max(start, 0), min(start + count, len(sizes))
    if start >= end:
        return []
    begin = at + sum(sizes[:start]) + start  # one comma after each job before it
    stop = begin + sum(sizes[start:end]) + (end - start - 1)
    try:
        jobs = orjson.loads(b"[" + data[begin:stop] + b"]")
    except orjson.JSONDecodeError as exc:  # a matching hash makes this a writer's bug; still refuse it
        raise SegmentUnreadable(ref.key, f"jobs {start} to {end} are not valid JSON ({exc})") from exc
    if len(jobs) != end - start:
        raise SegmentUnreadable(ref.key, "its header's sizes do not describe its jobs")
    return jobs  # type: ignore[no-any-return]


def read_segment_parts(store: ObjectStore, ref: SegmentRef) -> tuple[bytes, ...] | None:
    """The encoded jobs of the segment ``ref`` names, byte for byte as they
    are in the object (what :func:`encode_segment` joined), after checking
    its size and SHA-256: what its id index must be built from, since the
    index records where each job sits. None for a segment written without
    ``sizes`` (before they existed), whose jobs cannot be cut out exactly.
    Raises SegmentUnreadable (missing, altered, malformed) or StoreError."""
    blob = store.get(ref.key)
    if blob is None:
        raise SegmentUnreadable(ref.key, "the object is missing")
    data = blob.data
    _verify(ref, data)
    layout = _jobs_layout(ref, data)
    if layout is None:
        return None
    at, sizes = layout
    parts = []
    for size in sizes:
        parts.append(data[at:at + size])
        at += size + 1  # and its comma
    return tuple(parts)


def _jobs_layout(ref: SegmentRef, data: bytes) -> tuple[int, list[int]] | None:
    """Where the first job of the verified segment ``data`` starts, and each
    job's length (the header's ``sizes``), checked against the object's
    length and the reference's count. None if the header has no ``sizes``.
    Raises SegmentUnreadable if they do not describe its jobs."""
    at = data.find(_JOBS_AT)
    try:
        head = orjson.loads(data[:at] + b"}") if at > 0 else None
    except orjson.JSONDecodeError:
        head = None
    sizes = head.get("sizes") if isinstance(head, dict) else None
    if not isinstance(head, dict) or not isinstance(sizes, list):
        return None
    # Either kind: lookups by id read delayed segments this way too, and the
    # SHA-256 checked before pins the object its reference names anyway.
    if (head.get("kind") not in SEGMENT_KINDS or len(sizes) != ref.total
            or not all(isinstance(n, int) and n > 0 for n in sizes)
            or at + len(_JOBS_AT) + sum(sizes) + max(len(sizes) - 1, 0) + 2 != len(data)):
        raise SegmentUnreadable(ref.key, "its header's sizes do not describe its jobs")
    return at + len(_JOBS_AT), sizes


def delete_quietly(store: ObjectStore, key: str) -> bool:
    """Delete ``key``; a store error is reported as False (a later pass of
    the collector retries). Deleting a missing key is not an error."""
    try:
        store.delete(key)
    except StoreError:
        return False
    return True


#: A lookup of one job by id that is not in the document (the API's, a job
#: page's) reads at most this many segments it does not already hold, and
#: only when the document's ``sealed`` window says the job was sealed
#: recently: it is then in one of the newest segments (see newest_first).
JOB_LOOKUP_READS = 8


def newest_first(
    lanes: Mapping[str, Sequence[SegmentRef]], delays: Mapping[str, Sequence[DelayedRef]] | None = None,
) -> list[tuple[str, SegmentRef]]:
    """Every ``(queue, reference)`` of ``lanes``, and of ``delays`` (format
    3, each as :meth:`DelayedRef.as_segment` describes it), the most
    recently sealed first: where a job sealed recently sits, or one merged
    from it since."""
    pairs = [(queue, ref) for queue, refs in lanes.items() for ref in refs]
    pairs.extend((queue, ref.as_segment()) for queue, refs in (delays or {}).items() for ref in refs)
    pairs.sort(key=lambda pair: pair[1].sealed_at, reverse=True)
    return pairs


__all__ = [
    "DELAYED_KIND",
    "JOB_LOOKUP_READS",
    "PENDING_KIND",
    "SEGMENT_KINDS",
    "DelayedRef",
    "SegmentRef",
    "decode_segment",
    "delayed_segment_key",
    "delete_quietly",
    "digest",
    "encode_segment",
    "epoch_of_key",
    "is_delayed_key",
    "keeper_of_key",
    "newest_first",
    "read_segment",
    "read_segment_parts",
    "read_segment_window",
    "segment_key",
    "segment_prefix",
    "write_segment",
]
