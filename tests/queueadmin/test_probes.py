"""``/livez`` and ``/readyz`` through the ASGI application daphne serves
(queueadmin.asgi): no token, no Host check, GET and HEAD only, and
readiness that follows the node's state."""

from __future__ import annotations

import uuid

import pytest

from engine import Broker, MemoryStore
from queueadmin import runtime
from tests.helpers import KEY, wait_for
from tests.queueadmin.api_client import Client

pytestmark = pytest.mark.django_db


def test_livez_answers_ok_without_a_token_or_a_known_host(beating_broker: Broker) -> None:
    answer = Client().get("/livez", HTTP_HOST="10.1.2.3:8000")
    assert (answer.status_code, answer.json()) == (200, {"status": "ok"})
    assert answer["Cache-Control"] == "no-store"


def test_readyz_is_200_on_a_leader(beating_broker: Broker) -> None:
    answer = Client().get("/readyz", HTTP_HOST="10.1.2.3:8000")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["ready"] is True and body["role"] == "leader"
    assert 0 <= body["store_age_seconds"] < 5
    assert "reason" not in body


def test_readyz_is_503_with_the_reason_when_the_document_does_not_parse(
    settings: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MemoryStore()
    store.put(KEY, b"{corrupt")
    node = Broker(store, url="http://node.test", heartbeat_seconds=0.05, takeover_seconds=0.4).start()
    try:
        monkeypatch.setattr(runtime, "get_broker", lambda: node)
        wait_for(lambda: Client().get("/readyz").status_code == 503)
        body = Client().get("/readyz").json()
        assert body["ready"] is False and body["role"] == "standby"
        assert body["reason"] == "document_unreadable" and KEY in body["message"]
    finally:
        node.stop(timeout=10)


def test_readyz_is_503_on_a_stopped_node(monkeypatch: pytest.MonkeyPatch) -> None:
    node = Broker(MemoryStore(), url=f"http://{uuid.uuid4().hex}.test")  # never started
    monkeypatch.setattr(runtime, "get_broker", lambda: node)
    answer = Client().get("/readyz")
    assert answer.status_code == 503
    assert answer.json()["reason"] == "stopped"


@pytest.mark.parametrize("path", ["/livez", "/readyz"])
def test_head_has_the_get_headers_and_no_body(beating_broker: Broker, path: str) -> None:
    got, head = Client().get(path), Client().generic("HEAD", path)
    assert head.status_code == got.status_code == 200
    assert head.content == b""
    assert head["Content-Type"] == got["Content-Type"]
    if path == "/readyz":  # the store's age, to the millisecond, may gain or lose a digit in between
        assert abs(int(head["Content-Length"]) - len(got.content)) <= 2
    else:
        assert head["Content-Length"] == str(len(got.content))


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_other_methods_are_refused_with_405(beating_broker: Broker, method: str) -> None:
    answer = Client().generic(method, "/readyz")
    assert answer.status_code == 405
    assert answer.json()["error"] == "method_not_allowed"
    assert answer["Allow"] == "GET, HEAD"


def test_paths_near_the_probes_still_go_to_django(beating_broker: Broker) -> None:
    # Only the exact paths are probes: /livez/ is Django's, which has no such page.
    answer = Client().get("/livez/")
    assert answer.status_code == 404
    assert answer["Content-Type"].startswith("text/html")
