"""The fuzz suite's Hypothesis profile (see :mod:`tests.fuzz.profiles`) and
the nodes its examples run against.

The example database lives in ``.hypothesis/`` (not in git): a failure found
once is replayed first the next time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.fuzz import profiles
from tests.fuzz.nodes import MAX_PAYLOAD, MAX_REQUEST, TOKEN, Nodes

if TYPE_CHECKING:
    from django.test import Client
    from pytest_django.fixtures import Settings as SettingsWrapper

def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A fuzz test runs many examples and shrinks what fails: give it the
    profile's time. A hang is still a failure of its call, after seconds."""
    for item in items:
        if "tests/fuzz/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.timeout(profiles.TIMEOUT_SECONDS))


@pytest.fixture
def node_settings(settings: SettingsWrapper) -> SettingsWrapper:
    settings.QUEUE_ADVERTISE_URL = "http://node-a.test:8000"
    settings.QUEUE_API_TOKEN = TOKEN
    settings.QUEUE_LEASE_SECONDS = 30.0
    settings.QUEUE_HEARTBEAT_SECONDS = 120.0  # no idle commits: "nothing changed" is byte for byte
    settings.QUEUE_TAKEOVER_SECONDS = 600.0
    settings.QUEUE_MAX_PAYLOAD_BYTES = MAX_PAYLOAD
    settings.QUEUE_MAX_REQUEST_BYTES = MAX_REQUEST
    return settings


@pytest.fixture
def nodes(node_settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch, db: None) -> Nodes:
    """Fresh nodes for each example. With the test database: a wrong token
    is looked up among the API tokens there, and the dashboard needs it."""
    return Nodes(monkeypatch)


@pytest.fixture
def operator_client(db: None) -> Client:
    """A signed-in superuser: every permission, every queue."""
    from django.contrib.auth.models import User
    from django.test import Client

    client = Client()
    client.force_login(User.objects.create_superuser("fuzz-operator", "op@example.com", "pw"))
    return client
