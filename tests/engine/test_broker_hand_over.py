"""A graceful stop hands the lead over (``Broker.stop``, ``HandOver``): the
stopping leader's last commit names no leader, so a standby takes over at
its next poll instead of after a whole takeover interval without commits,
and nothing the stopping leader acknowledged is lost on the way."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import orjson
import pytest

from engine import Broker, MemoryStore, NotLeader
from engine.direct import DirectClient
from engine.document import QueueState
from engine.errors import StoreUnavailable, ValidationError
from engine.model import BrokerInfo
from engine.ops import HandOver, TakeOver, claim_op, push_op
from engine.policy import Policy
from engine.transitions import apply
from tests.helpers import KEY, document, wait_for

BEAT = 0.05
#: Far longer than any wait below: a standby that took over did so because it
#: was handed the lead, not because the leader went quiet.
LONG_TAKEOVER = 60.0
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_the_transition_names_no_leader_and_keeps_the_epoch() -> None:
    state = QueueState(policy=Policy())
    state.broker = BrokerInfo(id="a", url="http://a", epoch=3)
    apply(state, HandOver(broker_id="a", epoch=3), NOW)
    assert state.broker == BrokerInfo(epoch=3) and state.dirty


@pytest.mark.parametrize("named", [BrokerInfo(id="b", url="http://b", epoch=4), BrokerInfo(id="a", epoch=4)])
def test_the_transition_refuses_a_leader_that_was_replaced(named: BrokerInfo) -> None:
    state = QueueState(policy=Policy())
    state.broker = named
    with pytest.raises(ValidationError, match="does not lead"):
        apply(state, HandOver(broker_id="a", epoch=3), NOW)
    assert state.broker == named and not state.dirty


@pytest.fixture
def brokers() -> Callable[..., Broker]:
    made: list[Broker] = []

    def make(store: MemoryStore, url: str, **kwargs: object) -> Broker:
        options = {"heartbeat_seconds": BEAT, "takeover_seconds": LONG_TAKEOVER, **kwargs}
        broker = Broker(store, url=url, **options)  # type: ignore[arg-type]
        made.append(broker.start())
        return broker

    yield make  # type: ignore[misc]
    for broker in made:
        broker.stop(timeout=10, hand_over=False)


def test_a_stopping_leader_hands_over_and_a_standby_takes_over_at_its_next_poll(
    brokers: Callable[..., Broker],
) -> None:
    store = MemoryStore()
    a = brokers(store, "http://a", policy=Policy(lease_seconds=30))
    wait_for(lambda: a.role == "leader")
    [pushed] = a.execute(push_op("q", ["x"], policy=a.policy))
    a.execute(push_op("q", ["y"], policy=a.policy))
    [claimed] = a.execute(claim_op("w", ["q"], policy=a.policy))
    b = brokers(store, "http://b")
    wait_for(lambda: b.leader.id == a.id)

    a.stop()
    # a's last commit names nobody, at a's epoch; a refuses with no leader to name.
    assert a.role == "stopped" and a.leader == BrokerInfo(epoch=1)
    # b takes over long before a takeover interval (60 s) without commits.
    wait_for(lambda: b.role == "leader", timeout=10)
    after = document(store)
    assert after["broker"] == {"id": b.id, "url": "http://b", "epoch": 2}
    jobs = {job["id"]: job for job in after["jobs"]}
    assert claimed.id == pushed and jobs[pushed]["status"] == "running"
    # The running lease kept running across the hand-over, renewed by b's takeover.
    assert jobs[pushed]["lease"]["token"] == claimed.lease
    assert b.execute(claim_op("w", ["q"], policy=b.policy))[0].payload == "y"


def test_a_stop_without_hand_over_leaves_the_document_naming_the_leader(brokers: Callable[..., Broker]) -> None:
    store = MemoryStore()
    a = brokers(store, "http://a")
    wait_for(lambda: a.role == "leader")
    a.stop(hand_over=False)
    assert document(store)["broker"] == {"id": a.id, "url": "http://a", "epoch": 1}


def test_every_push_acknowledged_while_the_leader_stops_is_in_the_handed_over_document(
    brokers: Callable[..., Broker],
) -> None:
    """Pushes race the stop: each is acknowledged (and then in the document
    that names no leader, I1/I2) or refused as not_leader; none is both."""
    store = MemoryStore()
    a = brokers(store, "http://a")
    wait_for(lambda: a.role == "leader")
    acknowledged: list[str] = []
    refused: list[BaseException] = []
    started = threading.Barrier(5)

    def pusher(n: int) -> None:
        started.wait()
        for i in range(10_000):
            try:
                acknowledged.extend(a.execute(push_op("q", [f"{n}-{i}"], policy=a.policy)))
            except NotLeader as exc:
                refused.append(exc)
                return

    threads = [threading.Thread(target=pusher, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    started.wait()
    wait_for(lambda: len(acknowledged) >= 50)
    a.stop()
    for thread in threads:
        thread.join(10)
    after = document(store)
    assert after["broker"] == {"id": None, "url": None, "epoch": 1}
    assert len(refused) == 4  # every pusher ended on a refusal
    assert {job["id"] for job in after["jobs"]} == set(acknowledged)


def test_a_leader_replaced_before_it_stops_hands_nothing_over(brokers: Callable[..., Broker]) -> None:
    """The hand-over is a conditional write of a's last version: an intruder's
    takeover in between fails it, and the document keeps naming the intruder."""
    store = MemoryStore()
    a = brokers(store, "http://a", heartbeat_seconds=30)  # no heartbeat meanwhile
    wait_for(lambda: a.role == "leader")
    a.execute(push_op("q", ["x"], policy=a.policy))
    DirectClient(store).execute(TakeOver(broker_id="intruder", url="http://intruder", epoch=1))

    a.stop()
    assert document(store)["broker"] == {"id": "intruder", "url": "http://intruder", "epoch": 2}
    assert a.leader.id == "intruder"  # a's committer read who replaced it


class _RefusingWrites(MemoryStore):
    """Writes of the document fail, outcome unknown, once ``down`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.down = threading.Event()

    def put_parts(self, key: str, parts: Sequence[bytes], **kwargs: object) -> str:  # type: ignore[override]
        if self.down.is_set() and not key.endswith(".created"):
            raise StoreUnavailable("the store is down")
        return super().put_parts(key, parts, **kwargs)  # type: ignore[arg-type]


def test_a_leader_whose_store_fails_the_hand_over_still_stops(brokers: Callable[..., Broker]) -> None:
    store = _RefusingWrites()
    a = brokers(store, "http://a")
    wait_for(lambda: a.role == "leader")
    store.down.set()
    a.stop(timeout=1)
    assert a.role == "stopped"
    store.down.clear()
    # Nothing was handed over: the standbys wait a takeover interval, as after
    # a crash. Nor later: the stopped node's committer does not go on retrying
    # the hand-over once the store takes writes again (its retries back off
    # for at most a second each).
    time.sleep(2)
    assert document(store)["broker"] == {"id": a.id, "url": "http://a", "epoch": 1}


class _LosesTheHandOversAnswer(MemoryStore):
    """The first write of a document that names no leader (the hand-over)
    lands and then fails as if its answer was lost (outcome unknown)."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = 0

    def put_parts(self, key: str, parts: Sequence[bytes], **kwargs: object) -> str:  # type: ignore[override]
        etag = super().put_parts(key, parts, **kwargs)  # type: ignore[arg-type]
        if key == KEY and not self.lost and orjson.loads(b"".join(parts))["broker"]["id"] is None:
            self.lost += 1
            raise StoreUnavailable("the answer was lost")
        return etag


def test_a_hand_over_whose_answer_is_lost_is_settled_by_the_re_read(
    brokers: Callable[..., Broker], caplog: pytest.LogCaptureFixture,
) -> None:
    """The re-read finds the hand-over landed: a document that names nobody at
    this leader's epoch is its own doing, not a successor's, so the stopping
    leader does not take it for a takeover and fail what rode the write."""
    store = _LosesTheHandOversAnswer()
    a = brokers(store, "http://a")
    wait_for(lambda: a.role == "leader")
    with caplog.at_level("INFO", logger="engine.broker"):
        a.stop()
    assert store.lost == 1
    assert document(store)["broker"] == {"id": None, "url": None, "epoch": 1}
    # Settled as landed: neither a step-down ("replaced by broker None") nor a
    # refused hand-over, whose batch's other operations would have been
    # answered not_leader although they landed.
    assert a.last_error is None
    assert "handed over queue.json (epoch 1)" in caplog.text and "without handing over" not in caplog.text
