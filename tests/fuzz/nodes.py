"""A fresh leading broker per fuzz example, and the settings it runs with.

Each example gets a new broker on its own memory store (about a millisecond
to start), so one example that wedges or corrupts a node cannot make the
next ones fail for its reasons, and shrinking finds the real minimal input.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from engine import Broker
from queueadmin import runtime
from queueadmin.dashboard.source import source

TOKEN = "fuzz-token-0123456789"
AUTH = {"authorization": f"Bearer {TOKEN}"}
MAX_PAYLOAD = 4096
MAX_REQUEST = 64 * 1024


def _stop(broker: Broker) -> None:
    """Stop ``broker`` without letting a wedged one stop the suite."""
    stopper = threading.Thread(target=broker.stop, kwargs={"timeout": 2.0}, daemon=True)
    stopper.start()
    stopper.join(3.0)


class Nodes:
    """Fresh leading brokers, each on its own memory store, that the views use."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.current: Broker | None = None
        monkeypatch.setattr(runtime, "get_broker", self._get)

    def _get(self) -> Broker:
        assert self.current is not None, "no fuzz node is running"
        return self.current

    @contextmanager
    def fresh(self) -> Iterator[Broker]:
        from django.conf import settings as django_settings

        django_settings.QUEUE_STORE_URL = f"memory://fuzz-{uuid.uuid4().hex}"
        broker = runtime.build_broker().start()
        deadline = time.monotonic() + 5
        while broker.role != "leader":
            assert time.monotonic() < deadline, "the fuzz node did not lead in time"
            time.sleep(0.001)
        self.current = broker
        source.reset()
        runtime.seen_workers.clear()
        try:
            yield broker
        finally:
            self.current = None
            _stop(broker)
            source.reset()
