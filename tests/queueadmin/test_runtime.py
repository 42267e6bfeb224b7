"""The embedded broker's runtime: the singleton, when it starts, the commit
notifier long-poll claims wait on, and the seq-watching store wrapper."""

from __future__ import annotations

import asyncio
import importlib
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from engine import utc_now
from queueadmin import runtime
from queueadmin.metrics import sampler
from tests.helpers import behind_fault_store

if TYPE_CHECKING:
    from pytest_django.fixtures import Settings as SettingsWrapper

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def memory_node(settings: SettingsWrapper) -> Iterator[SettingsWrapper]:
    """Settings for this process's broker on a fresh memory store; stops it after."""
    runtime.stop_broker()
    settings.QUEUE_STORE_URL = f"memory://runtime-{uuid.uuid4().hex}"
    settings.QUEUE_ADVERTISE_URL = None
    yield settings
    runtime.stop_broker()


def test_the_test_suite_does_not_autostart() -> None:
    from django.conf import settings

    assert settings.QUEUE_BROKER_AUTOSTART is False


def test_get_broker_is_one_lazy_singleton_and_does_not_start_it(memory_node: SettingsWrapper) -> None:
    seen: list[object] = []
    threads = [threading.Thread(target=lambda: seen.append(runtime.get_broker())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len({id(b) for b in seen}) == 1
    assert runtime.get_broker().role == "stopped"
    assert runtime.get_broker().url is None  # QUEUE_ADVERTISE_URL unset: advertises nothing


def test_start_and_stop_broker(memory_node: SettingsWrapper) -> None:
    broker = runtime.start_broker()
    assert runtime.start_broker() is broker  # idempotent
    assert broker.role in ("standby", "leader")

    runtime.stop_broker()
    runtime.stop_broker()  # idempotent

    assert broker.role == "stopped"
    assert runtime.get_broker() is not broker  # a fresh one from the settings now in force


def test_importing_the_asgi_app_starts_the_broker_only_when_autostart_is_on(memory_node: SettingsWrapper) -> None:
    import queueadmin.asgi

    memory_node.QUEUE_BROKER_AUTOSTART = False
    importlib.reload(queueadmin.asgi)
    assert runtime.get_broker().role == "stopped"

    memory_node.QUEUE_BROKER_AUTOSTART = True
    try:
        importlib.reload(queueadmin.asgi)
        assert runtime.get_broker().role in ("standby", "leader")
        assert sampler._sampler is not None  # the metrics history starts with the broker
    finally:
        sampler.stop_sampler()


def test_notify_wakes_waiters_on_every_loop_and_they_unregister() -> None:
    notifier = runtime.CommitNotifier()
    notifier.notify()  # nobody waits: nothing happens
    ready = threading.Barrier(3)
    woken: list[bool] = []

    def waiter() -> None:
        async def wait() -> None:
            with notifier.listen() as event:
                ready.wait()
                woken.append(await asyncio.wait_for(event.wait(), timeout=10))

        asyncio.run(wait())  # each thread runs its own event loop

    threads = [threading.Thread(target=waiter) for _ in range(2)]
    for thread in threads:
        thread.start()
    ready.wait()
    assert notifier.waiting() == 2
    notifier.notify()
    for thread in threads:
        thread.join(10)

    assert woken == [True, True]
    assert notifier.waiting() == 0


def test_notify_ignores_a_closed_loop() -> None:
    notifier = runtime.CommitNotifier()
    loop = asyncio.new_event_loop()
    listening = notifier.listen()

    async def enter() -> None:
        listening.__enter__()

    loop.run_until_complete(enter())
    loop.close()

    notifier.notify()  # must not raise although the loop is gone
    assert notifier.waiting() == 1


def test_a_node_on_a_fault_store_reads_the_clock_its_control_file_sets(
    settings: SettingsWrapper, tmp_path: Path,
) -> None:
    """Chaos runs set a node's clock off through its fault store; any other store gives the real clock."""
    behind_fault_store(settings, tmp_path / "store", b'{"clock_offset_seconds": -20}')
    chaos_node = runtime.build_broker()
    settings.QUEUE_STORE_URL = (tmp_path / "plain").as_uri()
    plain_node = runtime.build_broker()

    assert -21 < (chaos_node.clock() - utc_now()).total_seconds() < -19
    assert abs((plain_node.clock() - utc_now()).total_seconds()) < 1
