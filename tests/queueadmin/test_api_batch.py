"""The batch calls of the broker API (docs/api.md, "Batches"): ``POST
/api/v1/ack`` and ``POST /api/v1/heartbeat``, against a real Broker on a
memory store, with the fixtures of test_api.py. Each item gets its own
outcome; one bad item changes nothing and fails nothing else; a body that is
not a batch is refused whole and changes nothing; answers come only after
the commit landed (I1)."""

# ruff: noqa: F811
from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import orjson
import pytest

from engine import (
    Broker,
    BrokerClient,
    FailOutcome,
    JobNotFound,
    LeaseLost,
    NotLeader,
    ObjectStore,
    Unauthorized,
    wire,
)
from engine.ops import complete_op, fail_op, get_job_op, heartbeat_op
from tests.helpers import document, stored
from tests.queueadmin.api_client import Client, Transport

# The fixtures of test_api.py, imported so that these tests run on the same
# node; a test naming one as an argument is not redefining it (F811).
from tests.queueadmin.test_api import (  # noqa: F401
    TOKEN,
    api,
    broker,
    claim,
    error_of,
    node_settings,
    post,
    push_one,
    raw_post,
    store,
)

ACK = "/api/v1/ack"
BEAT = "/api/v1/heartbeat"


def leased(api: Client, count: int, **push: object) -> list[dict[str, Any]]:
    """Push ``count`` jobs and claim them all."""
    for n in range(count):
        push_one(api, n, **push)
    jobs = claim(api, max_jobs=count)
    assert len(jobs) == count
    return jobs


def results(response: Any) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.content
    found: list[dict[str, Any]] = response.json()["results"]
    return found


def test_completes_and_fails_are_answered_one_by_one_in_one_commit(api: Client, store: ObjectStore) -> None:
    done, retry, dead = leased(api, 3, max_attempts=2)
    seq = document(store)["seq"]

    answer = results(post(api, ACK, {"acks": [
        {"id": done["id"], "lease": done["lease"], "outcome": "complete"},
        {"id": retry["id"], "lease": retry["lease"], "outcome": "fail", "error": "boom", "retry_in_seconds": 60},
        {"id": dead["id"], "lease": dead["lease"], "outcome": "fail", "error": "never", "give_up": True},
    ]}))

    assert answer[0] == {"id": done["id"], "ok": True}
    assert answer[1]["id"] == retry["id"] and answer[1]["status"] == "pending" and answer[1]["not_before"]
    assert answer[2] == {"id": dead["id"], "status": "dead", "not_before": None}
    doc = document(store)
    assert doc["seq"] == seq + 1  # one commit for the three
    assert [(j["id"], j["status"]) for j in doc["jobs"]] == [(retry["id"], "pending")]
    assert [d["id"] for d in doc["dead"]] == [dead["id"]]
    assert doc["queues"]["q"]["completed"] == 1


def test_one_bad_item_gets_its_own_error_and_fails_nothing_else(api: Client, store: ObjectStore) -> None:
    good, stolen = leased(api, 2)
    unknown = "0" * 32

    answer = results(post(api, ACK, {"acks": [
        {"id": stolen["id"], "lease": "not-the-lease", "outcome": "complete"},
        {"id": unknown, "lease": "x", "outcome": "fail", "error": "e"},
        {"id": good["id"], "lease": good["lease"], "outcome": "complete"},
        {"id": stolen["id"], "lease": stolen["lease"], "outcome": "finished"},
        {"lease": "x", "outcome": "complete"},
        17,
    ]}))

    assert [(r["id"], r.get("error")) for r in answer] == [
        (stolen["id"], "lease_lost"), (unknown, "job_not_found"), (good["id"], None),
        (stolen["id"], "invalid"), (None, "invalid"), (None, "invalid"),
    ]
    assert all(r["message"] for r in answer if "error" in r)
    assert answer[3]["message"].startswith("acks[3]: ") and "'outcome'" in answer[3]["message"]
    assert answer[2] == {"id": good["id"], "ok": True}
    doc = document(store)
    assert [(j["id"], j["status"]) for j in doc["jobs"]] == [(stolen["id"], "running")]  # untouched
    assert doc["queues"]["q"]["completed"] == 1


