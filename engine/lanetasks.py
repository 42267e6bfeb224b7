"""Format 2: the lane keeper's units of work, and each queue's share of the
document's budget.

A :class:`~engine.lanes.LaneKeeper` plans a task on the committer's thread
(from a version, with a few dictionary lookups per queue) and runs it on one
of its own threads: a :class:`SealTask` writes a queue's tail to a new
segment, a :class:`RefillTask` brings the next jobs of its first segment
back, a :class:`MergeTask` merges a run of small segments, a
:class:`WarmTask` reads id indexes as a tenure starts, and, in format 3, a
:class:`DelayedSealTask` writes delayed jobs due later to a delayed segment
and a :class:`DelayedRefillTask` brings one back as it comes due. :class:`Shares` is one
queue's part of ``head_jobs``, ``segment_jobs`` and ``refill_below`` while
several queues hold pending jobs.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime

import orjson

from engine.document import QueueState
from engine.policy import Policy
from engine.segments import DelayedRef, SegmentRef


@dataclass(frozen=True, slots=True)
class SealTask:
    """Write ``queue``'s jobs (``jobs``: ids and pos; ``parts``: as encoded)
    to a new segment, then commit the Seal that swaps them for it."""

    queue: str
    jobs: tuple[tuple[str, int], ...]
    parts: tuple[bytes, ...]
    after: str | None  # the queue's last segment when planned (unused with ``prev``)
    oldest: datetime
    # Pipelined (see LaneKeeper._busy): the seal this one was planned behind,
    # whose segment is this one's ``after`` once written and which is
    # submitted first.
    prev: SealTask | None = field(default=None, compare=False, repr=False)
    # Set by the keeper's thread: the segment's key once written (before the
    # Seal is submitted), and ``queued`` once the Seal is in the committer's
    # queue or the task gave up.
    key: list[str] = field(default_factory=list, compare=False, repr=False)
    queued: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)

    def after_key(self) -> str | None:
        """The ``after`` its Seal names: the key of ``prev``'s segment, if any."""
        if self.prev is None:
            return self.after
        return self.prev.key[0] if self.prev.key else None

    def can_follow(self, last: str | None) -> bool:
        """Whether it can still land on a version whose queue's last segment is
        ``last``: its ``after`` is that one (``prev`` landed, or it has none)."""
        if self.prev is None:
            return self.after == last
        return bool(self.prev.key) and self.prev.key[0] == last


@dataclass(frozen=True, slots=True)
class RefillTask:
    """Bring up to ``want`` jobs of ``queue``'s first segment ``ref`` back into the document."""

    queue: str
    ref: SegmentRef
    want: int


@dataclass(frozen=True, slots=True)
class MergeTask:
    """Merge the adjacent segments ``refs`` of ``queue`` into one."""

    queue: str
    refs: tuple[SegmentRef, ...]


@dataclass(frozen=True, slots=True)
class WarmTask:
    """Read the id indexes of ``refs`` into the cache, as a tenure starts."""

    refs: tuple[SegmentRef, ...]
    queue: str = ""  # no queue's: _finished frees none


@dataclass(frozen=True, slots=True)
class DelayedSealTask:
    """Write ``queue``'s delayed jobs ``jobs`` (ids and pos, in due order;
    ``parts``: as encoded) to a new delayed segment, then commit the
    SealDelayed that swaps them for it. ``first_due``/``last_due``: the
    earliest and latest ``not_before`` among them."""

    queue: str
    jobs: tuple[tuple[str, int], ...]
    parts: tuple[bytes, ...]
    first_due: datetime
    last_due: datetime


@dataclass(frozen=True, slots=True)
class DelayedRefillTask:
    """Bring the first ``take`` jobs (in due order) of ``queue``'s delayed
    segment ``ref`` back into the document, and the others, if any, into a
    new delayed segment in its place."""

    queue: str
    ref: DelayedRef
    take: int


@dataclass(frozen=True, slots=True)
class DelayedMergeTask:
    """Merge the adjacent (in due order) small delayed segments ``refs`` of ``queue`` into one."""

    queue: str
    refs: tuple[DelayedRef, ...]


Task = SealTask | RefillTask | MergeTask | WarmTask | DelayedSealTask | DelayedRefillTask | DelayedMergeTask


def id_prefix(job_id: str) -> bytes:
    """How an encoded job with id ``job_id`` starts (``encode_job`` writes the id first)."""
    return b'{"id":' + orjson.dumps(job_id) + b","


def last_key(state: QueueState, queue: str) -> str | None:
    """The key of ``queue``'s last segment in ``state``, if it has any."""
    refs = state.lanes.get(queue)
    return refs[-1].key if refs else None


@dataclass(frozen=True, slots=True)
class Shares:
    """One queue's part of the document's budget while ``n`` queues hold pending jobs or segments."""

    head: int
    seal: int
    refill: int

    @classmethod
    def of(cls, policy: Policy, n: int) -> Shares:
        n = max(1, n)
        head = max(policy.head_jobs // n, policy.head_jobs // 10, 1)
        seal = max(policy.segment_jobs // n, policy.segment_jobs // 10, 1)
        refill = max(1, min(head, policy.refill_below * head // policy.head_jobs))
        return cls(head=head, seal=seal, refill=refill)
