"""Where the dashboard's snapshots come from, and what it measures over time.

:data:`source` is process-wide. :meth:`SnapshotSource.current` returns the
latest committed version of ``queue.json``:

* on the leader, from the committer's memory (no I/O; the engine's
  :class:`~engine.DocumentDecoder` reuses what did not change);
* on any other node, from the store: a cheap ETag check (HEAD or ``stat``)
  first, and a full read only when the document changed.

Every call also records a sample of the per-queue counters, from which the
overview computes arrival and completion rates over the last minute, and of
the leader's commit latency. Where the leader's metrics sampler recorded the
counters a minute ago (:func:`recorded_rates`), the overview uses those
instead: a full minute from the first view, not a burst extrapolated from
the few seconds this process has watched. Workers that asked this node for work are in
:data:`queueadmin.runtime.seen_workers`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import DatabaseError

from engine import DOCUMENT_KEY, DocumentDecoder
from queueadmin import config, runtime
from queueadmin.dashboard.snapshot import Snapshot, decode_document
from queueadmin.metrics import history

RATE_WINDOW_SECONDS = 60.0
# Below a minute of history a per-minute rate would extrapolate (a one-off
# burst read as a rate); the page says "measuring" until then.
MIN_RATE_SECONDS = RATE_WINDOW_SECONDS
# Callers asking within this long of the last check share its snapshot, so a
# burst of requests (or sockets) costs one check.
FRESH_SECONDS = 0.2


@dataclass(frozen=True, slots=True)
class Rates:
    """Jobs per minute for one queue, over ``seconds`` of history."""

    arrivals: float
    completions: float
    seconds: float


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """This node's broker, as it sees itself."""

    role: str
    id: str
    url: str | None
    last_error: str | None
    last_commit_ms: float | None
    commit_ms_p50: float | None
    commit_ms_max: float | None
    commits: int | None
    mean_batch: float | None
    #: On a standby: the seq its watch last saw the document change to and
    #: the seconds since, on its own monotonic clock (Broker.quiet), and how
    #: often it looks (so it sees a change at most this much late).
    quiet: tuple[int, float] | None = None
    poll_seconds: float = 0.0
    #: On the leader: writes of the document sent a second time because they
    #: were slow, and those the second attempt landed (engine.committer).
    hedged: int = 0
    hedges_landed: int = 0


