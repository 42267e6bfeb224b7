"""I10 through the API: a deleted queue.json is reported by /api/v1/health and
refused with a JSON 503 ``document_missing``, and nothing re-creates it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest
from django.test import Client

from engine import Broker
from queueadmin import runtime

if TYPE_CHECKING:
    from pytest_django.fixtures import Settings as SettingsWrapper

KEY = "queue.json"
TOKEN = "test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


@pytest.fixture
def broker(settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch) -> Iterator[Broker]:
    settings.QUEUE_STORE_URL = f"memory://lost-{uuid.uuid4().hex}"
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


def test_a_deleted_document_is_reported_and_refused_until_reinitialised(broker: Broker) -> None:
    api = Client(headers=AUTH)
    pushed = api.post("/api/v1/jobs", {"queue": "q", "payload": 1}, content_type="application/json")
    assert pushed.status_code == 201
    broker.store.delete(KEY)
    wait_until(lambda: broker.document_missing is not None)

    health = Client().get("/api/v1/health")
    assert health.status_code == 200
    document = health.json()["document"]
    assert document["state"] == "missing" and document["error"] == "document_missing"
    assert "queueinit" in document["message"]

    refused = api.post("/api/v1/jobs", {"queue": "q", "payload": 2}, content_type="application/json")
    assert refused.status_code == 503
    assert refused["Content-Type"] == "application/json"
    assert refused.json()["error"] == "document_missing"
    assert broker.store.get(KEY) is None
