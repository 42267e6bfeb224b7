"""I8 through the API: an operation that gets past validation but breaks the
commit is answered alone with a JSON 400 operation_failed, never a 500 or a
hang, and the node carries on."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest
from django.test import Client

from engine import Broker, QueueState
from queueadmin import runtime

if TYPE_CHECKING:
    from pytest_django.fixtures import Settings as SettingsWrapper

TOKEN = "test-token-0123456789"


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


@pytest.fixture
def broker(settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch) -> Iterator[Broker]:
    settings.QUEUE_STORE_URL = f"memory://faults-{uuid.uuid4().hex}"
    settings.QUEUE_ADVERTISE_URL = "http://node-a.test:8000"
    settings.QUEUE_API_TOKEN = TOKEN
    settings.QUEUE_HEARTBEAT_SECONDS = 0.05
    settings.QUEUE_TAKEOVER_SECONDS = 0.4
    node = runtime.build_broker().start()
    try:
        wait_until(lambda: node.role == "leader")
        monkeypatch.setattr(runtime, "get_broker", lambda: node)
        yield node
    finally:
        node.stop(timeout=10)


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
    wait_until(lambda: broker.seq >= seq + 3)  # heartbeats go on
    assert broker.role == "leader"
