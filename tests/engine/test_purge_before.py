"""A purge bounded by pos (format 2): an operator's dry run of "every
pending job of queue q", run later, removes at most what it counted (I9),
whatever was claimed, pushed, sealed, refilled or merged in between.

Pure transitions on a QueueState: seals, refills and merges are applied
directly, with references the test makes up (no objects are written or read).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engine import Policy, ValidationError, empty_state
from engine.document import QueueState
from engine.model import Job
from engine.ops import Merge, Purge, PurgeOutcome, Refill, Seal, claim_op, fail_op, purge_op, push_op
from engine.segments import SegmentRef
from engine.transitions import apply, apply_batch
from engine.wire import operator_from_json, operator_json

POLICY = Policy(segment_jobs=10, head_jobs=20, refill_below=10)
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def ref_for(key: str, jobs: tuple[tuple[str, int], ...]) -> SegmentRef:
    return SegmentRef(key=key, total=len(jobs), consumed=0, front=jobs[0][1], last_pos=jobs[-1][1], size=1,
                      sha256="x", oldest_enqueued_at=NOW, epoch=1, sealed_at=NOW)


def seal(state: QueueState, key: str, ids: list[str]) -> None:
    jobs = tuple((job_id, state.pos[job_id]) for job_id in ids)
    refs = state.lanes.get("q")
    apply(state, Seal(queue="q", ref=ref_for(key, jobs), jobs=jobs, after=refs[-1].key if refs else None), NOW)


def state_with_segments(pushed: int = 60, sealed: int = 3) -> tuple[QueueState, list[str]]:
    """Queue q with ``pushed`` jobs (pos 0..): the first 20 at the front, then
    ``sealed`` segments of 10, then the rest in the tail."""
    state = empty_state(policy=POLICY)
    apply_batch(state, [], NOW)  # a node with segments on writes format 2
    ids: list[str] = apply(state, push_op("q", list(range(pushed)), policy=POLICY), NOW)
    for n in range(sealed):
        seal(state, f"seg/q/{n}", ids[20 + 10 * n:30 + 10 * n])
    return state, ids


def dry_run(state: QueueState) -> Purge:
    """What the dashboard's dry run sends: the version's next pos."""
    return purge_op(queue="q", status="pending", before_pos=state.next_pos)


def refill(state: QueueState, ids: list[str], count: int) -> None:
    """Move the first segment's next ``count`` jobs back into the document."""
    ref = state.lanes["q"][0]
    start = ref.front
    jobs = tuple((Job(id=ids[pos], queue="q", payload=b"0", status="pending", attempts=0, max_attempts=3,
                      enqueued_at=NOW), pos) for pos in range(start, start + count))
    left = ref.total - ref.consumed - count
    apply(state, Refill(queue="q", key=ref.key, consumed=ref.consumed, jobs=jobs,
                        front=start + count if left else None, oldest=NOW if left else None), NOW)


def test_it_removes_every_pending_job_the_dry_run_saw_in_one_commit() -> None:
    state, ids = state_with_segments()
    outcome = apply(state, dry_run(state), NOW)
    assert isinstance(outcome, PurgeOutcome)
    assert outcome.in_segments == 30 and sorted(outcome.ids) == sorted(ids[:20] + ids[50:])
    assert outcome.count == 60
    assert "q" not in state.lanes and state.pending("q") == 0
    assert state.counters("q").purged == 60 and outcome.kept_whole is None
    assert sorted(state.take_dropped_segments()) == ["seg/q/0", "seg/q/1", "seg/q/2"]


