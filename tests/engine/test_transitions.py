"""Unit tests for the pure queue transitions (engine.transitions) and the operation builders.

Everything runs on an in-memory ``QueueState`` with an explicit clock: every
transition gets ``now`` as a timezone-aware datetime, so lease expiry, backoff
and delays are exact. The last section is a randomized model check: thousands
of random operations compared step by step with a small reference model.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from engine import transitions
from engine.document import QueueState
from engine.errors import (
    EngineError,
    InvalidPayload,
    JobNotFound,
    LeaseLost,
    PayloadTooLarge,
    QueueError,
    ValidationError,
)
from engine.model import ClaimedJob, FailOutcome
from engine.operations import (
    Claim,
    Complete,
    Expire,
    Fail,
    Heartbeat,
    Operation,
    Purge,
    Push,
    Requeue,
    claim_op,
    complete_op,
    fail_op,
    heartbeat_op,
    purge_op,
    push_op,
    requeue_op,
)
from engine.parsing import empty_state, parse_document
from engine.policy import MAX_CLAIM_JOBS, MAX_DELAY_SECONDS, MAX_LEASE_SECONDS, Policy

T0 = datetime(2025, 3, 1, 9, 30, tzinfo=UTC)


# -- helpers ------------------------------------------------------------------------------------------


def at(seconds: float) -> datetime:
    """The test clock: T0 plus ``seconds``."""
    return T0 + timedelta(seconds=seconds)


def new_state(**policy: Any) -> QueueState:
    return empty_state(policy=Policy(**policy))


def push(state: QueueState, queue: str, payloads: Sequence[Any], *, now: datetime = T0, **kwargs: Any) -> list[str]:
    return transitions.push(state, push_op(queue, list(payloads), policy=state.policy, **kwargs), now)


def claim(
    state: QueueState,
    queues: str | Sequence[str] = "q",
    *,
    now: datetime = T0,
    worker: str = "w1",
    max_jobs: int = 1,
    lease_seconds: float | None = None,
) -> list[ClaimedJob]:
    op = claim_op(worker, queues, policy=state.policy, max_jobs=max_jobs, lease_seconds=lease_seconds)
    return transitions.claim(state, op, now)


def claim_one(state: QueueState, queues: str | Sequence[str] = "q", **kwargs: Any) -> ClaimedJob:
    claimed = claim(state, queues, **kwargs)
    assert len(claimed) == 1, claimed
    return claimed[0]


def claim_ids(state: QueueState, queues: str | Sequence[str] = "q", *, now: datetime = T0) -> list[str]:
    """Claim everything claimable and return the ids in the order handed out."""
    return [c.id for c in claim(state, queues, now=now, max_jobs=MAX_CLAIM_JOBS)]


def heartbeat(
    state: QueueState, job_id: str, lease: str, *, now: datetime, lease_seconds: float | None = None
) -> datetime:
    return transitions.heartbeat(state, heartbeat_op(job_id, lease, lease_seconds=lease_seconds), now)


def complete(state: QueueState, job_id: str, lease: str, *, now: datetime = T0) -> None:
    transitions.complete(state, complete_op(job_id, lease), now)


def fail(
    state: QueueState,
    job_id: str,
    lease: str,
    *,
    now: datetime = T0,
    error: str = "boom",
    retry_in_seconds: float | None = None,
) -> FailOutcome:
    op = fail_op(job_id, lease, error=error, retry_in_seconds=retry_in_seconds, policy=state.policy)
    return transitions.fail(state, op, now)


def requeue(state: QueueState, job_ids: Sequence[str], *, now: datetime = T0) -> list[str]:
    return transitions.requeue(state, requeue_op(list(job_ids)), now)


def purge(
    state: QueueState,
    job_ids: Sequence[str] | None = None,
    *,
    queue: str | None = None,
    status: str | None = None,
    now: datetime = T0,
) -> list[str]:
    op = purge_op(None if job_ids is None else list(job_ids), queue=queue, status=status)
    return transitions.purge(state, op, now)


def kill(state: QueueState, job_id: str, *, now: datetime = T0, error: str = "fatal") -> None:
    """Fail ``job_id`` until it reaches the dead letters. It must be the next claimable job of its queue,
    and, if it has more than one attempt, the only one."""
    job = state.jobs[job_id]
    for _ in range(job.max_attempts - job.attempts):
        c = claim_one(state, job.queue, now=now)
        assert c.id == job_id
        fail(state, c.id, c.lease, now=now, error=error, retry_in_seconds=0)
    assert job_id in state.dead


def snapshot(state: QueueState) -> bytes:
    """The document bytes with a fixed seq, writer and time, so two snapshots compare the state alone."""
    return b"".join(state.encode(seq=77, writer="test-writer", now=T0))


def pending_ids(state: QueueState) -> list[str]:
    return [j.id for j in state.jobs.values() if j.status == "pending"]


def counters(state: QueueState, queue: str = "q") -> dict[str, int]:
    c = state.queues[queue]
    return {
        "pushed": c.pushed,
        "completed": c.completed,
        "failed": c.failed,
        "dead": c.dead,
        "purged": c.purged,
        "dead_dropped": c.dead_dropped,
    }


def zero_counters(**changes: int) -> dict[str, int]:
    base = dict.fromkeys(("pushed", "completed", "failed", "dead", "purged", "dead_dropped"), 0)
    base.update(changes)
    return base


# -- push -----------------------------------------------------------------------------------------------


def test_push_one_adds_a_pending_job_with_defaults_and_counts_it() -> None:
    state = new_state(max_attempts=4)

    [job_id] = push(state, "q", [{"n": 1}], now=at(5))

    assert len(job_id) == 32
    int(job_id, 16)  # hex
    job = state.jobs[job_id]
    assert job.queue == "q"
    assert job.status == "pending"
    assert job.attempts == 0
    assert job.max_attempts == 4
    assert job.enqueued_at == at(5)
    assert job.not_before is None
    assert job.lease is None
    assert job.last_error is None
    assert job.payload == b'{"n":1}'
    assert counters(state) == zero_counters(pushed=1)
    assert state.dirty


def test_push_many_returns_ids_in_order_and_keeps_them_in_fifo_order() -> None:
    state = new_state()

    ids = push(state, "q", list(range(10)))

    assert len(ids) == len(set(ids)) == 10
    assert list(state.jobs) == ids
    assert [state.jobs[i].payload for i in ids] == [str(n).encode() for n in range(10)]
    assert counters(state)["pushed"] == 10


def test_push_with_explicit_ids_returns_those_ids_in_order() -> None:
    state = new_state()

    assert push(state, "q", ["a", "b", "c"], ids=["z", "y", "x"]) == ["z", "y", "x"]
    assert list(state.jobs) == ["z", "y", "x"]


def test_push_per_push_max_attempts_overrides_policy() -> None:
    state = new_state(max_attempts=3)

    [job_id] = push(state, "q", [1], max_attempts=7)

    assert state.jobs[job_id].max_attempts == 7


def test_push_of_the_same_ids_again_changes_nothing() -> None:
    state = new_state()
    ids = push(state, "q", [1, 2, 3], ids=["a", "b", "c"])
    state.encoded(seq=1, writer="w")
    before = snapshot(state)

    again = push(state, "q", [9, 9, 9], ids=ids, now=at(100))

    assert again == ids
    assert state.dirty is False
    assert snapshot(state) == before
    assert counters(state)["pushed"] == 3
    assert state.jobs["a"].payload == b"1"
    assert state.jobs["a"].enqueued_at == T0


def test_push_of_an_id_that_is_running_or_dead_is_ignored() -> None:
    state = new_state(max_attempts=1)
    push(state, "q", [1, 2], ids=["run", "dead"])
    c = claim_one(state)
    kill(state, "dead")
    state.encoded(seq=1, writer="w")
    before = snapshot(state)

    assert push(state, "q", [0, 0], ids=["run", "dead"], now=at(3)) == ["run", "dead"]

    assert state.jobs["run"].status == "running"
    assert state.jobs["run"].lease is not None
    assert state.jobs["run"].lease.token == c.lease
    assert "dead" in state.dead
    assert "dead" not in state.jobs
    assert snapshot(state) == before
    assert state.dirty is False


def test_push_with_some_known_ids_adds_only_the_new_ones() -> None:
    state = new_state()
    push(state, "q", [1], ids=["old"])

    assert push(state, "q", [2, 3], ids=["old", "new"]) == ["old", "new"]

    assert list(state.jobs) == ["old", "new"]
    assert state.jobs["old"].payload == b"1"
    assert counters(state)["pushed"] == 2


def test_push_repeated_id_within_one_push_adds_it_once() -> None:
    state = new_state()

    push(state, "q", [1, 2], ids=["a", "a"])

    assert list(state.jobs) == ["a"]
    assert state.jobs["a"].payload == b"1"
    assert counters(state)["pushed"] == 1


def test_push_payload_values_round_trip_through_claim() -> None:
    state = new_state()
    payloads = [None, True, 0, -5, 2**63 - 1, 1.5, "", "h\u00e9llo \u2603", [1, [2, {}]], {"a": {"b": [None]}}]
    push(state, "q", payloads)

    claimed = claim(state, max_jobs=len(payloads))

    assert [c.payload for c in claimed] == payloads


def test_delayed_push_is_stored_with_not_before() -> None:
    state = new_state()

    [job_id] = push(state, "q", [1], delay_seconds=5, now=at(10))

    assert state.jobs[job_id].not_before == at(15)
    assert state.jobs[job_id].status == "pending"


def test_delayed_push_is_not_claimable_before_not_before() -> None:
    state = new_state()
    push(state, "q", [1], delay_seconds=5)

    assert claim(state, now=T0) == []
    assert claim(state, now=at(4.999999)) == []


def test_delayed_push_is_claimable_exactly_at_not_before() -> None:
    state = new_state()
    [job_id] = push(state, "q", [1], delay_seconds=5)

    assert claim_ids(state, now=at(5)) == [job_id]


def test_delayed_push_is_claimable_after_not_before_even_if_asked_too_early_first() -> None:
    state = new_state()
    [job_id] = push(state, "q", [1], delay_seconds=5)
    assert claim(state, now=at(1)) == []

    assert claim_ids(state, now=at(60)) == [job_id]


def test_due_delayed_job_keeps_its_push_position() -> None:
    state = new_state()
    [delayed] = push(state, "q", [1], delay_seconds=5)
    [later] = push(state, "q", [2], now=at(1))

    assert claim_ids(state, now=at(10)) == [delayed, later]


def test_undelayed_jobs_pushed_after_a_delayed_one_are_claimable_at_once() -> None:
    state = new_state()
    push(state, "q", [1], delay_seconds=5)
    [now_job] = push(state, "q", [2])

    assert claim_ids(state, now=at(1)) == [now_job]


# -- claim ----------------------------------------------------------------------------------------------


def test_claim_hands_out_jobs_of_one_queue_in_fifo_order() -> None:
    state = new_state()
    ids = push(state, "q", [1, 2, 3])
    ids += push(state, "q", [4], now=at(1))
    ids += push(state, "q", [5, 6], now=at(2))

    got = [claim_one(state, now=at(3)).id for _ in ids]

    assert got == ids
    assert claim(state, now=at(3)) == []


def test_claim_across_queues_follows_push_order() -> None:
    state = new_state()
    order = []
    for i, queue in enumerate(["a", "b", "a", "c", "b", "a"]):
        order += push(state, queue, [i], now=at(i))

    assert claim_ids(state, ["c", "b", "a"], now=at(10)) == order


def test_claim_across_queues_one_at_a_time_follows_push_order() -> None:
    state = new_state()
    order = []
    for i, queue in enumerate(["b", "a", "a", "b"]):
        order += push(state, queue, [i], now=at(i))

    assert [claim_one(state, ["a", "b"], now=at(10)).id for _ in order] == order


def test_claim_takes_at_most_max_jobs() -> None:
    state = new_state()
    ids = push(state, "q", list(range(5)))

    first = claim(state, max_jobs=3)
    rest = claim(state, max_jobs=3)

    assert [c.id for c in first] == ids[:3]
    assert [c.id for c in rest] == ids[3:]


def test_claim_from_empty_or_unknown_queue_returns_nothing_and_changes_nothing() -> None:
    state = new_state()
    push(state, "q", [1])
    state.encoded(seq=1, writer="w")
    before = snapshot(state)

    assert claim(state, "other") == []
    assert claim(state, ["x", "y"], max_jobs=10) == []

    assert state.dirty is False
    assert snapshot(state) == before
    assert "other" not in state.queues


def test_claim_takes_only_the_named_queues() -> None:
    state = new_state()
    [a] = push(state, "a", [1])
    [b] = push(state, "b", [2])
    [c] = push(state, "c", [3])

    assert claim_ids(state, ["c", "a"]) == [a, c]
    assert state.jobs[b].status == "pending"


def test_claim_sets_lease_attempts_and_returns_claimed_job() -> None:
    state = new_state(lease_seconds=45)
    [job_id] = push(state, "q", [{"x": 1}])

    c = claim_one(state, now=at(2), worker="worker-7")

    assert (c.id, c.queue, c.payload, c.attempt) == (job_id, "q", {"x": 1}, 1)
    assert c.lease_expires_at == at(47)
    job = state.jobs[job_id]
    assert job.status == "running"
    assert job.attempts == 1
    assert job.lease is not None
    assert job.lease.worker == "worker-7"
    assert job.lease.token == c.lease
    assert job.lease.claimed_at == job.lease.heartbeat_at == at(2)
    assert job.lease.expires_at == at(47)
    assert job.lease.seconds == 45


def test_claim_lease_seconds_argument_sets_expiry() -> None:
    state = new_state()
    push(state, "q", [1])

    c = claim_one(state, now=at(1), lease_seconds=2.5)

    assert c.lease_expires_at == at(3.5)
    assert state.jobs[c.id].lease.seconds == 2.5  # type: ignore[union-attr]


def test_claim_attempt_counts_up_on_each_claim() -> None:
    state = new_state(max_attempts=5)
    push(state, "q", [1])

    attempts = []
    for i in range(4):
        c = claim_one(state, now=at(i))
        attempts.append((c.attempt, state.jobs[c.id].attempts))
        fail(state, c.id, c.lease, now=at(i), retry_in_seconds=0)

    assert attempts == [(1, 1), (2, 2), (3, 3), (4, 4)]


def test_claim_gives_every_job_a_distinct_lease_token() -> None:
    state = new_state()
    push(state, "q", list(range(50)))

    tokens = [c.lease for c in claim(state, max_jobs=50)]

    assert len(set(tokens)) == 50
    assert all(isinstance(t, str) and len(t) >= 16 for t in tokens)


def test_running_jobs_are_not_claimed_again() -> None:
    state = new_state()
    [a, b] = push(state, "q", [1, 2])

    assert claim_one(state).id == a
    assert claim_one(state).id == b
    assert claim(state, max_jobs=10) == []


def test_claim_does_not_reorder_jobs_in_the_document() -> None:
    state = new_state()
    ids = push(state, "q", [1, 2, 3])

    claim(state, max_jobs=2)

    assert list(state.jobs) == ids


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


# -- apply_batch -----------------------------------------------------------------------------------------


def test_apply_batch_isolates_errors_and_applies_the_other_ops() -> None:
    state = new_state()
    policy = state.policy
    [a] = push(state, "q", [1])
    c = claim_one(state)

    results = transitions.apply_batch(
        state,
        [
            push_op("q", [2], policy=policy, ids=["b"]),
            complete_op(c.id, "wrong"),
            heartbeat_op("missing", "x"),
            requeue_op(["b"]),
            claim_op("w2", ["q"], policy=policy, max_jobs=5),
            complete_op(c.id, c.lease),
        ],
        at(1),
    )

    assert results[0] == ["b"]
    assert isinstance(results[1], LeaseLost)
    assert isinstance(results[2], JobNotFound)
    assert isinstance(results[3], ValidationError)
    assert [j.id for j in results[4]] == ["b"]
    assert results[5] is None
    assert list(state.jobs) == ["b"]
    assert a not in state.jobs
    assert counters(state) == zero_counters(pushed=2, completed=1)


def test_apply_batch_ops_see_each_others_effects_in_order() -> None:
    state = new_state()
    policy = state.policy

    results = transitions.apply_batch(
        state,
        [
            claim_op("w", ["q"], policy=policy),
            push_op("q", [1], policy=policy, ids=["x"]),
            claim_op("w", ["q"], policy=policy),
        ],
        T0,
    )

    assert results[0] == []
    assert [j.id for j in results[2]] == ["x"]


def test_apply_batch_expires_before_applying_the_ops() -> None:
    state = new_state()
    push(state, "q", [1])
    old = claim_one(state, lease_seconds=5)

    [claimed] = transitions.apply_batch(state, [claim_op("w2", ["q"], policy=state.policy)], at(5))

    assert [j.id for j in claimed] == [old.id]


# -- refused operations change nothing ----------------------------------------------------------------


def _populated() -> tuple[QueueState, ClaimedJob]:
    state = new_state(max_attempts=2)
    push(state, "q", [0], ids=["dead"])
    kill(state, "dead")
    push(state, "q", [1, 2, 3], ids=["run", "pend", "later"])
    run = claim_one(state, lease_seconds=100)
    assert run.id == "run"
    push(state, "q", [5], ids=["delayed"], delay_seconds=50)
    state.encoded(seq=1, writer="w")
    assert state.dirty is False
    return state, run


REFUSED: list[tuple[str, Any, type[Exception] | None]] = [
    ("heartbeat-wrong-token", lambda run: heartbeat_op("run", "wrong"), LeaseLost),
    ("heartbeat-unknown", lambda run: heartbeat_op("ghost", run.lease), JobNotFound),
    ("heartbeat-pending", lambda run: heartbeat_op("pend", run.lease), LeaseLost),
    ("heartbeat-dead", lambda run: heartbeat_op("dead", run.lease), LeaseLost),
    ("complete-wrong-token", lambda run: complete_op("run", "wrong"), LeaseLost),
    ("complete-unknown", lambda run: complete_op("ghost", run.lease), JobNotFound),
    ("fail-wrong-token", lambda run: Fail(job_id="run", lease="wrong", error="e"), LeaseLost),
    ("fail-unknown", lambda run: Fail(job_id="ghost", lease=run.lease, error="e"), JobNotFound),
    ("requeue-pending", lambda run: requeue_op(["pend"]), ValidationError),
    ("requeue-mixed-unknown", lambda run: requeue_op(["run", "dead", "ghost"]), JobNotFound),
    ("purge-mixed-unknown", lambda run: purge_op(["pend", "run", "dead", "ghost"]), JobNotFound),
    ("claim-empty-queue", lambda run: claim_op("w", ["empty"], policy=Policy()), None),
    ("purge-status-no-match", lambda run: purge_op(queue="empty", status="dead"), None),
    ("push-known-ids", lambda run: push_op("q", [0, 0, 0], policy=Policy(), ids=["run", "pend", "dead"]), None),
    ("expire-nothing-due", lambda run: Expire(), None),
]


@pytest.mark.parametrize(("name", "make_op", "error"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_or_empty_op_leaves_state_clean_and_bytes_unchanged(
    name: str, make_op: Any, error: type[Exception] | None
) -> None:
    state, run = _populated()
    before = snapshot(state)
    jobs_before = dict(state.jobs)
    dead_before = dict(state.dead)

    [result] = transitions.apply_batch(state, [make_op(run)], at(1))

    if error is None:
        assert not isinstance(result, Exception)
    else:
        assert isinstance(result, error)
        assert isinstance(result, QueueError)
    assert state.dirty is False
    assert snapshot(state) == before
    assert state.jobs == jobs_before
    assert state.dead == dead_before


def test_refused_op_in_a_batch_does_not_undo_the_good_ops_around_it() -> None:
    state, run = _populated()

    results = transitions.apply_batch(
        state, [complete_op("pend", "bad"), complete_op("run", run.lease), requeue_op(["pend"])], at(1)
    )

    assert [type(r) for r in results] == [LeaseLost, type(None), ValidationError]
    assert "run" not in state.jobs
    assert state.dirty is True


# -- builders: validation ------------------------------------------------------------------------------


BAD_QUEUE_NAMES: list[Any] = ["", "-q", "_q", ".q", "a b", "a/b", "a" * 101, "caf\u00e9", "q\nx", None, 5, b"q"]


@pytest.mark.parametrize("name", BAD_QUEUE_NAMES)
def test_push_and_claim_refuse_bad_queue_names(name: Any) -> None:
    with pytest.raises(ValidationError, match="queue name"):
        push_op(name, [1], policy=Policy())
    with pytest.raises(ValidationError, match="queue name"):
        claim_op("w", [name], policy=Policy())


@pytest.mark.parametrize("name", ["q\n", "a" * 100 + "\n"])
def test_push_and_claim_refuse_queue_name_with_trailing_newline(name: str) -> None:
    with pytest.raises(ValidationError, match="queue name"):
        push_op(name, [1], policy=Policy())


@pytest.mark.parametrize("name", ["q", "Q", "0", "a" * 100, "emails.high:v2-x_y"])
def test_push_and_claim_accept_good_queue_names(name: str) -> None:
    assert push_op(name, [1], policy=Policy()).queue == name
    assert claim_op("w", name, policy=Policy()).queues == (name,)


def test_purge_by_queue_refuses_bad_queue_name() -> None:
    with pytest.raises(ValidationError):
        purge_op(queue="bad name", status="pending")


@pytest.mark.parametrize("payloads", [[], (), "abc", b"abc", {"a": 1}, 5, None])
def test_push_refuses_empty_or_non_list_payloads(payloads: Any) -> None:
    with pytest.raises(ValidationError):
        push_op("q", payloads, policy=Policy())


def test_push_accepts_a_tuple_of_payloads() -> None:
    assert len(push_op("q", (1, 2), policy=Policy()).jobs) == 2


class _Point:
    pass


@pytest.mark.parametrize(
    "payload",
    [
        {1, 2},
        b"bytes",
        object(),
        _Point(),
        float("nan"),
        float("inf"),
        float("-inf"),
        [1, {"deep": float("nan")}],
        {"x": [float("inf")]},
        {1: "int key"},
        2**64,
        datetime(2020, 1, 1, tzinfo=UTC),
        FailOutcome(status="dead"),
    ],
    ids=lambda p: type(p).__name__ + ":" + repr(p)[:20],
)
def test_push_refuses_non_json_payloads(payload: Any) -> None:
    with pytest.raises(InvalidPayload) as info:
        push_op("q", [1, payload], policy=Policy())
    assert isinstance(info.value, ValidationError)
    assert info.value.code == "invalid_payload"


def test_push_accepts_strings_that_merely_contain_nan_or_infinity() -> None:
    op = push_op("q", ["NaN", {"Infinity": "-Infinity"}], policy=Policy())
    assert [j.payload for j in op.jobs] == [b'"NaN"', b'{"Infinity":"-Infinity"}']


def test_push_refuses_payload_over_the_limit_and_accepts_one_at_it() -> None:
    policy = Policy(max_payload_bytes=10)
    assert push_op("q", ["x" * 8], policy=policy).jobs[0].payload == b'"xxxxxxxx"'  # 10 bytes

    with pytest.raises(PayloadTooLarge) as info:
        push_op("q", ["ok", "x" * 9], policy=policy)

    assert (info.value.size, info.value.limit) == (11, 10)
    assert info.value.code == "payload_too_large"
    assert isinstance(info.value, ValidationError)
    assert "11" in str(info.value)
    assert "10" in str(info.value)


@pytest.mark.parametrize("max_jobs", [0, -1, MAX_CLAIM_JOBS + 1, 1.5, True, "3", None])
def test_claim_refuses_bad_max_jobs(max_jobs: Any) -> None:
    with pytest.raises(ValidationError, match="max_jobs"):
        claim_op("w", ["q"], policy=Policy(), max_jobs=max_jobs)


def test_claim_accepts_max_jobs_at_the_limits() -> None:
    assert claim_op("w", ["q"], policy=Policy(), max_jobs=1).max_jobs == 1
    assert claim_op("w", ["q"], policy=Policy(), max_jobs=MAX_CLAIM_JOBS).max_jobs == MAX_CLAIM_JOBS


@pytest.mark.parametrize("lease_seconds", [0, -1, 0.0, float("nan"), float("inf"), MAX_LEASE_SECONDS + 1, True, "5"])
def test_claim_and_heartbeat_refuse_bad_lease_seconds(lease_seconds: Any) -> None:
    with pytest.raises(ValidationError, match="lease_seconds"):
        claim_op("w", ["q"], policy=Policy(), lease_seconds=lease_seconds)
    with pytest.raises(ValidationError, match="lease_seconds"):
        heartbeat_op("job", "lease", lease_seconds=lease_seconds)


@pytest.mark.parametrize("delay", [-1, -0.001, float("nan"), float("inf"), MAX_DELAY_SECONDS + 1, True, "1", None])
def test_push_refuses_bad_delay(delay: Any) -> None:
    with pytest.raises(ValidationError, match="delay_seconds"):
        push_op("q", [1], policy=Policy(), delay_seconds=delay)


@pytest.mark.parametrize("max_attempts", [0, -3, 1001, 2.0, True, False, "3"])
def test_push_refuses_bad_max_attempts(max_attempts: Any) -> None:
    with pytest.raises(ValidationError, match="max_attempts"):
        push_op("q", [1], policy=Policy(), max_attempts=max_attempts)


@pytest.mark.parametrize("retry", [-1, float("nan"), True, "2", MAX_DELAY_SECONDS + 1])
def test_fail_refuses_bad_retry_in_seconds(retry: Any) -> None:
    with pytest.raises(ValidationError, match="retry_in_seconds"):
        fail_op("job", "lease", error="e", retry_in_seconds=retry, policy=Policy())


def test_fail_refuses_non_string_error() -> None:
    with pytest.raises(ValidationError, match="error"):
        fail_op("job", "lease", error=None, retry_in_seconds=None, policy=Policy())  # type: ignore[arg-type]


@pytest.mark.parametrize("worker", ["", None, 7, "w" * 201])
def test_claim_refuses_bad_worker(worker: Any) -> None:
    with pytest.raises(ValidationError, match="worker"):
        claim_op(worker, ["q"], policy=Policy())


def test_claim_refuses_no_queues_and_dedups_repeated_ones() -> None:
    with pytest.raises(ValidationError, match="at least one queue"):
        claim_op("w", [], policy=Policy())
    assert claim_op("w", ["b", "a", "b"], policy=Policy()).queues == ("b", "a")


@pytest.mark.parametrize("job_id", ["", None, 5, "x" * 201])
def test_builders_refuse_bad_job_ids_and_leases(job_id: Any) -> None:
    policy = Policy()
    for build in (
        lambda: heartbeat_op(job_id, "lease"),
        lambda: heartbeat_op("job", job_id),
        lambda: complete_op(job_id, "lease"),
        lambda: complete_op("job", job_id),
        lambda: fail_op(job_id, "lease", error="e", retry_in_seconds=None, policy=policy),
        lambda: requeue_op([job_id]),
        lambda: purge_op([job_id]),
        lambda: push_op("q", [1], policy=policy, ids=[job_id]),
    ):
        with pytest.raises(ValidationError):
            build()


def test_push_refuses_ids_of_a_different_length() -> None:
    with pytest.raises(ValidationError, match="differ in length"):
        push_op("q", [1, 2], policy=Policy(), ids=["a"])


def test_requeue_refuses_no_ids_and_dedups() -> None:
    with pytest.raises(ValidationError):
        requeue_op([])
    assert requeue_op(["a", "b", "a"]).job_ids == ("a", "b")
    assert requeue_op("a").job_ids == ("a",)


def test_purge_needs_ids_or_queue_and_status() -> None:
    with pytest.raises(ValidationError):
        purge_op()
    with pytest.raises(ValidationError):
        purge_op([])
    with pytest.raises(ValidationError):
        purge_op(queue="q")
    with pytest.raises(ValidationError):
        purge_op(status="pending")
    with pytest.raises(ValidationError):
        purge_op(queue="q", status="completed")
    with pytest.raises(ValidationError, match="not both"):
        purge_op(["a"], queue="q", status="pending")
    assert purge_op(["a", "a", "b"]).job_ids == ("a", "b")
    assert purge_op(queue="q", status="dead") == Purge(queue="q", status="dead")


def test_error_types_share_one_root_and_carry_codes() -> None:
    for cls in (JobNotFound, LeaseLost, ValidationError, InvalidPayload, PayloadTooLarge):
        assert issubclass(cls, QueueError)
        assert issubclass(cls, EngineError)
    assert {ValidationError.code, InvalidPayload.code, PayloadTooLarge.code, JobNotFound.code, LeaseLost.code} == {
        "invalid",
        "invalid_payload",
        "payload_too_large",
        "job_not_found",
        "lease_lost",
    }


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"lease_seconds": 0},
        {"lease_seconds": MAX_LEASE_SECONDS + 1},
        {"max_payload_bytes": 0},
        {"dead_letter_limit": -1},
        {"max_error_chars": 0},
        {"backoff_base_seconds": -1},
        {"backoff_base_seconds": 10, "backoff_cap_seconds": 5},
    ],
)
def test_policy_refuses_bad_limits(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Policy(**kwargs)


# -- randomized model check ----------------------------------------------------------------------------


COUNTER_FIELDS = ("pushed", "completed", "failed", "dead", "purged", "dead_dropped")
QUEUES = ("a", "b", "c")


@dataclass
class MJob:
    id: str
    queue: str
    payload: Any
    max_attempts: int
    status: str = "pending"
    attempts: int = 0
    token: str | None = None
    worker: str | None = None
    expires_at: datetime | None = None
    seconds: float | None = None
    not_before: datetime | None = None
    last_error: str | None = None
    expiry_worker: str | None = None  # set when last_error came from an expired lease


@dataclass
class MDead:
    id: str
    queue: str
    payload: Any
    attempts: int
    max_attempts: int
    error: str | None
    expiry_worker: str | None


@dataclass
class Model:
    """The reference model: a plain ordered dict of jobs, the dead letters and counters."""

    policy: Policy
    jobs: dict[str, MJob] = field(default_factory=dict)
    dead: dict[str, MDead] = field(default_factory=dict)
    removed: set[str] = field(default_factory=set)
    pushed: set[str] = field(default_factory=set)
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    old_tokens: list[tuple[str, str]] = field(default_factory=list)

    def count(self, queue: str, name: str, n: int = 1) -> None:
        self.counters.setdefault(queue, dict.fromkeys(COUNTER_FIELDS, 0))[name] += n

    def to_back(self, job: MJob) -> None:
        self.jobs.pop(job.id, None)
        self.jobs[job.id] = job

    def to_dead(self, job: MJob, error: str | None, expiry_worker: str | None) -> None:
        del self.jobs[job.id]
        self.dead[job.id] = MDead(job.id, job.queue, job.payload, job.attempts, job.max_attempts, error, expiry_worker)
        self.count(job.queue, "dead")
        while len(self.dead) > self.policy.dead_letter_limit:
            oldest = self.dead.pop(next(iter(self.dead)))
            self.count(oldest.queue, "dead_dropped")
            self.removed.add(oldest.id)

    def revoke(self, job: MJob) -> None:
        if job.token is not None:
            self.old_tokens.append((job.id, job.token))
        job.token = job.worker = job.expires_at = job.seconds = None

    def expire(self, now: datetime) -> list[str]:
        running = [j for j in self.jobs.values() if j.status == "running" and j.expires_at is not None]
        due = sorted((j for j in running if j.expires_at <= now), key=lambda j: (j.expires_at, j.id))
        for job in due:
            worker = job.worker
            self.count(job.queue, "failed")
            self.revoke(job)
            if job.attempts >= job.max_attempts:
                self.to_dead(job, None, worker)
            else:
                job.status, job.not_before = "pending", None
                job.last_error, job.expiry_worker = None, worker
                self.to_back(job)
        return [j.id for j in due]

    def leased(self, job_id: str, token: str) -> MJob | type[QueueError]:
        job = self.jobs.get(job_id)
        if job is None:
            return LeaseLost if job_id in self.dead else JobNotFound
        if job.token is None or job.token != token:
            return LeaseLost
        return job

    def eligible(self, queues: Sequence[str], now: datetime) -> list[MJob]:
        return [
            j
            for j in self.jobs.values()
            if j.status == "pending" and j.queue in queues and (j.not_before is None or j.not_before <= now)
        ]

    def check(self, op: Operation, result: Any, now: datetime) -> bool:
        """Apply ``op`` to the model, assert the engine's ``result`` matches; return True if it changed state."""
        if isinstance(op, Push):
            assert result == [j.id for j in op.jobs]
            added = False
            for new in op.jobs:
                if new.id in self.jobs or new.id in self.dead:
                    continue
                nb = now + timedelta(seconds=new.delay_seconds) if new.delay_seconds > 0 else None
                self.jobs[new.id] = MJob(new.id, op.queue, orjson.loads(new.payload), new.max_attempts, not_before=nb)
                self.pushed.add(new.id)
                self.removed.discard(new.id)
                self.count(op.queue, "pushed")
                added = True
            if op.queue not in self.counters:
                self.count(op.queue, "pushed", 0)
            return added
        if isinstance(op, Claim):
            expected = self.eligible(op.queues, now)[: op.max_jobs]
            assert [c.id for c in result] == [j.id for j in expected], "claim order differs from FIFO order"
            for c, job in zip(result, expected, strict=True):
                job.status, job.attempts, job.not_before = "running", job.attempts + 1, None
                job.token, job.worker, job.seconds = c.lease, op.worker, op.lease_seconds
                job.expires_at = now + timedelta(seconds=op.lease_seconds)
                assert (c.queue, c.payload, c.attempt, c.lease_expires_at) == (
                    job.queue,
                    job.payload,
                    job.attempts,
                    job.expires_at,
                )
            return bool(result)
        if isinstance(op, Heartbeat | Complete | Fail):
            job = self.leased(op.job_id, op.lease)
            if not isinstance(job, MJob):
                assert isinstance(result, job), (op, result)
                return False
            if isinstance(op, Heartbeat):
                job.seconds = op.lease_seconds if op.lease_seconds is not None else job.seconds
                assert job.seconds is not None
                job.expires_at = now + timedelta(seconds=job.seconds)
                assert result == job.expires_at
            elif isinstance(op, Complete):
                assert result is None
                self.revoke(job)
                del self.jobs[job.id]
                self.removed.add(job.id)
                self.count(job.queue, "completed")
            else:
                self.count(job.queue, "failed")
                self.revoke(job)
                if job.attempts >= job.max_attempts:
                    assert result == FailOutcome(status="dead")
                    self.to_dead(job, op.error, None)
                else:
                    delay = self.policy.backoff(job.attempts) if op.retry_in_seconds is None else op.retry_in_seconds
                    nb = now + timedelta(seconds=delay) if delay > 0 else None
                    assert result == FailOutcome(status="pending", not_before=nb)
                    job.status, job.not_before, job.last_error, job.expiry_worker = "pending", nb, op.error, None
                    self.to_back(job)
            return True
        if isinstance(op, Requeue):
            for job_id in op.job_ids:
                if job_id not in self.jobs and job_id not in self.dead:
                    assert isinstance(result, JobNotFound), (op, result)
                    return False
                if job_id in self.jobs and self.jobs[job_id].status == "pending":
                    assert isinstance(result, ValidationError), (op, result)
                    return False
            assert result == list(op.job_ids)
            for job_id in op.job_ids:
                if job_id in self.jobs:
                    job = self.jobs[job_id]
                    self.revoke(job)
                    job.status, job.not_before = "pending", None
                    self.to_back(job)
                else:
                    d = self.dead.pop(job_id)
                    self.jobs[job_id] = MJob(
                        d.id, d.queue, d.payload, d.max_attempts, last_error=d.error, expiry_worker=d.expiry_worker
                    )
            return True
        if isinstance(op, Purge):
            if op.job_ids:
                for job_id in op.job_ids:
                    if job_id not in self.jobs and job_id not in self.dead:
                        assert isinstance(result, JobNotFound), (op, result)
                        return False
                ids = list(op.job_ids)
            elif op.status == "dead":
                ids = [d.id for d in self.dead.values() if d.queue == op.queue]
            else:
                ids = [j.id for j in self.jobs.values() if j.queue == op.queue and j.status == op.status]
            assert result == ids
            for job_id in ids:
                if job_id in self.jobs:
                    job = self.jobs.pop(job_id)
                    self.revoke(job)
                    queue = job.queue
                else:
                    queue = self.dead.pop(job_id).queue
                self.removed.add(job_id)
                self.count(queue, "purged")
            return bool(ids)
        if isinstance(op, Expire):
            expected_ids = self.expire(now)
            assert result == expected_ids
            return bool(expected_ids)
        raise AssertionError(op)


