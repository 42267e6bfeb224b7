"""Concurrency limits (``max_running``): at most N jobs of a queue run at once,
across every worker, whatever each worker's own concurrency. The limit is
kept in the document beside the queue's pause, so every leader applies it.
(The transitions fuzz machine checks claims against a model of the limits;
tests/queueadmin/test_dashboard_limits.py sets them from the dashboard.)"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from engine import (
    ClaimedJob,
    DocumentError,
    Policy,
    QueueState,
    ValidationError,
    empty_state,
    parse_document,
    utc_now,
)
from engine.ops import MAX_RUNNING_LIMIT, claim_op, complete_op, limit_op, push_op, requeue_op
from engine.transitions import apply
from tests.engine.test_waiters import Desk, parked, payloads
from tests.engine.test_waiters import run as run_line
from tests.helpers import KEY

POLICY = Policy()


def state_with(queue: str, n: int) -> QueueState:
    state = empty_state(policy=POLICY)
    apply(state, push_op(queue, list(range(n)), policy=POLICY), utc_now())
    return state


def claim(state: QueueState, *queues: str, max_jobs: int = 10) -> list[Any]:
    return [job.payload for job in apply(state, claim_op("w", list(queues), policy=POLICY, max_jobs=max_jobs),
                                         utc_now())]


def test_one_claim_takes_no_more_than_the_limit_leaves_room_for() -> None:
    state = state_with("q", 5)
    assert apply(state, limit_op("q", 2), utc_now()) is None
    assert claim(state, "q") == [0, 1]
    assert claim(state, "q") == []
    assert state.running_here["q"] == 2 and state.room("q", utc_now()) == 0


def test_a_completion_makes_room_for_the_next_job_in_fifo_order() -> None:
    state = state_with("q", 3)
    apply(state, limit_op("q", 1), utc_now())
    [first] = apply(state, claim_op("w", ["q"], policy=POLICY, max_jobs=3), utc_now())
    assert claim(state, "q") == []
    apply(state, complete_op(first.id, first.lease), utc_now())
    assert claim(state, "q") == [1]


def test_a_limited_queue_does_not_hold_back_the_other_queues_of_a_claim() -> None:
    state = empty_state(policy=POLICY)
    apply(state, push_op("slow", ["s1", "s2"], policy=POLICY), utc_now())
    apply(state, push_op("fast", ["f1", "f2"], policy=POLICY), utc_now())
    apply(state, limit_op("slow", 1), utc_now())
    # Oldest first across both queues, skipping what the limit leaves out.
    assert claim(state, "slow", "fast") == ["s1", "f1", "f2"]


def test_a_lower_limit_lets_running_jobs_finish_and_starts_none_until_below_it() -> None:
    state = state_with("q", 4)
    running = apply(state, claim_op("w", ["q"], policy=POLICY, max_jobs=3), utc_now())
    assert apply(state, limit_op("q", 1), utc_now()) is None
    assert state.running_here["q"] == 3 and claim(state, "q") == []
    for job in running[:2]:
        apply(state, complete_op(job.id, job.lease), utc_now())
    assert claim(state, "q") == []  # still one running: at the limit
    apply(state, complete_op(running[2].id, running[2].lease), utc_now())
    assert claim(state, "q") == [3]


def test_removing_the_limit_and_requeues_keep_the_running_count_right() -> None:
    state = state_with("q", 3)
    apply(state, limit_op("q", 1), utc_now())
    [job] = apply(state, claim_op("w", ["q"], policy=POLICY), utc_now())
    apply(state, requeue_op([job.id]), utc_now())  # running -> pending, at the back
    assert state.running_here["q"] == 0
    assert claim(state, "q") == [1]
    assert apply(state, limit_op("q", None), utc_now()) == 1
    assert claim(state, "q") == [2, 0]
    assert state.running_here["q"] == 3


def test_setting_the_same_limit_changes_nothing() -> None:
    state = state_with("q", 1)
    apply(state, limit_op("q", 3), utc_now())
    state.dirty = False
    assert apply(state, limit_op("q", 3), utc_now()) == 3
    assert not state.dirty


@pytest.mark.parametrize("bad", [0, -1, MAX_RUNNING_LIMIT + 1, 1.5, True, "2"])
def test_a_bad_limit_is_refused(bad: Any) -> None:
    with pytest.raises(ValidationError, match="max_running must be a whole number from 1 to 100000, or null"):
        limit_op("q", bad)


def test_the_limit_round_trips_and_a_queue_without_one_writes_none() -> None:
    state = state_with("q", 2)
    apply(state, push_op("other", [1], policy=POLICY), utc_now())
    apply(state, limit_op("q", 7), utc_now())
    claim(state, "q", max_jobs=1)
    data = b"".join(state.encode(seq=1, writer="w", now=utc_now()))
    raw = orjson.loads(data)
    assert raw["queues"]["q"]["max_running"] == 7 and "max_running" not in raw["queues"]["other"]
    back = parse_document(KEY, data, policy=POLICY)
    assert back.queues == state.queues and back.running_here.get("q") == 1 and not back.running_here.get("other")


@pytest.mark.parametrize("bad", [0, "7", True, None])
def test_a_malformed_limit_makes_the_document_unreadable(bad: Any) -> None:
    state = state_with("q", 1)
    raw = orjson.loads(b"".join(state.encode(seq=1, writer="w", now=utc_now())))
    raw["queues"]["q"]["max_running"] = bad
    with pytest.raises(DocumentError, match=r"queues\.q\.max_running: expected an integer >= 1"):
        parse_document(KEY, orjson.dumps(raw), policy=POLICY)


async def at_limit(desk: Desk) -> tuple[ClaimedJob, asyncio.Task[list[ClaimedJob]]]:
    """Queue q limited to one, its one job running (worker a), and worker w's claim parked in line."""
    apply(desk.state, limit_op("q", 1), utc_now())
    desk.push("first")
    [first] = await desk.execute(claim_op("a", ["q"], policy=POLICY))
    task = desk.wait("w")
    await parked(desk, 1)
    return first, task


