"""A claim riding an acknowledgement (docs/api.md, "Batches"): ``POST
/api/v1/ack`` with a ``claim``, against a real Broker on a memory store, with
the fixtures of test_api.py. The claim is submitted with the acks, rides
their commit and is applied after them, oldest jobs first (I7); it never
waits; each ack item keeps its own outcome; a bad claim refuses the whole
request and changes nothing; an answer without a claim is as before; and
BrokerClient carries a Claim of ``execute_many`` this way, or apart to a
broker that does not take the field."""

# ruff: noqa: F811
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from engine import Broker, BrokerClient, ClaimedJob, LeaseLost, ObjectStore, Policy, ValidationError, wire
from engine.ops import claim_op, complete_op
from queueadmin.api import views
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
CLAIM = {"worker": "w2", "queues": ["q"], "max_jobs": 10, "lease_seconds": 60}


def acks_of(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"id": j["id"], "lease": j["lease"], "outcome": "complete"} for j in jobs]


def test_a_claim_rides_the_commit_of_the_acks_and_takes_the_oldest_jobs(api: Client, store: ObjectStore) -> None:
    ids = [push_one(api, n) for n in range(5)]
    first = claim(api, max_jobs=2)
    seq = document(store)["seq"]

    response = post(api, ACK, {"acks": acks_of(first), "claim": {**CLAIM, "max_jobs": 2}})

    assert response.status_code == 200, response.content
    answer = response.json()
    assert answer["results"] == [{"id": j["id"], "ok": True} for j in first]
    claimed = answer["claim"]["jobs"]
    assert [j["id"] for j in claimed] == ids[2:4]  # FIFO: the oldest pending ones (I7)
    assert all(j["lease"] and j["attempt"] == 1 for j in claimed)
    doc = document(store)
    assert doc["seq"] == seq + 1  # acks and claim in one commit
    assert doc["queues"]["q"]["completed"] == 2
    running = {j["id"]: j for j in doc["jobs"] if j["status"] == "running"}
    assert sorted(running) == sorted(ids[2:4]) and {j["lease"]["worker"] for j in running.values()} == {"w2"}


def test_each_ack_keeps_its_own_outcome_and_the_claim_is_applied_after_them(
    api: Client, store: ObjectStore
) -> None:
    push_one(api, "a")
    push_one(api, "b")
    good, retried = claim(api, max_jobs=2)
    unknown = "0" * 32

    answer = post(api, ACK, {"acks": [
        {"id": good["id"], "lease": "not-the-lease", "outcome": "complete"},
        {"id": unknown, "lease": "x", "outcome": "complete"},
        {"id": retried["id"], "lease": retried["lease"], "outcome": "fail", "error": "e", "retry_in_seconds": 0},
    ], "claim": CLAIM}).json()

    assert [r.get("error") for r in answer["results"]] == ["lease_lost", "job_not_found", None]
    # The failed job was pending again when the claim ran, in the same commit.
    assert [(j["id"], j["attempt"]) for j in answer["claim"]["jobs"]] == [(retried["id"], 2)]
    assert {j["id"]: j["status"] for j in document(store)["jobs"]} == {good["id"]: "running",
                                                                        retried["id"]: "running"}


def test_a_claim_that_finds_nothing_answers_at_once_and_an_answer_without_one_is_unchanged(
    api: Client, store: ObjectStore
) -> None:
    push_one(api, "a")
    jobs = claim(api)
    started = time.monotonic()

    answer = post(api, ACK, {"acks": acks_of(jobs), "claim": {**CLAIM, "queues": ["empty"]}}).json()

    assert answer["claim"] == {"jobs": []} and time.monotonic() - started < 5  # no long poll
    push_one(api, "b")
    plain = post(api, ACK, {"acks": acks_of(claim(api))}).json()
    assert set(plain) == {"results"}
    assert document(store)["queues"]["q"]["completed"] == 2


BAD_CLAIMS = [
    ({"acks": "ACKS", "claim": []}, "claim"),
    ({"acks": "ACKS", "claim": "w2"}, "claim"),
    ({"acks": "ACKS", "claim": {"queues": ["q"]}}, "'worker'"),
    ({"acks": "ACKS", "claim": {**CLAIM, "queues": "q"}}, "'queues'"),
    ({"acks": "ACKS", "claim": {**CLAIM, "max_jobs": 0}}, "max_jobs"),
    ({"acks": "ACKS", "claim": {**CLAIM, "lease_seconds": -1}}, "lease_seconds"),
    ({"acks": "ACKS", "claim": {**CLAIM, "wait_seconds": 5}}, "wait_seconds"),
    ({"acks": "ACKS", "claim": {**CLAIM, "extra": 1}}, "'extra'"),
    ({"claim": CLAIM}, "'acks'"),
]


