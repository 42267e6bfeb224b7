"""Long-poll lease watches: a worker learns at once that a lease it holds is
no longer its own.

A worker heartbeats each lease every third of the lease by default; between
two heartbeats it does not know that an operator requeued or purged its job,
or that the lease ran out, so its handler runs on for up to that long
(engine.cancellation). A watch (``POST /api/v1/leases/watch``,
:meth:`engine.Broker.awatch_leases`) names the leases a worker holds and
parks until a landed commit revokes one of them (a requeue, a purge, an
expiry: ``QueueState.revoked_leases``), or its wait is over: then the worker
cancels those jobs at once. It writes nothing. A lease the worker ended
itself (its own complete or fail) does not answer it: a busy worker
acknowledges jobs all the time.

A broker keeps one :class:`LeaseWatches`. A watch is registered first and
then checked against the leader's state as it is now, so no commit falls
between the two; after that the committer's writer thread calls
:meth:`committed` after every landed commit, and each watch is checked again
(a dictionary lookup per lease: a commit does not walk the backlog).

Only a revocation that has landed answers a watch, never one still being
written: the writer pipelines, so the state it hands over (and the one the
first check reads, from the event loop's thread) may already hold the next
write's changes, and that write may never land (the leader loses the
document to another). Each revocation carries the lowest seq of a write that
can hold it, and counts once the state's landed seq reaches it
(``QueueState.revocation_landed``). So a worker told that a lease is lost
can rely on it: a result sent with that lease would be refused.

Thread-safety: :meth:`committed` and :meth:`close` run on the writer or
control thread; watches live on any number of event loops. The registry's
state is under one lock, and a watch is woken with ``call_soon_threadsafe``
on its own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Callable, Sequence

from engine.document import QueueState
from engine.errors import EngineError, QueueError
from engine.lifecycle import lease_problem
from engine.optypes import QueueScope

__all__ = ["LeaseWatches", "Lost"]

#: One lease found lost: the job's id, and the LeaseLost or JobNotFound a heartbeat would get.
Lost = tuple[str, QueueError]


class _Watch:
    """One parked watch. ``lost`` and ``error`` are set once, under the registry's lock."""

    __slots__ = ("error", "future", "leases", "loop", "lost", "scope")

    def __init__(self, leases: Sequence[tuple[str, str]], scope: QueueScope | None,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.leases = leases
        self.scope = scope
        self.loop = loop
        self.future: asyncio.Future[None] = loop.create_future()
        self.lost: list[Lost] | None = None
        self.error: EngineError | None = None


def lost_leases(state: QueueState, leases: Sequence[tuple[str, str]], scope: QueueScope | None = None) -> list[Lost]:
    """Which of ``leases`` (job id, lease token) ``state`` shows revoked, and
    why (the error a heartbeat would get), in order: a lease that ended
    without its holder (``QueueState.revoked_leases``: requeued, purged, run
    out), or the current lease of a job outside ``scope`` (the token's scope
    was narrowed since it claimed). A lease its holder ended itself (a
    complete or a fail, which it knows of) is not reported: a busy worker's
    watch must not be answered by each of its own acknowledgements. Nor is
    one this leader never revoked (an older leader's, or a token it never
    gave): heartbeats find those. A job outside ``scope`` named with any
    other token gets no answer, as an id that does not exist, so that a
    watch never tells whether another queue's job exists."""
    lost: list[Lost] = []
    for job_id, token in leases:
        # The token lookup first: it is all most leases cost a commit.
        if not state.revocation_landed(token):
            if scope is None:
                continue
            job = state.jobs.get(job_id)
            if job is None or job.lease is None or job.lease.token != token or scope(job.queue):
                continue
        problem = lease_problem(state, job_id, token, scope)
        if problem is not None:
            lost.append((job_id, problem))
    return lost


class LeaseWatches:
    """The lease watches parked on one broker (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tickets = itertools.count()
        self._watches: dict[int, _Watch] = {}

    async def watch(
        self,
        leases: Sequence[tuple[str, str]],
        wait: float,
        current: Callable[[], QueueState | None],
        *,
        scope: QueueScope | None = None,
    ) -> list[Lost]:
        """The leases of ``leases`` that are not current, as soon as one is
        found, or ``[]`` once ``wait`` seconds passed with all of them current.
        ``current`` gives the leader's state now (None once it stopped);
        ``scope`` confines the watch to some queues' jobs, as a lease call's
        (:func:`engine.ops.scoped`). Raises the error :meth:`close` was given."""
        watch = _Watch(leases, scope, asyncio.get_running_loop())
        ticket = next(self._tickets)
        with self._lock:
            self._watches[ticket] = watch
        try:
            state = current()
            if state is not None and (lost := lost_leases(state, leases, scope)):
                return lost
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(watch.future), wait)
            with self._lock:
                if watch.error is not None:
                    raise watch.error
                return watch.lost or []
        finally:
            with self._lock:
                self._watches.pop(ticket, None)

    def committed(self, state: QueueState) -> None:
        """The broker's on-commit hook (the writer thread): answer every watch
        one of whose leases ``state``, just landed, no longer holds."""
        with self._lock:
            for watch in self._watches.values():
                if watch.lost is None and watch.error is None and (lost := lost_leases(state, watch.leases,
                                                                                       watch.scope)):
                    watch.lost = lost
                    self._wake(watch)

    def close(self, error: EngineError) -> None:
        """Answer every watch with ``error`` (the broker stepped down or stopped). Any thread."""
        with self._lock:
            for watch in self._watches.values():
                if watch.lost is None and watch.error is None:
                    watch.error = error
                    self._wake(watch)

    def watching(self) -> int:
        """How many watches are parked (for tests and health pages)."""
        with self._lock:
            return len(self._watches)

    @staticmethod
    def _wake(watch: _Watch) -> None:
        def resolve() -> None:
            if not watch.future.done():
                watch.future.set_result(None)

        with contextlib.suppress(RuntimeError):  # its loop closed: nobody waits any more
            watch.loop.call_soon_threadsafe(resolve)
