"""Pure transition tests (engine.transitions). Complete and fail: finishing a job, retries with
backoff, dead letters. The builders and the test clock are in builders.py.
"""

from __future__ import annotations

import dataclasses

import pytest

from engine import transitions
from engine.errors import (
    JobNotFound,
    LeaseLost,
)
from engine.model import FailOutcome
from engine.ops import complete_op, fail_op, heartbeat_op, push_op, requeue_op, scoped
from engine.policy import Policy
from tests.engine.transitions.builders import (
    T0,
    at,
    claim,
    claim_ids,
    claim_one,
    complete,
    counters,
    fail,
    heartbeat,
    new_state,
    push,
    snapshot,
    zero_counters,
)

# -- complete --------------------------------------------------------------------------------------------


def test_complete_removes_the_job_and_counts_it() -> None:
    state = new_state()
    [a, b] = push(state, "q", [1, 2])
    c = claim_one(state)

    complete(state, c.id, c.lease, now=at(1))

    assert c.id == a
    assert list(state.jobs) == [b]
    assert c.id not in state.dead
    assert counters(state) == zero_counters(pushed=2, completed=1)


def test_complete_with_wrong_lease_is_lease_lost_and_job_untouched() -> None:
    state = new_state()
    push(state, "q", [1])
    c = claim_one(state)
    state.encoded(seq=1, writer="w")
    before_job = state.jobs[c.id]
    before = snapshot(state)

    with pytest.raises(LeaseLost):
        complete(state, c.id, "wrong-token")

    assert state.jobs[c.id] is before_job
    assert snapshot(state) == before
    assert state.dirty is False
    assert counters(state)["completed"] == 0


def test_complete_twice_is_job_not_found() -> None:
    state = new_state()
    push(state, "q", [1])
    c = claim_one(state)
    complete(state, c.id, c.lease)

    with pytest.raises(JobNotFound):
        complete(state, c.id, c.lease)

    assert counters(state)["completed"] == 1


def test_complete_of_a_pending_job_is_lease_lost() -> None:
    state = new_state()
    [job_id] = push(state, "q", [1])

    with pytest.raises(LeaseLost):
        complete(state, job_id, "token")

    assert job_id in state.jobs


def test_complete_of_a_dead_job_is_lease_lost() -> None:
    state = new_state(max_attempts=1)
    push(state, "q", [1])
    c = claim_one(state)
    fail(state, c.id, c.lease)

    with pytest.raises(LeaseLost, match="dead letters"):
        complete(state, c.id, c.lease)

    assert c.id in state.dead


@pytest.mark.parametrize("status", ["running", "pending", "dead"])
def test_a_lease_call_confined_to_other_queues_finds_no_job(status: str) -> None:
    """``engine.ops.scoped``: a job of a queue the scope rejects is not found,
    with its own lease or a wrong one, whatever its status, and is left as it
    was; the same job in scope is acted on."""
    state = new_state(max_attempts=1)
    push(state, "mail", [1])
    c = claim_one(state, "mail")
    if status == "pending":
        transitions.requeue(state, requeue_op([c.id]), T0)
    elif status == "dead":
        fail(state, c.id, c.lease)
    before = snapshot(state)
    elsewhere, here = (lambda queue: queue == "billing"), (lambda queue: queue == "mail")
    lease_calls = [heartbeat_op(c.id, c.lease), complete_op(c.id, c.lease),
                   fail_op(c.id, c.lease, error="e", retry_in_seconds=None, policy=Policy())]

    for op in lease_calls:
        for lease in (c.lease, "wrong"):
            with pytest.raises(JobNotFound):
                transitions.apply(state, scoped(dataclasses.replace(op, lease=lease), elsewhere), at(1))
    assert snapshot(state) == before
    if status == "running":
        transitions.apply(state, scoped(complete_op(c.id, c.lease), here), at(1))
        assert c.id not in state.jobs
    else:
        with pytest.raises(LeaseLost):  # in scope, the job's own state is told
            transitions.apply(state, scoped(complete_op(c.id, c.lease), here), at(1))


def test_scoped_leaves_every_other_operation_as_it_is() -> None:
    op = push_op("q", [1], policy=Policy())
    assert scoped(op, lambda queue: False) is op
    assert scoped(complete_op("a", "b"), None) == complete_op("a", "b")


# -- fail ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempt", "expected_delay"),
    [(1, 2.0), (2, 4.0), (3, 8.0), (4, 10.0), (5, 10.0), (50, 10.0)],
)
def test_fail_retries_with_exponential_backoff_capped(attempt: int, expected_delay: float) -> None:
    state = new_state(max_attempts=100, backoff_base_seconds=2, backoff_cap_seconds=10)
    push(state, "q", [1])
    for i in range(attempt - 1):  # earlier attempts fail with no delay, so the job is claimable again
        c = claim_one(state, now=at(i))
        fail(state, c.id, c.lease, now=at(i), retry_in_seconds=0)
    c = claim_one(state, now=at(1000))
    assert c.attempt == attempt

    outcome = fail(state, c.id, c.lease, now=at(1000))

    assert outcome == FailOutcome(status="pending", not_before=at(1000 + expected_delay))
    job = state.jobs[c.id]
    assert (job.status, job.lease, job.attempts) == ("pending", None, attempt)
    assert job.not_before == at(1000 + expected_delay)


@pytest.mark.parametrize(
    ("attempts", "expected"), [(0, 1.0), (1, 1.0), (2, 2.0), (3, 4.0), (9, 256.0), (10, 300.0), (10_000, 300.0)]
)
def test_policy_backoff_doubles_from_base_up_to_cap(attempts: int, expected: float) -> None:
    assert Policy().backoff(attempts) == expected


