"""Rate limits (``rate_limit``): at most N jobs of a queue start in each window
of S seconds, across every worker. The limit and its window are kept in the
document, so a new leader carries on the window instead of granting a fresh
one. (The transitions fuzz machine checks claims against a model of the
windows; tests/queueadmin/test_dashboard_rate_limits.py sets them from the
dashboard.)"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from engine import DocumentError, Policy, QueueState, RateLimit, ValidationError, empty_state, parse_document, utc_now
from engine.ops import (
    MAX_RATE_JOBS,
    claim_op,
    complete_op,
    limit_op,
    push_op,
    rate_limit_op,
)
from engine.optypes import Expire, TakeOver
from engine.transitions import apply
from tests.engine.test_waiters import Desk, parked, payloads
from tests.engine.test_waiters import run as run_line
from tests.helpers import KEY

POLICY = Policy()
T0 = datetime(2026, 12, 4, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def state_with(queue: str, n: int) -> QueueState:
    state = empty_state(policy=POLICY)
    apply(state, push_op(queue, list(range(n)), policy=POLICY), T0)
    return state


def claim(state: QueueState, when: float, *queues: str, max_jobs: int = 10) -> list[Any]:
    op = claim_op("w", list(queues), policy=POLICY, max_jobs=max_jobs, lease_seconds=3600)
    return [job.payload for job in apply(state, op, at(when))]


def test_a_window_starts_at_most_its_jobs_and_the_next_window_starts_more() -> None:
    state = state_with("q", 10)
    assert apply(state, rate_limit_op("q", 3, 10), T0) is None
    assert claim(state, 0, "q", max_jobs=2) == [0, 1]
    assert claim(state, 5, "q") == [2]  # the window opened at 0 has one left
    assert claim(state, 9.99, "q") == []
    assert state.rate_reopens("q", at(9.99)) == at(10)
    assert claim(state, 10, "q") == [3, 4, 5]  # a new window opens at 10
    assert state.queues["q"].rate_limit == RateLimit(jobs=3, seconds=10, window_start=at(10), window_started=3)


def test_an_idle_queue_gets_a_whole_window_at_its_first_start() -> None:
    state = state_with("q", 6)
    apply(state, rate_limit_op("q", 2, 1), T0)
    assert claim(state, 0, "q") == [0, 1]
    # Nothing asked for a while: the window opens at the next start, not on
    # the clock's beat, so a start at 7.9 gets two.
    assert claim(state, 7.9, "q") == [2, 3]
    assert claim(state, 8.5, "q") == []
    assert claim(state, 8.9, "q") == [4, 5]


def test_the_rate_and_the_concurrency_limit_both_hold() -> None:
    state = state_with("q", 6)
    apply(state, rate_limit_op("q", 4, 60), T0)
    apply(state, limit_op("q", 2), T0)
    assert claim(state, 0, "q") == [0, 1]  # the concurrency limit
    assert state.room("q", at(0)) == 0 and state.rate_reopens("q", at(0)) is None
    apply(state, limit_op("q", None), T0)
    assert claim(state, 1, "q") == [2, 3]  # the rate's window has two left
    assert claim(state, 2, "q") == [] and state.room("q", at(2)) == 0


def test_a_rate_limited_queue_does_not_hold_back_the_other_queues_of_a_claim() -> None:
    state = empty_state(policy=POLICY)
    apply(state, push_op("slow", ["s1", "s2", "s3"], policy=POLICY), T0)
    apply(state, push_op("fast", ["f1", "f2"], policy=POLICY), T0)
    apply(state, rate_limit_op("slow", 1, 60), T0)
    assert claim(state, 0, "slow", "fast") == ["s1", "f1", "f2"]
    assert claim(state, 1, "slow", "fast") == []


def test_a_job_started_again_after_its_lease_expired_counts_again() -> None:
    """Every start counts, including a retry's: the downstream service sees each."""
    state = state_with("q", 3)
    apply(state, rate_limit_op("q", 2, 60), T0)
    op = claim_op("w", ["q"], policy=POLICY, max_jobs=1, lease_seconds=1)
    [job] = apply(state, op, T0)
    apply(state, Expire(), at(2))  # back to pending, at the back of the queue
    assert state.jobs[job.id].status == "pending"
    assert claim(state, 3, "q") == [1]
    assert claim(state, 4, "q") == []  # two starts in the window: 0 and then 1


