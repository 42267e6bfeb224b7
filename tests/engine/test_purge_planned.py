"""A purge of planned segments (format 2): an operator's dry run of "every
pending job of queue q" run later removes at most what it counted (I9).

Pure transitions on a QueueState: seals and refills are applied directly,
with references the test makes up (no objects are written or read).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engine import Policy, ValidationError, empty_state
from engine.document import QueueState
from engine.model import Job
from engine.ops import PlannedSegment, Purge, PurgeOutcome, Refill, Seal, claim_op, purge_op, push_op
from engine.segments import SegmentRef
from engine.transitions import apply, apply_batch
from engine.wire import operator_from_json, operator_json

POLICY = Policy(segment_jobs=10, head_jobs=20, refill_below=10)
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def state_with_segments(pushed: int = 60, sealed: int = 3) -> tuple[QueueState, list[str]]:
    """Queue q with ``pushed`` jobs: the first 20 at the front, then ``sealed``
    segments of 10, then the rest in the tail."""
    state = empty_state(policy=POLICY)
    apply_batch(state, [], NOW)  # upgrades to format 2
    ids: list[str] = apply(state, push_op("q", list(range(pushed)), policy=POLICY), NOW)
    for n in range(sealed):
        chunk = ids[20 + 10 * n:30 + 10 * n]
        jobs = tuple((job_id, state.pos[job_id]) for job_id in chunk)
        ref = SegmentRef(key=f"seg/q/{n}", total=10, consumed=0, front=jobs[0][1], last_pos=jobs[-1][1],
                         size=1, sha256="x", oldest_enqueued_at=NOW, epoch=1, sealed_at=NOW)
        refs = state.lanes.get("q")
        apply(state, Seal(queue="q", ref=ref, jobs=jobs, after=refs[-1].key if refs else None), NOW)
    return state, ids


def dry_run(state: QueueState) -> Purge:
    """What the dashboard's dry run plans: the document's pending ids and every segment."""
    ids = [j.id for j in state.jobs.values() if j.queue == "q" and j.status == "pending"]
    segments = [(r.key, r.front, r.last_pos, r.remaining) for r in state.lanes["q"]]
    return purge_op(ids, expect=["pending"] * len(ids), queue="q", segments=segments)


def refill(state: QueueState, ids: list[str], count: int) -> None:
    """Move the first segment's next ``count`` jobs back into the document."""
    ref = state.lanes["q"][0]
    start = 20 + 10 * int(ref.key.rsplit("/", 1)[1]) + ref.consumed
    chosen = ids[start:start + count]
    jobs = tuple((state_job(state, job_id), ref.front + i) for i, job_id in enumerate(chosen))
    left = ref.total - ref.consumed - count
    apply(state, Refill(queue="q", key=ref.key, consumed=ref.consumed, jobs=jobs,
                        front=ref.front + count if left else None, oldest=NOW if left else None), NOW)


def state_job(state: QueueState, job_id: str) -> Job:
    """A pending job as a segment would hold it (rebuilt: it is not in the document)."""
    return Job(id=job_id, queue="q", payload=b"0", status="pending", attempts=0, max_attempts=3, enqueued_at=NOW)


def test_it_removes_what_the_dry_run_saw_in_one_commit() -> None:
    state, ids = state_with_segments()
    op = dry_run(state)
    outcome = apply(state, op, NOW)
    assert isinstance(outcome, PurgeOutcome)
    assert outcome.in_segments == 30 and sorted(outcome.ids) == sorted(ids[:20] + ids[50:])
    assert outcome.count == 60
    assert "q" not in state.lanes and state.pending("q") == 0
    assert state.counters("q").purged == 60
    assert sorted(state.take_dropped_segments()) == ["seg/q/0", "seg/q/1", "seg/q/2"]