def _check_invariants(state: QueueState, model: Model) -> None:
    # Document order and content equal the model (FIFO order included).
    assert list(state.jobs) == list(model.jobs)
    assert list(state.dead) == list(model.dead)
    tokens = []
    for job_id, job in state.jobs.items():
        m = model.jobs[job_id]
        assert (job.queue, job.status, job.attempts, job.max_attempts, job.not_before) == (
            m.queue,
            m.status,
            m.attempts,
            m.max_attempts,
            m.not_before,
        ), job_id
        if m.expiry_worker is None:
            assert job.last_error == m.last_error
        else:
            assert job.last_error is not None
            assert repr(m.expiry_worker) in job.last_error
        if job.status == "running":
            assert job.lease is not None
            assert (job.lease.token, job.lease.worker, job.lease.expires_at) == (m.token, m.worker, m.expires_at)
            tokens.append(job.lease.token)
        else:
            assert job.status == "pending"
            assert job.lease is None
            assert m.token is None
    assert len(tokens) == len(set(tokens)), "two running jobs share a lease token"
    for job_id, dead in state.dead.items():
        md = model.dead[job_id]
        assert (dead.queue, dead.attempts, dead.max_attempts) == (md.queue, md.attempts, md.max_attempts)
        if md.expiry_worker is None:
            assert dead.error == md.error
        else:
            assert repr(md.expiry_worker) in dead.error
    # Every pushed id is in exactly one place.
    assert not (state.jobs.keys() & state.dead.keys())
    assert set(state.jobs) | set(state.dead) <= model.pushed
    for job_id in model.pushed:
        places = (job_id in state.jobs) + (job_id in state.dead) + (job_id in model.removed)
        assert places == 1, job_id
    # Counters equal the model's, and balance: every pushed job is still here or left by one counted way.
    for queue in set(state.queues) | set(model.counters):
        real = state.queues.get(queue)
        assert real is not None, queue
        got = {f: getattr(real, f) for f in COUNTER_FIELDS}
        assert got == model.counters.get(queue, dict.fromkeys(COUNTER_FIELDS, 0)), queue
        in_jobs = sum(1 for j in state.jobs.values() if j.queue == queue)
        in_dead = sum(1 for d in state.dead.values() if d.queue == queue)
        assert real.pushed == in_jobs + in_dead + real.completed + real.purged + real.dead_dropped, queue
        assert real.dead >= in_dead + real.dead_dropped


