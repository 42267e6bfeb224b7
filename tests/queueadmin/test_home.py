"""The overview page at "/" and the health check at "/healthz"."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import orjson
import pytest
from django.test import Client

from engine.stores import FileStore
from queueadmin.views import DocumentSnapshot

if TYPE_CHECKING:
    # Only a type; its name has changed between pytest-django releases.
    from pytest_django.fixtures import Settings as SettingsWrapper

KEY = "queue.json"


@pytest.fixture
def store(tmp_path: Path, settings: SettingsWrapper) -> FileStore:
    """A fresh folder store that the page reads, via QUEUE_STORE_URL."""
    root = tmp_path / "store"
    settings.QUEUE_STORE_URL = root.as_uri()
    return FileStore(root)


T = "2026-01-01T00:00:00Z"
LEASE = {"worker": "w", "token": "t", "claimed_at": T, "heartbeat_at": T, "expires_at": T, "seconds": 30}


def _job(job_id: str, queue: str, payload: object, status: str, attempts: int) -> dict[str, object]:
    lease = LEASE if status == "running" else None
    return {"id": job_id, "queue": queue, "payload": payload, "status": status, "attempts": attempts,
            "max_attempts": 3, "enqueued_at": T, "lease": lease}


def _doc(**overrides: object) -> bytes:
    """A document in format 1 (docs/format.md), with fields overridden."""
    doc: dict[str, object] = {
        "format": 1,
        "seq": 42,
        "writer": "writer-abc",
        "jobs": [
            _job("j1", "emails", {"to": "a"}, "pending", 0),
            _job("j2", "emails", None, "pending", 1),
            _job("j3", "emails", [1], "running", 1),
            _job("j4", "reports", "x", "running", 2),
        ],
        "dead": [{"id": "j0", "queue": "reports", "payload": 1, "attempts": 3, "max_attempts": 3,
                  "enqueued_at": T, "died_at": T, "error": "boom"}],
        "queues": {
            "emails": {"pushed": 10, "completed": 7, "failed": 1, "dead": 0},
            "reports": {"pushed": 3, "completed": 0, "failed": 4, "dead": 1},
        },
        "broker": {"id": "broker-7", "url": "http://10.0.0.7:8000", "epoch": 5},
    }
    doc.update(overrides)
    return orjson.dumps(doc)


def _snapshot(response: object) -> DocumentSnapshot:
    snapshot = response.context["snapshot"]  # type: ignore[attr-defined]
    assert isinstance(snapshot, DocumentSnapshot)
    return snapshot


def test_empty_store_says_there_is_no_document_yet(client: Client, store: FileStore) -> None:
    response = client.get("/")

    assert response.status_code == 200
    body = response.content.decode()
    assert "no document yet" in body
    assert store.describe() in body
    snapshot = _snapshot(response)
    assert not snapshot.exists
    assert snapshot.error is None
    assert store.list() == [], "reading the page must not create the document"


def test_valid_document_shows_counts_per_queue_and_status(client: Client, store: FileStore) -> None:
    data = _doc()
    etag = store.put(KEY, data, if_none_match=True)

    response = client.get("/")

    assert response.status_code == 200
    snapshot = _snapshot(response)
    assert snapshot.exists
    assert snapshot.error is None
    assert snapshot.etag == etag
    assert snapshot.size == len(data)
    assert (snapshot.format, snapshot.seq, snapshot.writer) == (1, 42, "writer-abc")
    assert snapshot.jobs == 4
    assert snapshot.dead_letters == 1
    assert snapshot.statuses == ("pending", "running")
    assert snapshot.status_totals == (2, 2)
    rows = {row.name: row for row in snapshot.queues}
    assert rows["emails"].status_counts == (2, 1)
    assert rows["emails"].dead_letters == 0
    assert (rows["emails"].pushed, rows["emails"].completed) == (10, 7)
    assert rows["reports"].status_counts == (0, 1)
    assert rows["reports"].dead_letters == 1
    assert (rows["reports"].failed, rows["reports"].dead) == (4, 1)
    assert snapshot.broker is not None
    assert (snapshot.broker.id, snapshot.broker.url, snapshot.broker.epoch) == ("broker-7", "http://10.0.0.7:8000", 5)

    body = response.content.decode()
    assert etag in body or etag.replace('"', "&quot;") in body
    assert f"{len(data)} bytes" in body
    assert "broker-7" in body
    assert 'role="alert"' not in body


def test_a_status_the_engine_does_not_know_is_refused_like_the_engine_refuses_it(
    client: Client, store: FileStore
) -> None:
    store.put(KEY, _doc(jobs=[_job("a", "q", 1, "paused", 0)], queues={}, dead=[]))

    snapshot = _snapshot(client.get("/"))

    assert snapshot.error is not None and "jobs[0].status" in snapshot.error


def test_document_without_broker_says_so(client: Client, store: FileStore) -> None:
    store.put(KEY, _doc(broker=None))

    response = client.get("/")

    assert _snapshot(response).broker is None
    assert "names no broker" in response.content.decode()


def test_queue_names_are_escaped(client: Client, store: FileStore) -> None:
    evil = "<script>alert(1)</script>"
    store.put(KEY, _doc(jobs=[_job("a", evil, 1, "pending", 0)]))

    body = client.get("/").content.decode()

    assert evil not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b'{"format": 1, "seq": ', "not valid JSON"),
        (b"\xff\xfe not utf-8", "not valid JSON"),
        (b"[1, 2, 3]", "not a queueadmin document"),
        (b'{"hello": "world"}', "no top-level 'format' field"),
        (b'{"format": 99, "seq": 1, "jobs": [], "dead": [], "queues": {}}', "unsupported format version 99"),
        (b'{"format": 1, "jobs": [], "dead": [], "queues": {}}', "missing field 'seq'"),
        (b'{"format": 1, "seq": 1, "jobs": {}, "dead": [], "queues": {}}', "jobs: expected a list"),
        (b'{"format": 1, "seq": 1, "jobs": [7], "dead": [], "queues": {}}', "jobs[0]: expected an object, got int"),
        (b'{"format": 1, "seq": 1, "jobs": [], "dead": [], "queues": {"q": {"pushed": -1}}}', "queues.q.pushed"),
        (b'{"format": 1, "seq": 1, "jobs": [], "dead": [], "queues": {}, "broker": 3}', "broker: expected an object"),
    ],
)
def test_unreadable_document_shows_an_error_and_is_left_alone(
    client: Client, store: FileStore, data: bytes, problem: str
) -> None:
    etag = store.put(KEY, data, if_none_match=True)

    response = client.get("/")

    assert response.status_code == 200
    snapshot = _snapshot(response)
    assert snapshot.error is not None
    assert problem in snapshot.error
    assert snapshot.exists
    assert snapshot.etag == etag
    assert snapshot.size == len(data)
    body = response.content.decode()
    assert 'role="alert"' in body
    assert "queue.json is unreadable" in body
    # The page reads; it never repairs, rewrites or deletes (I6).
    blob = store.get(KEY)
    assert blob is not None
    assert (blob.data, blob.etag) == (data, etag)


def test_bad_store_url_shows_an_error_not_a_500(client: Client, settings: SettingsWrapper) -> None:
    settings.QUEUE_STORE_URL = "ftp://user:secret@example.invalid/queue?token=hunter2"

    response = client.get("/")

    assert response.status_code == 200
    body = response.content.decode()
    assert 'role="alert"' in body
    assert "The store cannot be opened" in body
    assert "unknown store scheme" in _snapshot(response).error  # type: ignore[operator]
    assert _snapshot(response).store == "ftp://example.invalid/queue"
    assert "secret" not in _snapshot(response).store


def test_home_refuses_writes(client: Client, store: FileStore) -> None:
    assert client.post("/").status_code == 405


def test_healthz(client: Client) -> None:
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"ok": True}
