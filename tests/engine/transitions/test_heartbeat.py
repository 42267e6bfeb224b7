"""Pure transition tests (engine.transitions). Heartbeat: extending a lease, and the lease-lost cases.
The builders and the test clock are in builders.py.
"""

from __future__ import annotations

import pytest

from engine import transitions
from engine.errors import (
    JobNotFound,
    LeaseLost,
)
from engine.ops import (
    heartbeat_op,
)
from tests.engine.transitions.builders import (
    T0,
    at,
    claim_one,
    heartbeat,
    new_state,
    push,
)

# -- heartbeat -------------------------------------------------------------------------------------------


def test_heartbeat_extends_expiry_from_now() -> None:
    state = new_state()
    push(state, "q", [1])
    c = claim_one(state, lease_seconds=10)

    new_deadline = heartbeat(state, c.id, c.lease, now=at(7))

    assert new_deadline == at(17)
    lease = state.jobs[c.id].lease
    assert lease is not None
    assert (lease.claimed_at, lease.heartbeat_at, lease.expires_at, lease.token) == (T0, at(7), at(17), c.lease)


def test_heartbeat_with_lease_seconds_changes_the_lease_length_for_later_heartbeats() -> None:
    state = new_state()
    push(state, "q", [1])
    c = claim_one(state, lease_seconds=10)

    assert heartbeat(state, c.id, c.lease, now=at(1), lease_seconds=60) == at(61)
    assert heartbeat(state, c.id, c.lease, now=at(2)) == at(62)


def test_heartbeat_with_wrong_token_is_lease_lost_and_changes_nothing() -> None:
    state = new_state()
    push(state, "q", [1])
    c = claim_one(state, lease_seconds=10)
    before = state.jobs[c.id]

    with pytest.raises(LeaseLost) as info:
        heartbeat(state, c.id, "not-the-token", now=at(1))

    assert info.value.job_id == c.id
    assert info.value.code == "lease_lost"
    assert state.jobs[c.id] is before


def test_heartbeat_on_a_pending_job_is_lease_lost() -> None:
    state = new_state()
    [job_id] = push(state, "q", [1])

    with pytest.raises(LeaseLost):
        heartbeat(state, job_id, "any", now=T0)


def test_heartbeat_of_unknown_job_is_job_not_found() -> None:
    state = new_state()

    with pytest.raises(JobNotFound) as info:
        heartbeat(state, "nope", "token", now=T0)

    assert info.value.job_id == "nope"
    assert info.value.code == "job_not_found"


def test_heartbeat_after_lease_expired_and_expiry_ran_is_lease_lost() -> None:
    state = new_state()
    push(state, "q", [1])
    c = claim_one(state, lease_seconds=10)

    [result] = transitions.apply_batch(state, [heartbeat_op(c.id, c.lease)], at(10))

    assert isinstance(result, LeaseLost)
    assert state.jobs[c.id].status == "pending"


def test_heartbeat_before_deadline_in_apply_batch_keeps_the_lease() -> None:
    state = new_state()
    push(state, "q", [1])
    c = claim_one(state, lease_seconds=10)

    [result] = transitions.apply_batch(state, [heartbeat_op(c.id, c.lease)], at(9.5))

    assert result == at(19.5)
    assert state.jobs[c.id].status == "running"
