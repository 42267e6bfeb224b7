"""The line of waiting long-poll claims (engine.WaitingClaims), driven by hand.

Each test holds one QueueState and plays the committer: a claim is applied to
the state at once (``Desk.execute``), and a "commit" is a call of
``committed(state)``. Everything runs on one event loop, so the order of
events is the test's, not the scheduler's. (tests/queueadmin/test_long_poll.py
runs the same line behind a real broker.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from engine import ClaimedJob, NotLeader, Policy, QueueState, WaitingClaims, empty_state, utc_now
from engine.ops import Claim, claim_op, pause_op, push_op
from engine.transitions import apply

POLICY = Policy()
WAIT = 30.0
TIMEOUT = 10.0


class Desk:
    """A state, the line, and a fake committer that applies claims at once."""

    def __init__(self) -> None:
        self.state: QueueState = empty_state(policy=POLICY)
        self.line = WaitingClaims()
        self.claims: list[str] = []  # the worker of every claim run, in order
        self.before_answer: Callable[[], None] | None = None  # runs once, after the next claim applied

    async def execute(self, op: Claim) -> list[ClaimedJob]:
        self.claims.append(op.worker)
        jobs: list[ClaimedJob] = apply(self.state, op, utc_now())
        hook, self.before_answer = self.before_answer, None
        if hook is not None:
            hook()
        await asyncio.sleep(0)  # an answer is never synchronous
        return jobs

    def push(self, *payloads: Any, queue: str = "q", delay: float = 0) -> None:
        apply(self.state, push_op(queue, list(payloads), policy=POLICY, delay_seconds=delay), utc_now())

    def commit(self) -> None:
        self.line.committed(self.state)

    def wait(self, worker: str, *, queues: tuple[str, ...] = ("q",), max_jobs: int = 1,
             wait: float = WAIT) -> asyncio.Task[list[ClaimedJob]]:
        op = claim_op(worker, queues, policy=POLICY, max_jobs=max_jobs)
        return asyncio.create_task(self.line.claim(self.execute, op, wait))


async def until(predicate: Callable[[], bool], what: str = "condition") -> None:
    """Yield to the loop until ``predicate()`` holds (bounded, never a fixed pause)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)


async def parked(desk: Desk, n: int) -> None:
    await until(lambda: desk.line.parked() == n, f"{n} parked claims")


def run(scenario: Callable[[Desk], Awaitable[None]]) -> Desk:
    desk = Desk()
    asyncio.run(asyncio.wait_for(scenario(desk), TIMEOUT))
    return desk


def payloads(jobs: list[ClaimedJob]) -> list[Any]:
    return [job.payload for job in jobs]


def test_a_commit_wakes_as_many_waiters_as_jobs_became_claimable_first_come_first_served() -> None:
    async def scenario(desk: Desk) -> None:
        tasks = []
        for n in range(5):
            tasks.append(desk.wait(f"w{n}"))
            await parked(desk, n + 1)  # one at a time: the arrival order is known
        desk.push("a", "b")
        desk.commit()

        assert payloads(await tasks[0]) == ["a"]
        assert payloads(await tasks[1]) == ["b"]
        await parked(desk, 3)
        assert desk.claims == ["w0", "w1", "w2", "w3", "w4", "w0", "w1"]  # one claim each, then two
        assert desk.line.wakes == 2

        desk.commit()  # nothing claimable: nobody wakes, nothing runs
        await asyncio.sleep(0)
        assert len(desk.claims) == 7
        for task in tasks[2:]:
            task.cancel()
        await asyncio.gather(*tasks[2:], return_exceptions=True)
        assert desk.line.waiting() == 0

    run(scenario)


def test_a_waiter_that_claimed_nothing_keeps_its_place_in_line() -> None:
    async def scenario(desk: Desk) -> None:
        first = desk.wait("first")
        await parked(desk, 1)
        second = desk.wait("second")
        await parked(desk, 2)
        desk.push("taken by someone else")
        desk.commit()
        # A claim that does not wait takes the job before the woken one runs.
        apply(desk.state, claim_op("thief", ["q"], policy=POLICY), utc_now())
        await until(lambda: desk.claims.count("first") == 2, "the woken claim")
        await parked(desk, 2)

        desk.push("next")
        desk.commit()

        assert payloads(await first) == ["next"]
        assert desk.claims == ["first", "second", "first", "first"]
        second.cancel()

    run(scenario)


def test_a_claim_in_flight_when_jobs_arrived_claims_again_when_it_comes_back_empty() -> None:
    async def scenario(desk: Desk) -> None:
        def push_and_commit() -> None:
            # The claim was applied (and found nothing) before this push; the
            # commit carrying both lands before the claim is answered.
            desk.push("arrived meanwhile")
            desk.commit()

        desk.before_answer = push_and_commit
        task = desk.wait("w")

        assert payloads(await task) == ["arrived meanwhile"]
        assert desk.claims == ["w", "w"]

    run(scenario)


def test_a_waiter_of_several_queues_is_woken_once_and_a_multi_job_claim_counts_for_its_jobs() -> None:
    async def scenario(desk: Desk) -> None:
        both = desk.wait("both", queues=("a", "b"), max_jobs=2)
        await parked(desk, 1)
        other = desk.wait("other", queues=("b",))
        await parked(desk, 2)
        desk.push(1, queue="a")
        desk.push(2, 3, queue="b")
        desk.commit()

        assert sorted(payloads(await both)) == [1, 2]
        assert payloads(await other) == [3]
        assert desk.line.wakes == 2

    run(scenario)


