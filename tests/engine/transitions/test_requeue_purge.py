"""Pure transition tests (engine.transitions). Requeue and purge, and the bound on dead letters. The
builders and the test clock are in builders.py.
"""

from __future__ import annotations

import pytest

from engine import transitions
from engine.document import QueueState
from engine.errors import (
    JobNotFound,
    LeaseLost,
    ValidationError,
)
from engine.ops import (
    Expire,
    push_op,
)
from tests.engine.transitions.builders import (
    at,
    claim,
    claim_ids,
    claim_one,
    complete,
    counters,
    fail,
    heartbeat,
    kill,
    new_state,
    purge,
    push,
    requeue,
    snapshot,
    zero_counters,
)

# -- requeue ---------------------------------------------------------------------------------------------


def test_requeue_running_job_returns_it_to_pending_at_the_back_and_revokes_the_lease() -> None:
    state = new_state()
    [a, b] = push(state, "q", [1, 2])
    c = claim_one(state)
    [d] = push(state, "q", [3], now=at(1))

    assert requeue(state, [a], now=at(2)) == [a]

    job = state.jobs[a]
    assert (job.status, job.lease, job.attempts, job.not_before) == ("pending", None, 1, None)
    assert list(state.jobs) == [b, d, a]
    with pytest.raises(LeaseLost):
        complete(state, a, c.lease)
    with pytest.raises(LeaseLost):
        heartbeat(state, a, c.lease, now=at(3))
    assert claim_ids(state, now=at(3)) == [b, d, a]
    assert state.jobs[a].attempts == 2
    assert counters(state) == zero_counters(pushed=3)


def test_requeued_running_job_is_not_expired_by_its_old_lease() -> None:
    state = new_state()
    push(state, "q", [1])
    c = claim_one(state, lease_seconds=5)
    requeue(state, [c.id], now=at(1))

    assert transitions.apply(state, Expire(), at(100)) == []
    assert counters(state)["failed"] == 0


def test_requeue_dead_job_returns_it_to_pending_with_attempts_reset() -> None:
    state = new_state(max_attempts=2)
    [a] = push(state, "q", [1], now=at(-1))
    kill(state, a, error="kaput")
    assert a in state.dead
    [b] = push(state, "q", [2], now=at(1))

    assert requeue(state, [a], now=at(5)) == [a]

    assert a not in state.dead
    job = state.jobs[a]
    assert (job.status, job.attempts, job.max_attempts, job.lease) == ("pending", 0, 2, None)
    assert job.enqueued_at == at(-1)
    assert job.last_error == "kaput"
    assert job.payload == b"1"
    assert list(state.jobs) == [b, a]
    c = claim(state, max_jobs=2, now=at(6))
    assert [(j.id, j.attempt) for j in c] == [(b, 1), (a, 1)]
    assert counters(state) == zero_counters(pushed=2, failed=2, dead=1)


def test_requeue_pending_job_is_a_validation_error() -> None:
    state = new_state()
    [job_id] = push(state, "q", [1])
    state.encoded(seq=1, writer="w")
    before = snapshot(state)

    with pytest.raises(ValidationError, match="already pending"):
        requeue(state, [job_id])

    assert snapshot(state) == before
    assert state.dirty is False


def test_requeue_unknown_job_is_job_not_found() -> None:
    state = new_state()

    with pytest.raises(JobNotFound):
        requeue(state, ["nope"])


def test_requeue_is_all_or_nothing() -> None:
    state = new_state(max_attempts=1)
    [dead, run, pend] = push(state, "q", [1, 2, 3], ids=["dead", "run", "pend"])
    kill(state, dead)
    c = claim_one(state)
    assert c.id == run
    state.encoded(seq=1, writer="w")
    before = snapshot(state)

    with pytest.raises(JobNotFound):
        requeue(state, [run, dead, "unknown"])
    with pytest.raises(ValidationError):
        requeue(state, [dead, run, pend])

    assert snapshot(state) == before
    assert state.dirty is False
    assert state.jobs[run].lease.token == c.lease  # type: ignore[union-attr]
    assert dead in state.dead
    heartbeat(state, run, c.lease, now=at(1))  # the lease still works


def test_requeue_of_running_and_dead_together_appends_both_in_order() -> None:
    state = new_state(max_attempts=1)
    push(state, "q", [1, 2, 3], ids=["dead", "run", "other"])
    kill(state, "dead")
    claim_one(state)

    assert requeue(state, ["run", "dead"]) == ["run", "dead"]

    assert list(state.jobs) == ["other", "run", "dead"]


# -- purge -----------------------------------------------------------------------------------------------


