"""The properties every fuzzed call must keep, as assertions the tests share.

* Exactly one answer, in time (the driver raises NoAnswer otherwise).
* A 2xx, or a documented 4xx: JSON ``{"error": code, "message": text}`` whose
  code is in :data:`engine.wire.STATUS_BY_CODE` with that status.
  Never a 5xx from a healthy leader on a memory store.
* The stored document still parses (``engine.parse_document``).
* A refusal changes nothing: the stored bytes are the same before and after.
* The node still works afterwards: an innocent push is answered 201.
"""

from __future__ import annotations

import threading
from typing import Any

import orjson

from engine import Broker, parse_document
from engine.ops import Tick
from engine.wire import STATUS_BY_CODE
from tests.fuzz.asgi_driver import Answer, call
from tests.fuzz.nodes import AUTH
from tests.helpers import KEY


def stored(broker: Broker) -> bytes:
    blob = broker.store.get(KEY)
    assert blob is not None, "the document is gone"
    return blob.data


def check_answer(answer: Answer, what: str) -> Any:
    """Assert the answer is one documented JSON answer; return its body."""
    assert answer.starts == 1, f"{what}: {answer.starts} answers started"
    return check_response(answer.status, answer.content_type, answer.body, what)


def check_response(status: int, content_type: str, content: bytes, what: str) -> Any:
    """Assert one answer is a 2xx or a documented JSON 4xx; return its JSON body."""
    assert status < 500, f"{what}: {status} {content[:300]!r}"
    assert 200 <= status < 300 or status in set(STATUS_BY_CODE.values()), \
        f"{what}: undocumented status {status} {content[:300]!r}"
    assert content_type.startswith("application/json"), \
        f"{what}: {status} answered {content_type!r}, not JSON: {content[:300]!r}"
    body = orjson.loads(content)
    if status >= 400:
        assert isinstance(body, dict), f"{what}: error body {body!r}"
        code = body.get("error")
        assert code in STATUS_BY_CODE, f"{what}: undocumented error code {code!r}"
        assert STATUS_BY_CODE[code] == status, f"{what}: {code} answered with {status}"
        assert isinstance(body.get("message"), str) and body["message"], f"{what}: no message in {body!r}"
    return body


def check_document(broker: Broker, what: str) -> None:
    try:
        parse_document(KEY, stored(broker), policy=broker.policy)
    except Exception as exc:
        raise AssertionError(f"{what}: the stored document no longer parses: {exc}") from exc


def check_refusal_changed_nothing(answer: Answer, before: bytes, broker: Broker, what: str) -> None:
    if answer.status >= 400:
        assert stored(broker) == before, f"{what}: refused with {answer.status} but the document changed"


def check_alive(broker: Broker, what: str) -> None:
    """The node still answers an innocent push, and its control loop can still commit."""
    answer = call("POST", "/api/v1/jobs", orjson.dumps({"queue": "alive", "payload": 1}), headers=AUTH)
    assert answer.status == 201, f"after {what}: an innocent push got {answer.status} {answer.body[:300]!r}"
    done = threading.Event()

    def tick() -> None:
        try:
            broker.execute(Tick())
        finally:
            done.set()

    threading.Thread(target=tick, daemon=True).start()
    assert done.wait(5.0), f"after {what}: the broker can no longer commit a heartbeat"


def check_call(answer: Answer, before: bytes, broker: Broker, what: str) -> Any:
    """Every per-call property at once; returns the answer's body."""
    body = check_answer(answer, what)
    check_document(broker, what)
    check_refusal_changed_nothing(answer, before, broker, what)
    return body
