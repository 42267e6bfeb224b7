"""Pure transition tests (engine.transitions). Expire: leases past their deadline, and stale lease
entries. The builders and the test clock are in builders.py.
"""

from __future__ import annotations

import pytest

from engine import transitions
from engine.errors import (
    LeaseLost,
)
from engine.ops import (
    Expire,
    claim_op,
    complete_op,
    fail_op,
    heartbeat_op,
)
from tests.engine.transitions.builders import (
    T0,
    at,
    claim_ids,
    claim_one,
    counters,
    fail,
    heartbeat,
    new_state,
    push,
    zero_counters,
)

# -- expire ----------------------------------------------------------------------------------------------


def test_apply_batch_expires_past_deadline_lease_to_the_back_of_the_queue() -> None:
    state = new_state()
    [a, b] = push(state, "q", [1, 2])
    c = claim_one(state, worker="slow-worker", lease_seconds=10)
    [d] = push(state, "q", [3], now=at(1))

    assert transitions.apply_batch(state, [], at(9.999)) == []
    assert state.jobs[a].status == "running"

    transitions.apply_batch(state, [], at(10))

    job = state.jobs[c.id]
    assert (job.status, job.lease, job.not_before, job.attempts) == ("pending", None, None, 1)
    assert "slow-worker" in (job.last_error or "")
    assert "expired" in (job.last_error or "")
    assert list(state.jobs) == [b, d, a]
    assert claim_ids(state, now=at(11)) == [b, d, a]
    assert counters(state) == zero_counters(pushed=3, failed=1)


def test_expire_op_returns_expired_ids_and_leaves_live_leases() -> None:
    state = new_state()
    push(state, "q", [1, 2, 3])
    short = claim_one(state, lease_seconds=5)
    long = claim_one(state, lease_seconds=50)
    other = claim_one(state, lease_seconds=6)

    assert transitions.apply(state, Expire(), at(4)) == []
    expired = transitions.apply(state, Expire(), at(10))

    assert expired == [short.id, other.id]
    assert state.jobs[long.id].status == "running"
    assert state.jobs[short.id].status == "pending"
    assert transitions.apply(state, Expire(), at(10)) == []


def test_expire_op_in_a_batch_after_automatic_expiry_finds_nothing() -> None:
    state = new_state()
    push(state, "q", [1])
    c = claim_one(state, lease_seconds=5)

    [result] = transitions.apply_batch(state, [Expire()], at(6))

    assert result == []
    assert state.jobs[c.id].status == "pending"


def test_expire_of_exhausted_job_moves_it_to_dead_letters_naming_the_worker() -> None:
    state = new_state(max_attempts=1)
    [job_id] = push(state, "q", [1])
    claim_one(state, worker="w-42", lease_seconds=5, now=at(1))

    transitions.apply_batch(state, [], at(30))

    assert job_id not in state.jobs
    dead = state.dead[job_id]
    assert "w-42" in dead.error
    assert dead.died_at == at(30)
    assert counters(state) == zero_counters(pushed=1, failed=1, dead=1)


def test_lease_heartbeated_in_time_is_not_expired() -> None:
    state = new_state()
    push(state, "q", [1])
    c = claim_one(state, lease_seconds=10)
    heartbeat(state, c.id, c.lease, now=at(8))

    transitions.apply_batch(state, [], at(15))
    assert state.jobs[c.id].status == "running"
    assert state.jobs[c.id].lease.token == c.lease  # type: ignore[union-attr]

    transitions.apply_batch(state, [], at(18))
    assert state.jobs[c.id].status == "pending"
    assert counters(state)["failed"] == 1


def test_stale_lease_entries_do_not_expire_a_reclaimed_job() -> None:
    state = new_state()
    push(state, "q", [1])
    first = claim_one(state, worker="w1", lease_seconds=10)
    fail(state, first.id, first.lease, now=at(1), retry_in_seconds=0)
    second = claim_one(state, worker="w2", lease_seconds=100, now=at(2))

    transitions.apply_batch(state, [], at(50))

    job = state.jobs[second.id]
    assert job.status == "running"
    assert job.lease is not None
    assert job.lease.token == second.lease
    assert counters(state)["failed"] == 1


def test_stale_worker_gets_lease_lost_after_its_job_was_released_and_new_holder_completes() -> None:
    state = new_state()
    push(state, "q", [1])
    old = claim_one(state, worker="old", lease_seconds=10)

    [new_claims] = transitions.apply_batch(state, [claim_op("new", ["q"], policy=state.policy)], at(11))
    [new] = new_claims
    assert new.id == old.id
    assert new.lease != old.lease
    assert new.attempt == 2

    results = transitions.apply_batch(
        state,
        [
            heartbeat_op(old.id, old.lease),
            fail_op(old.id, old.lease, error="late", retry_in_seconds=None, policy=state.policy),
            complete_op(old.id, old.lease),
        ],
        at(12),
    )
    assert [type(r) for r in results] == [LeaseLost, LeaseLost, LeaseLost]
    assert state.jobs[new.id].lease.worker == "new"  # type: ignore[union-attr]

    assert transitions.apply_batch(state, [complete_op(new.id, new.lease)], at(13)) == [None]
    assert new.id not in state.jobs
    assert counters(state) == zero_counters(pushed=1, failed=1, completed=1)


@pytest.mark.parametrize("case", ["heartbeat-at-claim-instant", "two-heartbeats-one-instant", "same-deadline"])
def test_expiry_counts_one_failure_even_if_a_heartbeat_repeated_the_deadline(case: str) -> None:
    state = new_state()
    push(state, "q", [1])
    c = claim_one(state, lease_seconds=30)
    if case == "heartbeat-at-claim-instant":
        heartbeat(state, c.id, c.lease, now=T0)
    elif case == "two-heartbeats-one-instant":
        transitions.apply_batch(state, [heartbeat_op(c.id, c.lease), heartbeat_op(c.id, c.lease)], at(5))
    else:
        heartbeat(state, c.id, c.lease, now=at(10), lease_seconds=20)  # deadline stays at 30

    expired = transitions.apply(state, Expire(), at(60))

    assert expired == [c.id]
    assert counters(state)["failed"] == 1


def test_expiry_of_exhausted_job_heartbeated_at_claim_instant_does_not_crash_apply_batch() -> None:
    state = new_state(max_attempts=1)
    push(state, "q", [1])
    c = claim_one(state, lease_seconds=30)
    heartbeat(state, c.id, c.lease, now=T0)

    transitions.apply_batch(state, [], at(60))

    assert c.id in state.dead
    assert counters(state) == zero_counters(pushed=1, failed=1, dead=1)


def test_next_deadline_reports_earliest_indexed_lease() -> None:
    state = new_state()
    assert state.next_deadline() is None
    push(state, "q", [1, 2])
    claim_one(state, lease_seconds=20)
    claim_one(state, lease_seconds=5)

    assert state.next_deadline() == at(5)