def test_a_new_rate_keeps_the_open_windows_starts_and_removing_it_frees_the_queue() -> None:
    state = state_with("q", 10)
    apply(state, rate_limit_op("q", 3, 60), T0)
    assert claim(state, 0, "q") == [0, 1, 2]
    assert apply(state, rate_limit_op("q", 5, 60), at(1)) == {"jobs": 3, "seconds": 60.0}
    assert claim(state, 2, "q") == [3, 4]  # five in the window opened at 0
    assert apply(state, rate_limit_op("q", 1, 30), at(3)) == {"jobs": 5, "seconds": 60.0}
    assert claim(state, 29, "q") == []  # the window now closes at 30
    assert claim(state, 30, "q") == [5]
    assert apply(state, rate_limit_op("q", None), at(31)) == {"jobs": 1, "seconds": 30.0}
    assert state.queues["q"].rate_limit is None
    assert claim(state, 31, "q") == [6, 7, 8, 9]


def test_setting_the_same_rate_changes_nothing() -> None:
    state = state_with("q", 1)
    apply(state, rate_limit_op("q", 3, 1.5), T0)
    state.dirty = False
    assert apply(state, rate_limit_op("q", 3, 1.5), T0) == {"jobs": 3, "seconds": 1.5}
    assert not state.dirty