def test_heartbeats_extend_every_lease_and_refuse_the_lost_ones(api: Client, store: ObjectStore) -> None:
    first, second = leased(api, 2)

    answer = results(post(api, BEAT, {"lease_seconds": 120, "leases": [
        {"id": first["id"], "lease": first["lease"]},
        {"id": second["id"], "lease": "stale"},
        {"id": second["id"], "lease": second["lease"], "lease_seconds": 5},
    ]}))

    assert answer[0]["id"] == first["id"] and answer[0]["lease_expires_at"] > first["lease_expires_at"]
    assert answer[1] == {"id": second["id"], "error": "lease_lost", "message": answer[1]["message"]}
    assert answer[2]["error"] == "invalid" and "'lease_seconds'" in answer[2]["message"]
    jobs = {j["id"]: j for j in document(store)["jobs"]}
    assert jobs[first["id"]]["lease"]["expires_at"] > jobs[second["id"]]["lease"]["expires_at"]


def test_a_batch_of_only_bad_items_is_answered_and_changes_nothing(api: Client, store: ObjectStore) -> None:
    leased(api, 1)
    before = stored(store)

    answer = results(post(api, ACK, {"acks": [{"id": "a", "lease": "l", "outcome": "?"}]}))

    assert answer[0]["error"] == "invalid"
    assert stored(store) == before


BAD_BODIES = [
    (ACK, b"not json", 400, "malformed_json"),
    (ACK, b"[]", 400, "invalid"),
    (ACK, b"{}", 400, "invalid"),
    (ACK, b'{"acks": []}', 400, "invalid"),
    (ACK, b'{"acks": {"id": "a"}}', 400, "invalid"),
    (ACK, b'{"acks": [{"id": "a", "lease": "l", "outcome": "complete"}], "extra": true}', 400, "invalid"),
    (BEAT, b'{"leases": []}', 400, "invalid"),
    (BEAT, b'{"leases": [{"id": "a", "lease": "l"}], "lease_seconds": 0}', 400, "invalid"),
    (ACK, orjson.dumps({"acks": [{"id": str(i), "lease": "l", "outcome": "complete"}
                                 for i in range(wire.MAX_BATCH_ITEMS + 1)]}), 413, "payload_too_large"),
]


@pytest.mark.parametrize(("path", "body", "status", "code"), BAD_BODIES)
def test_a_body_that_is_not_a_batch_is_refused_whole_and_changes_nothing(
    api: Client, store: ObjectStore, node_settings: Any, path: str, body: bytes, status: int, code: str
) -> None:
    node_settings.QUEUE_MAX_REQUEST_BYTES = 1024 * 1024  # the item limit, not the byte limit
    [job] = leased(api, 1)
    before = stored(store)

    response = raw_post(api, path, body)

    assert error_of(response, status)["error"] == code
    assert stored(store) == before
    assert job


@pytest.mark.parametrize("path", [ACK, BEAT])
@pytest.mark.parametrize("header", [None, "Bearer wrong-token"])
def test_the_token_is_required(broker: Broker, store: ObjectStore, path: str, header: str | None) -> None:
    before = stored(store)
    client = Client(headers={"Authorization": header} if header is not None else {})
    body = {"acks": [{"id": "a", "lease": "l", "outcome": "complete"}]} if path == ACK else {
        "leases": [{"id": "a", "lease": "l"}]}

    assert error_of(post(client, path, body), 401)["error"] == "unauthorized"
    assert stored(store) == before


def test_get_is_not_allowed(api: Client) -> None:
    for path in (ACK, BEAT):
        assert error_of(api.get(path), 405)["error"] == "method_not_allowed"


