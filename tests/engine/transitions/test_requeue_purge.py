"""Pure transition tests (engine.transitions). Requeue and purge, and the bound on dead letters. The
builders and the test clock are in builders.py.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
    requeue_op,
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


def test_a_paced_requeue_makes_its_jobs_due_one_after_another() -> None:
    """``per_second``: in the order given, the first at once, each next one
    1 / per_second later; dead and running jobs alike; the jobs not yet due
    never hold back a job pushed after them."""
    state = new_state(max_attempts=1)
    a, b, c = push(state, "q", [1, 2, 3])
    for job_id in (a, b):
        kill(state, job_id)
    running = claim_one(state, "q")
    assert running.id == c

    moved = transitions.requeue(state, requeue_op([b, a, c], per_second=4), at(10))

    assert moved == [b, a, c]
    assert [state.jobs[j].not_before for j in (b, a, c)] == [None, at(10.25), at(10.5)]
    assert all(state.jobs[j].attempts == 0 for j in (a, b)) and state.jobs[c].attempts == 1
    [d] = push(state, "q", [4])
    assert claim_ids(state, "q", now=at(10)) == [b, d]
    assert claim_ids(state, "q", now=at(10.25)) == [a]
    assert claim_ids(state, "q", now=at(10.5)) == [c]


def test_a_paced_conditional_requeue_paces_only_the_jobs_that_move() -> None:
    state = new_state(max_attempts=1)
    a, b, c = push(state, "q", [1, 2, 3])
    for job_id in (a, b, c):
        kill(state, job_id)
    transitions.requeue(state, requeue_op([b], expect=["dead"]), at(1))  # b moved since the dry run

    moved = transitions.requeue(state, requeue_op([a, b, c], expect=["dead"] * 3, per_second=1), at(2))

    assert moved == [a, c]
    assert state.jobs[a].not_before is None and state.jobs[c].not_before == at(3)


@given(statuses=st.lists(st.sampled_from(["pending", "running", "dead"]), min_size=1, max_size=8),
       picks=st.lists(st.tuples(st.integers(0, 7), st.sampled_from(["running", "dead"])), min_size=1, max_size=8),
       per_second=st.floats(0.01, 1000))
def test_a_paced_requeue_paces_exactly_the_jobs_that_move(statuses: list[str], picks: list[tuple[int, str]],
                                                          per_second: float) -> None:
    """Whatever the jobs' statuses and the dry run's (possibly stale)
    expectations: the jobs still in their expected status move, in the
    order given, the i-th due i / per_second after the requeue; no claim
    hands one out before it is due, and they are handed out in that order."""
    state = new_state(max_attempts=1)
    status_of: dict[str, str] = {}
    # The jobs to run or kill first (a claim takes the oldest), then the pending ones.
    for status in sorted(statuses, key=lambda s: s == "pending"):
        [job_id] = push(state, "q", [len(status_of)])
        if status != "pending":
            claimed = claim_one(state, "q")
            assert claimed.id == job_id
            if status == "dead":
                fail(state, job_id, claimed.lease)
        status_of[job_id] = status
    ids = list(status_of)
    chosen = list({ids[i % len(ids)]: expected for i, expected in picks}.items())  # one expectation an id
    now = at(100)

    moved = transitions.requeue(state, requeue_op([j for j, _ in chosen], expect=[e for _, e in chosen],
                                                  per_second=per_second), now)

    assert moved == [j for j, expected in chosen if status_of[j] == expected]
    due = [now + timedelta(seconds=i / per_second) for i in range(len(moved))]
    assert [state.jobs[j].not_before or now for j in moved] == due
    assert all(state.jobs[j].status == "pending" for j in moved)
    handed = []
    for when in sorted(set(due)):
        taken = [c.id for c in claim(state, "q", now=when, max_jobs=100) if c.id in moved]
        assert all(due[moved.index(j)] <= when for j in taken)
        handed += taken
    assert handed == moved


@pytest.mark.parametrize("per_second", [0, -1, float("inf"), float("nan"), 1e9, True, "2"])
def test_a_pace_that_is_not_a_positive_finite_number_is_refused(per_second: object) -> None:
    with pytest.raises(ValidationError, match="per_second"):
        requeue_op(["a"], per_second=per_second)  # type: ignore[arg-type]


def test_a_pace_that_would_put_the_last_job_beyond_the_longest_delay_is_refused() -> None:
    ids = [f"j{i}" for i in range(400)]
    with pytest.raises(ValidationError, match="pace them faster"):
        requeue_op(ids, per_second=1 / 86400)
    assert requeue_op(ids[:300], per_second=1 / 86400).per_second == 1 / 86400


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
