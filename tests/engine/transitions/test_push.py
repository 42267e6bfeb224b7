"""Pure transition tests (engine.transitions). Push: new jobs, explicit ids and their dedup, delayed
jobs. The builders and the test clock are in builders.py.
"""

from __future__ import annotations

from tests.engine.transitions.builders import (
    T0,
    at,
    claim,
    claim_ids,
    claim_one,
    counters,
    kill,
    new_state,
    push,
    snapshot,
    zero_counters,
)

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
