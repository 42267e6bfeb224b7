"""Whether a node should take traffic: the answer behind ``GET /readyz``.

A node is ready when it leads and its last heartbeat commit landed within the
takeover interval, or when it stands by and reached the store (an ETag check
or a read of the document) within that interval: then a request it gets is
either served (leader) or answered ``not_leader`` with the leader's URL
(standby), which a client follows. It is not ready while the document is
lost (I10) or does not parse (I6), while it cannot reach the store, before
its first read, once stopped, and for good on a store that does not honour
conditional writes (:mod:`engine.storecheck`). Pure: :func:`assess` takes what the broker
knows and does no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: Why a node is not ready (``None`` when it is).
NotReady = Literal[
    "stopped", "starting", "store_unsafe", "document_missing", "document_unreadable", "store_unreachable"
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Readiness:
    """A node's readiness: ``ready``; its ``role``; when not ready, ``reason``
    (a :data:`NotReady` code) and ``message`` for people; and how long ago,
    by the node's own monotonic clock, it last reached the store
    (``store_age_seconds``, None before the first time)."""

    ready: bool
    role: str
    reason: NotReady | None = None
    message: str = ""
    store_age_seconds: float | None = None


def assess(
    *,
    role: str,
    store_ok_at: float | None,
    now: float,
    takeover_seconds: float,
    missing: Exception | None,
    unreadable: Exception | None,
    last_error: str | None,
    unsafe: Exception | None = None,
) -> Readiness:
    """The readiness of a node in ``role`` that last reached the store at
    monotonic ``store_ok_at`` (None: never), at ``now``. ``missing`` and
    ``unreadable`` are the document's problems (DocumentMissing, DocumentError)
    if any; ``last_error`` is the node's latest store or election error;
    ``unsafe`` the StoreUnsafe its store check raised, if it did."""
    age = None if store_ok_at is None else max(0.0, now - store_ok_at)

    def refuse(reason: NotReady, message: str) -> Readiness:
        return Readiness(ready=False, role=role, reason=reason, message=message, store_age_seconds=age)

    if role == "stopped":
        return refuse("stopped", "the broker is not running on this node")
    if unsafe is not None:
        return refuse("store_unsafe", str(unsafe))
    if missing is not None:
        return refuse("document_missing", str(missing))
    if unreadable is not None:
        return refuse("document_unreadable", str(unreadable))
    if age is None:
        why = f": {last_error}" if last_error else ""
        return refuse("starting", f"this node has not read the document yet{why}")
    if age > takeover_seconds:
        why = f" (last error: {last_error})" if last_error else ""
        return refuse(
            "store_unreachable",
            f"this node last reached the store {age:.1f} s ago, more than the takeover interval "
            f"of {takeover_seconds:g} s{why}",
        )
    return Readiness(ready=True, role=role, store_age_seconds=age)