@pytest.mark.parametrize(("jobs", "seconds", "problem"), [
    (0, 1, "jobs must be a whole number from 1 to 1000000"),
    (MAX_RATE_JOBS + 1, 1, "jobs must be a whole number"),
    (1.5, 1, "jobs must be a whole number"),
    (True, 1, "jobs must be a whole number"),
    ("2", 1, "jobs must be a whole number"),
    (5, 0, "seconds must be a number from 0.01 to 86400"),
    (5, 0.001, "seconds must be a number"),
    (5, 86_401, "seconds must be a number"),
    (5, float("nan"), "seconds must be a number"),
    (5, float("inf"), "seconds must be a number"),
    (5, None, "seconds must be a number"),
    (5, "1", "seconds must be a number"),
    (5, False, "seconds must be a number"),
    (None, 1, "without jobs has no seconds"),
])
def test_a_bad_rate_is_refused(jobs: Any, seconds: Any, problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        rate_limit_op("q", jobs, seconds)


def test_the_rate_and_its_window_round_trip_so_a_new_leader_carries_on_the_window() -> None:
    state = state_with("q", 5)
    apply(state, push_op("other", [1], policy=POLICY), T0)
    apply(state, rate_limit_op("q", 2, 30), T0)
    unopened = orjson.loads(b"".join(state.encode(seq=1, writer="w", now=T0)))
    assert unopened["queues"]["q"]["rate_limit"] == {"jobs": 2, "seconds": 30.0}
    assert "rate_limit" not in unopened["queues"]["other"]
    assert claim(state, 1, "q") == [0, 1]
    data = b"".join(state.encode(seq=2, writer="w", now=at(1)))
    assert orjson.loads(data)["queues"]["q"]["rate_limit"] == {
        "jobs": 2, "seconds": 30.0, "window_start": "2026-12-04T12:00:01Z", "window_started": 2}
    leader = parse_document(KEY, data, policy=POLICY)
    assert leader.queues == state.queues
    assert claim(leader, 20, "q") == []  # the old leader's window is still open
    assert claim(leader, 31, "q") == [2, 3]


def test_a_new_leader_whose_clock_runs_behind_holds_the_queue_at_most_one_window_longer() -> None:
    """The old leader's clock ran an hour ahead: its window would stay open an hour on the new leader's clock.
    The takeover moves the window's start to the new leader's now, keeping its count (as leases are renewed)."""
    state = state_with("q", 5)
    apply(state, rate_limit_op("q", 2, 30), T0)
    assert claim(state, 3600, "q") == [0, 1]  # at T0 + 1 h on the old leader's clock
    ahead = orjson.loads(b"".join(state.encode(seq=2, writer="old", now=at(3600))))["queues"]["q"]["rate_limit"]
    apply(state, TakeOver(broker_id="new", url=None, epoch=state.broker.epoch), T0)
    assert state.queues["q"].rate_limit == RateLimit(jobs=2, seconds=30, window_start=T0, window_started=2)
    assert ahead["window_start"] == "2026-12-04T13:00:00Z"
    assert claim(state, 29, "q") == []  # still the old window's two
    assert claim(state, 30, "q") == [2, 3]  # not an hour later


def test_a_takeover_leaves_a_window_in_the_new_leaders_past_as_it_was() -> None:
    state = state_with("q", 5)
    apply(state, rate_limit_op("q", 2, 30), T0)
    assert claim(state, 0, "q") == [0, 1]
    apply(state, TakeOver(broker_id="new", url=None, epoch=state.broker.epoch), at(10))
    assert state.queues["q"].rate_limit == RateLimit(jobs=2, seconds=30, window_start=T0, window_started=2)
    assert claim(state, 30, "q") == [2, 3]


@pytest.mark.parametrize(("rate", "problem"), [
    ({"jobs": 0, "seconds": 1}, r"rate_limit\.jobs: expected an integer >= 1"),
    ({"jobs": 2}, r"rate_limit: missing field 'seconds'|seconds"),
    ({"jobs": 2, "seconds": 0}, r"rate_limit\.seconds: expected a positive number"),
    ({"jobs": 2, "seconds": 100_000}, r"rate_limit: expected at most 1000000 jobs per 0.01 to 86400 seconds"),
    ({"jobs": 2, "seconds": 1, "window_start": "2026-12-04T12:00:00Z"}, "window_start and window_started together"),
    ({"jobs": 2, "seconds": 1, "window_start": "yesterday", "window_started": 1}, "expected an ISO 8601 time"),
    ({"jobs": 2, "seconds": 1, "window_start": "2026-12-04T12:00:00Z", "window_started": -1},
     r"window_started: expected an integer >= 0"),
    ("2/s", r"rate_limit: expected an object"),
])
def test_a_malformed_rate_limit_makes_the_document_unreadable(rate: Any, problem: str) -> None:
    state = state_with("q", 1)
    raw = orjson.loads(b"".join(state.encode(seq=1, writer="w", now=T0)))
    raw["queues"]["q"]["rate_limit"] = rate
    with pytest.raises(DocumentError, match=problem):
        parse_document(KEY, orjson.dumps(raw), policy=POLICY)


def test_a_waiter_on_a_used_up_window_is_woken_when_it_closes_without_a_commit() -> None:
    """Long polls: time, not a commit, ends a rate window, so the line sets an alarm for it."""

    async def scenario(desk: Desk) -> None:
        apply(desk.state, rate_limit_op("q", 1, 0.3), utc_now())
        desk.push("first", "second")
        await desk.execute(claim_op("a", ["q"], policy=POLICY))
        desk.commit()
        task = desk.wait("w")
        await parked(desk, 1)
        assert desk.claims == ["a", "w"] and not task.done()  # w's first claim found the window used up
        desk.push("third")
        desk.commit()  # counted with w in line: still nothing before the window closes
        await asyncio.sleep(0)
        assert desk.line.wakes == 0
        assert payloads(await task) == ["second"]  # no commit since: the alarm at the window's end
        assert desk.claims == ["a", "w", "w"]

    run_line(scenario)


def test_a_waiter_arriving_after_the_window_filled_learns_when_it_closes() -> None:
    async def scenario(desk: Desk) -> None:
        apply(desk.state, rate_limit_op("q", 1, 0.3), utc_now())
        desk.push("first", "second")
        await desk.execute(claim_op("a", ["q"], policy=POLICY))
        desk.commit()  # nobody in line yet
        task = desk.wait("w")
        assert payloads(await task) == ["second"]
        assert desk.claims == ["a", "w", "w"]

    run_line(scenario)


def test_a_completion_does_not_reopen_a_used_up_window() -> None:
    async def scenario(desk: Desk) -> None:
        apply(desk.state, rate_limit_op("q", 1, 60), utc_now())
        desk.push("first", "second")
        [first] = await desk.execute(claim_op("a", ["q"], policy=POLICY))
        task = desk.wait("w", wait=0.3)
        await parked(desk, 1)
        apply(desk.state, complete_op(first.id, first.lease), utc_now())
        desk.commit()
        assert await task == []  # the window lasts a minute
        assert desk.line.wakes == 0

    run_line(scenario)


def test_a_rate_limit_in_words_groups_its_thousands() -> None:
    assert RateLimit(jobs=10, seconds=60.0).describe() == "10 per 60 s"
    assert RateLimit(jobs=1000, seconds=0.5).describe() == "1,000 per 0.5 s"
