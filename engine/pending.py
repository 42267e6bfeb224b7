"""What the group committer tracks while it works: one submitted operation
(:class:`Pending`), one conditional write (:class:`Write`), which stage the
writer's operations are in (:class:`Batches`), how callers are answered
(exactly once, I8), its counters and its timeout error.

Split from :mod:`engine.committer`, which holds the writer loop itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from engine.document import QueueState
from engine.errors import EngineError
from engine.model import Departure
from engine.ops import Operation


@dataclass(slots=True)
class CommitStats:
    """Counters for tests, benchmarks and the dashboard."""

    commits: int = 0
    operations: int = 0
    lost_races: int = 0
    ambiguous: int = 0
    reads: int = 0
    last_commit_seconds: float = 0.0

    @property
    def mean_batch(self) -> float:
        """Operations answered per landed write."""
        return self.operations / self.commits if self.commits else 0.0


class Pending:
    """One submitted operation, its outcome once applied, and how to answer it:
    a held lock for a thread, a future for a coroutine."""

    __slots__ = ("answered", "future", "lock", "loop", "op", "result")

    def __init__(self, op: Operation, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.op = op
        self.loop = loop
        self.result: Any = None
        self.answered = False  # set once, by whoever answers it (I8: exactly one answer)
        if loop is None:
            # A pre-acquired lock is the cheapest one-shot signal between threads.
            self.lock: threading.Lock | None = threading.Lock()
            self.lock.acquire()
            self.future: asyncio.Future[Any] | None = None
        else:
            self.lock = None
            self.future = loop.create_future()


#: What a guarded step returns when it failed (its victims were answered).
FAILED = object()


class Write:
    """One conditional PUT, run on the I/O thread."""

    __slots__ = ("batch", "created", "departures", "done", "error", "etag", "parts", "seq", "started", "state")

    def __init__(self, batch: list[Pending], seq: int, parts: list[bytes], state: QueueState) -> None:
        self.batch = batch
        self.seq = seq
        self.parts = parts
        self.state = state  # the state these parts encode (its ETag is set when the write lands)
        self.created = False  # the write created the document (if_none_match)
        self.started = time.monotonic()
        self.done = False
        self.etag: str | None = None
        self.error: EngineError | None = None
        # The jobs this write removes from the document, reported once it lands.
        self.departures: list[Departure] = []


@dataclass(slots=True, eq=False)
class Batches:
    """Where the writer thread's operations are, stage by stage (see
    ``GroupCommitter._run``). Only the writer thread touches it.

    * ``new`` — taken from the submit queue, not applied yet;
    * ``staged`` — applied to the in-memory state, waiting for the next write;
    * ``inflight`` — the one write on the I/O thread (its batch is in flight);
    * ``settling`` — the batch of a write that finished, until it is answered;
    * ``linger_until``, ``linger_target``, ``last_arrival`` — the linger after
      a landed write: until when (monotonic), how many staged operations end
      it early, and when the last ones arrived.
    """

    new: list[Pending] = field(default_factory=list)
    staged: list[Pending] = field(default_factory=list)
    inflight: Write | None = None
    settling: list[Pending] = field(default_factory=list)
    linger_until: float = 0.0
    linger_target: int = 0
    last_arrival: float = 0.0


def settle_futures(batch: list[Pending]) -> None:
    """Runs on the callers' event loop: resolve each operation's future."""
    for pending in batch:
        future = pending.future
        assert future is not None
        if future.done():  # the caller gave up (cancelled)
            continue
        result = pending.result
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)


def printable(text: str) -> str:
    """``text`` with anything UTF-8 cannot carry (lone surrogates) escaped, so
    that an error message about bad input can itself be encoded."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def answer(batch: list[Pending], stats: CommitStats) -> None:
    """Answer each operation of ``batch`` with its ``result``, skipping any
    already answered: never twice (I8), whoever answered first wins. Thread
    callers are released at once; coroutines get one wake-up per event loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Pending]] = {}
    answered = 0
    for pending in batch:
        if pending.answered:
            continue
        pending.answered = True
        answered += 1
        loop = pending.loop
        if loop is None:
            assert pending.lock is not None
            pending.lock.release()
        else:
            same = by_loop.get(loop)
            if same is None:
                by_loop[loop] = [pending]
            else:
                same.append(pending)
    stats.operations += answered
    for loop, items in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            loop.call_soon_threadsafe(settle_futures, items)


def fail(batch: list[Pending], exc: EngineError, stats: CommitStats) -> None:
    """Answer every not yet answered operation of ``batch`` with ``exc``."""
    todo = [pending for pending in batch if not pending.answered]
    for pending in todo:
        pending.result = exc
    answer(todo, stats)
