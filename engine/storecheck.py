"""Whether a store honours the conditional writes the engine rests on.

Every guarantee of the queue comes from the store refusing a write whose
condition does not hold: ``If-None-Match: *`` on an object that exists, and
``If-Match`` with an ETag that is no longer current (I3, DESIGN.md). A store
that ignores them (an S3-compatible service or a proxy that drops the
headers) accepts both of two racing writers, and the later one silently
erases what the earlier one acknowledged. Nothing else would ever show it.

:func:`check_conditions` finds out on a scratch object of its own, before a
node writes the document (``Broker`` does it once as it starts, and
``manage.py queuecheck`` on demand). It writes, rewrites, reads and deletes
one small probe object under ``<document key>.probe/``, and never touches the
document, its segments or their indexes. A probe left behind by a process
that died in the middle is deleted by a later check once it is an hour old.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from engine.errors import PreconditionFailed, StoreError, StoreUnsafe
from engine.stores.base import ObjectStore

log = logging.getLogger(__name__)

#: A probe older than this, by the time in its name, was left by a check that
#: never finished (its process died); the next check deletes it.
STALE_PROBE_SECONDS = 3600.0


def probe_prefix(document_key: str) -> str:
    """Where probes live: beside the document, outside its segments' and indexes' prefixes."""
    return f"{document_key}.probe/"


def _probe_age(prefix: str, key: str, now: float) -> float | None:
    """Seconds since the probe ``key`` was named (its leading Unix time), or None for a key not of ours."""
    stamp = key[len(prefix):].partition("-")[0]
    return now - int(stamp) if stamp.isdigit() else None


def check_conditions(store: ObjectStore, document_key: str, *, clock: Callable[[], float] = time.time) -> None:
    """Check on a probe object that ``store`` refuses a second create, refuses
    a write with a stale ETag, accepts one with the current ETag (as its
    write returned it, and as a read returned it), reads back the bytes it
    wrote, and shows a change to a metadata read. Returns None when it does.

    Raises :class:`~engine.errors.StoreUnsafe` naming the first rule broken,
    or what the store raised: StoreUnavailable (transient; try again),
    StoreConfigError (credentials, bucket), another StoreError. Deletes its probe whatever
    happens (best effort), and probes older than :data:`STALE_PROBE_SECONDS`.
    """
    prefix = probe_prefix(document_key)
    key = f"{prefix}{int(clock()):010d}-{os.urandom(8).hex()}"
    try:
        problem = _broken_rule(store, key)
    finally:
        _clear(store, prefix, key, clock())
    if problem is not None:
        raise StoreUnsafe(problem, store.describe())


def _broken_rule(store: ObjectStore, key: str) -> str | None:
    """The first rule of conditional writes ``store`` breaks on the new object ``key``, or None."""
    # Other store errors propagate: they say nothing of the conditions (an
    # S3-compatible store without them answers NotImplemented, which S3Store
    # raises as StoreUnsafe itself).
    try:
        first = store.put(key, b"create", if_none_match=True)
    except PreconditionFailed:
        return f"creating the new object {key} with If-None-Match: * was refused"
    if _lands(lambda: store.put(key, b"create again", if_none_match=True)):
        return f"a second create of {key} with If-None-Match: * replaced the first instead of being refused"
    try:
        second = store.put(key, b"replace", if_match=first)
    except PreconditionFailed:
        return (f"a write to {key} with If-Match and the ETag its create returned was refused: the ETags "
                "its writes return are not the object's")
    if second == first:
        return f"the ETag of {key} did not change when its bytes did"
    if _lands(lambda: store.put(key, b"stale", if_match=first)):
        return (f"a write to {key} with If-Match and an ETag no longer current replaced the object instead "
                "of being refused")
    blob = store.get(key)
    if blob is None or blob.data != b"replace":
        return f"a read of {key} did not return the bytes last written"
    # What the engine needs of a read's ETag: that a write conditional on it
    # lands (a takeover writes on the version it read), and that a metadata
    # read then shows the change (a standby's poll). Not that it is spelled
    # as the write's was: a store may quote one and not the other.
    try:
        store.put(key, b"after a read", if_match=blob.etag)
    except PreconditionFailed:
        return f"a write to {key} with If-Match and the ETag a read of it returned was refused"
    if store.etag(key) in (None, blob.etag):
        return f"a metadata read of {key} did not show that it changed"
    return None


def _lands(write: Callable[[], object]) -> bool:
    """Whether ``write``, which the store must refuse, landed instead."""
    try:
        write()
    except PreconditionFailed:
        return False
    return True


def _clear(store: ObjectStore, prefix: str, key: str, now: float) -> None:
    """Delete this check's probe and any stale one; a failure only leaves them for a later check.

    A probe's age is read from its name, written by another machine's clock:
    the hour allows for clocks that differ, and a check takes a second."""
    try:
        store.delete(key)
        stale = [k for k in store.list(prefix)
                 if k != key and (age := _probe_age(prefix, k, now)) is not None and age > STALE_PROBE_SECONDS]
        for old in stale:
            store.delete(old)
    except StoreError as exc:
        log.warning("store check: could not delete its probe objects under %s: %s", prefix, exc)


__all__ = ["STALE_PROBE_SECONDS", "check_conditions", "probe_prefix"]
