"""Cancelling a running job: the worker tells its handler that the job is no
longer its own, and a handler that checks stops.

A job's lease can be lost while its handler runs: an operator purged or
requeued the job, or the lease ran out (the worker was cut off from the
broker for longer than the lease) and another worker may be running the job
now. A thread cannot be killed, so the worker cannot stop the handler; it
can tell it. The worker's heartbeat finds the lease lost, at most one
heartbeat interval after it happened (a third of the lease by default), and
cancels the job's :class:`Cancellation`. So does a worker that stops with
the job still running past its grace period: its lease will run out and the
job will run again elsewhere. A handler that checks stops there::

    from engine import check_cancelled

    def handler(payload):
        for row in rows(payload):
            check_cancelled()  # raises JobCancelled once the job is no longer ours
            send(row)

and the worker counts the job lost, reporting nothing: there is no lease to
report with, and the job's new owner (or its purge) decides what it
becomes. A handler that never checks runs to its end, as before, and its
result is not sent. :func:`current_cancellation` gives the handler the
whole object, to wait on it instead of sleeping (``if cancellation.wait(5):
return``).

Outside a worker's handler thread (a test calling the handler directly,
Django's ImmediateBackend), :func:`cancelled` is False and
:func:`check_cancelled` returns: code that checks runs the same there.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Cancellation", "JobCancelled", "cancelled", "check_cancelled", "current_cancellation"]


class JobCancelled(Exception):
    """Raised by :func:`check_cancelled` (or :meth:`Cancellation.check`) in
    a handler whose job is no longer its own; ``reason`` says why. The
    worker counts the job lost and sends nothing. Raised in a handler whose
    job was *not* cancelled, it fails the attempt like any exception."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Cancellation:
    """One running job's cancellation: set once, by the worker, never unset.
    Thread-safe."""

    __slots__ = ("_event", "_lock", "_reason")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()  # the heartbeat thread and a stopping worker may cancel at once
        self._reason = ""

    def cancel(self, reason: str) -> bool:
        """Cancel with ``reason``; False (and the first reason kept) if it was
        cancelled already."""
        with self._lock:
            if self._event.is_set():
                return False
            self._reason = reason  # written before the event is set, so every reader that sees the event sees it
            self._event.set()
            return True

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    @property
    def reason(self) -> str:
        """Why it was cancelled; empty while it is not."""
        return self._reason if self._event.is_set() else ""

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds (None: for ever) for a cancellation;
        True if the job was cancelled. A handler's interruptible sleep."""
        return self._event.wait(timeout)

    def check(self) -> None:
        """Raise :class:`JobCancelled` if the job was cancelled."""
        if self._event.is_set():
            raise JobCancelled(self._reason)


_local = threading.local()


def current_cancellation() -> Cancellation:
    """The cancellation of the job this thread's handler runs; outside a
    worker's handler, a fresh one that nothing cancels."""
    found = getattr(_local, "cancellation", None)
    return found if found is not None else Cancellation()


def cancelled() -> bool:
    """Whether the job this thread's handler runs was cancelled (False outside a handler)."""
    found = getattr(_local, "cancellation", None)
    return found is not None and found.cancelled


def check_cancelled() -> None:
    """Raise :class:`JobCancelled` if the job this thread's handler runs was
    cancelled; return at once otherwise, and outside a handler."""
    found = getattr(_local, "cancellation", None)
    if found is not None:
        found.check()


@contextmanager
def handling(cancellation: Cancellation) -> Iterator[None]:
    """Make ``cancellation`` the current thread's for the block: the worker
    wraps each handler call in it. Nests (the outer one comes back)."""
    outer = getattr(_local, "cancellation", None)
    _local.cancellation = cancellation
    try:
        yield
    finally:
        _local.cancellation = outer
