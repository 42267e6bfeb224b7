"""Pre-built documents holding ``depth`` pending jobs, written before a run.

Each system gets a document in its own format, built with its own code: the
engine's through :func:`engine.transitions.push` and ``QueueState.encode``,
jqueue's through its Pydantic models and ``jqueue.core.codec``. Building is
not measured; the bytes are written straight into the bare MemoryStore.
"""

from __future__ import annotations

from collections.abc import Sequence

from jqueue.core import codec as jqueue_codec  # type: ignore[import-untyped]
from jqueue.domain.models import Job as JQueueJob  # type: ignore[import-untyped]
from jqueue.domain.models import QueueState as JQueueState

from bench.config import QUEUE, payload, payload_bytes
from engine import Policy, QueueState, utc_now
from engine.ops import push_op
from engine.transitions import push

SEED_BATCH = 1_000
SEED_WRITER = "bench:seed"


def engine_document(depth: int, *, policy: Policy | None = None) -> bytes | None:
    """The engine's format-1 document with ``depth`` pending jobs in queue
    ``bench`` (``None`` for depth 0: no document exists yet)."""
    if depth <= 0:
        return None
    policy = policy or Policy()
    state = QueueState(policy=policy)
    now = utc_now()
    for start in range(0, depth, SEED_BATCH):
        payloads = [payload(n) for n in range(start, min(start + SEED_BATCH, depth))]
        push(state, push_op(QUEUE, payloads, policy=policy), now)
    encoded: bytes | Sequence[bytes] = state.encode(seq=1, writer=SEED_WRITER, now=now)
    # QueueState.encode returns the document as bytes or as a list of pieces.
    return encoded if isinstance(encoded, bytes) else b"".join(encoded)


def jqueue_document(depth: int) -> bytes | None:
    """jqueue 1.0's document with ``depth`` queued jobs for entrypoint ``bench``
    (``None`` for depth 0)."""
    if depth <= 0:
        return None
    jobs = tuple(JQueueJob.new(QUEUE, payload_bytes(n)) for n in range(depth))
    data: bytes = jqueue_codec.encode(JQueueState(jobs=jobs, version=depth))
    return data


class Seeds:
    """Both documents for one depth, built on first use and kept for the
    runs at that depth (each run still gets a fresh store)."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self._engine: bytes | None = None
        self._jqueue: bytes | None = None
        self._built: set[str] = set()

    def engine(self) -> bytes | None:
        if "engine" not in self._built:
            self._engine = engine_document(self.depth)
            self._built.add("engine")
        return self._engine

    def jqueue(self) -> bytes | None:
        if "jqueue" not in self._built:
            self._jqueue = jqueue_document(self.depth)
            self._built.add("jqueue")
        return self._jqueue