def test_purge_by_ids_removes_pending_running_and_dead_jobs() -> None:
    state = new_state(max_attempts=1)
    push(state, "q", [1, 2, 3, 4], ids=["dead", "run", "pend", "keep"])
    kill(state, "dead")
    run = claim_one(state)
    assert run.id == "run"

    assert purge(state, ["pend", "run", "dead"]) == ["pend", "run", "dead"]

    assert list(state.jobs) == ["keep"]
    assert state.dead == {}
    assert counters(state)["purged"] == 3
    with pytest.raises(JobNotFound):
        complete(state, "run", run.lease)
    assert transitions.apply(state, Expire(), at(1000)) == []  # the running job's lease entry is stale
    assert claim_ids(state) == ["keep"]


def test_purge_counts_per_queue() -> None:
    state = new_state()
    push(state, "a", [1], ids=["a1"])
    push(state, "b", [1, 2], ids=["b1", "b2"])

    purge(state, ["a1", "b1", "b2"])

    assert counters(state, "a")["purged"] == 1
    assert counters(state, "b")["purged"] == 2


def test_purge_with_unknown_id_removes_nothing() -> None:
    state = new_state()
    push(state, "q", [1, 2], ids=["a", "b"])
    state.encoded(seq=1, writer="w")
    before = snapshot(state)

    with pytest.raises(JobNotFound) as info:
        purge(state, ["a", "ghost", "b"])

    assert info.value.job_id == "ghost"
    assert list(state.jobs) == ["a", "b"]
    assert snapshot(state) == before
    assert state.dirty is False


def _mixed_state() -> QueueState:
    """Queues a and b, each with two pending, two running and two dead jobs."""
    state = new_state(max_attempts=1)
    for q in ("a", "b"):
        push(state, q, [1, 2], ids=[f"{q}-dead1", f"{q}-dead2"])
        kill(state, f"{q}-dead1")
        kill(state, f"{q}-dead2")
        push(state, q, [1, 2, 3, 4], ids=[f"{q}-run1", f"{q}-run2", f"{q}-pend1", f"{q}-pend2"])
        claim(state, q, max_jobs=2)
    return state


@pytest.mark.parametrize("status", ["pending", "running", "dead"])
def test_purge_by_queue_and_status_removes_exactly_those_jobs(status: str) -> None:
    state = _mixed_state()
    short = {"pending": "pend", "running": "run", "dead": "dead"}[status]
    everything = set(state.jobs) | set(state.dead)

    removed = purge(state, queue="a", status=status)

    assert removed == [f"a-{short}1", f"a-{short}2"]
    assert (set(state.jobs) | set(state.dead)) == everything - set(removed)
    assert counters(state, "a")["purged"] == 2
    assert counters(state, "b")["purged"] == 0


def test_purge_by_queue_and_status_with_no_match_changes_nothing() -> None:
    state = _mixed_state()
    state.encoded(seq=1, writer="w")
    before = snapshot(state)

    assert purge(state, queue="zzz", status="pending") == []

    assert snapshot(state) == before
    assert state.dirty is False


def test_purged_pending_job_is_not_claimed_from_a_stale_index_entry() -> None:
    state = new_state()
    [a, b] = push(state, "q", [1, 2])

    purge(state, [a])

    assert claim_ids(state) == [b]


def test_purged_job_id_can_be_pushed_again_once_out_of_the_dedup_window() -> None:
    state = new_state(dedup_window_seconds=60)
    push(state, "q", [1, 2], ids=["a", "b"])
    purge(state, ["a"])
    assert push(state, "q", [3], ids=["a"], now=at(1)) == ["a"]  # a retried push: not brought back
    assert list(state.jobs) == ["b"]

    transitions.apply_batch(state, [push_op("q", [3], policy=state.policy, ids=["a"])], at(60))

    assert list(state.jobs) == ["b", "a"]
    assert claim_ids(state, now=at(61)) == ["b", "a"]


# -- dead letter bound -----------------------------------------------------------------------------------


def test_dead_letters_are_bounded_dropping_the_oldest() -> None:
    state = new_state(max_attempts=1, dead_letter_limit=2)
    push(state, "a", [1, 2], ids=["a1", "a2"])
    push(state, "b", [3], ids=["b1"])
    kill(state, "a1")
    kill(state, "b1")
    assert list(state.dead) == ["a1", "b1"]

    kill(state, "a2")

    assert list(state.dead) == ["b1", "a2"]
    assert counters(state, "a") == zero_counters(pushed=2, failed=2, dead=2, dead_dropped=1)
    assert counters(state, "b") == zero_counters(pushed=1, failed=1, dead=1)
    assert "a1" not in state.jobs
    with pytest.raises(JobNotFound):
        requeue(state, ["a1"])


def test_dead_letter_limit_zero_drops_every_dead_job() -> None:
    state = new_state(max_attempts=1, dead_letter_limit=0)
    push(state, "q", [1], ids=["x"])

    kill_claim = claim_one(state)
    assert fail(state, kill_claim.id, kill_claim.lease).status == "dead"

    assert state.dead == {}
    assert state.jobs == {}
    assert counters(state) == zero_counters(pushed=1, failed=1, dead=1, dead_dropped=1)
