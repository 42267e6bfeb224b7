"""Fixtures for the whole suite.

No test starts the embedded broker unless it asks for one (see
:func:`pytest_configure`).

Every test starts with no ``AWS_*``, ``AZURE_*`` or ``GOOGLE_*`` variables and no
cloud config files, so no test can pick up real credentials or reach a real
cloud endpoint by accident.
A test that needs S3 asks for fixtures that set dummy credentials for moto
(see ``tests/s3_fixtures.py``); those run after this one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
# Every test under these folders gets the marker, so that ``-m "not e2e"``
# (``make test-fast``) never depends on a module remembering its pytestmark.
MARKERS_BY_FOLDER = {TESTS / "e2e": "e2e", TESTS / "fuzz": "fuzz"}

pytest_plugins = [
    "tests.s3_fixtures",
    "tests.cloud_fixtures",
    "tests.queueadmin.dashboard_fixtures",
    "tests.queueadmin.node_fixtures",
]


def pytest_configure(config: pytest.Config) -> None:
    """Keep ``import queueadmin.asgi`` from starting the embedded broker in
    tests, and hash passwords with a fast hasher.

    pytest-django has loaded the settings before any conftest runs, so this
    changes the loaded setting rather than the environment. That also keeps it
    in this process: daphne processes started by end-to-end tests inherit the
    environment and must start their brokers.
    """
    from django.conf import settings

    settings.QUEUE_BROKER_AUTOSTART = False
    # Tests make many users and sign some in: a deliberately slow hasher
    # (PBKDF2, about 1 s a password on a busy CI machine) buys nothing here.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by the folder it lives in (see ``MARKERS_BY_FOLDER``)."""
    for item in items:
        for folder, marker in MARKERS_BY_FOLDER.items():
            if item.path.is_relative_to(folder):
                item.add_marker(marker)


@pytest.fixture(autouse=True)
def _no_real_cloud(monkeypatch: pytest.MonkeyPatch) -> None:
    """Strip every ``AWS_*``, ``AZURE_*`` and ``GOOGLE_*`` variable for the duration of each test.

    Also point boto's config and credential files at nothing (``~/.aws`` is
    part of its credential chain too) and disable the EC2 metadata service,
    which botocore would otherwise probe over the network.
    """
    for name in list(os.environ):
        if name.startswith(("AWS_", "AZURE_", "GOOGLE_", "GCE_")) or name == "STORAGE_EMULATOR_HOST":
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    # The same for Google's chain (gcloud's folder, the GCE metadata server).
    monkeypatch.setenv("CLOUDSDK_CONFIG", os.devnull)
    monkeypatch.setenv("NO_GCE_CHECK", "true")


class _NoRecorder:
    """Stands in for the finished-job recorder (queueadmin.history): takes departures, records nothing."""

    def offer(self, departures: object) -> None:
        pass


@pytest.fixture(autouse=True)
def _finished_jobs_unrecorded(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Brokers built in a test record no finished jobs unless it uses the
    ``finished_recorder`` fixture: the recorder's thread writes to the
    database outside the test's transaction (and after it, while it retries)."""
    if "finished_recorder" in request.fixturenames:
        return
    from queueadmin.history import recorder

    monkeypatch.setattr(recorder, "shared_recorder", lambda **kwargs: _NoRecorder())


@pytest.fixture(autouse=True)
def _no_api_tokens_of_other_tests() -> Iterator[None]:
    """Each test starts with no database API token cached: the cache outlives
    the test's database transaction, and a test without database access
    keeps the last tokens read (as a node keeps them through an outage)."""
    from queueadmin.api import auth

    yield
    auth.digests.clear()
