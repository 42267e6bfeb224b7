"""One compare-and-set round on the queue document, shared by every writer.

Layer 1 in two steps, each a pure shell around the store:

* :func:`state_of`: what was read becomes a state. A document is parsed (a
  document that does not parse raises DocumentError and is never overwritten,
  I6); an absent one is an empty state only on a fresh store, and raises
  DocumentMissing if it existed (I10, through :class:`~engine.lineage.Presence`).
* :func:`write_state`: the change goes back with a conditional write, over
  the version it was read from (``If-Match``) or, for a document that did not
  exist, as its creation (``If-None-Match: *``). A lost race raises
  PreconditionFailed; the caller re-reads and re-applies.

The direct client, the group committer and the broker's takeover each do
their own retrying around these, and record a creation marker when their
write created the document (``Presence.found``).
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.document import QueueState
from engine.lineage import Presence
from engine.parsing import empty_state, parse_document
from engine.policy import Policy
from engine.stores.base import Blob, ObjectStore


def state_of(
    key: str, blob: Blob | None, *, policy: Policy, presence: Presence, seq: int = 0, epoch: int = 0
) -> QueueState:
    """The state of ``blob``, read from ``key`` (None: the object is absent).

    An absent document is a fresh, empty state (its ETag None, so that it is
    written as a creation) only if ``presence`` says the store never had one;
    otherwise raises DocumentMissing (I10). ``seq`` and ``epoch``: the highest
    this caller knew, recorded in the marker if the document is lost. A
    present one is parsed (raising DocumentError, I6) and reported to
    ``presence``. I/O only through ``presence``: reading or writing the
    creation marker, on the rare paths it describes; raises StoreError from them.
    """
    if blob is None:
        missing = presence.gone(seq=seq, epoch=epoch)
        if missing is not None:
            raise missing
        return empty_state(policy=policy)
    state = parse_document(key, blob.data, policy=policy, etag=blob.etag)
    presence.found(seq=state.seq, epoch=state.broker.epoch)
    return state


def write_state(store: ObjectStore, key: str, parts: Sequence[bytes], *, etag: str | None) -> str:
    """Write ``parts`` to ``key`` over the version ``etag``, or create it when
    ``etag`` is None. One write; returns the new ETag. Raises
    PreconditionFailed if another writer got there first, StoreUnavailable if
    the outcome is unknown (settle it by re-reading), other StoreErrors."""
    if etag is None:
        return store.put_parts(key, parts, if_none_match=True)
    return store.put_parts(key, parts, if_match=etag)