class _Driver:
    def __init__(self, seed: int, *, delays: bool) -> None:
        self.rng = random.Random(seed)
        self.delays = delays
        self.policy = Policy(
            max_attempts=3,
            lease_seconds=10,
            dead_letter_limit=6,
            backoff_base_seconds=0.5 if delays else 0,
            backoff_cap_seconds=4 if delays else 0,
            max_error_chars=50,
        )
        self.state = empty_state(policy=self.policy)
        self.model = Model(self.policy)
        self.next_id = 0
        self.now = T0

    def job_ref(self) -> tuple[str, str]:
        """A (job id, lease token) pair: usually a live lease, sometimes stale, unknown or wrong."""
        rng, model = self.rng, self.model
        running = [j for j in model.jobs.values() if j.status == "running"]
        roll = rng.random()
        if running and roll < 0.6:
            job = rng.choice(running)
            assert job.token is not None
            return job.id, job.token
        if model.old_tokens and roll < 0.8:
            return rng.choice(model.old_tokens)
        if model.jobs and roll < 0.9:
            return rng.choice(list(model.jobs)), "wrong-token"
        if model.dead and roll < 0.95:
            return rng.choice(list(model.dead)), "wrong-token"
        return f"ghost{rng.randrange(5)}", "wrong-token"

    def some_ids(self) -> list[str]:
        rng, model = self.rng, self.model
        pool = list(model.jobs) + list(model.dead) + [f"ghost{i}" for i in range(2)]
        running = [j.id for j in model.jobs.values() if j.status == "running"]
        pool += (running + list(model.dead)) * 3  # favour ids that can be requeued
        return rng.sample(pool, min(len(pool), rng.randint(1, 3)))

    def make_op(self) -> Operation:
        rng, policy = self.rng, self.policy
        kind = rng.choices(
            ["push", "repush", "claim", "heartbeat", "complete", "fail", "requeue", "purge_ids", "purge_status"],
            weights=[18, 2, 22, 10, 14, 14, 6, 3, 1],
        )[0]
        if kind == "push" or (kind == "repush" and not self.model.jobs):
            n = rng.randint(1, 3)
            ids = [f"j{self.next_id + i}" for i in range(n)]
            self.next_id += n
            delay = rng.choice([0, 0, 0, 2.5, 12]) if self.delays else 0
            return push_op(
                rng.choice(QUEUES),
                [{"n": i} for i in ids],
                policy=policy,
                ids=ids,
                delay_seconds=delay,
                max_attempts=rng.choice([None, 1, 2, 4]),
            )
        if kind == "repush":
            job = self.model.jobs[rng.choice(list(self.model.jobs))]
            return push_op(job.queue, ["again"], policy=policy, ids=[job.id])
        if kind == "claim":
            return claim_op(
                rng.choice(["w1", "w2", "w3"]),
                rng.sample(QUEUES, rng.randint(1, 3)),
                policy=policy,
                max_jobs=rng.randint(1, 4),
                lease_seconds=rng.choice([None, 3.0, 25.0]),
            )
        if kind in ("heartbeat", "complete", "fail"):
            job_id, token = self.job_ref()
            if kind == "heartbeat":
                seconds = rng.choice([None, None, round(rng.uniform(1, 40), 6)])
                return heartbeat_op(job_id, token, lease_seconds=seconds)
            if kind == "complete":
                return complete_op(job_id, token)
            retry = rng.choice([None, 0, 1.5]) if self.delays else rng.choice([None, 0])
            return fail_op(job_id, token, error=f"err{rng.randrange(1000)}", retry_in_seconds=retry, policy=policy)
        if kind == "requeue":
            return requeue_op(self.some_ids())
        if kind == "purge_ids":
            return purge_op(self.some_ids())
        return purge_op(queue=rng.choice(QUEUES), status=rng.choice(["pending", "running", "dead"]))

    def step(self, n: int) -> None:
        rng = self.rng
        self.now += timedelta(seconds=round(rng.uniform(0.05, 6), 6))
        self.state.dirty = False
        if rng.random() < 0.05:
            # An explicit Expire, outside apply_batch.
            result = transitions.apply(self.state, Expire(), self.now)
            changed = self.model.check(Expire(), result, self.now)
        else:
            ops = [self.make_op() for _ in range(rng.choice([1, 1, 2, 3]))]
            results = transitions.apply_batch(self.state, ops, self.now)
            changed = bool(self.model.expire(self.now))
            for op, result in zip(ops, results, strict=True):
                changed |= self.model.check(op, result, self.now)
        assert self.state.dirty == changed, f"step {n}: dirty={self.state.dirty}, changed={changed}"
        _check_invariants(self.state, self.model)
        if n % 250 == 249:
            self.round_trip(n)

    def round_trip(self, n: int) -> None:
        """Encode, parse, compare, and carry on with the parsed state."""
        state = self.state
        data = b"".join(state.encode(seq=n, writer="prop", now=self.now))
        state.encoded(seq=n, writer="prop")
        parsed = parse_document("queue.json", data, policy=self.policy)
        assert parsed.jobs == state.jobs
        assert parsed.dead == state.dead
        assert parsed.queues == state.queues
        assert b"".join(parsed.encode(seq=n + 1, writer="prop", now=self.now)) == b"".join(
            state.encode(seq=n + 1, writer="prop", now=self.now)
        )
        self.state = parsed


def _run_model_check(seed: int, *, delays: bool, steps: int) -> _Driver:
    driver = _Driver(seed, delays=delays)
    for n in range(steps):
        driver.step(n)
    return driver


@pytest.mark.parametrize("seed", [1, 20250301])
def test_random_operations_keep_every_invariant(seed: int) -> None:
    driver = _run_model_check(seed, delays=False, steps=2000)
    c = driver.model.counters
    # The run exercised every path, not just a few.
    assert sum(q["completed"] for q in c.values()) > 50
    assert sum(q["dead"] for q in c.values()) > 10
    assert sum(q["dead_dropped"] for q in c.values()) > 0
    assert sum(q["purged"] for q in c.values()) > 0
    assert sum(q["failed"] for q in c.values()) > sum(q["dead"] for q in c.values())


def test_random_operations_with_delays_and_backoff_keep_every_invariant() -> None:
    _run_model_check(7, delays=True, steps=2000)
