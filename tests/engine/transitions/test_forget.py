"""Pure transition tests (engine.transitions): forgetting an empty queue.

A queue's entry (its counters and paused flag) stays in the document after
its last job leaves. ``forget_queue`` removes it, but only while the queue
holds no job at all (pending, running or dead), checked as the operation
applies: a job pushed after an operator's dry run makes it fail, changing
nothing. The builders and the test clock are in builders.py.
"""

from __future__ import annotations

import pytest

from engine import transitions
from engine.errors import ValidationError
from engine.ops import Expire, forget_op, pause_op, push_op
from tests.engine.transitions.builders import (
    at,
    claim_one,
    complete,
    kill,
    new_state,
    purge,
    push,
    snapshot,
)


def test_forgetting_a_drained_queue_removes_its_counters_and_flag() -> None:
    state = new_state()
    [job_id] = push(state, "q", [1])
    push(state, "other", [2])
    c = claim_one(state, "q")
    complete(state, c.id, c.lease)
    transitions.set_paused(state, pause_op("q"), at(0))
    assert job_id not in state.jobs and "q" in state.queues
    state.dirty = False

    assert transitions.forget_queue(state, forget_op("q"), at(1)) is True

    assert "q" not in state.queues and "other" in state.queues
    assert state.dirty, "a forgotten queue must reach the next commit"
    assert b'"q":' not in snapshot(state)


def test_a_later_push_starts_the_queue_again_from_zero() -> None:
    state = new_state()
    push(state, "q", [1])
    c = claim_one(state, "q")
    complete(state, c.id, c.lease)
    transitions.forget_queue(state, forget_op("q"), at(1))

    push(state, "q", [2], now=at(2))

    assert state.queues["q"].pushed == 1 and state.queues["q"].completed == 0


@pytest.mark.parametrize("status", ["pending", "running", "dead"])
def test_a_queue_holding_any_job_is_refused_and_nothing_changes(status: str) -> None:
    state = new_state(max_attempts=1)
    push(state, "other", [0])
    [job_id] = push(state, "q", [1])
    if status == "running":
        claim_one(state, "q")
    elif status == "dead":
        kill(state, job_id)
    before = snapshot(state)
    state.dirty = False

    with pytest.raises(ValidationError, match=r"queue 'q' is not empty: it holds 1 job \(pending, running or dead\)"):
        transitions.apply(state, forget_op("q"), at(1))

    assert snapshot(state) == before and not state.dirty
    assert "q" in state.queues


def test_a_push_in_the_same_batch_before_the_forget_makes_it_fail() -> None:
    """The emptiness check is made as the operation applies, not when it was planned."""
    state = new_state()
    push(state, "q", [1])
    c = claim_one(state, "q")
    complete(state, c.id, c.lease)
    late = push_op("q", [2], policy=state.policy)
    pushed, refused = transitions.apply_batch(state, [late, forget_op("q")], at(1))

    assert isinstance(refused, ValidationError)
    assert pushed == [late.jobs[0].id] and "q" in state.queues and late.jobs[0].id in state.jobs


def test_an_unknown_or_already_forgotten_queue_answers_false() -> None:
    state = new_state()
    state.dirty = False
    assert transitions.forget_queue(state, forget_op("never"), at(0)) is False
    assert not state.dirty, "forgetting nothing must not cause a write"


def test_a_purged_queue_can_be_forgotten_but_its_counts_go_with_it() -> None:
    state = new_state()
    push(state, "q", [1, 2])
    purge(state, queue="q", status="pending")
    transitions.apply(state, Expire(), at(1))
    assert transitions.forget_queue(state, forget_op("q"), at(1)) is True
    assert "q" not in state.queues


def test_forget_op_checks_the_queue_name() -> None:
    with pytest.raises(ValidationError, match="invalid queue name"):
        forget_op("no spaces")