class SnapshotSource:
    """The latest snapshot plus rate and latency history. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._forget()

    def _forget(self) -> None:
        self._decoder = DocumentDecoder()
        self._snapshot: Snapshot | None = None
        self._checked = 0.0
        # (monotonic time, {queue: (pushed, completed)})
        self._samples: deque[tuple[float, dict[str, tuple[int, int]]]] = deque()
        self._latency_ms: deque[float] = deque(maxlen=100)
        self._latency_seq = -1

    def reset(self) -> None:
        """Forget everything (tests; a settings change)."""
        with self._lock:
            self._forget()

    def changed(self) -> None:
        """The document was just changed from this process (a submit, an
        action): the next :meth:`current` reads it again rather than share a
        snapshot from before the change, which would not show the change
        (a job just submitted would be unknown to its own page)."""
        with self._lock:
            self._checked = 0.0

    def current(self, *, fresh_seconds: float = FRESH_SECONDS) -> Snapshot:
        """The latest committed document. Raises DocumentError for a document
        that cannot be read (DocumentMissing for one this node knew that is
        gone, I10) and StoreError when the store cannot be reached."""
        with self._lock:
            now = time.monotonic()
            cached = self._snapshot
            if cached is not None and now - self._checked < fresh_seconds:
                return cached
            snapshot = self._read(cached)
            self._snapshot = snapshot
            self._checked = now
            self._sample(now, snapshot)
            return snapshot

    def _read(self, cached: Snapshot | None) -> Snapshot:
        broker = runtime.get_broker()
        missing = broker.document_missing
        if missing is not None:
            # I10: the document this node knew is gone. Say so; never show
            # the empty queue a fresh store would have.
            raise missing
        taken_at = datetime.now(UTC)
        committer = broker.committer
        if committer is not None:
            etag, parts = committer.committed
            stats = committer.stats
            if stats.commits and committer.committed_seq != self._latency_seq:
                self._latency_seq = committer.committed_seq
                self._latency_ms.append(stats.last_commit_seconds * 1000)
            if not parts:
                return Snapshot.empty(taken_at=taken_at)
            if cached is not None and etag is not None and cached.etag == etag:
                return cached.at(taken_at)
            return Snapshot.decoded(self._decoder.decode(parts), etag=etag, taken_at=taken_at)
        store = broker.store
        etag = store.etag(DOCUMENT_KEY)
        if etag is None:
            return Snapshot.empty(taken_at=taken_at)
        if cached is not None and cached.etag == etag:
            # Unchanged, but read now: a standby whose leader died must see
            # the last commit grow old, not stay as old as when it was read.
            return cached.at(taken_at)
        blob = store.get(DOCUMENT_KEY)
        if blob is None:
            return Snapshot.empty(taken_at=taken_at)
        return decode_document(blob.data, etag=blob.etag, taken_at=taken_at)

    # -- history -------------------------------------------------------------------

    def _sample(self, now: float, snapshot: Snapshot) -> None:
        counts = {name: (q.pushed, q.completed) for name, q in snapshot.queues.items()}
        self._samples.append((now, counts))
        # Keep one sample older than the window, so a full minute is covered.
        while len(self._samples) > 2 and now - self._samples[1][0] >= RATE_WINDOW_SECONDS:
            self._samples.popleft()

    def rates(self) -> dict[str, Rates]:
        """Per queue: jobs pushed and completed per minute over the last minute
        (from the newest sample at least a minute old); {} with less history."""
        with self._lock:
            if len(self._samples) < 2:
                return {}
            now, latest = self._samples[-1]
            base_time, base = next(
                ((t, c) for t, c in reversed(self._samples) if now - t >= RATE_WINDOW_SECONDS), self._samples[0]
            )
        seconds = now - base_time
        if seconds < MIN_RATE_SECONDS:
            return {}
        result = {}
        for name, (pushed, completed) in latest.items():
            old_pushed, old_completed = base.get(name, (0, 0))
            result[name] = Rates(
                arrivals=max(pushed - old_pushed, 0) * 60 / seconds,
                completions=max(completed - old_completed, 0) * 60 / seconds,
                seconds=seconds,
            )
        return result

    def node(self) -> NodeInfo:
        """This node's role and, on the leader, its commit latency and batching."""
        broker = runtime.get_broker()
        committer = broker.committer
        with self._lock:
            latencies = sorted(self._latency_ms)
        stats = committer.stats if committer is not None else None
        return NodeInfo(
            role=broker.role,
            id=broker.id,
            url=broker.url,
            last_error=broker.last_error,
            last_commit_ms=stats.last_commit_seconds * 1000 if stats and stats.commits else None,
            commit_ms_p50=latencies[len(latencies) // 2] if latencies else None,
            commit_ms_max=latencies[-1] if latencies else None,
            commits=stats.commits if stats else None,
            mean_batch=stats.mean_batch if stats else None,
            quiet=broker.quiet(),
            poll_seconds=broker.poll_seconds,
            hedged=stats.hedged if stats else 0,
            hedges_landed=stats.hedges_landed if stats else 0,
        )


def recorded_rates(snapshot: Snapshot) -> dict[str, Rates]:
    """Per queue of ``snapshot``: jobs pushed and completed per minute since
    the newest point the metrics sampler recorded at least a minute before
    ``snapshot.taken_at`` (and within three samples of that: a queue with
    no such point is left out). One query; {} when the database cannot be
    read (the in-process samples still give a rate)."""
    step = timedelta(seconds=config.metrics_sample_seconds())
    minute_ago = snapshot.taken_at - timedelta(seconds=RATE_WINDOW_SECONDS)
    try:
        base = history.counters_before(list(snapshot.queues), minute_ago, within=history.GAP_STEPS * step)
    except DatabaseError:
        return {}
    rates = {}
    for name, (at, pushed, completed) in base.items():
        q = snapshot.queues[name]
        seconds = (snapshot.taken_at - at).total_seconds()
        # A counter below its recorded value (the store was re-initialised) counts as 0.
        rates[name] = Rates(arrivals=max(q.pushed - pushed, 0) * 60 / seconds,
                            completions=max(q.completed - completed, 0) * 60 / seconds, seconds=seconds)
    return rates


#: The process-wide source every page and socket reads from.
source = SnapshotSource()
