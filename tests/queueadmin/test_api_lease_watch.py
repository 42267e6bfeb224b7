"""``POST /api/v1/leases/watch`` (engine.leasewatch): a worker learns at once
that a lease it holds was lost, without waiting for its next heartbeat,
through the ASGI application daphne serves, on a real leading broker.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import orjson
import pytest

from engine import Broker, ObjectStore
from engine.ops import Tick, claim_op, complete_op, purge_op, requeue_op
from tests.helpers import stored, wait_for
from tests.queueadmin.api_client import Client, TestResponse
from tests.queueadmin.dashboard_fixtures import make_token, push

if TYPE_CHECKING:
    from pytest_django.fixtures import SettingsWrapper

pytestmark = pytest.mark.usefixtures("fresh_token_cache")

TOKEN = "watch-token-0123456789"


@pytest.fixture
def full(settings: SettingsWrapper) -> str:
    settings.QUEUE_API_TOKEN = TOKEN
    return TOKEN


def watch(leases: list[tuple[str, str]], wait: float = 0, *, token: str = TOKEN, **more: Any) -> TestResponse:
    body = {"leases": [{"id": job_id, "lease": lease} for job_id, lease in leases], "wait_seconds": wait, **more}
    return Client().post("/api/v1/leases/watch", orjson.dumps(body), content_type="application/json",
                         headers={"Authorization": f"Bearer {token}"})


def running(broker: Broker, queue: str = "q", n: int = 1) -> list[tuple[str, str]]:
    push(broker, queue, list(range(n)))
    return [(job.id, job.lease) for job in broker.execute(claim_op("w", [queue], policy=broker.policy, max_jobs=n))]


def test_leases_still_held_are_answered_empty_and_nothing_is_written(broker: Broker, store: ObjectStore,
                                                                   full: str) -> None:
    leases = running(broker, n=2)
    before = stored(store)

    assert watch(leases).json() == {"lost": []}
    assert watch(leases, wait=0.2).json() == {"lost": []}  # the wait ran out
    assert stored(store) == before
    assert broker.lease_watches.watching() == 0


def test_a_lease_revoked_already_is_answered_at_once_with_why(broker: Broker, full: str) -> None:
    [(a, lease_a), (b, lease_b), (c, lease_c)] = running(broker, n=3)
    broker.execute(requeue_op([a]))
    broker.execute(purge_op([b]))
    broker.execute(requeue_op([c]))
    claimed = broker.execute(claim_op("w2", ["q"], policy=broker.policy, max_jobs=3))
    [(c2, lease_c2)] = [(job.id, job.lease) for job in claimed if job.id == c]

    answer = watch([(a, lease_a), (b, lease_b), (c, lease_c), (c2, lease_c2)], wait=20)

    assert answer.status_code == 200
    assert answer.json() == {"lost": [
        {"id": a, "error": "lease_lost", "message": f"job {a!r}: the lease expired or the job was handed to "
                                                    "someone else"},
        {"id": b, "error": "job_not_found", "message": f"job {b!r} not found"},
        {"id": c, "error": "lease_lost", "message": f"job {c!r}: the lease expired or the job was handed to "
                                                    "someone else"}]}


@pytest.mark.parametrize("revoke", ["requeue", "purge"])
def test_a_waiting_watch_is_answered_by_the_commit_that_revokes_a_lease(broker: Broker, full: str,
                                                                        revoke: str) -> None:
    [(a, lease_a), (b, lease_b)] = running(broker, n=2)
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(answer=watch([(a, lease_a), (b, lease_b)], wait=25)))
    thread.start()
    wait_for(lambda: broker.lease_watches.watching() == 1, what="the watch parked")
    metrics = Client().get("/metrics", headers={"Authorization": f"Bearer {full}"}).content.decode()
    assert "\nqueueadmin_lease_watches 1.0\n" in metrics  # an operator sees it parked
    broker.execute(requeue_op([b]) if revoke == "requeue" else purge_op([b]))
    thread.join(10)

    assert not thread.is_alive(), "the watch waited past the commit that revoked its lease"
    assert [(lost["id"], lost["error"]) for lost in result["answer"].json()["lost"]] == [
        (b, "lease_lost" if revoke == "requeue" else "job_not_found")]
    assert broker.lease_watches.watching() == 0


def test_a_lease_that_runs_out_answers_a_waiting_watch_with_the_commit_that_expires_it(broker: Broker,
                                                                                      full: str) -> None:
    """The worker's heartbeats stalled (a long GC pause, a lost network): the
    commit that expires the lease tells the worker, whose job runs again elsewhere."""
    push(broker, "q", ["stalled"])
    [job] = broker.execute(claim_op("w", ["q"], policy=broker.policy, lease_seconds=0.2))
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(answer=watch([(job.id, job.lease)], wait=25)))
    thread.start()
    wait_for(lambda: broker.lease_watches.watching() == 1, what="the watch parked")

    def answered() -> bool:
        broker.execute(Tick())  # every commit expires what ran out; a tick is the commit a quiet leader makes
        return not thread.is_alive()

    wait_for(answered, what="the commit that expires the lease to answer the watch")

    assert [(lost["id"], lost["error"]) for lost in result["answer"].json()["lost"]] == [(job.id, "lease_lost")]


def test_a_lease_its_holder_ended_or_one_never_given_does_not_answer_a_watch(broker: Broker, full: str) -> None:
    """A busy worker's watch must not be answered by each of its own
    acknowledgements; a token the broker never gave is for heartbeats to refuse."""
    [(a, lease_a), (b, lease_b)] = running(broker, n=2)
    broker.execute(complete_op(a, lease_a))

    assert watch([(a, lease_a), (b, "not-a-lease-it-gave"), (b, lease_b)], wait=0.3).json() == {"lost": []}


def test_a_watch_is_a_workers_call_confined_to_its_tokens_queues(broker: Broker, full: str, db: None) -> None:
    [(mine, my_lease)] = running(broker, "billing")
    [(theirs, their_lease)] = running(broker, "mail")
    _, worker = make_token("billing workers", queues="billing", may_push=False)
    _, producer = make_token("billing producers", queues="billing", may_work=False)

    answer = watch([(mine, my_lease), (theirs, their_lease)], token=worker).json()
    assert answer == {"lost": [{"id": theirs, "error": "job_not_found", "message": f"job {theirs!r} not found"}]}
    # Without its lease, another queue's job is as silent as an id that does not exist: no existence oracle.
    probe = [(theirs, "a-guessed-lease"), ("no-such-job", "a-guessed-lease")]
    assert watch(probe, wait=0.2, token=worker).json() == {"lost": []}
    refused = watch([(mine, my_lease)], token=producer)
    assert refused.status_code == 403 and refused.json()["error"] == "forbidden"
    assert watch([(mine, my_lease)], token="wrong-token-0123456789").status_code == 401


@pytest.mark.parametrize(("body", "words"), [
    ({"leases": []}, "'leases' must hold at least one item"),
    ({"leases": [{"id": "j", "lease": "l"}], "wait_seconds": 31}, "'wait_seconds' must be a number from 0 to 30"),
    ({"leases": [{"id": "j", "lease": "l"}], "wait_seconds": True}, "'wait_seconds' must be a number"),
    ({"leases": [{"id": "j"}]}, "missing field 'leases[0].lease'"),
    ({"leases": [{"id": "j", "lease": "l", "colour": "red"}]}, "unknown field 'leases[0].colour'"),
    ({"leases": [{"id": "j", "lease": "l"}], "lease_seconds": 5}, "unknown field 'lease_seconds'"),
])
def test_a_bad_watch_is_refused_whole(broker: Broker, store: ObjectStore, full: str, body: dict[str, Any],
                                      words: str) -> None:
    before = stored(store)
    answer = Client().post("/api/v1/leases/watch", orjson.dumps(body), content_type="application/json",
                           headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 400 and answer.json()["error"] == "invalid", answer.content
    assert words in answer.json()["message"], answer.json()["message"]
    assert stored(store) == before


def test_a_waiting_watch_is_answered_not_leader_when_the_broker_stops(broker: Broker, full: str) -> None:
    leases = running(broker)
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(answer=watch(leases, wait=25)))
    thread.start()
    wait_for(lambda: broker.lease_watches.watching() == 1, what="the watch parked")
    broker.stop()
    thread.join(10)

    assert not thread.is_alive()
    assert result["answer"].status_code == 503 and result["answer"].json()["error"] == "not_leader"