def test_the_answer_comes_only_after_the_commit_landed(
    api: Client, broker: Broker, store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = leased(api, 2)
    events: list[str] = []
    answered = threading.Event()
    put_parts = store.put_parts

    def slow_put(*args: Any, **kwargs: Any) -> Any:
        # Hold the write a while: an answer given before it lands would show up meanwhile.
        answered.wait(0.5)
        result = put_parts(*args, **kwargs)
        events.append("landed")
        return result

    monkeypatch.setattr(store, "put_parts", slow_put)
    response: list[Any] = []

    def ack() -> None:
        response.append(post(api, ACK, {"acks": [
            {"id": j["id"], "lease": j["lease"], "outcome": "complete"} for j in jobs]}))
        events.append("answered")
        answered.set()

    thread = threading.Thread(target=ack)
    thread.start()
    thread.join(10)
    assert events == ["landed", "answered"]
    assert [r.get("ok") for r in results(response[0])] == [True, True]
    assert document(store)["jobs"] == []


# -- BrokerClient.execute_many against these endpoints --------------------------------------------


@pytest.fixture
def broker_client(broker: Broker) -> Iterator[BrokerClient]:
    """A BrokerClient reaching this node's real API application (tests.queueadmin.api_client)."""
    transport = Transport()
    client = BrokerClient(["http://testserver"], token=TOKEN, transport=transport, retry_seconds=1)
    yield client
    client.close()


def test_broker_client_acknowledges_in_one_request_with_per_item_errors(
    broker_client: BrokerClient, store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    pushed = broker_client.push("q", ["a", "b", "c"])
    done, failed, stolen = broker_client.claim("w", ["q"], max_jobs=3)
    sent: list[str] = []
    send = broker_client._send
    monkeypatch.setattr(broker_client, "_send", lambda method, url, *a: sent.append(url) or send(method, url, *a))
    ops = [
        complete_op(done.id, done.lease),
        fail_op(failed.id, failed.lease, error="boom", retry_in_seconds=None, policy=broker_client.policy,
                give_up=True),
        complete_op(stolen.id, "not-the-lease"),
        complete_op("0" * 32, "x"),
    ]

    outcomes = broker_client.execute_many(ops)

    assert sent == ["http://testserver/api/v1/ack"]
    assert outcomes[0] is None
    assert outcomes[1] == FailOutcome(status="dead", not_before=None)
    assert type(outcomes[2]) is LeaseLost and outcomes[2].job_id == stolen.id
    assert type(outcomes[3]) is JobNotFound and outcomes[3].job_id == "0" * 32
    assert [j["id"] for j in document(store)["jobs"]] == [stolen.id] and len(pushed) == 3


def test_broker_client_heartbeats_in_one_request_and_sends_other_ops_singly(
    broker_client: BrokerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker_client.push("q", ["a", "b"])
    first, second = broker_client.claim("w", ["q"], max_jobs=2, lease_seconds=10)
    sent: list[str] = []
    send = broker_client._send
    monkeypatch.setattr(broker_client, "_send", lambda method, url, *a: sent.append(url) or send(method, url, *a))

    outcomes = broker_client.execute_many([
        heartbeat_op(first.id, first.lease, lease_seconds=60),
        get_job_op(second.id),
        heartbeat_op(second.id, "stale", lease_seconds=60),
        heartbeat_op(second.id, second.lease),  # another lease length: another request
    ])

    assert sorted(sent) == sorted(["http://testserver/api/v1/heartbeat"] * 2 + [
        f"http://testserver/api/v1/jobs/{second.id}"])
    assert isinstance(outcomes[0], datetime) and outcomes[0] > first.lease_expires_at
    assert outcomes[1]["status"] == "running"
    assert type(outcomes[2]) is LeaseLost
    assert isinstance(outcomes[3], datetime)


def test_broker_client_splits_a_large_batch(
    broker_client: BrokerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wire.batches, "MAX_BATCH_ITEMS", 2)  # the broker refuses more, and
    monkeypatch.setattr(wire, "MAX_BATCH_ITEMS", 2)  # the client splits there
    broker_client.push("q", list(range(5)))
    jobs = broker_client.claim("w", ["q"], max_jobs=5)
    sent: list[str] = []
    send = broker_client._send
    monkeypatch.setattr(broker_client, "_send", lambda method, url, *a: sent.append(url) or send(method, url, *a))

    outcomes = broker_client.execute_many([complete_op(j.id, j.lease) for j in jobs])

    assert outcomes == [None] * 5 and len(sent) == 3


def test_broker_client_raises_a_whole_request_failure(
    broker: Broker, broker_client: BrokerClient, node_settings: Any
) -> None:
    node_settings.ALLOWED_HOSTS = ["testserver", "node-a.test"]  # the leader a stopped node names
    broker_client.push("q", ["a"])
    [job] = broker_client.claim("w", ["q"])
    with pytest.raises(Unauthorized):
        BrokerClient(["http://testserver"], token="wrong", transport=Transport()).execute_many(
            [complete_op(job.id, job.lease)])
    broker.stop()  # no node leads: a NotLeader for the whole request, after the retry budget
    with pytest.raises(NotLeader):
        broker_client.execute_many([complete_op(job.id, job.lease)])
