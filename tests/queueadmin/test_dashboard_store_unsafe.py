"""A node whose store failed its check of conditional writes
(engine.storecheck): every page says so in a banner, instead of only an empty
queue ("No queues yet") with the reason in the broker panel."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from django.test import Client

from engine import Broker
from queueadmin import runtime
from queueadmin.dashboard.source import source
from tests.helpers import behind_fault_store, wait_for

if TYPE_CHECKING:
    from pytest_django.fixtures import SettingsWrapper

pytestmark = pytest.mark.django_db


@contextlib.contextmanager
def node_on(
    tmp_path: Path, settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch, plan: bytes,
) -> Iterator[Broker]:
    """This process's node on a folder store behind the fault store, with ``plan`` as its faults."""
    behind_fault_store(settings, tmp_path / "store", plan)
    node = runtime.build_broker().start()
    try:
        monkeypatch.setattr(runtime, "get_broker", lambda: node)
        source.reset()
        yield node
    finally:
        node.stop()


@pytest.fixture
def unsafe(tmp_path: Path, settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch) -> Iterator[Broker]:
    with node_on(tmp_path, settings, monkeypatch, b'{"unconditional": true}') as node:
        wait_for(lambda: node.store_unsafe is not None)
        yield node


@pytest.mark.parametrize("path", ["/", "/jobs/", "/workers/", "/audit/", "/submit/"])
def test_every_page_says_the_node_writes_nothing_and_why(unsafe: Broker, operator: Client, path: str) -> None:
    response = operator.get(path)

    assert response.status_code == 200
    assert b'id="store-unsafe"' in response.content
    assert b"the store does not honour conditional writes" in response.content
    assert b"replaced the first instead of being refused" in response.content


def test_no_banner_on_a_store_that_passed(
    tmp_path: Path, settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch, operator: Client,
) -> None:
    with node_on(tmp_path, settings, monkeypatch, b"{}") as node:
        wait_for(lambda: node.role == "leader")
        assert b'id="store-unsafe"' not in operator.get("/").content
