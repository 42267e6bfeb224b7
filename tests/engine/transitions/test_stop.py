"""Pure transition tests (engine.transitions): an operator stops running jobs.

A stopped job goes to the dead letters at once, kept (for inspection and a
redrive), whatever attempts it had left; its lease is revoked, so its worker
is told and its late result is refused.
"""

from __future__ import annotations

import pytest

from engine import transitions
from engine.errors import JobNotFound, LeaseLost, ValidationError
from engine.lifecycle import STOPPED_ERROR
from engine.ops import Expire, stop_op
from engine.wire.requests import operator_from_json, operator_json
from tests.engine.transitions.builders import (
    at,
    claim_ids,
    claim_one,
    complete,
    counters,
    fail,
    heartbeat,
    new_state,
    push,
    requeue,
    zero_counters,
)


def test_a_stopped_job_goes_to_the_dead_letters_at_once_and_its_lease_is_revoked() -> None:
    state = new_state(max_attempts=5)
    [a, b] = push(state, "q", [1, 2])
    c = claim_one(state)
    assert c.id == a

    assert transitions.apply(state, stop_op([a]), at(2)) == [a]

    assert a not in state.jobs and list(state.jobs) == [b]
    dead = state.dead[a]
    assert (dead.error, dead.attempts, dead.max_attempts, dead.payload) == (STOPPED_ERROR, 1, 5, b"1")
    assert dead.died_at == at(2)
    # The attempt is recorded as failed (an attempt's ends are a format: no new one), with why.
    assert (dead.history[-1].end, dead.history[-1].error, dead.history[-1].worker) == ("failed", STOPPED_ERROR, "w1")
    assert state.revocation_landed(c.lease) is False  # noted, answered once the write lands
    assert c.lease in state.revoked_leases
    with pytest.raises(LeaseLost):
        heartbeat(state, a, c.lease, now=at(3))
    with pytest.raises(LeaseLost):
        complete(state, a, c.lease)
    with pytest.raises(LeaseLost):
        fail(state, a, c.lease)
    assert transitions.apply(state, Expire(), at(1000)) == []  # its old lease expires nothing
    assert counters(state) == zero_counters(pushed=2, failed=1, dead=1)
    # Kept: a redrive runs it again from zero attempts.
    assert requeue(state, [a], now=at(4)) == [a]
    assert claim_ids(state, now=at(5)) == [b, a]


def test_a_stop_is_all_or_nothing_unless_conditional() -> None:
    state = new_state()
    [_, b, c] = push(state, "q", [1, 2, 3])
    running = claim_one(state)
    before = dict(state.jobs)
    with pytest.raises(ValidationError, match="is pending: only a running job can be stopped"):
        transitions.apply(state, stop_op([running.id, b]), at(1))
    with pytest.raises(JobNotFound):
        transitions.apply(state, stop_op([running.id, "nope"]), at(1))
    assert state.jobs == before and not state.dead  # refused: nothing changed

    # A dry run's conditional stop skips what is no longer running.
    assert transitions.apply(state, stop_op([running.id, b], expect=["running", "running"]), at(1)) == [running.id]
    with pytest.raises(ValidationError, match="is dead: only a running job can be stopped"):
        transitions.apply(state, stop_op([running.id]), at(2))
    assert list(state.jobs) == [b, c]


def test_a_stop_needs_running_jobs_named_and_crosses_the_wire_as_it_was() -> None:
    with pytest.raises(ValidationError, match="at least one job id"):
        stop_op([])
    with pytest.raises(ValidationError, match="expected status must be one of running"):
        stop_op(["a"], expect=["dead"])
    op = stop_op(["a", "b", "a"], expect=["running", "running", "running"])
    assert op.job_ids == ("a", "b")
    assert operator_from_json(operator_json(op), policy=new_state().policy) == op
