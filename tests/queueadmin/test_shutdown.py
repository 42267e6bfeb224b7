"""queueadmin.shutdown's patch of daphne's ``Server.kill_all_applications``:
it cancels the requests in flight after the broker's stop, and, whatever
goes wrong while it waits for them, it still cancels and its Deferred still
fires (the reactor's shutdown waits for it). The whole path, with real
daphne processes and SIGTERM, is tests/e2e/test_hand_over.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import daphne.server  # first: it installs the asyncio reactor that daphne serves on
import pytest
from twisted.internet import defer

from queueadmin import shutdown


class _Broken:
    """An application instance whose state cannot be read."""

    def done(self) -> bool:
        raise RuntimeError("not this shape")


class _FakeServer:
    def __init__(self, connections: dict[Any, dict[str, Any]]) -> None:
        self.connections = connections


@pytest.fixture
def cancelled(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """daphne's own kill_all_applications replaced by a recorder, then patched by the module."""
    calls: list[object] = []

    def record(server: object) -> str:
        calls.append(server)
        return "cancelled"

    monkeypatch.setattr(daphne.server.Server, "kill_all_applications", record)
    shutdown._cancel_after_the_stop()
    yield calls


def _fired(deferred: Any) -> list[object]:
    results: list[object] = []
    deferred.addBoth(results.append)
    return results


def test_without_a_stop_under_way_it_cancels_at_once(cancelled: list[object],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutdown, "_stopping", None)
    server = _FakeServer({})
    assert daphne.server.Server.kill_all_applications(server) == "cancelled"  # type: ignore[arg-type]
    assert cancelled == [server]


def test_it_cancels_only_once_the_stop_is_over(cancelled: list[object], monkeypatch: pytest.MonkeyPatch) -> None:
    stopping: Any = defer.Deferred()
    monkeypatch.setattr(shutdown, "_stopping", stopping)
    server = _FakeServer({})
    results = _fired(daphne.server.Server.kill_all_applications(server))  # type: ignore[arg-type]
    assert cancelled == [] and results == []
    stopping.callback(None)
    assert cancelled == [server] and results == ["cancelled"]


def test_it_cancels_and_fires_even_if_it_cannot_tell_what_is_running(
    cancelled: list[object], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shutdown, "_stopping", defer.succeed(None))
    server = _FakeServer({object(): {"application_instance": _Broken()}})
    results = _fired(daphne.server.Server.kill_all_applications(server))  # type: ignore[arg-type]
    assert cancelled == [server] and results == ["cancelled"]


class _Transport:
    """What :func:`shutdown.unsent` reads of a Twisted FileDescriptor's write buffers."""

    def __init__(self, data: bytes, offset: int, later: int) -> None:
        self.dataBuffer, self.offset, self._tempDataLen = data, offset, later


class _Protocol:
    def __init__(self, transport: object) -> None:
        self.transport = transport


def test_an_answer_still_in_the_transports_buffer_counts_as_unsent() -> None:
    """The reactor's shutdown closes connections without flushing them: an
    answer written but not yet sent would be lost, so the wait counts it."""
    assert shutdown.unsent(_Protocol(_Transport(b"HTTP/1.1 200 OK", 0, 0))) == 15
    assert shutdown.unsent(_Protocol(_Transport(b"HTTP/1.1 200 OK", 15, 0))) == 0
    assert shutdown.unsent(_Protocol(_Transport(b"", 0, 173))) == 173
    assert shutdown.unsent(_Protocol(object())) == 0  # another shape: nothing to wait for
    assert shutdown.unsent(object()) == 0
