"""Operator actions on a standby node run on the leader: signed with the
nodes' shared secret key, posted to the leader's /api/v1/operator, each
usable once.

Every test here runs with a real (non-development) secret key, as a cluster
must; the public development key is tested on its own.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.core import signing
from django.db import OperationalError
from django.test import Client
from django.utils import timezone

from engine import Broker, NotLeader, ObjectStore, Policy
from engine.ops import forget_op, make_due_op, pause_op, purge_op, push_op, requeue_op
from queueadmin import runtime
from queueadmin.api import forward
from queueadmin.dashboard import actions
from queueadmin.models import AuditEntry, ForwardNonce
from tests.helpers import document, stored, wait_for
from tests.queueadmin.api_client import Client as ApiClient
from tests.queueadmin.dashboard_fixtures import act, client_for, kill, make_user

POLICY = Policy()
DEVELOPMENT_KEY = "django-insecure-queueadmin-local-development-only"


@pytest.fixture(autouse=True)
def cluster_key(settings: Any, db: None) -> None:
    """A private secret key shared by the nodes, and the shared database
    (where the leader records the nonces it has used)."""
    settings.SECRET_KEY = "test-cluster-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz"


@pytest.mark.parametrize(
    "op",
    [
        requeue_op(["a", "b"]),
        make_due_op(["a", "b"], expect=["pending", "pending"]),
        purge_op(["a"]),
        purge_op(queue="emails", status="dead"),
        pause_op("emails"),
        pause_op("emails", paused=False),
        forget_op("emails"),
        push_op("emails", [{"to": "ada@example.com"}], policy=POLICY, max_attempts=4, delay_seconds=30),
    ],
)
def test_a_signed_operation_comes_back_the_same(op: Any) -> None:
    assert forward.unsign(forward.sign(op), policy=POLICY).op == op


def test_each_signature_carries_its_own_nonce() -> None:
    first, second = (forward.unsign(forward.sign(pause_op("q")), policy=POLICY) for _ in range(2))
    assert first.op == second.op and first.nonce != second.nonce


def test_an_altered_or_stale_signature_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    text = forward.sign(requeue_op(["a"]))
    with pytest.raises(signing.BadSignature):
        forward.unsign(text[:-2] + ("AA" if not text.endswith("AA") else "BB"), policy=POLICY)
    with pytest.raises(signing.BadSignature):
        forward.unsign(signing.dumps({"kind": "requeue", "job_ids": ["a"]}, salt="another salt"), policy=POLICY)
    monkeypatch.setattr(forward, "MAX_AGE_SECONDS", -1)
    with pytest.raises(signing.SignatureExpired):
        forward.unsign(text, policy=POLICY)


def post_operator(body: str) -> Any:
    return ApiClient().post("/api/v1/operator", body, content_type="text/plain")


def test_the_leader_runs_a_signed_operation(broker: Broker, store: ObjectStore) -> None:
    dead = kill(broker)
    response = post_operator(forward.sign(requeue_op([dead])))
    assert response.status_code == 200
    assert response.json() == {"result": [dead], "seq": document(store)["seq"]}
    assert document(store)["jobs"][0]["id"] == dead


# Named ids: a signed value carries a timestamp, and ids made from it would differ
# between pytest-xdist's workers (which then refuse to run the suite).
@pytest.mark.parametrize("body", ["", "not signed at all", signing.dumps({"kind": "requeue"}, salt="x")],
                         ids=["empty", "not-signed", "signed-with-another-salt"])
def test_an_unsigned_operator_request_is_forbidden_and_changes_nothing(broker: Broker, store: ObjectStore,
                                                                       body: str) -> None:
    kill(broker)
    before = stored(store)
    response = post_operator(body)
    assert response.status_code == 403 and response.json()["error"] == "forbidden"
    assert stored(store) == before


def test_a_signed_but_malformed_operation_is_invalid(broker: Broker, store: ObjectStore) -> None:
    before = stored(store)
    text = signing.dumps({"kind": "requeue", "job_ids": []}, salt=forward.SALT)
    response = post_operator(text)
    assert response.status_code == 400
    assert stored(store) == before


@pytest.mark.parametrize("body", [
    {"kind": "make_due", "job_ids": []},
    {"kind": "make_due", "job_ids": [1]},
    {"kind": "make_due", "job_ids": ["a"], "expect": ["dead"]},
    {"kind": "make_due"},
])
def test_a_signed_but_malformed_run_now_is_invalid(broker: Broker, store: ObjectStore, body: dict[str, Any]) -> None:
    before = stored(store)
    response = post_operator(signing.dumps(body, salt=forward.SALT))
    assert response.status_code == 400, response.content
    assert stored(store) == before


def test_a_signed_operation_with_a_lone_surrogate_is_invalid(broker: Broker, store: ObjectStore) -> None:
    before = stored(store)
    text = signing.dumps({"kind": "pause", "queue": "q\ud800", "paused": True, "nonce": "n" * 32},
                         salt=forward.SALT)
    response = post_operator(text)
    assert response.status_code == 400 and "surrogate" in response.json()["message"]
    assert stored(store) == before


def test_an_api_token_does_not_make_an_operator_request(broker: Broker, store: ObjectStore,
                                                         settings: Any) -> None:
    settings.QUEUE_API_TOKEN = "worker-token"
    kill(broker)
    before = stored(store)
    response = ApiClient().post("/api/v1/operator", '{"kind": "purge", "queue": "q", "status": "dead"}',
                             content_type="application/json", headers={"Authorization": "Bearer worker-token"})
    assert response.status_code == 403
    assert stored(store) == before


def as_a_standby(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make this node a standby (its broker answers NotLeader naming
    http://leader.test:8000) whose forwarded operations reach the same broker
    through the leader's operator endpoint (Django's test client)."""
    real_execute = broker.execute

    def standby(op: object) -> None:
        raise NotLeader("http://leader.test:8000")

    def leader(url: str, *, content: bytes, **kwargs: Any) -> httpx.Response:
        assert url == "http://leader.test:8000/api/v1/operator"
        monkeypatch.setattr(broker, "execute", real_execute)
        answer = post_operator(content.decode())
        monkeypatch.setattr(broker, "execute", standby)
        return httpx.Response(answer.status_code, content=answer.content,
                              request=httpx.Request("POST", url))

    monkeypatch.setattr(broker, "execute", standby)
    monkeypatch.setattr(forward.httpx, "post", leader)


