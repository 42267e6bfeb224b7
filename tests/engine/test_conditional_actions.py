"""Conditional requeue and purge (``expect``): an operator's dry run names the
jobs it showed and the status each was in, and the run acts only on those
still in that status when it commits (I9). Everything else is skipped, not
refused, and the outcome lists exactly the ids acted on.
"""

from __future__ import annotations

import pytest

from engine import transitions
from engine.errors import ValidationError
from engine.ops import purge_op, requeue_op
from tests.engine.transitions.builders import T0, at, claim_one, kill, new_state, push


def test_conditional_purge_skips_jobs_that_changed_status_or_left() -> None:
    state = new_state(max_attempts=1)
    a, b, c, d = push(state, "q", [1, 2, 3, 4])
    for job_id in (a, b, c):
        kill(state, job_id)
    transitions.requeue(state, requeue_op([b]), at(1))  # b is pending again
    transitions.purge(state, purge_op([c]), at(1))  # c is gone

    op = purge_op([a, b, c, d], expect=["dead", "dead", "dead", "running"])  # d is pending
    removed = transitions.purge(state, op, at(2))

    assert removed == [a]
    assert a not in state.dead and b in state.jobs and d in state.jobs
    assert state.counters("q").purged == 2  # c before, a now


def test_conditional_purge_never_removes_a_job_that_was_claimed_since() -> None:
    state = new_state()
    [a, b] = push(state, "q", [1, 2])
    claimed = claim_one(state, now=at(1))
    assert claimed.id == a

    assert transitions.purge(state, purge_op([a, b], expect=["pending", "pending"]), at(2)) == [b]
    assert state.jobs[a].status == "running"


def test_conditional_requeue_skips_jobs_that_changed_status() -> None:
    state = new_state(max_attempts=1)
    [a, b, c] = push(state, "q", [1, 2, 3])
    kill(state, a)
    kill(state, b)
    transitions.requeue(state, requeue_op([b]), at(1))
    running = claim_one(state, now=at(2))  # c, the first pending job
    assert running.id == c

    moved = transitions.requeue(state, requeue_op([a, b, c], expect=["dead", "dead", "dead"]), at(3))

    assert moved == [a]
    assert state.jobs[a].status == "pending" and state.jobs[c].status == "running"
    assert state.jobs[c].lease is not None and state.jobs[c].lease.token == running.lease


def test_conditional_operations_that_match_nothing_change_nothing() -> None:
    state = new_state()
    [a] = push(state, "q", [1], now=T0)
    state.dirty = False
    assert transitions.purge(state, purge_op(["gone"], expect=["dead"]), at(1)) == []
    assert transitions.requeue(state, requeue_op([a], expect=["running"]), at(1)) == []
    assert not state.dirty and list(state.jobs) == [a]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: requeue_op(["a", "b"], expect=["dead"]), "one status per job id"),
        (lambda: requeue_op(["a"], expect=["pending"]), "expected status"),
        (lambda: purge_op(["a"], expect=["done"]), "expected status"),
        (lambda: purge_op(["a", "a"], expect=["dead", "running"]), "two statuses"),
        (lambda: purge_op(queue="q", status="dead", expect=["dead"]), "job ids"),
        (lambda: purge_op(["../x"], expect=["dead"]), "job id"),
    ],
)
def test_bad_expectations_are_refused_by_the_builders(build: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        build()  # type: ignore[operator]


def test_repeated_ids_with_the_same_expectation_are_merged() -> None:
    op = purge_op(["a", "b", "a"], expect=["dead", "pending", "dead"])
    assert (op.job_ids, op.expect) == (("a", "b"), ("dead", "pending"))