def test_segments_sealed_and_jobs_pushed_after_the_dry_run_stay() -> None:
    state, ids = state_with_segments(pushed=60, sealed=2)  # tail: ids[40:60]
    op = dry_run(state)
    later: list[str] = apply(state, push_op("q", list(range(100, 110)), policy=POLICY), NOW)
    # The tail's oldest ten (in the dry run, as document ids) are sealed after it.
    chunk = ids[40:50]
    jobs = tuple((job_id, state.pos[job_id]) for job_id in chunk)
    apply(state, Seal(queue="q", ref=SegmentRef(key="seg/q/new", total=10, consumed=0, front=jobs[0][1],
                                                   last_pos=jobs[-1][1], size=1, sha256="x",
                                                   oldest_enqueued_at=NOW, epoch=1, sealed_at=NOW),
                      jobs=jobs, after="seg/q/1"), NOW)
    outcome = apply(state, op, NOW)
    assert outcome.in_segments == 20 and sorted(outcome.ids) == sorted(ids[:20] + ids[50:60])
    assert [r.key for r in state.lanes["q"]] == ["seg/q/new"]  # fewer than planned: never more (I9)
    assert sorted(j.id for j in state.jobs.values()) == sorted(later)
    assert state.pending("q") == 20


def test_jobs_refilled_since_the_dry_run_go_and_nothing_is_counted_twice() -> None:
    state, ids = state_with_segments()
    op = dry_run(state)
    refill(state, ids, 4)  # 4 of the first segment's jobs come back into the document
    outcome = apply(state, op, NOW)
    assert outcome.count == 60 and outcome.in_segments == 26
    assert set(ids[20:24]) <= set(outcome.ids)
    assert state.pending("q") == 0 and state.counters("q").purged == 60


def test_a_segment_used_up_since_the_dry_run_is_not_dropped_twice() -> None:
    state, ids = state_with_segments()
    op = dry_run(state)
    refill(state, ids, 10)  # the first segment is used up: its reference goes
    outcome = apply(state, op, NOW)
    assert outcome.count == 60 and outcome.in_segments == 20
    assert state.pending("q") == 0


def test_a_planned_reference_holding_more_than_planned_is_left_alone() -> None:
    state, _ = state_with_segments()
    op = dry_run(state)
    smaller = tuple(s._replace(remaining=s.remaining - 1) if s.key == "seg/q/0" else s for s in op.segments)
    outcome = apply(state, Purge(job_ids=op.job_ids, expect=op.expect, queue="q", segments=smaller), NOW)
    # It leads the queue's segments: the ones behind it stay too (order is kept).
    assert outcome.in_segments == 0 and len(state.lanes["q"]) == 3


def test_a_job_claimed_since_the_dry_run_is_left_alone() -> None:
    state, _ = state_with_segments()
    op = dry_run(state)
    [claimed] = apply(state, claim_op("w", ["q"], policy=POLICY), NOW + timedelta(seconds=1))
    outcome = apply(state, op, NOW)
    assert claimed.id not in outcome.ids and outcome.count == 59
    assert state.jobs[claimed.id].status == "running"


@pytest.mark.parametrize("bad", [
    {"queue": None, "segments": [("k", 0, 1, 1)]},
    {"queue": "q", "status": "dead", "segments": [("k", 0, 1, 1)]},
    {"queue": "q", "segments": [("k", 2, 1, 1)]},
    {"queue": "q", "segments": [("", 0, 1, 1)]},
    {"queue": "q", "segments": [("k", 0, 1)]},
    {"queue": "q", "segments": [("k", 0, 1, True)]},
    {"queue": "q", "segments": []},
])
def test_the_builder_refuses_bad_plans(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        purge_op([], expect=[], **bad)  # type: ignore[arg-type]


def test_the_builder_accepts_a_queue_with_only_segments_and_the_wire_keeps_it() -> None:
    op = purge_op([], expect=[], queue="q", segments=[["seg/q/0", 20, 29, 10]])
    assert op.segments == (PlannedSegment("seg/q/0", 20, 29, 10),)
    assert operator_from_json(operator_json(op), policy=POLICY) == op
