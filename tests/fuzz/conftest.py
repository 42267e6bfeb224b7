"""Hypothesis profiles and the node every fuzz example runs against.

Profiles (``HYPOTHESIS_PROFILE``): ``ci`` (the default) keeps the whole fuzz
suite around a minute on a small CI machine; ``long`` searches about twenty
times deeper for a run on a developer's machine
(``HYPOTHESIS_PROFILE=long pytest tests/fuzz``). The example database lives in
``.hypothesis/`` (not in git): a failure found once is replayed first next time.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, Phase, settings

from tests.fuzz.nodes import MAX_PAYLOAD, MAX_REQUEST, TOKEN, Nodes

if TYPE_CHECKING:
    from pytest_django.fixtures import Settings as SettingsWrapper

_COMMON = {
    "deadline": None,  # per-call deadlines are the tests' own (see asgi_driver)
    # A fixture such as ``node`` is shared by a test's examples on purpose:
    # each example asks it for a fresh broker.
    "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                              HealthCheck.data_too_large],
    "print_blob": True,
}
settings.register_profile("ci", max_examples=60, stateful_step_count=30, **_COMMON)
settings.register_profile("long", max_examples=1500, stateful_step_count=80, **_COMMON)
# Replay the database and the explicit examples only: quick, for checking a fix.
settings.register_profile("replay", max_examples=60, phases=[Phase.explicit, Phase.reuse], **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def scaled(n: int) -> int:
    """``n`` examples under the ci profile, proportionally more under a larger one."""
    return max(1, n * settings.default.max_examples // 60)


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
