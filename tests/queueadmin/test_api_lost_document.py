"""I10 through the API: a deleted queue.json is reported by /api/v1/health and
refused with a JSON 503 ``document_missing``, and nothing re-creates it."""

from __future__ import annotations

import pytest

from engine import Broker
from tests.helpers import KEY, wait_for
from tests.queueadmin.api_client import Client
from tests.queueadmin.node_fixtures import AUTH


@pytest.fixture
def broker(beating_broker: Broker) -> Broker:
    """This file's broker heartbeats fast (tests/queueadmin/node_fixtures.py)."""
    return beating_broker

def test_a_deleted_document_is_reported_and_refused_until_reinitialised(broker: Broker) -> None:
    api = Client(headers=AUTH)
    pushed = api.post("/api/v1/jobs", {"queue": "q", "payload": 1}, content_type="application/json")
    assert pushed.status_code == 201
    broker.store.delete(KEY)
    wait_for(lambda: broker.document_missing is not None)

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