def test_jobs_pushed_and_sealed_after_the_dry_run_stay() -> None:
    state, ids = state_with_segments(pushed=60, sealed=2)  # tail: ids[40:60]
    op = dry_run(state)
    later: list[str] = apply(state, push_op("q", list(range(100, 130)), policy=POLICY), NOW)
    seal(state, "seg/q/old", ids[40:50])  # counted by the dry run (in the document then)
    seal(state, "seg/q/mixed", ids[50:55] + later[:5])  # holds jobs from before and after it
    seal(state, "seg/q/new", later[5:15])
    outcome = apply(state, op, NOW)
    assert outcome.in_segments == 30 and sorted(outcome.ids) == sorted(ids[:20] + ids[55:60])
    # The mixed segment stays, and the one behind it: never more than counted (I9).
    assert [r.key for r in state.lanes["q"]] == ["seg/q/mixed", "seg/q/new"]
    # The outcome names it, as the commit saw it: a refill right after it may use it up.
    assert outcome.kept_whole == "seg/q/mixed"
    assert sorted(j.id for j in state.jobs.values()) == sorted(later[15:])
    assert state.pending("q") == 10 + 10 + 15


def test_a_segment_wholly_after_the_bound_is_not_reported_as_kept_whole() -> None:
    state, ids = state_with_segments(pushed=60, sealed=2)
    op = dry_run(state)
    seal(state, "seg/q/old", ids[40:50])
    seal(state, "seg/q/old2", ids[50:60])
    later: list[str] = apply(state, push_op("q", list(range(100, 110)), policy=POLICY), NOW)
    seal(state, "seg/q/new", later)
    outcome = apply(state, op, NOW)
    assert outcome.count == 60 and outcome.kept_whole is None
    assert [r.key for r in state.lanes["q"]] == ["seg/q/new"]


def test_jobs_refilled_since_the_dry_run_go_and_nothing_is_counted_twice() -> None:
    state, ids = state_with_segments()
    op = dry_run(state)
    refill(state, ids, 4)
    outcome = apply(state, op, NOW)
    assert outcome.count == 60 and outcome.in_segments == 26
    assert set(ids[20:24]) <= set(outcome.ids)
    assert state.pending("q") == 0 and state.counters("q").purged == 60


def test_segments_merged_since_the_dry_run_go_with_their_new_reference() -> None:
    state, ids = state_with_segments()
    op = dry_run(state)
    jobs = tuple((job_id, 20 + i) for i, job_id in enumerate(ids[20:40]))
    apply(state, Merge(queue="q", keys=("seg/q/0", "seg/q/1"), ref=ref_for("seg/q/merged", jobs)), NOW)
    outcome = apply(state, op, NOW)
    assert outcome.count == 60 and outcome.in_segments == 30
    assert "q" not in state.lanes


def test_a_job_claimed_or_retried_since_the_dry_run_is_left_alone() -> None:
    state, _ = state_with_segments()
    op = dry_run(state)
    [running, retried] = apply(state, claim_op("w", ["q"], policy=POLICY, max_jobs=2), NOW + timedelta(seconds=1))
    apply(state, fail_op(retried.id, retried.lease, error="x", retry_in_seconds=None, policy=POLICY), NOW)
    outcome = apply(state, op, NOW)
    assert outcome.count == 58
    assert state.jobs[running.id].status == "running"
    assert state.jobs[retried.id].status == "pending"  # pending again, with a new pos: not counted then


@pytest.mark.parametrize("bad", [
    {"queue": None, "status": "pending", "before_pos": 3},
    {"queue": "q", "status": "dead", "before_pos": 3},
    {"queue": "q", "status": "pending", "before_pos": -1},
    {"queue": "q", "status": "pending", "before_pos": True},
    {"queue": "q", "status": "pending", "before_pos": 3, "job_ids": ["a"]},
])
def test_the_builder_refuses_bad_bounds(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        purge_op(**bad)  # type: ignore[arg-type]


def test_the_wire_keeps_the_bound_under_a_kind_of_its_own() -> None:
    op = purge_op(queue="q", status="pending", before_pos=42)
    sent = operator_json(op)
    assert sent["kind"] == "purge_before"  # a node that does not know it refuses it
    assert operator_from_json(sent, policy=POLICY) == op