def test_a_paused_queue_wakes_nobody_until_it_is_resumed() -> None:
    async def scenario(desk: Desk) -> None:
        task = desk.wait("w")
        await parked(desk, 1)
        apply(desk.state, pause_op("q"), utc_now())
        desk.push("held")
        desk.commit()
        await asyncio.sleep(0)
        assert desk.line.wakes == 0 and not task.done()

        apply(desk.state, pause_op("q", paused=False), utc_now())
        desk.commit()

        assert payloads(await task) == ["held"]

    run(scenario)


def test_a_delayed_job_wakes_a_waiter_when_it_is_due_without_another_commit() -> None:
    async def scenario(desk: Desk) -> None:
        task = desk.wait("w")
        await parked(desk, 1)
        desk.push("later", delay=0.2)
        pushed_at = utc_now()
        desk.commit()
        assert desk.line.wakes == 0

        assert payloads(await task) == ["later"]
        assert utc_now() - pushed_at >= timedelta(seconds=0.2)
        assert desk.claims == ["w", "w"]

    run(scenario)


def test_a_waiter_arriving_after_the_delayed_push_committed_learns_its_due_time() -> None:
    async def scenario(desk: Desk) -> None:
        desk.push("later", delay=0.2)
        desk.commit()  # nobody waits yet; no commit follows

        assert payloads(await desk.wait("w")) == ["later"]

    run(scenario)


def test_close_answers_every_waiter_with_the_error() -> None:
    async def scenario(desk: Desk) -> None:
        tasks = [desk.wait(f"w{n}") for n in range(3)]
        await parked(desk, 3)

        desk.line.close(NotLeader("http://node-b.test"))

        for task in tasks:
            with pytest.raises(NotLeader) as raised:
                await task
            assert raised.value.leader_url == "http://node-b.test"
        assert desk.line.waiting() == 0
        assert desk.claims == ["w0", "w1", "w2"]

    run(scenario)


def test_a_cancelled_waiter_leaves_and_passes_on_a_wake_it_did_not_use() -> None:
    async def scenario(desk: Desk) -> None:
        gone = desk.wait("gone")
        await parked(desk, 1)
        stays = desk.wait("stays")
        await parked(desk, 2)
        desk.push("job")
        desk.commit()  # wakes "gone"...
        gone.cancel()  # ...whose client hangs up before its claim runs

        assert payloads(await stays) == ["job"]
        assert desk.claims == ["gone", "stays", "stays"]
        assert gone.cancelled()
        assert desk.line.waiting() == 0

    run(scenario)


def test_time_running_out_answers_an_empty_list_and_leaves_the_line() -> None:
    async def scenario(desk: Desk) -> None:
        assert await desk.wait("w", wait=0.05) == []
        assert desk.claims == ["w"]
        assert desk.line.waiting() == 0

    run(scenario)


def test_claimable_counts_up_to_its_limit_and_due_times_come_earliest_first() -> None:
    state = empty_state(policy=POLICY)
    now = utc_now()
    apply(state, push_op("q", list(range(1000)), policy=POLICY), now)
    for delay in (30, 10, 20, 40):
        apply(state, push_op("q", [delay], policy=POLICY, delay_seconds=delay), now)
    apply(state, claim_op("w", ["q"], policy=POLICY, max_jobs=998), now)

    assert state.claimable("q", now, 5) == 2
    assert state.claimable("q", now, 1) == 1
    assert state.claimable("nope", now, 5) == 0
    assert state.due_times("q", 3) == [now + timedelta(seconds=s) for s in (10, 20, 30)]
    assert state.next_due() == {"q": now + timedelta(seconds=10)}
    assert state.claimable("q", now + timedelta(seconds=25), 10) == 4  # two became due


def test_delayed_due_counts_jobs_due_here_promoted_or_not_and_forgets_those_claimed() -> None:
    state = empty_state(policy=POLICY)
    now = utc_now()
    apply(state, push_op("q", list(range(3)), policy=POLICY), now)  # never delayed: not counted
    for delay in (5, 5, 10, 60):
        apply(state, push_op("q", [delay], policy=POLICY, delay_seconds=delay), now)
    soon = now + timedelta(seconds=11)
    assert state.delayed_due("q", soon, 10) == 3  # 60 s is later
    assert state.delayed_due("q", soon, 2) == 2
    assert state.delayed_due("q", now + timedelta(seconds=61), 10) == 4
    assert state.delayed_due("nope", soon, 10) == 0
    # Come due and promoted by a claim that takes only the three ready ones:
    # the two waiting for their FIFO turn still count.
    apply(state, claim_op("w", ["q"], policy=POLICY, max_jobs=3), now + timedelta(seconds=6))
    assert state.delayed_due("q", soon, 10) == 3
    apply(state, claim_op("w", ["q"], policy=POLICY, max_jobs=2), now + timedelta(seconds=6))
    assert state.delayed_due("q", soon, 10) == 1  # claimed: no longer here with a delay
    assert state.delayed_due("q", now + timedelta(seconds=61), 10) == 2
