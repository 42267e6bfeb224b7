"""A leading embedded broker that heartbeats fast, for API tests that watch
the node carry on (or stop) between commits. A plugin (tests/conftest.py):
ask for ``beating_broker``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from engine import Broker
from queueadmin import runtime
from tests.helpers import wait_for

if TYPE_CHECKING:
    from pytest_django.fixtures import Settings as SettingsWrapper

TOKEN = "test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def beating_broker(settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch) -> Iterator[Broker]:
    """A started broker on a fresh memory store, leading, heartbeating every
    50 ms, and the one the API views use."""
    settings.QUEUE_STORE_URL = f"memory://node-{uuid.uuid4().hex}"
    settings.QUEUE_ADVERTISE_URL = "http://node-a.test:8000"
    settings.QUEUE_API_TOKEN = TOKEN
    settings.QUEUE_HEARTBEAT_SECONDS = 0.05
    settings.QUEUE_TAKEOVER_SECONDS = 0.4
    node = runtime.build_broker().start()
    try:
        wait_for(lambda: node.role == "leader")
        monkeypatch.setattr(runtime, "get_broker", lambda: node)
        yield node
    finally:
        node.stop(timeout=10)
