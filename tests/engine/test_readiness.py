"""A node's readiness (``Broker.readiness``, behind ``GET /readyz``): the
pure rule, then real brokers on a memory store in each state."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engine import Broker, DocumentError, DocumentMissing, FaultyStore, MemoryStore, StoreUnavailable, StoreUnsafe
from engine.readiness import assess
from tests.helpers import KEY, wait_for


def test_the_rule_in_each_state() -> None:
    fresh = {"store_ok_at": 10.0, "now": 10.2, "takeover_seconds": 1.0, "missing": None, "unreadable": None,
             "last_error": None}
    assert assess(role="leader", **fresh).ready
    assert assess(role="standby", **fresh).ready
    assert assess(role="standby", **fresh).store_age_seconds == pytest.approx(0.2)
    missing, unreadable = DocumentMissing("queue.json", "it is gone"), DocumentError("queue.json", "not JSON")
    cases = {
        "stopped": assess(role="stopped", **fresh),
        "store_unsafe": assess(role="standby", **{**fresh, "store_ok_at": None},
                               unsafe=StoreUnsafe("a second create replaced the first", "s3://b")),
        "starting": assess(role="standby", **{**fresh, "store_ok_at": None, "last_error": "connection refused"}),
        "document_missing": assess(role="standby", **{**fresh, "missing": missing}),
        "document_unreadable": assess(role="standby", **{**fresh, "unreadable": unreadable}),
        "store_unreachable": assess(role="leader", **{**fresh, "now": 11.5, "last_error": "timed out"}),
    }
    for reason, readiness in cases.items():
        assert not readiness.ready and readiness.reason == reason, readiness
    assert "connection refused" in cases["starting"].message
    assert "gone" in cases["document_missing"].message
    assert "s3://b: a second create replaced the first" in cases["store_unsafe"].message
    assert "1.5 s ago" in cases["store_unreachable"].message and "timed out" in cases["store_unreachable"].message



def test_a_leader_and_a_standby_that_reads_the_store_are_ready(make_broker: Callable[..., Broker]) -> None:
    store = MemoryStore()
    leader = make_broker(store, "http://a")
    wait_for(lambda: leader.role == "leader")
    standby = make_broker(store, "http://b")
    wait_for(lambda: standby.readiness().ready)
    assert leader.readiness().ready and leader.readiness().role == "leader"
    assert standby.readiness().role == "standby"
    leader.stop()
    assert leader.readiness().reason == "stopped"


def test_a_standby_that_cannot_reach_the_store_stops_being_ready(make_broker: Callable[..., Broker]) -> None:
    memory = MemoryStore()
    leader = make_broker(memory, "http://a")
    wait_for(lambda: leader.role == "leader")

    class Unreachable(FaultyStore):
        down = False

        def etag(self, key: str) -> str | None:
            if self.down:
                raise StoreUnavailable("injected: the store does not answer")
            return super().etag(key)

    store = Unreachable(memory)
    standby = make_broker(store, "http://b")
    wait_for(lambda: standby.readiness().ready)
    store.down = True
    wait_for(lambda: standby.readiness().reason == "store_unreachable", timeout=5)
    assert "does not answer" in standby.readiness().message
    store.down = False
    wait_for(lambda: standby.readiness().ready, timeout=5)


def test_an_unreadable_document_makes_every_node_unready(make_broker: Callable[..., Broker]) -> None:
    store = MemoryStore()
    store.put(KEY, b"{corrupt")
    node = make_broker(store, "http://a")
    wait_for(lambda: node.readiness().reason == "document_unreadable", timeout=5)
    assert KEY in node.readiness().message