@pytest.mark.parametrize(("body", "named"), BAD_CLAIMS)
def test_a_bad_claim_refuses_the_whole_request_and_changes_nothing(
    api: Client, store: ObjectStore, body: dict[str, Any], named: str
) -> None:
    push_one(api, "a")
    push_one(api, "b")
    jobs = claim(api)
    before = stored(store)
    if body.get("acks") == "ACKS":
        body = {**body, "acks": acks_of(jobs)}

    error = error_of(post(api, ACK, body), 400)

    assert error["error"] == "invalid" and named in error["message"]
    assert stored(store) == before  # the ack was not applied either


def test_malformed_json_and_a_bad_token_refuse_the_request_and_change_nothing(
    api: Client, broker: Broker, store: ObjectStore
) -> None:
    push_one(api, "a")
    push_one(api, "b")
    jobs = claim(api)
    before = stored(store)
    body = orjson.dumps({"acks": acks_of(jobs), "claim": CLAIM})

    assert error_of(raw_post(api, ACK, body[:-1]), 400)["error"] == "malformed_json"
    for header in ({}, {"Authorization": "Bearer wrong-token"}):
        assert error_of(raw_post(Client(headers=header), ACK, body), 401)["error"] == "unauthorized"
    assert stored(store) == before


def test_the_answer_comes_only_after_the_commit_with_the_claim_landed(
    api: Client, store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    push_one(api, "a")
    push_one(api, "b")
    jobs = claim(api)
    events: list[str] = []
    answered = threading.Event()
    put_parts = store.put_parts

    def slow_put(*args: Any, **kwargs: Any) -> Any:
        answered.wait(0.5)  # an answer given before the write lands would show up meanwhile
        result = put_parts(*args, **kwargs)
        events.append("landed")
        return result

    monkeypatch.setattr(store, "put_parts", slow_put)
    response: list[Any] = []

    def ack() -> None:
        response.append(post(api, ACK, {"acks": acks_of(jobs), "claim": CLAIM}))
        events.append("answered")
        answered.set()

    thread = threading.Thread(target=ack)
    thread.start()
    thread.join(10)
    assert events == ["landed", "answered"]
    assert len(response[0].json()["claim"]["jobs"]) == 1


# -- BrokerClient ----------------------------------------------------------------------------------


@pytest.fixture
def broker_client(broker: Broker) -> Iterator[BrokerClient]:
    client = BrokerClient(["http://testserver"], token=TOKEN, transport=Transport(), retry_seconds=1)
    yield client
    client.close()


def sent_paths(client: BrokerClient, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    sent: list[str] = []
    send = client._send
    monkeypatch.setattr(client, "_send", lambda method, url, *a: sent.append(url.split("/api/v1")[1]) or send(
        method, url, *a))
    return sent


def test_broker_client_carries_a_claim_in_the_ack_request(
    broker_client: BrokerClient, store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = broker_client.push("q", ["a", "b", "c"])
    done, stolen = broker_client.claim("w", ["q"], max_jobs=2)
    sent = sent_paths(broker_client, monkeypatch)
    seq = document(store)["seq"]

    outcomes = broker_client.execute_many([
        claim_op("w", ["q"], policy=broker_client.policy, max_jobs=5),
        complete_op(done.id, done.lease),
        complete_op(stolen.id, "not-the-lease"),
    ])

    assert sent == ["/ack"] and document(store)["seq"] == seq + 1
    [job] = outcomes[0]
    assert isinstance(job, ClaimedJob) and job.id == ids[2]
    assert outcomes[1] is None and type(outcomes[2]) is LeaseLost


def test_broker_client_sends_the_claim_apart_to_a_broker_without_the_field(
    broker_client: BrokerClient, store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A broker from before the field: it refuses an unknown top-level field whole.
    monkeypatch.setattr(views.wire, "ack_claim_from", lambda data, policy: (wire.ack_from(data, policy), None))
    broker_client.push("q", ["a", "b", "c"])
    jobs = broker_client.claim("w", ["q"], max_jobs=2)
    sent = sent_paths(broker_client, monkeypatch)

    def ack_and_claim(job: ClaimedJob) -> list[Any]:
        return broker_client.execute_many([complete_op(job.id, job.lease),
                                           claim_op("w", ["q"], policy=broker_client.policy)])

    first = ack_and_claim(jobs[0])
    assert sent == ["/ack", "/ack", "/claim"]  # refused (nothing applied), then apart
    assert first[0] is None and len(first[1]) == 1
    second = ack_and_claim(jobs[1])
    assert sent[3:] == ["/ack", "/claim"]  # from then on, apart at once
    assert second == [None, []]
    assert document(store)["queues"]["q"]["completed"] == 2


def test_a_claim_the_broker_refuses_alone_is_that_claims_outcome() -> None:
    claim_ = claim_op("w", ["q"], policy=Policy())
    answer = {"results": [], "claim": wire.claim_json(claim_, ValidationError("no"))}
    refused = wire.claim_outcome_from(orjson.loads(orjson.dumps(answer)), claim_)
    assert isinstance(refused, ValidationError) and "claim: no" in str(refused)
