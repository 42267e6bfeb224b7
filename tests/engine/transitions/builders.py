"""Builders shared by the transition tests: a fixed clock and one-line
wrappers that make an operation and apply it to a ``QueueState``.

Every transition gets ``now`` as a timezone-aware datetime (``at(seconds)``
is ``T0`` plus that many seconds), so lease expiry, backoff and delays are exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from engine import transitions
from engine.document import QueueState
from engine.model import ClaimedJob, FailOutcome
from engine.ops import (
    claim_op,
    complete_op,
    fail_op,
    heartbeat_op,
    purge_op,
    push_op,
    requeue_op,
)
from engine.parsing import empty_state
from engine.policy import MAX_CLAIM_JOBS, Policy

T0 = datetime(2025, 3, 1, 9, 30, tzinfo=UTC)


# -- helpers ------------------------------------------------------------------------------------------


def at(seconds: float) -> datetime:
    """The test clock: T0 plus ``seconds``."""
    return T0 + timedelta(seconds=seconds)


def new_state(**policy: Any) -> QueueState:
    return empty_state(policy=Policy(**policy))


def push(state: QueueState, queue: str, payloads: Sequence[Any], *, now: datetime = T0, **kwargs: Any) -> list[str]:
    return transitions.push(state, push_op(queue, list(payloads), policy=state.policy, **kwargs), now)


def claim(
    state: QueueState,
    queues: str | Sequence[str] = "q",
    *,
    now: datetime = T0,
    worker: str = "w1",
    max_jobs: int = 1,
    lease_seconds: float | None = None,
    in_order: bool = False,
) -> list[ClaimedJob]:
    op = claim_op(worker, queues, policy=state.policy, max_jobs=max_jobs, lease_seconds=lease_seconds,
                  in_order=in_order)
    return transitions.claim(state, op, now)


def claim_one(state: QueueState, queues: str | Sequence[str] = "q", **kwargs: Any) -> ClaimedJob:
    claimed = claim(state, queues, **kwargs)
    assert len(claimed) == 1, claimed
    return claimed[0]


def claim_ids(state: QueueState, queues: str | Sequence[str] = "q", *, now: datetime = T0) -> list[str]:
    """Claim everything claimable and return the ids in the order handed out."""
    return [c.id for c in claim(state, queues, now=now, max_jobs=MAX_CLAIM_JOBS)]


def heartbeat(
    state: QueueState, job_id: str, lease: str, *, now: datetime, lease_seconds: float | None = None
) -> datetime:
    return transitions.heartbeat(state, heartbeat_op(job_id, lease, lease_seconds=lease_seconds), now)


def complete(state: QueueState, job_id: str, lease: str, *, now: datetime = T0) -> None:
    transitions.complete(state, complete_op(job_id, lease), now)


def fail(
    state: QueueState,
    job_id: str,
    lease: str,
    *,
    now: datetime = T0,
    error: str = "boom",
    retry_in_seconds: float | None = None,
) -> FailOutcome:
    op = fail_op(job_id, lease, error=error, retry_in_seconds=retry_in_seconds, policy=state.policy)
    return transitions.fail(state, op, now)


def requeue(state: QueueState, job_ids: Sequence[str], *, now: datetime = T0) -> list[str]:
    return transitions.requeue(state, requeue_op(list(job_ids)), now)


def purge(
    state: QueueState,
    job_ids: Sequence[str] | None = None,
    *,
    queue: str | None = None,
    status: str | None = None,
    now: datetime = T0,
) -> list[str]:
    op = purge_op(None if job_ids is None else list(job_ids), queue=queue, status=status)
    return transitions.purge(state, op, now)


def kill(state: QueueState, job_id: str, *, now: datetime = T0, error: str = "fatal") -> None:
    """Fail ``job_id`` until it reaches the dead letters. It must be the next claimable job of its queue,
    and, if it has more than one attempt, the only one."""
    job = state.jobs[job_id]
    for _ in range(job.max_attempts - job.attempts):
        c = claim_one(state, job.queue, now=now)
        assert c.id == job_id
        fail(state, c.id, c.lease, now=now, error=error, retry_in_seconds=0)
    assert job_id in state.dead


def snapshot(state: QueueState) -> bytes:
    """The document bytes with a fixed seq, writer and time, so two snapshots compare the state alone."""
    return b"".join(state.encode(seq=77, writer="test-writer", now=T0))


def pending_ids(state: QueueState) -> list[str]:
    return [j.id for j in state.jobs.values() if j.status == "pending"]


def counters(state: QueueState, queue: str = "q") -> dict[str, int]:
    c = state.queues[queue]
    return {
        "pushed": c.pushed,
        "completed": c.completed,
        "failed": c.failed,
        "dead": c.dead,
        "purged": c.purged,
        "dead_dropped": c.dead_dropped,
    }


def zero_counters(**changes: int) -> dict[str, int]:
    base = dict.fromkeys(("pushed", "completed", "failed", "dead", "purged", "dead_dropped"), 0)
    base.update(changes)
    return base
