"""Pure transition tests (engine.transitions). Claim: FIFO order across queues, leases and attempts.
The builders and the test clock are in builders.py.
"""

from __future__ import annotations

from engine import transitions
from engine.ops import limit_op, pause_op
from tests.engine.transitions.builders import (
    at,
    claim,
    claim_ids,
    claim_one,
    fail,
    new_state,
    push,
    snapshot,
)

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


# -- claim in the order of the queues (priorities) ---------------------------------------------------


def test_a_claim_in_order_drains_each_queue_before_the_next() -> None:
    state = new_state()
    low = push(state, "low", [1, 2], now=at(0))
    high = push(state, "high", [3, 4], now=at(1))
    mid = push(state, "mid", [5], now=at(2))

    got = [c.id for c in claim(state, ["high", "mid", "low"], max_jobs=4, in_order=True, now=at(3))]

    assert got == high + mid + low[:1]  # each queue still in FIFO order (I7)
    assert [claim_one(state, ["high", "mid", "low"], in_order=True, now=at(3)).id] == low[1:]


def test_a_claim_in_order_one_job_at_a_time_takes_a_later_push_to_an_earlier_queue_first() -> None:
    state = new_state()
    low = push(state, "low", [1, 2], now=at(0))
    assert claim_one(state, ["high", "low"], in_order=True, now=at(1)).id == low[0]
    high = push(state, "high", [3], now=at(2))
    assert claim_one(state, ["high", "low"], in_order=True, now=at(3)).id == high[0]
    assert claim_one(state, ["high", "low"], in_order=True, now=at(3)).id == low[1]


def test_a_claim_in_order_passes_over_a_queue_that_has_nothing_it_may_take() -> None:
    """Paused, at its concurrency limit, or holding only jobs not yet due:
    the next queue's jobs are taken, not nothing."""
    state = new_state()
    push(state, "paused", [1])
    transitions.set_paused(state, pause_op("paused"), at(0))
    full = push(state, "full", [2, 3])
    transitions.set_limit(state, limit_op("full", 1), at(0))
    push(state, "later", [4], delay_seconds=60)
    rest = push(state, "rest", [5])
    order = ["paused", "full", "later", "rest"]

    got = [c.id for c in claim(state, order, max_jobs=10, in_order=True, now=at(1))]

    assert got == [full[0], *rest]


def test_a_claim_in_order_of_one_queue_is_a_plain_claim() -> None:
    plain, ordered = new_state(), new_state()
    for state in (plain, ordered):
        push(state, "q", [1, 2, 3])
    assert [c.payload for c in claim(plain, max_jobs=2)] == [c.payload for c in claim(ordered, max_jobs=2,
                                                                                       in_order=True)] == [1, 2]
