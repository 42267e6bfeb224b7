"""Long-poll claims behind a real broker (runtime.long_poll_claim, the claim
endpoint's entry point): many waiting workers do not turn a commit into a
storm of claims, an idle node still commits once per heartbeat, and a claim
that finds nothing writes nothing.

The counts come from a spy on the broker's ``aexecute`` (every claim the
long poll runs) and from the committer's and the store's counters.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from engine import Broker, DirectClient, MemoryStore, NotLeader
from engine.ops import Claim, Operation, TakeOver, claim_op, push_op
from queueadmin import runtime
from tests.helpers import wait_for

if TYPE_CHECKING:
    from pytest_django.fixtures import Settings as SettingsWrapper

WAIT = 30.0
TIMEOUT = 20.0


class ClaimSpy:
    """Wraps ``broker.aexecute``: counts the claims run, answered and in flight."""

    def __init__(self, broker: Broker) -> None:
        self.inner = broker.aexecute
        self.claims = 0
        self.answered = 0

    async def __call__(self, op: Operation) -> Any:
        if not isinstance(op, Claim):
            return await self.inner(op)
        self.claims += 1
        try:
            return await self.inner(op)
        finally:
            self.answered += 1

    @property
    def in_flight(self) -> int:
        return self.claims - self.answered


@pytest.fixture
def quiet_broker(settings: SettingsWrapper) -> Iterator[Broker]:
    """A leading broker on a fresh memory store that never heartbeats during a
    test: every commit is one the test caused."""
    settings.QUEUE_STORE_URL = f"memory://long-poll-{uuid.uuid4().hex}"
    settings.QUEUE_ADVERTISE_URL = "http://node-a.test:8000"
    settings.QUEUE_HEARTBEAT_SECONDS = 120.0
    settings.QUEUE_TAKEOVER_SECONDS = 600.0
    node = runtime.build_broker().start()
    try:
        wait_for(lambda: node.role == "leader")
        yield node
    finally:
        node.stop(timeout=10)


def spy_on(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> ClaimSpy:
    spy = ClaimSpy(broker)
    monkeypatch.setattr(broker, "aexecute", spy)
    return spy


async def until(predicate: Callable[[], bool], what: str) -> None:
    """Yield to the loop until ``predicate()`` holds (bounded, never a fixed pause)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


def waiting_claims(broker: Broker, n: int, queue: str = "q") -> list[asyncio.Task[Any]]:
    return [
        asyncio.create_task(runtime.long_poll_claim(broker, claim_op(f"w{i}", [queue], policy=broker.policy), WAIT))
        for i in range(n)
    ]


async def cancel_all(tasks: list[asyncio.Task[Any]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def test_an_idle_node_with_100_waiting_claims_commits_once_per_heartbeat_and_runs_no_claim(
    beating_broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = beating_broker
    spy = spy_on(broker, monkeypatch)
    committer = broker.committer
    assert committer is not None

    async def scenario() -> tuple[int, int, float]:
        loop = asyncio.get_running_loop()
        tasks = waiting_claims(broker, 100)
        await until(lambda: spy.answered >= 100, "every claim's first attempt")
        commits, claims, started = committer.stats.commits, spy.claims, loop.time()
        await until(lambda: committer.stats.commits >= commits + 8, "eight heartbeats")
        result = committer.stats.commits - commits, spy.claims - claims, loop.time() - started
        assert not any(task.done() for task in tasks)
        await cancel_all(tasks)
        return result

    commits, claims, elapsed = asyncio.run(scenario())

    assert claims == 0  # nothing became claimable: no waiter was woken
    assert commits <= elapsed / broker.heartbeat_seconds + 1


def test_three_jobs_wake_about_three_of_fifty_waiting_claims(
    quiet_broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = quiet_broker
    push = broker.aexecute
    spy = spy_on(broker, monkeypatch)
    committer = broker.committer
    assert committer is not None

    async def scenario() -> tuple[list[Any], int, int]:
        tasks = waiting_claims(broker, 50)
        await until(lambda: spy.answered >= 50, "every claim's first attempt")
        claims, operations = spy.claims, committer.stats.operations

        await push(push_op("q", ["a", "b", "c"], policy=broker.policy))
        await until(lambda: sum(task.done() for task in tasks) >= 3, "three claims to get jobs")
        await until(lambda: spy.in_flight == 0, "every woken claim to come back")
        done = [task.result() for task in tasks if task.done()]
        result = done, spy.claims - claims, committer.stats.operations - operations
        await cancel_all(tasks)
        return result

    done, claims, operations = asyncio.run(scenario())

    assert sorted(job.payload for jobs in done for job in jobs) == ["a", "b", "c"]
    assert len(done) == 3
    # Three claims, plus at most a few more when a commit lands between two
    # woken claims (it counts the jobs the later ones are about to take).
    assert 3 <= claims <= 6
    assert operations <= 1 + claims  # the push and those claims: no storm reached the committer


def test_a_claim_that_finds_nothing_writes_nothing(quiet_broker: Broker) -> None:
    broker = quiet_broker
    store = broker.store
    assert isinstance(store, MemoryStore)
    broker.execute(push_op("q", ["x"], policy=broker.policy, delay_seconds=300))  # pending, not due
    writes, reads = store.stats.writes, store.stats.reads

    for n in range(20):
        assert broker.execute(claim_op(f"w{n}", ["q", "empty"], policy=broker.policy)) == []

    async def long_polls() -> list[Any]:
        return await asyncio.gather(*[
            runtime.long_poll_claim(broker, claim_op(f"lp{n}", ["q"], policy=broker.policy), 0.1) for n in range(5)
        ])

    assert asyncio.run(long_polls()) == [[]] * 5
    assert (store.stats.writes, store.stats.reads) == (writes, reads)


def test_a_step_down_answers_every_waiting_claim_with_not_leader(
    beating_broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = beating_broker
    spy = spy_on(broker, monkeypatch)

    async def scenario() -> list[Any]:
        tasks = waiting_claims(broker, 5)
        await until(lambda: spy.answered >= 5, "every claim's first attempt")
        # Another node takes over; this one's next heartbeat write loses and it steps down.
        await asyncio.to_thread(
            DirectClient(broker.store).execute,
            TakeOver(broker_id="intruder", url="http://intruder.test", epoch=broker.leader.epoch),
        )
        return await asyncio.gather(*tasks, return_exceptions=True)

    outcomes = asyncio.run(scenario())

    assert all(isinstance(o, NotLeader) and o.leader_url == "http://intruder.test" for o in outcomes), outcomes
    assert broker.waiters.waiting() == 0
