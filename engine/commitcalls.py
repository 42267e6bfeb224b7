"""The group committer's callers' half: submitting operations and waiting
for their outcomes.

:class:`CommitCalls` is a base class of :class:`~engine.committer.GroupCommitter`
holding the methods that run on the callers' threads and event loops:
``execute``, ``submit``, ``execute_many`` and their ``a``-prefixed forms queue
operations (:class:`~engine.pending.Pending`) for the committer's writer
thread (:mod:`engine.committer`) and wait for their outcomes, and
``committed`` and ``document`` read the latest landed version without I/O.
Every field it reads is the committer's, declared below.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from engine.errors import CommitterNotRunning, CommitTimeout
from engine.ops import Operation, push_op
from engine.pending import Pending
from engine.policy import Policy

__all__ = ["CommitCalls"]


class CommitCalls:
    """The callers' half of :class:`~engine.committer.GroupCommitter` (see the module)."""

    # The committer's fields this half reads or sets (see GroupCommitter.__init__).
    policy: Policy
    _lock: threading.Lock
    _cond: threading.Condition
    _queue: list[Pending]
    _running: bool
    _committed: tuple[str | None, list[bytes]] | None

    # -- submitting ------------------------------------------------------------

    def _submit(self, pending: Pending) -> None:
        queue = self._queue
        with self._lock:  # the condition's lock, entered without Condition's Python-level wrapper
            if not self._running:
                raise CommitterNotRunning("the committer is not running; call start()")
            queue.append(pending)
            # Only the writer waits on the condition, and it takes the whole
            # queue each time it wakes: only the first arrival must wake it.
            if len(queue) == 1:
                self._cond.notify()

    def execute(self, op: Operation, *, timeout: float | None = None) -> Any:
        """Commit ``op`` and wait for its outcome (blocking this thread).

        With ``timeout``, wait at most that many seconds, then raise
        CommitTimeout: the operation may still commit later."""
        pending = Pending(op)
        self._submit(pending)
        assert pending.lock is not None
        if not pending.lock.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
            raise CommitTimeout(f"{type(op).__name__}: no answer within {timeout} s; it may still commit")
        if isinstance(pending.result, BaseException):
            raise pending.result
        return pending.result

    def submit(self, op: Operation, done: Callable[[Any], None]) -> None:
        """Queue ``op`` without waiting: ``done`` gets its outcome (its result,
        or the EngineError it failed with) exactly once (I8), once its commit
        landed or it failed, on the writer thread. So ``done`` must be quick
        and never block or do I/O. Raises CommitterNotRunning (nothing
        queued). An operation submitted after this returns is applied after
        ``op``.

        For background work that must not hold a thread while its commit is
        written: the lane keeper's seals (see ``LaneKeeper``)."""
        self._submit(Pending(op, done=done))

    def execute_many(self, ops: Sequence[Operation], *, timeout: float | None = None) -> list[Any]:
        """Submit ``ops`` at once (they ride one commit, up to ``max_batch``)
        and return one outcome per operation, in order: its result or its
        EngineError (returned, not raised), each after its commit landed (I1).
        Raises CommitterStopped (nothing submitted) or CommitTimeout (as execute)."""
        pendings = [Pending(op) for op in ops]
        self._submit_all(pendings)
        deadline = None if timeout is None else time.monotonic() + timeout
        for pending in pendings:
            assert pending.lock is not None
            if not pending.lock.acquire(timeout=-1 if deadline is None else max(deadline - time.monotonic(), 0)):
                raise CommitTimeout(f"{len(ops)} operations: no answer within {timeout} s; they may still commit")
        return [pending.result for pending in pendings]

    async def aexecute_many(self, ops: Sequence[Operation]) -> list[Any]:
        """As :meth:`execute_many`, awaiting without blocking the event loop."""
        pendings = [Pending(op, asyncio.get_running_loop()) for op in ops]
        self._submit_all(pendings)
        return list(await asyncio.gather(*(p.future for p in pendings if p.future), return_exceptions=True))

    def _submit_all(self, pendings: list[Pending]) -> None:
        with self._lock:  # all or none: a stopped committer takes none of them
            if not self._running:
                raise CommitterNotRunning("the committer is not running; call start()")
            was_empty = not self._queue
            self._queue.extend(pendings)
            if was_empty and pendings:
                self._cond.notify()

    async def aexecute(self, op: Operation) -> Any:
        """Commit ``op`` and await its outcome without blocking the event loop.

        Cancelling the await does not withdraw the operation: it may still commit.
        """
        return await self._submit_async(op)

    async def apush(
        self,
        queue: str,
        payloads: Sequence[Any],
        *,
        max_attempts: int | None = None,
        delay_seconds: float = 0,
        ids: Sequence[str] | None = None,
    ) -> list[str]:
        # As AsyncQueueMethods.apush, awaiting the future directly rather than
        # through aexecute's coroutine: one coroutine fewer per push.
        op = push_op(queue, payloads, policy=self.policy, max_attempts=max_attempts, delay_seconds=delay_seconds,
                     ids=ids)
        result: list[str] = await self._submit_async(op)
        return result

    def _submit_async(self, op: Operation) -> asyncio.Future[Any]:
        """Submit ``op``; the future (of the running loop) gets its outcome."""
        pending = Pending(op, asyncio.get_running_loop())
        self._submit(pending)
        assert pending.future is not None
        return pending.future

    @property
    def committed(self) -> tuple[str | None, list[bytes]]:
        """The latest landed version: its ETag and encoded parts (no I/O).

        The parts are immutable and shared with the writer: unchanged chunks
        are the same ``bytes`` objects from one commit to the next, so a
        reader may cache what it derives from each part by identity. Empty
        before the first write lands.
        """
        version = self._committed
        return (None, []) if version is None else (version[0], list(version[1]))

    def document(self) -> dict[str, Any]:
        """The latest committed document as parsed JSON ({} if none exists yet). No I/O."""
        _, parts = self.committed
        result: dict[str, Any] = orjson.loads(b"".join(parts)) if parts else {}
        return result