def test_a_waiter_on_a_queue_at_its_limit_is_woken_when_a_job_of_it_completes() -> None:
    """Long polls: a push to a queue at its limit wakes nobody; the completion's commit does."""

    async def scenario(desk: Desk) -> None:
        first, task = await at_limit(desk)
        desk.push("second")
        desk.commit()
        await asyncio.sleep(0)
        assert desk.line.wakes == 0 and not task.done()

        apply(desk.state, complete_op(first.id, first.lease), utc_now())
        desk.commit()
        assert payloads(await task) == ["second"]

    run_line(scenario)


def test_a_job_coming_due_in_a_queue_at_its_limit_sets_no_alarm() -> None:
    """No claim runs for it until a completion makes room: it could only come back empty."""

    async def scenario(desk: Desk) -> None:
        first, task = await at_limit(desk)
        desk.push("later", delay=0.05)
        desk.commit()
        await asyncio.sleep(0.2)
        assert desk.claims == ["a", "w"] and not task.done()  # w's first claim only

        apply(desk.state, complete_op(first.id, first.lease), utc_now())
        desk.commit()
        assert payloads(await task) == ["later"]

    run_line(scenario)


def test_a_waiter_arriving_at_a_queue_at_its_limit_sets_no_alarm_for_its_due_jobs() -> None:
    """As for a paused queue: the due time the last commit showed is not its to wait for."""

    async def scenario(desk: Desk) -> None:
        apply(desk.state, limit_op("q", 1), utc_now())
        desk.push("first")
        [first] = await desk.execute(claim_op("a", ["q"], policy=POLICY))
        desk.push("later", delay=0.05)
        desk.commit()  # nobody in line yet
        await asyncio.sleep(0.1)
        task = desk.wait("w")
        await parked(desk, 1)
        await asyncio.sleep(0.1)
        assert desk.claims == ["a", "w"] and not task.done()  # w's first claim only

        apply(desk.state, complete_op(first.id, first.lease), utc_now())
        desk.commit()
        assert payloads(await task) == ["later"]

    run_line(scenario)
