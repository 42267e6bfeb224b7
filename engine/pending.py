"""What the group committer tracks while it works: one submitted operation
(:class:`Pending`), one conditional write (:class:`Write`), which stage the
writer's operations are in (:class:`Batches`), how callers are answered
(exactly once, I8), its counters and its timeout error.

Split from :mod:`engine.committer`, which holds the writer loop itself.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.document import QueueState
from engine.errors import EngineError
from engine.model import Departure
from engine.optypes import Operation

log = logging.getLogger(__name__)

#: Upper bounds of :attr:`CommitStats.latency`'s buckets, in seconds.
LATENCY_BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Upper bounds of :attr:`CommitStats.sizes`'s buckets, in bytes.
SIZE_BOUNDS = (1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0, 67108864.0)
#: Upper bounds of :attr:`CommitStats.batches`'s buckets, in operations per write.
BATCH_BOUNDS = (1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 1000.0, 2500.0, 10000.0)


class Buckets:
    """A fixed-bucket histogram: how many observations fell at or below each
    bound (``counts[i]`` for ``bounds[i]``, not cumulative; the last count is
    for values above every bound), their ``sum`` and ``count``.

    :meth:`observe` costs one bisection and takes no lock: one thread (the
    committer's writer) observes; a reader on another thread may see an
    observation half recorded (the count but not yet the sum), never a
    corrupted value, which is what a metrics scrape needs.
    """

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        if list(bounds) != sorted(set(bounds)):
            raise ValueError("bounds must be strictly increasing")
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, observations at or below it)`` for each bound, then
        ``(inf, count)``: the form Prometheus histograms take."""
        counts = list(self.counts)
        result: list[tuple[float, int]] = []
        total = 0
        for bound, n in zip((*self.bounds, float("inf")), counts, strict=True):
            total += n
            result.append((bound, total))
        return result


@dataclass(slots=True)
class CommitStats:
    """Counters for tests, benchmarks, the dashboard and ``/metrics``.

    Only the committer's writer thread changes them (a broker shares one
    across the committers it runs, so they count for the node's lifetime).
    ``lost_races`` counts conditional writes that lost to another writer (CAS
    conflicts), ``ambiguous`` writes whose outcome was unknown until a
    re-read. ``hedged`` counts writes that sent a second, identical attempt
    because the first was slow, and ``hedges_landed`` those of them whose
    second attempt is the one that landed. ``latency``, ``sizes`` and ``batches`` are histograms of each
    landed write's duration (seconds), size (bytes) and operations;
    ``last_commit_at`` is when the last write landed (Unix time).
    """

    commits: int = 0
    operations: int = 0
    lost_races: int = 0
    ambiguous: int = 0
    hedged: int = 0
    hedges_landed: int = 0
    reads: int = 0
    last_commit_seconds: float = 0.0
    last_commit_at: float = 0.0
    latency: Buckets = field(default_factory=lambda: Buckets(LATENCY_BOUNDS))
    sizes: Buckets = field(default_factory=lambda: Buckets(SIZE_BOUNDS))
    batches: Buckets = field(default_factory=lambda: Buckets(BATCH_BOUNDS))

    @property
    def mean_batch(self) -> float:
        """Operations answered per landed write."""
        return self.operations / self.commits if self.commits else 0.0

    def landed(self, *, seconds: float, size: int, operations: int) -> None:
        """Record one landed write (the writer thread calls it). No I/O."""
        self.commits += 1
        self.last_commit_seconds = seconds
        self.last_commit_at = time.time()
        self.latency.observe(seconds)
        self.sizes.observe(float(size))
        self.batches.observe(float(operations))


class Pending:
    """One submitted operation, its outcome once applied, and how to answer it:
    a held lock for a thread, a future for a coroutine, or a callback that
    nobody waits on (``done``, see :meth:`GroupCommitter.submit`)."""

    __slots__ = ("answered", "done", "future", "lock", "loop", "op", "result")

    def __init__(
        self, op: Operation, loop: asyncio.AbstractEventLoop | None = None,
        done: Callable[[Any], None] | None = None,
    ) -> None:
        self.op = op
        self.loop = loop
        self.done = done
        self.result: Any = None
        self.answered = False  # set once, by whoever answers it (I8: exactly one answer)
        self.lock: threading.Lock | None = None
        self.future: asyncio.Future[Any] | None = None
        if done is None and loop is None:
            # A pre-acquired lock is the cheapest one-shot signal between threads.
            self.lock = threading.Lock()
            self.lock.acquire()
        elif done is None:
            assert loop is not None
            self.future = loop.create_future()


#: What a guarded step returns when it failed (its victims were answered).
FAILED = object()


class Write:
    """One conditional PUT of the document, run on an I/O thread, and at most
    one hedge: the same PUT sent again while the first is slow."""

    __slots__ = ("answers", "attempts", "batch", "created", "decided", "departures", "done", "dropped_segments",
                 "error", "etag", "failures", "hedge_at", "if_match", "parts", "seq", "started", "state")

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
        # Segment keys this write stops referencing, reported once it lands.
        self.dropped_segments: list[str] = []
        # Hedging (see CommitWrites._put): when a second, identical attempt is
        # due (monotonic; None: never), the attempts sent and answered, the
        # errors of those that failed, and which attempt decided the outcome
        # (None: undecided; 0 the first, 1 the hedge). Changed under the
        # committer's lock only.
        self.hedge_at: float | None = None
        self.if_match: str | None = None  # the ETag both attempts are conditioned on (None: a create)
        self.attempts = 1
        self.answers = 0
        self.failures: list[EngineError] = []
        self.decided: int | None = None


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
        if pending.done is not None:
            try:
                pending.done(pending.result)
            except Exception:  # a bug in the callback must not stop the others' answers (I8)
                log.exception("the callback of a %s failed", type(pending.op).__name__)
        elif loop is None:
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
