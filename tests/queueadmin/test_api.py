"""The broker HTTP API (docs/api.md) against a real Broker on a memory store.

Each test gets its own named ``memory://`` store and a started broker that
the views find through a patched ``runtime.get_broker``. The leader's idle
heartbeat is set far beyond any test's length, so the stored document
changes only when a request changes it: a refused request must leave its
bytes exactly as they were.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson
import pytest

from engine import Broker, ObjectStore
from queueadmin import runtime
from tests.helpers import document, stored, wait_for
from tests.queueadmin.api_client import AsyncClient, Client, TestResponse

if TYPE_CHECKING:
    from pytest_django.fixtures import Settings as SettingsWrapper

TOKEN = "test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MAX_PAYLOAD = 1024
MAX_REQUEST = 16 * 1024
NODE_A = "http://node-a.test:8000"
NODE_B = "http://node-b.test:8000"


@pytest.fixture
def node_settings(settings: SettingsWrapper) -> SettingsWrapper:
    """Settings for a test node on a fresh, uniquely named memory store."""
    settings.QUEUE_STORE_URL = f"memory://api-{uuid.uuid4().hex}"
    settings.QUEUE_ADVERTISE_URL = NODE_A
    settings.QUEUE_API_TOKEN = TOKEN
    settings.QUEUE_LEASE_SECONDS = 30.0
    settings.QUEUE_HEARTBEAT_SECONDS = 120.0  # no idle commits during a test
    settings.QUEUE_TAKEOVER_SECONDS = 600.0
    settings.QUEUE_MAX_PAYLOAD_BYTES = MAX_PAYLOAD
    settings.QUEUE_MAX_REQUEST_BYTES = MAX_REQUEST
    return settings


@pytest.fixture
def broker(node_settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch) -> Iterator[Broker]:
    """A started, leading broker that the API views use."""
    node = runtime.build_broker().start()
    try:
        wait_for(lambda: node.role == "leader")
        monkeypatch.setattr(runtime, "get_broker", lambda: node)
        yield node
    finally:
        node.stop()


@pytest.fixture
def store(broker: Broker) -> ObjectStore:
    return broker.store


@pytest.fixture
def api(broker: Broker) -> Client:
    """A client sending the right token to the node served by ``broker``."""
    return Client(headers=AUTH)


def post(client: Client, path: str, body: object) -> TestResponse:
    return client.post(path, orjson.dumps(body), content_type="application/json")


def raw_post(client: Client, path: str, data: bytes) -> TestResponse:
    return client.post(path, data, content_type="application/json")


def error_of(response: TestResponse, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body: dict[str, Any] = orjson.loads(response.content)
    assert isinstance(body["error"], str)
    assert isinstance(body["message"], str) and body["message"]
    return body


def push_one(client: Client, payload: object = None, **fields: object) -> str:
    response = post(client, "/api/v1/jobs", {"queue": "q", "payload": payload, **fields})
    assert response.status_code == 201, response.content
    [job_id] = response.json()["ids"]
    return str(job_id)


def claim(client: Client, **fields: object) -> list[dict[str, Any]]:
    response = post(client, "/api/v1/claim", {"worker": "w1", "queues": ["q"], **fields})
    assert response.status_code == 200, response.content
    jobs: list[dict[str, Any]] = response.json()["jobs"]
    return jobs


# -- push --------------------------------------------------------------------


def test_push_one_job_is_committed_before_the_201(api: Client, store: ObjectStore) -> None:
    job_id = push_one(api, {"to": "ada@example.com"})

    [job] = document(store)["jobs"]
    assert job["id"] == job_id
    assert job["payload"] == {"to": "ada@example.com"}
    assert job["status"] == "pending"


def test_a_batch_push_lands_in_one_commit_in_order(api: Client, store: ObjectStore) -> None:
    seq = document(store)["seq"]
    given = "c" * 32
    response = post(api, "/api/v1/jobs", {"queue": "q", "jobs": [
        {"payload": 1},
        {"payload": [2], "id": given, "max_attempts": 7},
        {"payload": None, "delay_seconds": 60, "max_attempts": None},
    ]})

    assert response.status_code == 201
    ids = response.json()["ids"]
    assert len(ids) == 3 and ids[1] == given and len(set(ids)) == 3
    doc = document(store)
    assert doc["seq"] == seq + 1
    assert [j["id"] for j in doc["jobs"]] == ids
    assert [j["max_attempts"] for j in doc["jobs"]] == [3, 7, 3]
    # Format 2 leaves a null not_before out of the document.
    assert doc["jobs"][2]["not_before"] is not None and doc["jobs"][0].get("not_before") is None


def test_a_push_with_client_ids_is_idempotent(api: Client, store: ObjectStore) -> None:
    body = {"queue": "q", "jobs": [{"payload": "a", "id": "a" * 32}, {"payload": "b", "id": "b" * 32}]}

    first = post(api, "/api/v1/jobs", body)
    again = post(api, "/api/v1/jobs", body)

    assert first.status_code == again.status_code == 201
    assert first.json() == again.json() == {"ids": ["a" * 32, "b" * 32]}
    doc = document(store)
    assert [j["id"] for j in doc["jobs"]] == ["a" * 32, "b" * 32]
    assert doc["queues"]["q"]["pushed"] == 2


# -- the life of a job ---------------------------------------------------------


def test_claim_heartbeat_complete_round_trip(api: Client, store: ObjectStore) -> None:
    job_id = push_one(api, {"n": 1})

    [job] = claim(api, lease_seconds=10)
    assert job["id"] == job_id and job["queue"] == "q" and job["payload"] == {"n": 1} and job["attempt"] == 1
    assert job["lease_expires_at"].endswith("Z")
    assert document(store)["jobs"][0]["status"] == "running"

    beat = post(api, f"/api/v1/jobs/{job_id}/heartbeat", {"lease": job["lease"], "lease_seconds": 20})
    assert beat.status_code == 200
    assert beat.json()["lease_expires_at"] > job["lease_expires_at"]

    done = post(api, f"/api/v1/jobs/{job_id}/complete", {"lease": job["lease"]})
    assert done.status_code == 200 and done.json() == {"ok": True}
    doc = document(store)
    assert doc["jobs"] == [] and doc["queues"]["q"]["completed"] == 1


def test_a_claim_in_order_takes_the_first_queues_jobs_first_and_may_ride_an_ack(api: Client) -> None:
    low = post(api, "/api/v1/jobs", {"queue": "low", "jobs": [{"payload": 1}, {"payload": 2}]}).json()["ids"]
    high = post(api, "/api/v1/jobs", {"queue": "high", "payload": 3}).json()["ids"]
    plain = post(api, "/api/v1/claim", {"worker": "w1", "queues": ["high", "low"], "max_jobs": 1}).json()["jobs"]
    assert [j["id"] for j in plain] == low[:1]  # the oldest across both queues
    ordered = post(api, "/api/v1/ack", {
        "acks": [{"id": plain[0]["id"], "lease": plain[0]["lease"], "outcome": "complete"}],
        "claim": {"worker": "w1", "queues": ["high", "low"], "max_jobs": 2, "in_order": True}}).json()
    assert [j["id"] for j in ordered["claim"]["jobs"]] == [*high, low[1]]


def test_fail_retries_then_dead_letters_after_max_attempts(api: Client, store: ObjectStore) -> None:
    job_id = push_one(api, "x", max_attempts=2)

    [first] = claim(api)
    retried = post(api, f"/api/v1/jobs/{job_id}/fail", {"lease": first["lease"], "error": "boom 1",
                                                         "retry_in_seconds": 0})
    assert retried.status_code == 200 and retried.json() == {"status": "pending", "not_before": None}

    [second] = claim(api)
    assert second["attempt"] == 2
    died = post(api, f"/api/v1/jobs/{job_id}/fail", {"lease": second["lease"], "error": "boom 2"})
    assert died.status_code == 200 and died.json() == {"status": "dead", "not_before": None}

    doc = document(store)
    assert doc["jobs"] == []
    assert [(d["id"], d["error"]) for d in doc["dead"]] == [(job_id, "boom 2")]
    view = api.get(f"/api/v1/jobs/{job_id}").json()
    assert view["status"] == "dead" and view["error"] == "boom 2"


def test_a_fail_with_give_up_dead_letters_at_once(api: Client, store: ObjectStore) -> None:
    job_id = push_one(api, "x", max_attempts=5)
    [job] = claim(api)

    response = post(api, f"/api/v1/jobs/{job_id}/fail", {"lease": job["lease"], "error": "no such task",
                                                         "give_up": True})

    assert response.status_code == 200 and response.json() == {"status": "dead", "not_before": None}
    assert [(d["id"], d["attempts"]) for d in document(store)["dead"]] == [(job_id, 1)]


def test_a_fail_with_a_non_boolean_give_up_is_refused_and_changes_nothing(api: Client, store: ObjectStore) -> None:
    job_id = push_one(api, "x")
    [job] = claim(api)
    before = stored(store)
    response = post(api, f"/api/v1/jobs/{job_id}/fail", {"lease": job["lease"], "error": "e", "give_up": "yes"})
    body = error_of(response, 400)
    assert body["error"] == "invalid" and "give_up" in body["message"]
    assert stored(store) == before


def test_a_fail_with_backoff_answers_not_before(api: Client) -> None:
    job_id = push_one(api, "x")
    [job] = claim(api)

    response = post(api, f"/api/v1/jobs/{job_id}/fail", {"lease": job["lease"], "error": "later",
                                                         "retry_in_seconds": 60})

    assert response.json()["status"] == "pending"
    assert response.json()["not_before"].endswith("Z")


def test_get_job_shows_pending_and_running_without_the_lease_token(api: Client) -> None:
    job_id = push_one(api, {"k": "v"})
    pending = api.get(f"/api/v1/jobs/{job_id}")
    assert pending.status_code == 200
    assert pending.json()["status"] == "pending" and pending.json()["payload"] == {"k": "v"}

    [job] = claim(api)
    running = api.get(f"/api/v1/jobs/{job_id}")
    assert running.json()["status"] == "running"
    assert running.json()["lease"]["worker"] == "w1"
    assert "token" not in running.json()["lease"]
    assert job["lease"].encode() not in running.content


def test_the_document_hides_lease_tokens(api: Client, store: ObjectStore) -> None:
    push_one(api, 1)
    [job] = claim(api)

    response = api.get("/api/v1/document")

    assert response.status_code == 200
    assert response.json()["jobs"][0]["lease"]["token"] == "…"
    assert job["lease"].encode() not in response.content
    assert response.json()["seq"] == document(store)["seq"]


def test_health_needs_no_token_and_names_the_leader(broker: Broker, store: ObjectStore) -> None:
    response = Client().get("/api/v1/health")

    assert response.status_code == 200
    assert response.json() == {
        "role": "leader",
        "broker": {"id": broker.id, "url": NODE_A, "epoch": 1},
        "node": {"id": broker.id, "url": NODE_A},
        "seq": document(store)["seq"],
        "document": {"state": "ok"},
        "segments": {"state": "ok"},
    }


# -- refusals: each one changes nothing ------------------------------------------

BAD_BODIES: list[tuple[str, bytes, int, str]] = [
    ("/api/v1/jobs", b"{not json", 400, "malformed_json"),
    ("/api/v1/jobs", b"", 400, "malformed_json"),
    ("/api/v1/jobs", b'{"queue": "q", "payload": NaN}', 400, "malformed_json"),
    ("/api/v1/jobs", b'{"queue": "q", "payload": "\xff"}', 400, "malformed_json"),
    ("/api/v1/jobs", b"[]", 400, "invalid"),
    ("/api/v1/jobs", b'{"payload": 1}', 400, "invalid"),
    ("/api/v1/jobs", b'{"queue": 7, "payload": 1}', 400, "invalid"),
    ("/api/v1/jobs", b'{"queue": "no spaces", "payload": 1}', 400, "invalid"),
    ("/api/v1/jobs", b'{"queue": "q"}', 400, "invalid"),
    ("/api/v1/jobs", b'{"queue": "q", "payload": 1, "colour": "red"}', 400, "invalid"),
    ("/api/v1/jobs", b'{"queue": "q", "payload": 1, "jobs": [{"payload": 2}]}', 400, "invalid"),
    ("/api/v1/jobs", b'{"queue": "q", "jobs": []}', 400, "invalid"),
    ("/api/v1/jobs", b'{"queue": "q", "jobs": [{"payload": 1}, {"payload": 2, "max_attempts": 0}]}', 400, "invalid"),
    ("/api/v1/jobs", b'{"queue": "q", "jobs": [{"payload": 1, "max_attempts": "3"}]}', 400, "invalid"),
    ("/api/v1/jobs", b'{"queue": "q", "jobs": [{"payload": 1, "delay_seconds": -1}]}', 400, "invalid"),
    ("/api/v1/jobs", b'{"queue": "q", "jobs": [{"payload": 1, "id": ""}]}', 400, "invalid"),
    ("/api/v1/jobs", b'{"queue": "q", "jobs": [{"payload": 1, "extra": true}]}', 400, "invalid"),
    ("/api/v1/jobs", b'{"queue": "q", "payload": 1e400}', 400, "invalid_payload"),
    ("/api/v1/jobs", b'{"queue": "q", "payload": [123456789012345678901234567890]}', 400, "invalid_payload"),
    ("/api/v1/jobs", b'{"queue": "q", "payload": "' + b"x" * MAX_PAYLOAD + b'"}', 413, "payload_too_large"),
    ("/api/v1/jobs", b'{"queue": "q", "payload": "' + b"x" * MAX_REQUEST + b'"}', 413, "payload_too_large"),
    ("/api/v1/claim", b'{"queues": ["q"]}', 400, "invalid"),
    ("/api/v1/claim", b'{"worker": "w", "queues": "q"}', 400, "invalid"),
    ("/api/v1/claim", b'{"worker": "w", "queues": []}', 400, "invalid"),
    ("/api/v1/claim", b'{"worker": "w", "queues": ["q"], "max_jobs": true}', 400, "invalid"),
    ("/api/v1/claim", b'{"worker": "w", "queues": ["q"], "wait_seconds": 31}', 400, "invalid"),
    ("/api/v1/claim", b'{"worker": "w", "queues": ["q"], "lease_seconds": 0}', 400, "invalid"),
    ("/api/v1/claim", b'{"worker": "w", "queues": ["q"], "sort": "lifo"}', 400, "invalid"),
]


@pytest.mark.parametrize(("path", "body", "status", "code"), BAD_BODIES)
def test_a_bad_body_is_refused_and_changes_nothing(
    api: Client, store: ObjectStore, path: str, body: bytes, status: int, code: str
) -> None:
    push_one(api, "existing")
    before = stored(store)

    response = raw_post(api, path, body)

    assert error_of(response, status)["error"] == code
    assert stored(store) == before


def test_payload_too_large_says_the_size_and_the_limit(api: Client) -> None:
    payload = post(api, "/api/v1/jobs", {"queue": "q", "jobs": [{"payload": 1}, {"payload": "x" * MAX_PAYLOAD}]})
    body = error_of(payload, 413)
    assert (body["size"], body["limit"]) == (MAX_PAYLOAD + 2, MAX_PAYLOAD)
    assert body["message"].startswith("jobs[1]: ")

    request = post(api, "/api/v1/jobs", {"queue": "q", "payload": "x" * MAX_REQUEST})
    assert error_of(request, 413)["limit"] == MAX_REQUEST


def test_field_errors_name_the_field(api: Client, broker: Broker) -> None:
    unknown = raw_post(api, "/api/v1/jobs", b'{"queue": "q", "jobs": [{"payload": 1}, {"payload": 2, "pri": 1}]}')
    assert "'jobs[1].pri'" in error_of(unknown, 400)["message"]
    missing = raw_post(api, "/api/v1/claim", b'{"queues": ["q"]}')
    assert "'worker'" in error_of(missing, 400)["message"]
    ranged = raw_post(
        api, "/api/v1/jobs", b'{"queue": "q", "jobs": [{"payload": 1}, {"payload": 1, "max_attempts": 0}]}'
    )
    message = error_of(ranged, 400)["message"]
    assert "jobs[1]" in message and "max_attempts" in message


@pytest.mark.parametrize("header", [None, "Bearer wrong-token", "Basic dGVzdA==", f"bearer{TOKEN}", "Bearer "])
def test_a_missing_or_wrong_token_is_401_and_changes_nothing(
    broker: Broker, store: ObjectStore, header: str | None
) -> None:
    before = stored(store)
    client = Client(headers={"Authorization": header} if header is not None else {})

    response = post(client, "/api/v1/jobs", {"queue": "q", "payload": 1})

    assert error_of(response, 401)["error"] == "unauthorized"
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/api/v1/document").status_code == 401
    assert stored(store) == before


def test_with_no_token_configured_every_call_is_refused(
    api: Client, broker: Broker, store: ObjectStore, settings: SettingsWrapper
) -> None:
    settings.QUEUE_API_TOKEN = None
    before = stored(store)

    response = post(api, "/api/v1/jobs", {"queue": "q", "payload": 1})

    assert "has no API token" in error_of(response, 401)["message"]
    assert stored(store) == before
    assert Client().get("/api/v1/health").status_code == 200


def test_an_unknown_job_is_404(api: Client, store: ObjectStore) -> None:
    before = stored(store)
    unknown = "0" * 32

    assert error_of(api.get(f"/api/v1/jobs/{unknown}"), 404)["error"] == "job_not_found"
    for action in ("heartbeat", "complete"):
        response = post(api, f"/api/v1/jobs/{unknown}/{action}", {"lease": "x"})
        assert error_of(response, 404)["error"] == "job_not_found"
    response = post(api, f"/api/v1/jobs/{unknown}/fail", {"lease": "x", "error": "e"})
    assert error_of(response, 404)["error"] == "job_not_found"
    assert stored(store) == before


def test_a_wrong_lease_is_409_lease_lost_and_changes_nothing(api: Client, store: ObjectStore) -> None:
    job_id = push_one(api, 1)
    [job] = claim(api)
    before = stored(store)

    for action, body in [
        ("heartbeat", {"lease": "not-the-lease"}),
        ("complete", {"lease": "not-the-lease"}),
        ("fail", {"lease": "not-the-lease", "error": "e"}),
    ]:
        response = post(api, f"/api/v1/jobs/{job_id}/{action}", body)
        assert error_of(response, 409)["error"] == "lease_lost"
    assert stored(store) == before
    assert post(api, f"/api/v1/jobs/{job_id}/complete", {"lease": job["lease"]}).status_code == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [("get", "/api/v1/claim"), ("get", "/api/v1/jobs"), ("post", "/api/v1/health"), ("delete", "/api/v1/jobs/x"),
     ("put", "/api/v1/document"), ("get", "/api/v1/jobs/x/complete")],
)
def test_a_wrong_method_is_405_json(api: Client, store: ObjectStore, method: str, path: str) -> None:
    before = stored(store)

    response = getattr(api, method)(path)

    assert error_of(response, 405)["error"] == "method_not_allowed"
    assert response["Allow"]
    assert stored(store) == before


@pytest.mark.parametrize("path", ["/api/v1/nope", "/api/v1/jobs/", "/api/v2/jobs", "/api/", "/api/v1/jobs/x/y/z"])
def test_an_unknown_api_url_is_404_json(api: Client, broker: Broker, path: str) -> None:
    for response in (api.get(path), post(api, path, {}), Client().post(path)):
        assert error_of(response, 404)["error"] == "not_found"


def test_a_bug_is_a_json_500_not_an_html_page(api: Client, broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(op: object) -> object:
        raise RuntimeError("a bug")

    monkeypatch.setattr(broker, "aexecute", broken)

    response = post(api, "/api/v1/jobs", {"queue": "q", "payload": 1})

    assert error_of(response, 500)["error"] == "internal_error"


# -- long-poll claims ------------------------------------------------------------


def test_a_waiting_claim_returns_soon_after_a_push(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    # No timer wakes a waiting claim (no job is delayed): only the push's commit can.

    async def scenario() -> tuple[Any, float]:
        client = AsyncClient()
        # Push only once the claim has tried and found nothing, so that only
        # the commit notification (or the 30 s timer) can wake it.
        first_attempt = asyncio.Event()
        attempt = broker.aexecute

        async def spied_attempt(op: Any) -> Any:
            result = await attempt(op)
            first_attempt.set()
            return result

        monkeypatch.setattr(broker, "aexecute", spied_attempt)

        async def push_later() -> None:
            await asyncio.wait_for(first_attempt.wait(), 5)
            response = await client.post("/api/v1/jobs", {"queue": "q", "payload": "late"},
                                         content_type="application/json", headers=AUTH)
            assert response.status_code == 201

        started = time.monotonic()
        claimed, _ = await asyncio.gather(
            client.post("/api/v1/claim", {"worker": "w", "queues": ["q"], "wait_seconds": 5},
                        content_type="application/json", headers=AUTH),
            push_later(),
        )
        return claimed, time.monotonic() - started

    response, elapsed = asyncio.run(scenario())

    assert response.status_code == 200
    assert [j["payload"] for j in response.json()["jobs"]] == ["late"]
    assert elapsed < 3


def test_a_waiting_claim_is_woken_from_another_event_loop(api: Client, broker: Broker) -> None:
    # The sync test client runs each request on an event loop of its own.
    result: dict[str, Any] = {}

    def waiting_claim() -> None:
        started = time.monotonic()
        result["response"] = post(Client(headers=AUTH), "/api/v1/claim",
                                   {"worker": "w", "queues": ["q"], "wait_seconds": 5})
        result["elapsed"] = time.monotonic() - started

    thread = threading.Thread(target=waiting_claim)
    thread.start()
    wait_for(lambda: broker.waiters.parked() == 1)
    push_one(api, "from another loop")
    thread.join(10)

    assert [j["payload"] for j in result["response"].json()["jobs"]] == ["from another loop"]
    assert result["elapsed"] < 3
    assert broker.waiters.waiting() == 0


@pytest.mark.slow
def test_an_empty_waiting_claim_answers_an_empty_list_when_time_runs_out(api: Client, broker: Broker) -> None:
    started = time.monotonic()
    jobs = claim(api, wait_seconds=1)
    elapsed = time.monotonic() - started

    assert jobs == []
    assert 0.9 <= elapsed < 3
    assert broker.waiters.waiting() == 0


@pytest.mark.slow
def test_a_waiting_claim_picks_up_a_delayed_job_when_it_is_due(api: Client, broker: Broker) -> None:
    job_id = push_one(api, "delayed", delay_seconds=0.5)
    assert claim(api) == []

    started = time.monotonic()
    jobs = claim(api, wait_seconds=5)

    assert [j["id"] for j in jobs] == [job_id]
    assert time.monotonic() - started < 3


# -- a node that does not lead ----------------------------------------------------


def test_a_standby_answers_503_with_the_leaders_url(
    api: Client, broker: Broker, store: ObjectStore, node_settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch
) -> None:
    push_one(api, 1)
    node_settings.QUEUE_ADVERTISE_URL = NODE_B
    standby = runtime.build_broker().start()
    try:
        wait_for(lambda: standby.leader.url == NODE_A)
        monkeypatch.setattr(runtime, "get_broker", lambda: standby)
        before = stored(store)

        for response in (
            post(api, "/api/v1/jobs", {"queue": "q", "payload": 2}),
            post(api, "/api/v1/claim", {"worker": "w", "queues": ["q"], "wait_seconds": 1}),
            api.get("/api/v1/document"),
        ):
            body = error_of(response, 503)
            assert body["error"] == "not_leader" and body["leader_url"] == NODE_A

        health = Client().get("/api/v1/health").json()
        assert health["role"] == "standby"
        assert health["broker"] == {"id": broker.id, "url": NODE_A, "epoch": 1}
        assert health["node"] == {"id": standby.id, "url": NODE_B}
        assert health["seq"] == document(store)["seq"]
        assert stored(store) == before
    finally:
        standby.stop()
