"""I8 through the API: an operation that gets past validation but breaks the
commit is answered alone with a JSON 400 operation_failed, never a 500 or a
hang, and the node carries on."""

from __future__ import annotations

from typing import Any

import pytest

from engine import Broker, QueueState
from tests.helpers import wait_for
from tests.queueadmin.api_client import Client
from tests.queueadmin.node_fixtures import TOKEN


@pytest.fixture
def broker(beating_broker: Broker) -> Broker:
    """This file's broker heartbeats fast (tests/queueadmin/node_fixtures.py)."""
    return beating_broker

def test_an_operation_that_cannot_be_encoded_gets_a_json_400_and_the_node_carries_on(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = QueueState.encode

    def encode(self: QueueState, **kwargs: Any) -> list[bytes]:
        if "poison" in self.queues:  # stands in for input that validation missed
            raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")
        return original(self, **kwargs)

    monkeypatch.setattr(QueueState, "encode", encode)
    api = Client(headers={"Authorization": f"Bearer {TOKEN}"})
    refused = api.post("/api/v1/jobs", {"queue": "poison", "payload": 1}, content_type="application/json")
    assert refused.status_code == 400
    assert refused["Content-Type"] == "application/json"
    assert refused.json()["error"] == "operation_failed"
    pushed = api.post("/api/v1/jobs", {"queue": "q", "payload": 2}, content_type="application/json")
    assert pushed.status_code == 201
    seq = broker.seq
    wait_for(lambda: broker.seq >= seq + 3)  # heartbeats go on
    assert broker.role == "leader"