def test_an_action_on_a_standby_runs_on_the_leader_and_is_audited_here(
    broker: Broker, operator: Client, store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = kill(broker)
    as_a_standby(broker, monkeypatch)

    response = act(operator, action="requeue", ids=dead, reason="from b", next="/")

    assert response.status_code == 302
    entry = AuditEntry.objects.get()
    assert entry.outcome == "ok" and "on the leader http://leader.test:8000" in entry.detail
    assert entry.seq == document(store)["seq"]
    assert document(store)["jobs"][0]["id"] == dead


def test_an_unreachable_leader_is_audited_as_failed(broker: Broker, operator: Client, store: ObjectStore,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    dead = kill(broker)
    before = stored(store)

    def standby(op: object) -> None:
        raise NotLeader("http://leader.test:8000")

    def down(url: str, **kwargs: Any) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    monkeypatch.setattr(broker, "execute", standby)
    monkeypatch.setattr(forward.httpx, "post", down)
    act(operator, action="requeue", ids=dead, reason="r", next="/")

    entry = AuditEntry.objects.get()
    assert entry.outcome == "failed" and "could not be reached" in entry.detail
    assert stored(store) == before


def test_execute_runs_locally_on_the_leader(broker: Broker) -> None:
    result, seq, where = actions.execute(pause_op("q"))
    assert (result, where) == (False, "") and seq == broker.seq


def test_a_replayed_operator_request_is_refused_and_changes_nothing(broker: Broker, store: ObjectStore) -> None:
    first_dead, second_dead = kill(broker), kill(broker)
    text = forward.sign(requeue_op([first_dead]))
    assert post_operator(text).status_code == 200
    # The job is taken again and dies again: a replay would requeue it a second time.
    kill(broker)
    before = stored(store)

    replay = post_operator(text)

    assert replay.status_code == 403
    assert replay.json()["error"] == "forbidden" and "already used" in replay.json()["message"]
    assert stored(store) == before
    # A fresh signature for the same kind of action still works.
    assert post_operator(forward.sign(requeue_op([second_dead]))).status_code == 200


def test_a_replay_is_refused_by_another_node_sharing_the_database(broker: Broker, store: ObjectStore) -> None:
    # The nonce lives in the shared table, not in the leader's memory: a node
    # that leads later refuses a request the previous leader already ran.
    dead = kill(broker)
    text = forward.sign(requeue_op([dead]))
    assert post_operator(text).status_code == 200
    assert ForwardNonce.objects.count() == 1
    assert not forward.use_nonce(forward.unsign(text, policy=POLICY).nonce)


def test_used_nonces_are_pruned_once_their_signatures_have_expired(monkeypatch: pytest.MonkeyPatch) -> None:
    assert forward.use_nonce("a" * 32)
    ForwardNonce.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert forward.use_nonce("b" * 32)
    assert list(ForwardNonce.objects.values_list("nonce", flat=True)) == ["b" * 32]


def test_a_signed_request_without_a_nonce_is_forbidden(broker: Broker, store: ObjectStore) -> None:
    dead = kill(broker)
    before = stored(store)
    text = signing.dumps({"kind": "requeue", "job_ids": [dead]}, salt=forward.SALT)  # an older node's request
    response = post_operator(text)
    assert response.status_code == 403 and "nonce" in response.json()["message"]
    assert stored(store) == before


@pytest.mark.parametrize("remote_addr", ["127.0.0.1", "::1", "10.0.0.9"])
def test_with_the_public_development_key_nothing_is_forwarded_even_from_loopback(
    broker: Broker, store: ObjectStore, settings: Any, remote_addr: str
) -> None:
    settings.SECRET_KEY = DEVELOPMENT_KEY
    dead = kill(broker)
    before = stored(store)
    response = ApiClient(REMOTE_ADDR=remote_addr).post("/api/v1/operator", forward.sign(requeue_op([dead])),
                                                    content_type="text/plain")
    assert response.status_code == 403 and "development secret key" in response.json()["message"]
    assert stored(store) == before


def test_a_standby_with_the_public_development_key_does_not_forward(
    broker: Broker, store: ObjectStore, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.SECRET_KEY = DEVELOPMENT_KEY
    operator = client_for(make_user("operator", "view_dashboard", "requeue_job"))  # signed in with this key
    dead = kill(broker)
    before = stored(store)
    sent: list[str] = []

    def standby(op: object) -> None:
        raise NotLeader("http://leader.test:8000")

    monkeypatch.setattr(broker, "execute", standby)
    monkeypatch.setattr(forward.httpx, "post", lambda url, **kwargs: sent.append(url))
    act(operator, action="requeue", ids=dead, reason="r", next="/")

    assert sent == []
    entry = AuditEntry.objects.get()
    assert entry.outcome == "failed" and "DJANGO_SECRET_KEY" in entry.detail
    assert stored(store) == before


def test_a_database_that_cannot_record_the_nonce_refuses_the_request_with_503_and_runs_nothing(
        broker: Broker, store: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # As on nodes whose shared database was never migrated (found by the chaos
    # harness's operator): without its nonce recorded the request could be
    # replayed, so it is not run.
    dead = kill(broker)
    before = stored(store)

    def no_table(nonce: str) -> bool:
        raise OperationalError("no such table: queueadmin_forwardnonce")

    monkeypatch.setattr(forward, "use_nonce", no_table)

    response = post_operator(forward.sign(requeue_op([dead])))

    assert response.status_code == 503, response.content
    body = response.json()
    assert body["error"] == "database_unavailable" and "manage.py migrate" in body["message"]
    assert stored(store) == before


def test_a_standby_answers_not_leader_without_touching_the_shared_database(
        broker: Broker, store: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # A standby runs no operator request, so it records no nonce: a shared
    # SQLite database locked by a stopped node held the answer for its busy
    # timeout (chaos seed 64), and the nonce was spent on nothing.
    standby = Broker(store, url="http://node-b.test:8000", heartbeat_seconds=120, takeover_seconds=600).start()
    try:
        wait_for(lambda: standby.role == "standby" and standby.leader_url == broker.url)
        monkeypatch.setattr(runtime, "get_broker", lambda: standby)
        dead = kill(broker)
        before = stored(store)

        def locked(nonce: str) -> bool:
            raise OperationalError("database is locked")

        use_nonce = forward.use_nonce
        monkeypatch.setattr(forward, "use_nonce", locked)
        text = forward.sign(requeue_op([dead]))

        response = post_operator(text)

        assert response.status_code == 503, response.content
        assert response.json()["error"] == "not_leader" and response.json()["leader_url"] == broker.url
        assert stored(store) == before
        # The leader, with its database: the same request is still fresh there.
        monkeypatch.setattr(runtime, "get_broker", lambda: broker)
        monkeypatch.setattr(forward, "use_nonce", use_nonce)
        assert post_operator(text).status_code == 200
    finally:
        standby.stop()