def test_failed_job_with_backoff_is_not_claimable_before_its_not_before() -> None:
    state = new_state(backoff_base_seconds=3)
    push(state, "q", [1])
    c = claim_one(state)
    fail(state, c.id, c.lease)

    assert claim(state, now=at(2.9)) == []


def test_failed_job_with_backoff_is_claimable_after_its_not_before() -> None:
    state = new_state(backoff_base_seconds=3)
    push(state, "q", [1])
    c = claim_one(state)
    fail(state, c.id, c.lease)

    again = claim(state, now=at(3))

    assert [(j.id, j.attempt) for j in again] == [(c.id, 2)]


def test_fail_with_explicit_retry_in_seconds_sets_not_before() -> None:
    state = new_state(backoff_base_seconds=100, backoff_cap_seconds=100)
    push(state, "q", [1])
    c = claim_one(state)

    outcome = fail(state, c.id, c.lease, now=at(1), retry_in_seconds=7.5)

    assert outcome == FailOutcome(status="pending", not_before=at(8.5))
    assert state.jobs[c.id].not_before == at(8.5)


def test_fail_with_zero_retry_makes_the_job_claimable_at_once() -> None:
    state = new_state(backoff_base_seconds=100, backoff_cap_seconds=100)
    push(state, "q", [1])
    c = claim_one(state)

    outcome = fail(state, c.id, c.lease, retry_in_seconds=0)

    assert outcome == FailOutcome(status="pending", not_before=None)
    assert claim_ids(state) == [c.id]


def test_fail_retry_goes_to_the_back_behind_jobs_pushed_after_it() -> None:
    state = new_state()
    [a] = push(state, "q", [1])
    c = claim_one(state)
    [b, cc] = push(state, "q", [2, 3], now=at(1))

    fail(state, c.id, c.lease, now=at(2), retry_in_seconds=0)

    assert list(state.jobs) == [b, cc, a]
    assert claim_ids(state, now=at(3)) == [b, cc, a]


def test_fail_keeps_last_error_and_counts_failed() -> None:
    state = new_state(max_attempts=5)
    push(state, "q", [1])
    c = claim_one(state)

    fail(state, c.id, c.lease, error="Traceback: ValueError", retry_in_seconds=0)

    assert state.jobs[c.id].last_error == "Traceback: ValueError"
    assert counters(state) == zero_counters(pushed=1, failed=1)
    c2 = claim_one(state, now=at(1))
    assert state.jobs[c2.id].last_error == "Traceback: ValueError"  # kept while running again
    fail(state, c2.id, c2.lease, error="second", retry_in_seconds=0)
    assert state.jobs[c2.id].last_error == "second"
    assert counters(state)["failed"] == 2


def test_fail_with_stale_lease_is_lease_lost_and_counts_nothing() -> None:
    state = new_state()
    push(state, "q", [1])
    c = claim_one(state)

    with pytest.raises(LeaseLost):
        fail(state, c.id, "stale")

    assert state.jobs[c.id].status == "running"
    assert counters(state)["failed"] == 0


def test_fail_of_unknown_job_is_job_not_found() -> None:
    state = new_state()

    with pytest.raises(JobNotFound):
        fail(state, "ghost", "token")


def test_fail_at_max_attempts_moves_the_job_to_dead_letters() -> None:
    state = new_state(max_attempts=2)
    [job_id] = push(state, "q", [{"k": "v"}], now=at(-5))
    c1 = claim_one(state)
    assert fail(state, c1.id, c1.lease, error="first", retry_in_seconds=0).status == "pending"
    c2 = claim_one(state, now=at(1))

    outcome = fail(state, c2.id, c2.lease, now=at(2), error="second")

    assert outcome == FailOutcome(status="dead", not_before=None)
    assert job_id not in state.jobs
    dead = state.dead[job_id]
    assert (dead.id, dead.queue, dead.payload) == (job_id, "q", b'{"k":"v"}')
    assert (dead.attempts, dead.max_attempts) == (2, 2)
    assert (dead.enqueued_at, dead.died_at, dead.error) == (at(-5), at(2), "second")
    assert counters(state) == zero_counters(pushed=1, failed=2, dead=1)


def test_fail_with_max_attempts_one_goes_straight_to_dead_even_with_retry_in_seconds() -> None:
    state = new_state()
    [job_id] = push(state, "q", [1], max_attempts=1)
    c = claim_one(state)

    assert fail(state, c.id, c.lease, retry_in_seconds=5).status == "dead"
    assert job_id in state.dead
    with pytest.raises(LeaseLost):
        heartbeat(state, c.id, c.lease, now=at(1))


def test_fail_truncates_long_error_keeping_its_end() -> None:
    state = new_state(max_error_chars=10, max_attempts=2)
    push(state, "q", [1])
    c = claim_one(state)

    fail(state, c.id, c.lease, error="x" * 50 + "0123456789", retry_in_seconds=0)
    assert state.jobs[c.id].last_error == "0123456789"

    c = claim_one(state)
    fail(state, c.id, c.lease, error="y" * 50 + "ABCDEFGHIJ")
    assert state.dead[c.id].error == "ABCDEFGHIJ"


def test_fail_keeps_an_error_of_exactly_the_limit() -> None:
    state = new_state(max_error_chars=10)
    push(state, "q", [1])
    c = claim_one(state)

    fail(state, c.id, c.lease, error="0123456789", retry_in_seconds=0)

    assert state.jobs[c.id].last_error == "0123456789"
