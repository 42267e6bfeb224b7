"""API tokens limited to some queues and to pushing or working
(``ApiToken.queues``, ``may_push``, ``may_work``; queueadmin.api.grants),
through the ASGI application daphne serves.

Every refusal is a 403 ``forbidden`` that names the token and what it may
not do, and leaves the stored document byte for byte as it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
import pytest

from engine import Broker, ObjectStore
from engine.ops import claim_op, fail_op
from queueadmin.models import ApiToken
from tests.helpers import stored
from tests.queueadmin.api_client import Client, TestResponse
from tests.queueadmin.dashboard_fixtures import make_token, push

if TYPE_CHECKING:
    from django.test import Client as DjangoClient
    from pytest_django.fixtures import SettingsWrapper

pytestmark = pytest.mark.usefixtures("fresh_token_cache")

ENV_TOKEN = "env-token-0123456789"


def call(method: str, path: str, token: str, body: Any = None) -> TestResponse:
    headers = {"Authorization": f"Bearer {token}"}
    if method == "GET":
        return Client().get(path, headers=headers)
    return Client().post(path, orjson.dumps(body), content_type="application/json", headers=headers)


def forbidden(answer: TestResponse, *words: str) -> None:
    assert answer.status_code == 403, answer.content
    body = answer.json()
    assert body["error"] == "forbidden"
    for word in words:
        assert word in body["message"], body["message"]


@pytest.fixture
def full(settings: SettingsWrapper) -> str:
    """The settings token: every call on every queue."""
    settings.QUEUE_API_TOKEN = ENV_TOKEN
    return ENV_TOKEN


def running(broker: Broker, queue: str) -> tuple[str, str]:
    """A job of ``queue`` claimed by a worker: its id and lease."""
    push(broker, queue, [{"n": 1}])
    [job] = broker.execute(claim_op("w0", [queue], policy=broker.policy))
    return job.id, job.lease


def test_a_producer_token_pushes_to_its_queues_only(broker: Broker, store: ObjectStore, full: str, db: None) -> None:
    _, token = make_token("billing producers", queues="billing, billing-*", may_work=False)
    assert call("POST", "/api/v1/jobs", token, {"queue": "billing", "payload": 1}).status_code == 201
    assert call("POST", "/api/v1/jobs", token, {"queue": "billing-eu", "payload": 2}).status_code == 201
    before = stored(store)
    # A queue that only starts like one of its patterns is not one of them.
    for queue in ("mail", "billingx", "Billing"):
        forbidden(call("POST", "/api/v1/jobs", token, {"queue": queue, "payload": 3}),
                  "'billing producers'", "push to", repr(queue), "billing billing-*")
    assert stored(store) == before


def test_a_producer_token_cannot_claim_or_acknowledge(broker: Broker, store: ObjectStore, full: str,
                                                      db: None) -> None:
    _, token = make_token("producers", may_work=False)
    job_id, lease = running(broker, "q")
    push(broker, "q", [{"n": 2}])
    before = stored(store)
    for path, body in [
        ("/api/v1/claim", {"worker": "w1", "queues": ["q"]}),
        (f"/api/v1/jobs/{job_id}/heartbeat", {"lease": lease}),
        (f"/api/v1/jobs/{job_id}/complete", {"lease": lease}),
        (f"/api/v1/jobs/{job_id}/fail", {"lease": lease, "error": "x"}),
        ("/api/v1/ack", {"acks": [{"id": job_id, "lease": lease, "outcome": "complete"}]}),
        ("/api/v1/heartbeat", {"leases": [{"id": job_id, "lease": lease}]}),
    ]:
        forbidden(call("POST", path, token, body), "may not claim or acknowledge", "for pushing only")
    assert stored(store) == before


def test_a_worker_token_claims_from_its_queues_only(broker: Broker, store: ObjectStore, full: str, db: None) -> None:
    _, token = make_token("billing workers", queues="billing", may_push=False)
    push(broker, "billing", [{"n": 1}])
    push(broker, "mail", [{"n": 2}])
    before = stored(store)
    forbidden(call("POST", "/api/v1/jobs", token, {"queue": "billing", "payload": 1}), "may not push")
    # One queue out of scope refuses the whole claim: nothing is leased.
    forbidden(call("POST", "/api/v1/claim", token, {"worker": "w1", "queues": ["billing", "mail"]}),
              "claim from 'mail'")
    assert stored(store) == before
    claimed = call("POST", "/api/v1/claim", token, {"worker": "w1", "queues": ["billing"]})
    [job] = claimed.json()["jobs"]
    assert job["queue"] == "billing"
    done = call("POST", f"/api/v1/jobs/{job['id']}/complete", token, {"lease": job["lease"]})
    assert done.status_code == 200


def test_an_ack_whose_claim_is_out_of_scope_applies_nothing(broker: Broker, store: ObjectStore, full: str,
                                                            db: None) -> None:
    _, token = make_token("billing workers", queues="billing", may_push=False)
    job_id, lease = running(broker, "billing")
    push(broker, "mail", [{"n": 2}])
    before = stored(store)
    answer = call("POST", "/api/v1/ack", token, {"acks": [{"id": job_id, "lease": lease, "outcome": "complete"}],
                                                 "claim": {"worker": "w0", "queues": ["mail"]}})
    forbidden(answer, "claim from 'mail'")
    assert stored(store) == before  # the ack was not applied either
    answer = call("POST", "/api/v1/ack", token, {"acks": [{"id": job_id, "lease": lease, "outcome": "complete"}],
                                                 "claim": {"worker": "w0", "queues": ["billing"]}})
    assert answer.status_code == 200 and answer.json()["results"] == [{"id": job_id, "ok": True}]


def test_a_lease_of_another_queues_job_is_of_no_use_to_a_narrowed_token(broker: Broker, store: ObjectStore,
                                                                         full: str, db: None) -> None:
    """A lease call names its job, not its queue: the job's queue is checked
    as the call is applied. Another queue's job, with its right lease or a
    wrong one, running or dead, is answered exactly as a job that does not
    exist, alone in a batch, and nothing changes."""
    _, token = make_token("billing workers", queues="billing", may_push=False)
    theirs, their_lease = running(broker, "mail")
    [dead] = push(broker, "mail", [{"n": 3}], max_attempts=1)
    [claimed] = broker.execute(claim_op("w1", ["mail"], policy=broker.policy))
    broker.execute(fail_op(dead, claimed.lease, error="boom", retry_in_seconds=None, policy=broker.policy))
    mine, my_lease = running(broker, "billing")

    def not_found(answer: TestResponse, job_id: str) -> None:
        assert answer.status_code == 404, answer.content
        assert answer.json() == {"error": "job_not_found", "message": f"job {job_id!r} not found"}

    before = stored(store)
    for job_id, lease in [(theirs, their_lease), (theirs, "wrong-lease"), (dead, "wrong-lease")]:
        for path, body in [(f"/api/v1/jobs/{job_id}/heartbeat", {"lease": lease}),
                           (f"/api/v1/jobs/{job_id}/complete", {"lease": lease}),
                           (f"/api/v1/jobs/{job_id}/fail", {"lease": lease, "error": "x"})]:
            not_found(call("POST", path, token, body), job_id)
            not_found(call("POST", path.replace(job_id, "no-such-job"), token, body), "no-such-job")
    assert stored(store) == before
    # The full token is told what the job's state is: the lease is wrong, or the job is dead.
    assert call("POST", f"/api/v1/jobs/{dead}/complete", full, {"lease": "wrong-lease"}).status_code == 409

    # In a batch, the other queue's item alone is not found; the token's own job is completed.
    answer = call("POST", "/api/v1/ack", token, {"acks": [
        {"id": theirs, "lease": their_lease, "outcome": "complete"},
        {"id": mine, "lease": my_lease, "outcome": "complete"}]})
    assert answer.status_code == 200
    assert answer.json()["results"] == [
        {"id": theirs, "error": "job_not_found", "message": f"job {theirs!r} not found"},
        {"id": mine, "ok": True}]
    answer = call("POST", "/api/v1/heartbeat", token, {"leases": [{"id": theirs, "lease": their_lease}]})
    assert answer.json()["results"] == [{"id": theirs, "error": "job_not_found",
                                         "message": f"job {theirs!r} not found"}]
    assert broker.get_job(theirs)["status"] == "running"
    assert call("POST", f"/api/v1/jobs/{theirs}/complete", full, {"lease": their_lease}).status_code == 200


def test_a_narrowed_token_finds_no_job_of_another_queue(broker: Broker, full: str, db: None) -> None:
    _, token = make_token("billing producers", queues="billing", may_work=False)
    [mine] = push(broker, "billing", [{"n": 1}])
    [theirs] = push(broker, "mail", [{"n": 2}])
    assert call("GET", f"/api/v1/jobs/{mine}", token).json()["queue"] == "billing"
    hidden = call("GET", f"/api/v1/jobs/{theirs}", token)
    unknown = call("GET", "/api/v1/jobs/no-such-job", token)
    # Exactly as for a job that does not exist, so the answer tells nothing.
    assert hidden.status_code == unknown.status_code == 404
    assert hidden.json() == {**unknown.json(), "message": unknown.json()["message"].replace("no-such-job", theirs)}
    assert call("GET", f"/api/v1/jobs/{theirs}", full).status_code == 200


@pytest.mark.parametrize("scope", [{"queues": "billing"}, {"may_push": False}, {"may_work": False}])
def test_only_an_unlimited_token_reads_the_document_and_the_metrics(broker: Broker, full: str, db: None,
                                                                    scope: dict[str, Any]) -> None:
    _, narrowed = make_token("narrowed", **scope)
    _, unlimited = make_token("unlimited")
    forbidden(call("GET", "/api/v1/document", narrowed), "the whole document", "shows every queue")
    forbidden(call("GET", "/metrics", narrowed), "the metrics")
    for token in (unlimited, full):
        assert call("GET", "/api/v1/document", token).status_code == 200
        assert call("GET", "/metrics", token).status_code == 200


def test_a_changed_scope_applies_to_the_next_request(broker: Broker, store: ObjectStore, full: str,
                                                     db: None) -> None:
    row, token = make_token("fleet")
    assert call("POST", "/api/v1/jobs", token, {"queue": "mail", "payload": 1}).status_code == 201
    row.queues = "billing"
    row.save()
    before = stored(store)
    forbidden(call("POST", "/api/v1/jobs", token, {"queue": "mail", "payload": 1}), "push to 'mail'")
    assert stored(store) == before


def test_admin_sets_a_tokens_scope_and_refuses_a_bad_one(broker: Broker, admin_client_: DjangoClient) -> None:
    add = "/admin/queueadmin/apitoken/add/"
    refused = admin_client_.post(add, {"name": "nothing", "queues": ""})
    assert refused.status_code == 200 and "could do nothing" in refused.content.decode()
    refused = admin_client_.post(add, {"name": "bad", "queues": "billing mail/eu", "may_push": "on"})
    assert refused.status_code == 200 and "not a pattern of queue names: mail/eu" in refused.content.decode()
    assert not ApiToken.objects.exists()
    made = admin_client_.post(add, {"name": "eu producers", "queues": "billing-*  *-eu", "may_push": "on"},
                              follow=True)
    [message] = [str(m) for m in made.context["messages"] if "Copy it now" in str(m)]
    token = message.split(" is ")[1].split(" ")[0]
    assert "push · billing-* *-eu" in admin_client_.get("/admin/queueadmin/apitoken/").content.decode()
    assert call("POST", "/api/v1/jobs", token, {"queue": "mail-eu", "payload": 1}).status_code == 201
    forbidden(call("POST", "/api/v1/jobs", token, {"queue": "mail", "payload": 1}), "'eu producers'")
    forbidden(call("POST", "/api/v1/claim", token, {"worker": "w", "queues": ["mail-eu"]}), "for pushing only")


def test_the_settings_token_and_an_unlimited_database_token_do_everything(broker: Broker, full: str,
                                                                          db: None) -> None:
    _, unlimited = make_token("unlimited")
    for token in (full, unlimited):
        assert call("POST", "/api/v1/jobs", token, {"queue": "any", "payload": 1}).status_code == 201
        [job] = call("POST", "/api/v1/claim", token, {"worker": "w", "queues": ["any"]}).json()["jobs"]
        assert call("POST", f"/api/v1/jobs/{job['id']}/complete", token, {"lease": job["lease"]}).status_code == 200
