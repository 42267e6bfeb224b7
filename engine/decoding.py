"""Reading the queue document as plain JSON values, for readers that only look.

:func:`~engine.parsing.parse_document` builds a :class:`~engine.document.QueueState`
with its indexes, checking every field: what a writer needs before it may
write (I6). A reader that only shows the queue (the dashboard) needs the
document as the dicts and lists its JSON decodes to, quickly, and for every
new version. This module gives it that:

* :func:`decode_document_json` decodes one stored document whole;
* :class:`DocumentDecoder` decodes the encoded parts of each new version
  (:meth:`QueueState.encode <engine.document.QueueState.encode>`), reusing
  what it decoded for the parts that did not change since the version before.
  A 100k-job document costs ~0.5 s to decode whole and a few milliseconds per
  commit this way.

How the encoder frames the document into parts is known here and in
:mod:`engine.document` only. Neither does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from engine.document import READABLE_FORMATS
from engine.parsing import parse_document
from engine.policy import DOCUMENT_KEY, Policy

Item = dict[str, Any]

# The frame QueueState.encode puts around the chunks: the header (with the
# dedup window) without its closing brace, then these, with b"," between
# chunks. The tests check it against the encoder's output.
_DEAD_MARK = b',"dead":['
_JOBS_MARK = b'],"jobs":['
_END_MARK = b"]}"
_SEPARATOR = b","


@dataclass(frozen=True, slots=True, kw_only=True)
class DecodedDocument:
    """One version of the document as plain JSON values.

    ``header`` is every top-level field except ``dead`` and ``jobs`` (format,
    seq, writer, broker, queues, finished, ...); ``dead`` and ``jobs`` are the
    dead letters and jobs in document order; ``size`` is the document's
    length in bytes. The values may be shared with other results of the same
    :class:`DocumentDecoder`: treat them as read-only.
    """

    header: dict[str, Any]
    dead: list[Item]
    jobs: list[Item]
    size: int


def decode_document_json(data: bytes, *, key: str = DOCUMENT_KEY) -> DecodedDocument:
    """Decode a whole stored document (the bytes of object ``key``) into plain
    JSON values, checking only the top-level shape and what each job and dead
    letter must have to be shown (id and queue; a job's status).

    Raises :class:`~engine.errors.DocumentError`, with
    :func:`~engine.parsing.parse_document`'s precise message, for a document
    that is not valid JSON, is not a queue document or has an unknown format
    version or malformed items. No I/O.
    """
    try:
        raw = orjson.loads(data)
        version = raw.get("format") if isinstance(raw, dict) else None
        if version not in READABLE_FORMATS or isinstance(version, bool):
            raise ValueError
        jobs, dead = raw.pop("jobs"), raw.pop("dead")
        _check_items(jobs, dead)
    except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
        # Let the strict parser name the problem; if it accepts the document
        # after all, the shortcut above was wrong, which is a bug here.
        parse_document(key, data, policy=Policy())
        raise
    return DecodedDocument(header=raw, dead=dead, jobs=jobs, size=len(data))


def _check_items(jobs: Any, dead: Any) -> None:
    if not isinstance(jobs, list) or not isinstance(dead, list):
        raise TypeError("jobs and dead must be lists")
    for item in jobs:
        if not isinstance(item, dict) or item.get("status") not in ("pending", "running") or "queue" not in item:
            raise TypeError("bad job")
    for item in dead:
        if not isinstance(item, dict) or "queue" not in item or "died_at" not in item:
            raise TypeError("bad dead letter")


class DocumentDecoder:
    """Decodes successive versions of the document from their encoded parts.

    :meth:`decode` takes the parts of a version as the engine wrote them
    (``GroupCommitter.committed``, that is :meth:`QueueState.encode
    <engine.document.QueueState.encode>`) and returns the same values as
    :func:`decode_document_json` of the joined parts.

    What it reuses, and how: the encoder keeps every unchanged chunk of up to
    512 jobs or dead letters as the *same* ``bytes`` object from one version
    to the next. The decoder remembers, for each chunk part of the previous
    call, the object and its decoded items; a part that is that very object
    again is not decoded again, and its items are the same dicts as last
    time. Everything else is decoded; what the new version no longer has is
    forgotten. Relying on the identity of the parts is the engine's business:
    a caller just passes each new version's parts, in order, and gets the
    decoded document.

    Parts in any other layout (a version the node read from the store comes
    as one part, the whole document) are decoded whole by
    :func:`decode_document_json`, with its checks and errors, and the memory
    of previous chunks is kept. Parts in the encoder's layout are the
    engine's own output and are not checked further.

    ``chunks_decoded`` and ``chunks_reused`` count chunk parts since the
    decoder was made (for tests and measurements). Not thread-safe: use one
    per reader. No I/O.
    """

    def __init__(self) -> None:
        self._cache: dict[int, tuple[bytes, list[Item]]] = {}
        self.chunks_decoded = 0
        self.chunks_reused = 0

    def decode(self, parts: Sequence[bytes], *, key: str = DOCUMENT_KEY) -> DecodedDocument:
        """The document made of ``parts`` (of object ``key``). Raises
        DocumentError only for parts decoded whole (see the class)."""
        if (len(parts) < 4 or parts[1] != _DEAD_MARK or parts[-1] != _END_MARK
                or _JOBS_MARK not in parts):
            return decode_document_json(b"".join(parts), key=key)
        try:
            header = orjson.loads(parts[0] + b"}")
        except orjson.JSONDecodeError:
            return decode_document_json(b"".join(parts), key=key)
        split = parts.index(_JOBS_MARK)
        cache: dict[int, tuple[bytes, list[Item]]] = {}
        dead = self._items(parts[2:split], cache)
        jobs = self._items(parts[split + 1:-1], cache)
        self._cache = cache  # forget chunks that are gone
        return DecodedDocument(header=header, dead=dead, jobs=jobs, size=sum(len(p) for p in parts))

    def _items(self, parts: Sequence[bytes], cache: dict[int, tuple[bytes, list[Item]]]) -> list[Item]:
        items: list[Item] = []
        for part in parts:
            if part == _SEPARATOR:
                continue
            hit = self._cache.get(id(part))
            # The cache entry holds the bytes object, so its id cannot be
            # taken by another object while the entry exists.
            if hit is None or hit[0] is not part:
                hit = (part, orjson.loads(b"[" + part + b"]"))
                self.chunks_decoded += 1
            else:
                self.chunks_reused += 1
            cache[id(part)] = hit
            items.extend(hit[1])
        return items
