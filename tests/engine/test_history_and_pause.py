"""Attempt history on jobs and dead letters, and pausing a queue.

The history is what the dashboard's job timeline is drawn from: each finished
attempt (failed, expired, requeued) with its worker, claim and last heartbeat
times, and a bounded error. Pausing a queue stops its claims and nothing else.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson
import pytest

from engine import transitions
from engine.document import QueueState
from engine.errors import DocumentError, ValidationError
from engine.model import Attempt, ClaimedJob
from engine.ops import (
    Expire,
    claim_op,
    complete_op,
    fail_op,
    heartbeat_op,
    pause_op,
    push_op,
    requeue_op,
)
from engine.parsing import empty_state, parse_document
from engine.policy import HISTORY_ATTEMPTS, HISTORY_ERROR_CHARS, Policy

T0 = datetime(2025, 3, 1, 9, 30, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def new_state(**policy: object) -> QueueState:
    return empty_state(policy=Policy(**policy))  # type: ignore[arg-type]


def push(state: QueueState, queue: str = "q", n: int = 1, *, now: datetime = T0) -> list[str]:
    return transitions.push(state, push_op(queue, list(range(n)), policy=state.policy), now)


def claim(state: QueueState, queues: list[str] | None = None, *, worker: str = "w1", now: datetime = T0,
          lease_seconds: float | None = None, max_jobs: int = 1) -> list[ClaimedJob]:
    op = claim_op(worker, queues or ["q"], policy=state.policy, max_jobs=max_jobs, lease_seconds=lease_seconds)
    return transitions.claim(state, op, now)


def fail(state: QueueState, job_id: str, lease: str, error: str, *, now: datetime) -> None:
    op = fail_op(job_id, lease, error=error, retry_in_seconds=0, policy=state.policy)
    transitions.fail(state, op, now)


def round_trip(state: QueueState) -> QueueState:
    data = b"".join(state.encode(seq=state.seq + 1, writer="w", now=T0))
    return parse_document("queue.json", data, policy=state.policy)


# -- history ------------------------------------------------------------------------------------------


def test_a_fresh_job_has_no_history_and_a_completed_attempt_adds_none() -> None:
    state = new_state()
    [a, b] = push(state, n=2)
    assert state.jobs[a].history == ()
    [c] = claim(state)
    transitions.complete(state, complete_op(c.id, c.lease), at(1))
    assert state.jobs[b].history == ()


def test_fail_records_the_attempt_with_worker_times_and_error() -> None:
    state = new_state(max_attempts=5)
    [a] = push(state)
    [c] = claim(state, worker="alpha", now=at(1))
    transitions.heartbeat(state, heartbeat_op(a, c.lease), at(4))
    fail(state, a, c.lease, "ValueError: bad row", now=at(6))

    assert state.jobs[a].history == (
        Attempt(worker="alpha", claimed_at=at(1), heartbeat_at=at(4), ended_at=at(6), end="failed",
                error="ValueError: bad row"),
    )


def test_expiry_records_an_expired_attempt_with_the_last_heartbeat() -> None:
    state = new_state(max_attempts=5)
    [a] = push(state)
    [c] = claim(state, worker="ghost", lease_seconds=10)
    transitions.heartbeat(state, heartbeat_op(a, c.lease), at(5))
    transitions.apply(state, Expire(), at(16))

    [attempt] = state.jobs[a].history
    assert (attempt.worker, attempt.heartbeat_at, attempt.ended_at, attempt.end) == ("ghost", at(5), at(16), "expired")
    assert attempt.error is not None and "stopped heartbeating" in attempt.error
    assert attempt.error.endswith(f"(last at {at(5):%Y-%m-%d %H:%M:%S}.{at(5).microsecond // 1000:03d} UTC)"), (
        attempt.error)


def test_requeue_of_a_running_job_records_a_requeued_attempt() -> None:
    state = new_state()
    [a] = push(state)
    claim(state, worker="w9")
    transitions.requeue(state, requeue_op([a]), at(3))

    [attempt] = state.jobs[a].history
    assert (attempt.worker, attempt.end, attempt.error, attempt.ended_at) == ("w9", "requeued", None, at(3))


def test_history_follows_a_job_into_the_dead_letters_and_back() -> None:
    state = new_state(max_attempts=2)
    [a] = push(state)
    for n, worker in enumerate(["w1", "w2"]):
        [c] = claim(state, worker=worker, now=at(10 * n))
        fail(state, a, c.lease, f"error {n}", now=at(10 * n + 1))
    dead = state.dead[a]
    assert [(h.worker, h.error) for h in dead.history] == [("w1", "error 0"), ("w2", "error 1")]

    transitions.requeue(state, requeue_op([a]), at(30))
    assert state.jobs[a].history == dead.history
    assert state.jobs[a].attempts == 0


def test_history_keeps_only_the_newest_attempts_and_bounds_each_error() -> None:
    state = new_state(max_attempts=HISTORY_ATTEMPTS + 5)
    [a] = push(state)
    for n in range(HISTORY_ATTEMPTS + 3):
        [c] = claim(state, now=at(n))
        fail(state, a, c.lease, f"#{n} " + "x" * 2000, now=at(n + 0.5))

    history = state.jobs[a].history
    assert len(history) == HISTORY_ATTEMPTS
    assert history[0].error is not None and history[0].error.endswith("x")
    assert all(len(h.error or "") == HISTORY_ERROR_CHARS for h in history)
    assert history[-1].ended_at == at(HISTORY_ATTEMPTS + 2.5)
    assert history[0].claimed_at == at(3)  # the three oldest were dropped


def test_history_round_trips_through_the_document_exactly() -> None:
    state = new_state(max_attempts=2)
    [a, b] = push(state, n=2)
    [c] = claim(state, worker="w1", now=at(1))
    fail(state, a, c.lease, "first\nline two", now=at(2))
    [c2] = claim(state, worker="w2", now=at(3))  # b
    [c3] = claim(state, worker="w3", now=at(4))  # a again
    fail(state, a, c3.lease, "second", now=at(5))  # dead now
    transitions.requeue(state, requeue_op([b]), at(6))
    assert c2.id == b

    parsed = round_trip(state)

    assert parsed.dead[a].history == state.dead[a].history
    assert parsed.jobs[b].history == state.jobs[b].history
    doc = orjson.loads(b"".join(state.encode(seq=1, writer="w", now=T0)))
    [dead] = doc["dead"]
    assert [h["end"] for h in dead["history"]] == ["failed", "failed"]
    assert dead["history"][0]["error"] == "first\nline two"


@pytest.mark.parametrize(
    ("history", "words"),
    [
        ("x", ("history", "expected a list")),
        ([1], ("history[0]", "expected an object")),
        ([{"end": "vanished"}], ("history[0].end", "'vanished'")),
        ([{"end": "failed", "worker": "w", "claimed_at": "2025-01-01T00:00:00Z",
           "heartbeat_at": "2025-01-01T00:00:00Z", "ended_at": "soon"}], ("history[0].ended_at", "'soon'")),
        ([{"end": "failed", "worker": "w", "claimed_at": "2025-01-01T00:00:00Z",
           "heartbeat_at": "2025-01-01T00:00:00Z", "ended_at": "2025-01-01T00:00:00Z", "error": 5}],
         ("history[0].error", "string")),
    ],
)
def test_a_malformed_history_is_refused_naming_the_field(history: object, words: tuple[str, ...]) -> None:
    state = new_state()
    push(state)
    doc = orjson.loads(b"".join(state.encode(seq=1, writer="w", now=T0)))
    doc["jobs"][0]["history"] = history

    with pytest.raises(DocumentError) as info:
        parse_document("queue.json", orjson.dumps(doc), policy=state.policy)

    for word in words:
        assert word in str(info.value)


# -- pause ----------------------------------------------------------------------------------------------


def test_a_paused_queue_takes_pushes_but_hands_out_no_claims() -> None:
    state = new_state()
    [a] = push(state, "q")
    [b] = push(state, "other")

    assert transitions.apply(state, pause_op("q"), T0) is False
    pending_after_pause = push(state, "q")

    assert state.queues["q"].pushed == 2
    assert claim(state, ["q"]) == []
    assert [c.id for c in claim(state, ["q", "other"], max_jobs=5)] == [b]

    assert transitions.apply(state, pause_op("q", paused=False), T0) is True
    assert [c.id for c in claim(state, ["q"], max_jobs=5)] == [a, *pending_after_pause]


def test_pausing_leaves_running_jobs_alone() -> None:
    state = new_state()
    [a] = push(state)
    [c] = claim(state)
    transitions.apply(state, pause_op("q"), T0)

    transitions.heartbeat(state, heartbeat_op(a, c.lease), at(1))
    transitions.complete(state, complete_op(a, c.lease), at(2))
    assert state.queues["q"].completed == 1


def test_a_queue_can_be_paused_before_its_first_push_and_the_flag_round_trips() -> None:
    state = new_state()
    transitions.apply(state, pause_op("later"), T0)
    assert state.dirty

    parsed = round_trip(state)

    assert parsed.queues["later"].paused is True
    push(parsed, "later")
    assert claim(parsed, ["later"]) == []


def test_pause_refuses_a_bad_queue_name_or_flag() -> None:
    with pytest.raises(ValidationError):
        pause_op("bad name")
    with pytest.raises(ValidationError):
        pause_op("q", paused="yes")  # type: ignore[arg-type]


def test_a_non_boolean_paused_flag_in_the_document_is_refused() -> None:
    state = new_state()
    push(state)
    doc = orjson.loads(b"".join(state.encode(seq=1, writer="w", now=T0)))
    doc["queues"]["q"]["paused"] = "no"

    with pytest.raises(DocumentError, match=r"queues\.q\.paused"):
        parse_document("queue.json", orjson.dumps(doc), policy=state.policy)


# -- give up ----------------------------------------------------------------------------------------


def test_fail_with_give_up_dead_letters_with_attempts_left() -> None:
    state = new_state(max_attempts=5)
    [a] = push(state)
    [c] = claim(state)
    op = fail_op(a, c.lease, error="not a task", retry_in_seconds=None, policy=state.policy, give_up=True)

    outcome = transitions.fail(state, op, at(1))

    assert outcome.status == "dead" and a not in state.jobs
    dead = state.dead[a]
    assert (dead.attempts, dead.max_attempts, dead.error) == (1, 5, "not a task")
    assert state.queues["q"].dead == 1 and state.queues["q"].failed == 1


def test_give_up_must_be_a_boolean() -> None:
    with pytest.raises(ValidationError):
        fail_op("a", "lease", error="e", retry_in_seconds=None, policy=Policy(), give_up="yes")  # type: ignore[arg-type]
