"""Pure transition tests (engine.transitions): an operator's "Run now" makes
delayed pending jobs due at once.

A delayed job (a delayed push, a retry waiting out its backoff) keeps its
place while it waits; made due, it is claimed in that FIFO turn, as if its
delay had run out now (I7). A job already due is left as it is.
"""

from __future__ import annotations

import pytest

from engine import transitions
from engine.errors import JobNotFound, ValidationError
from engine.ops import claim_op, make_due_op
from engine.parsing import parse_document
from engine.wire.requests import operator_from_json, operator_json
from tests.engine.transitions.builders import at, claim_ids, claim_one, fail, new_state, push, snapshot


def test_a_retry_in_backoff_made_due_is_claimed_at_once_in_its_place() -> None:
    state = new_state(max_attempts=5)
    [a] = push(state, "q", [1])
    c = claim_one(state)
    fail(state, a, c.lease, retry_in_seconds=3600, now=at(1))  # to the back, due in an hour
    [b] = push(state, "q", [2], now=at(2))
    assert state.jobs[a].not_before == at(3601)
    assert claim_ids(state, now=at(3)) == [b]  # only b is due

    assert transitions.apply(state, make_due_op([a]), at(4)) == [a]

    job = state.jobs[a]
    assert (job.status, job.not_before, job.attempts, job.last_error) == ("pending", None, 1, "boom")
    assert claim_ids(state, now=at(4)) == [a]


def test_it_keeps_each_jobs_fifo_place_and_leaves_due_jobs_as_they_are() -> None:
    state = new_state()
    [a] = push(state, "q", [1])
    [d] = push(state, "q", [2], delay_seconds=600)
    [b, c] = push(state, "q", [3, 4])
    order = list(state.pos.items())

    # a is due already: not made due, not moved; d keeps its pos, between a and b.
    assert transitions.apply(state, make_due_op([a, d]), at(1)) == [d]
    assert list(state.pos.items()) == order
    assert claim_ids(state, now=at(1)) == [a, d, b, c]


def test_a_job_whose_delay_ran_out_already_is_left_as_it_is() -> None:
    state = new_state()
    [d] = push(state, "q", [1], delay_seconds=5)
    before = snapshot(state)
    assert transitions.apply(state, make_due_op([d]), at(5)) == []  # due at 5 exactly
    assert snapshot(state) == before


def test_run_now_is_all_or_nothing_unless_conditional() -> None:
    state = new_state(max_attempts=1)
    [a] = push(state, "q", [1])
    [b] = push(state, "q", [2], delay_seconds=60)
    running = claim_one(state)
    assert running.id == a
    before = snapshot(state)
    with pytest.raises(ValidationError, match="is running: only a pending job can be made due"):
        transitions.apply(state, make_due_op([b, a]), at(1))
    with pytest.raises(JobNotFound):
        transitions.apply(state, make_due_op([b, "nope"]), at(1))
    assert snapshot(state) == before  # refused: nothing changed
    fail(state, a, running.lease, now=at(1))  # its one attempt: dead
    with pytest.raises(ValidationError, match="is dead: only a pending job can be made due"):
        transitions.apply(state, make_due_op([b, a]), at(2))
    assert state.jobs[b].not_before == at(60)

    # A dry run's conditional run skips what is no longer pending.
    state2 = new_state()
    [x, y] = push(state2, "q", [1, 2], delay_seconds=60)
    claimed = claim_ids(state2, now=at(60))
    assert claimed == [x, y]
    [z] = push(state2, "q", [3], delay_seconds=60, now=at(60))
    assert transitions.apply(state2, make_due_op([x, z], expect=["pending", "pending"]), at(61)) == [z]
    assert state2.jobs[z].not_before is None


def test_run_now_needs_job_ids_and_crosses_the_operator_wire_as_it_was() -> None:
    with pytest.raises(ValidationError, match="at least one job id"):
        make_due_op([])
    with pytest.raises(ValidationError, match="expected status must be one of pending"):
        make_due_op(["a"], expect=["dead"])
    op = make_due_op(["a", "b", "a"], expect=["pending", "pending", "pending"])
    assert op.job_ids == ("a", "b")
    assert operator_from_json(operator_json(op), policy=new_state().policy) == op
    assert operator_json(make_due_op(["a"]))["kind"] == "make_due"


def test_a_job_made_due_is_written_due_and_read_back_so() -> None:
    state = new_state()
    [d] = push(state, "q", [1], delay_seconds=600)
    transitions.apply(state, make_due_op([d]), at(1))
    again = parse_document("queue.json", snapshot(state), policy=state.policy)
    assert again.jobs[d].not_before is None
    assert [c.id for c in transitions.claim(again, claim_op("w", "q", policy=again.policy), at(1))] == [d]
