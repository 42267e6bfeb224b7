"""BrokerClient against fake brokers, reached through a :class:`MockTransport`.

The fake nodes speak docs/api.md on top of a real GroupCommitter, so the
client's requests and the outcomes it parses are checked end to end without
a server process. The real server is exercised by the e2e tests, and the
real transport's own failures by tests/engine/test_http_transport.py.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import httpx
import orjson
import pytest

from engine import (
    DocumentError,
    EngineError,
    GroupCommitter,
    HttpAnswer,
    InvalidPayload,
    JobNotFound,
    LeaseLost,
    MemoryStore,
    NotLeader,
    PayloadTooLarge,
    Policy,
    QueueError,
    StoreUnavailable,
    ValidationError,
    wire,
)
from engine.discovery import LeaderDiscovery
from engine.errors import BrokerUnavailable, Unauthorized
from engine.http_client import BrokerClient
from engine.leasewatch import lost_leases
from engine.model import ClaimedJob, FailOutcome
from engine.ops import complete_op, push_op
from engine.worker import Worker, WorkerOptions

TOKEN = "s3cret"
A, B, C = "http://node-a:8000", "http://node-b:8000", "http://node-c:8000"
QUICK = {"retry_seconds": 2.0, "backoff_seconds": 0.001, "backoff_cap_seconds": 0.01}


def _json(status: int, body: Any) -> httpx.Response:
    return httpx.Response(status, content=orjson.dumps(body), headers={"Content-Type": "application/json"})


def _error(status: int, code: str, message: str = "refused", **extra: Any) -> httpx.Response:
    return _json(status, {"error": code, "message": message, **extra})


class MockTransport:
    """An :class:`engine.http_transport.HttpTransport` answering from ``handler``
    (an ``httpx.Request`` to an ``httpx.Response``, as ``httpx.MockTransport``
    takes), so that the fake brokers below use httpx's request and response
    models. httpx's transport errors become BrokerUnavailable, as the real
    transport's do. Each request keeps its timeouts in
    ``extensions["timeout"]``, as httpx's own do."""

    def __init__(self, handler: Callable[[httpx.Request], httpx.Response]) -> None:
        self.handler = handler

    def send(self, method: str, url: str, content: bytes | None, headers: Any, *,
             connect_timeout: float, read_timeout: float) -> HttpAnswer:
        request = httpx.Request(method, url, content=content, headers=headers,
                                extensions={"timeout": {"connect": connect_timeout, "read": read_timeout}})
        try:
            response = self.handler(request)
        except httpx.TransportError as exc:
            raise BrokerUnavailable(f"{method} {url}: {type(exc).__name__}: {exc}") from exc
        return HttpAnswer(status=response.status_code, reason=response.reason_phrase, content=response.read())

    def close(self) -> None:
        pass


class Cluster:
    """Fake broker nodes by base URL. Each request is logged; ``faults`` are
    callables consulted first, which may answer or raise instead of the node."""

    def __init__(self, committer: GroupCommitter) -> None:
        self.committer = committer
        self.leader: str | None = A
        self.up = {A, B, C}
        self.log: list[httpx.Request] = []
        self.faults: list[Callable[[httpx.Request], httpx.Response | None]] = []

    def paths(self) -> list[str]:
        return [f"{r.method} {r.url.scheme}://{r.url.netloc.decode()}{r.url.path}" for r in self.log]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.log.append(request)
        base = f"{request.url.scheme}://{request.url.netloc.decode()}"
        for fault in list(self.faults):
            answer = fault(request)
            if answer is not None:
                return answer
        if base not in self.up:
            raise httpx.ConnectError("connection refused", request=request)
        path = request.url.path.removeprefix("/api/v1")
        if path == "/health":
            role = "leader" if base == self.leader else "standby"
            return _json(200, {"role": role, "broker": {"id": "x", "url": self.leader, "epoch": 1},
                               "node": {"id": base, "url": base}, "seq": 1})
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return _error(401, "unauthorized", "missing or wrong token")
        if base != self.leader:
            return _error(503, "not_leader", "not the leader", leader_url=self.leader)
        body = orjson.loads(request.content) if request.content else {}
        try:
            return self._serve(request.method, path, body)
        except QueueError as exc:
            status = {"job_not_found": 404, "lease_lost": 409, "payload_too_large": 413}.get(exc.code, 400)
            return _error(status, exc.code, str(exc))

    def _serve(self, method: str, path: str, body: dict[str, Any]) -> httpx.Response:
        c = self.committer
        if path == "/jobs" and method == "POST":
            jobs = body["jobs"]
            op = push_op(body["queue"], [j["payload"] for j in jobs], policy=c.policy,
                         max_attempts=jobs[0].get("max_attempts"), delay_seconds=jobs[0].get("delay_seconds", 0),
                         ids=[j["id"] for j in jobs])
            return _json(201, {"ids": c.execute(op)})
        if path == "/claim":
            claimed = c.claim(body["worker"], body["queues"], max_jobs=body.get("max_jobs", 1),
                              lease_seconds=body.get("lease_seconds"))
            return _json(200, {"jobs": [
                {"id": j.id, "queue": j.queue, "payload": j.payload, "attempt": j.attempt, "lease": j.lease,
                 "lease_expires_at": j.lease_expires_at.isoformat()} for j in claimed]})
        if path == "/document":
            return _json(200, c.document())
        if path in ("/ack", "/heartbeat"):
            items = wire.ack_from(body, c.policy) if path == "/ack" else wire.heartbeats_from(body)
            done = iter(c.execute_many([i for i in items if not isinstance(i, ValidationError)]))
            outcomes = [i if isinstance(i, ValidationError) else next(done) for i in items]
            return _json(200, wire.batch_results_json(items, outcomes))
        if path == wire.WATCH_PATH:
            # Answered from the committer's state, after at most a short wait
            # (a real broker parks the watch until a commit loses a lease).
            leases, wait = wire.watch_from(body)
            assert c.state is not None
            if not (lost := lost_leases(c.state, leases)) and wait:
                time.sleep(min(wait, 0.05))
                lost = lost_leases(c.state, leases)
            return _json(200, wire.watch_json(lost))
        _, _, job_id, *action = path.split("/")
        if not action:
            return _json(200, c.get_job(job_id))
        if action == ["heartbeat"]:
            expires = c.heartbeat(job_id, body["lease"], lease_seconds=body.get("lease_seconds"))
            return _json(200, {"lease_expires_at": expires.isoformat()})
        if action == ["complete"]:
            c.complete(job_id, body["lease"])
            return _json(200, {"ok": True})
        outcome = c.fail(job_id, body["lease"], error=body["error"], retry_in_seconds=body.get("retry_in_seconds"),
                         give_up=body.get("give_up", False))
        return _json(200, {"status": outcome.status,
                           "not_before": outcome.not_before.isoformat() if outcome.not_before else None})


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    committer = GroupCommitter(MemoryStore(), policy=Policy(max_attempts=2, backoff_base_seconds=0)).start()
    yield Cluster(committer)
    committer.stop()


@pytest.fixture
def make_client(cluster: Cluster) -> Iterator[Callable[..., BrokerClient]]:
    made: list[BrokerClient] = []

    def make(urls: Any = (A, B, C), **kwargs: Any) -> BrokerClient:
        options = {"token": TOKEN, "transport": MockTransport(cluster), **QUICK, **kwargs}
        client = BrokerClient(urls, **options)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def test_life_of_a_job_over_http(cluster: Cluster, make_client: Callable[..., BrokerClient]) -> None:
    client = make_client()
    a, b = client.push("q", [{"n": 1}, [1, "two"]])
    [job] = client.claim("w1", ["q"], lease_seconds=60)
    assert isinstance(job, ClaimedJob) and (job.id, job.payload, job.attempt) == (a, {"n": 1}, 1)
    assert job.lease_expires_at.tzinfo is not None
    expires = client.heartbeat(job.id, job.lease)
    assert isinstance(expires, datetime) and expires.tzinfo is not None and expires >= job.lease_expires_at
    assert client.get_job(a)["status"] == "running"
    client.complete(job.id, job.lease)
    [second] = client.claim("w1", "q")
    outcome = client.fail(second.id, second.lease, error="Traceback ...\nValueError: boom")
    assert outcome == FailOutcome(status="pending", not_before=None)
    assert [j["id"] for j in client.document()["jobs"]] == [b]
    with pytest.raises(JobNotFound):
        client.get_job(a)  # completed jobs leave the document
    [third] = client.claim("w1", "q")
    assert client.fail(third.id, third.lease, error="not a task", give_up=True).status == "dead"
    assert orjson.loads(cluster.log[-1].content)["give_up"] is True


def test_requests_carry_the_token_and_client_chosen_ids(cluster: Cluster, make_client: Callable[..., Any]) -> None:
    client = make_client([A])
    [job_id] = client.push("q", [{"x": 1.5}], max_attempts=5, delay_seconds=2)
    push = cluster.log[-1]
    assert push.headers["Authorization"] == f"Bearer {TOKEN}"
    assert push.headers["Content-Type"] == "application/json"
    assert orjson.loads(push.content) == {
        "queue": "q", "jobs": [{"id": job_id, "payload": {"x": 1.5}, "max_attempts": 5, "delay_seconds": 2.0}]}
    assert len(job_id) == 32


def test_discovery_asks_each_node_and_uses_the_leader(cluster: Cluster, make_client: Callable[..., Any]) -> None:
    cluster.leader = B
    client = make_client([A, B])
    client.push("q", [1])
    assert cluster.paths() == [
        f"GET {A}/api/v1/health", f"GET {B}/api/v1/health", f"POST {B}/api/v1/jobs"]
    assert client.leader_url == B


def test_discovery_follows_the_leader_a_standby_names(cluster: Cluster, make_client: Callable[..., Any]) -> None:
    cluster.leader = C
    client = make_client([A])
    client.push("q", [1])
    assert cluster.paths() == [f"GET {A}/api/v1/health", f"GET {C}/api/v1/health", f"POST {C}/api/v1/jobs"]


def test_discovery_reads_the_broker_url_from_the_store(cluster: Cluster, make_client: Callable[..., Any]) -> None:
    cluster.leader = C
    store = MemoryStore()
    store.put("queue.json", orjson.dumps({"format": 1, "broker": {"id": "x", "url": C, "epoch": 3}}))
    client = make_client((), store=store)
    client.push("q", [1])
    assert cluster.paths() == [f"GET {C}/api/v1/health", f"POST {C}/api/v1/jobs"]
    assert store.writes == 1  # ours above: the client only reads


def test_no_leader_in_store_or_urls_gives_up_clearly(make_client: Callable[..., Any]) -> None:
    store = MemoryStore()
    store.put("queue.json", orjson.dumps({"format": 1, "broker": {"id": None, "url": None, "epoch": 0}}))
    client = make_client((), store=store, retry_seconds=0.05)
    with pytest.raises(BrokerUnavailable, match="names no broker URL"):
        client.push("q", [1])


def test_follows_not_leader_to_the_new_leader(cluster: Cluster, make_client: Callable[..., Any]) -> None:
    client = make_client([A, B])
    client.push("q", [1])
    cluster.leader = B  # a takeover: A now answers 503 not_leader naming B
    client.push("q", [2])
    assert cluster.paths()[-2:] == [f"POST {A}/api/v1/jobs", f"POST {B}/api/v1/jobs"]
    assert client.leader_url == B
    assert len(cluster.committer.document()["jobs"]) == 2


def test_rediscovers_after_a_connection_error(cluster: Cluster, make_client: Callable[..., Any]) -> None:
    client = make_client([A, B])
    client.push("q", [1])
    cluster.up.discard(A)  # A dies; B takes over
    cluster.leader = B
    [job_id] = client.push("q", [2])
    assert cluster.paths()[-4:] == [
        f"POST {A}/api/v1/jobs", f"GET {A}/api/v1/health", f"GET {B}/api/v1/health", f"POST {B}/api/v1/jobs"]
    assert client.get_job(job_id)["status"] == "pending"


def test_retried_push_keeps_its_ids_and_lands_once(cluster: Cluster, make_client: Callable[..., Any]) -> None:
    def lost_answer(request: httpx.Request) -> httpx.Response | None:
        if request.url.path.endswith("/jobs"):
            cluster.faults.remove(lost_answer)
            cluster(request)  # the broker commits the push ...
            raise httpx.ReadTimeout("timed out", request=request)  # ... but the answer never arrives
        return None

    client = make_client([A])
    cluster.faults.append(lost_answer)
    ids = client.push("q", [{"n": 1}, {"n": 2}])
    bodies = [orjson.loads(r.content) for r in cluster.log if r.url.path.endswith("/jobs")]
    assert len(bodies) >= 2 and all(body == bodies[0] for body in bodies)
    assert [j["id"] for j in bodies[0]["jobs"]] == ids
    doc = cluster.committer.document()
    assert [j["id"] for j in doc["jobs"]] == ids and doc["queues"]["q"]["pushed"] == 2


def test_store_unavailable_is_retried_on_the_same_leader(cluster: Cluster, make_client: Callable[..., Any]) -> None:
    answers = iter([_error(503, "store_unavailable", "store timed out")])
    cluster.faults.append(lambda r: next(answers, None) if r.url.path.endswith("/jobs") else None)
    client = make_client([A])
    client.push("q", [1])
    assert cluster.paths() == [f"GET {A}/api/v1/health", f"POST {A}/api/v1/jobs", f"POST {A}/api/v1/jobs"]


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (_error(409, "lease_lost", "job 'j': the lease expired"), LeaseLost),
        (_error(404, "job_not_found", "job 'j' not found"), JobNotFound),
        (_error(400, "invalid", "lease must be a string"), ValidationError),
        (_error(400, "malformed_json", "body is not JSON"), ValidationError),
        (_error(400, "invalid_payload", "NaN"), InvalidPayload),
        (_error(413, "payload_too_large", "too big", size=9, limit=5), PayloadTooLarge),
        (_error(401, "unauthorized", "wrong token"), Unauthorized),
        (httpx.Response(401, content=b""), Unauthorized),
        (_error(503, "document_error", "queue.json: not JSON; refusing to overwrite it"), DocumentError),
        (_error(404, "not_found", "no such URL"), EngineError),
        (httpx.Response(500, content=b"<html>oops</html>"), EngineError),
    ],
)
def test_error_codes_map_to_engine_errors(
    cluster: Cluster, make_client: Callable[..., Any], answer: httpx.Response, error: type[EngineError]
) -> None:
    cluster.faults.append(lambda r: answer if "/jobs/" in r.url.path else None)
    client = make_client([A])
    with pytest.raises(error) as caught:
        client.complete("j", "lease-token")
    assert type(caught.value) is error
    message = orjson.loads(answer.content)["message"] if answer.content.startswith(b"{") else ""
    assert message in str(caught.value)
    assert cluster.paths().count(f"POST {A}/api/v1/jobs/j/complete") == 1  # refusals are not retried
    if isinstance(caught.value, PayloadTooLarge):
        assert (caught.value.size, caught.value.limit) == (9, 5)


def test_wrong_token_is_unauthorized(make_client: Callable[..., Any]) -> None:
    client = make_client([A], token="wrong")
    with pytest.raises(Unauthorized, match="check the API token"):
        client.push("q", [1])


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda c: c.push("bad queue!", [1]), ValidationError),
        (lambda c: c.push("q", [math.nan]), InvalidPayload),
        (lambda c: c.push("q", ["x" * 2000]), PayloadTooLarge),
        (lambda c: c.push("q", []), ValidationError),
        (lambda c: c.claim("w", ["q"], wait_seconds=31), ValidationError),
        (lambda c: c.claim("w", ["q"], max_jobs=0), ValidationError),
        (lambda c: c.heartbeat("", "lease"), ValidationError),
        (lambda c: c.fail("j", "lease", error=None), ValidationError),
        (lambda c: c.requeue(["j"]), EngineError),
        (lambda c: c.purge(queue="q", status="dead"), EngineError),
    ],
)
def test_bad_input_and_operator_actions_send_nothing(
    cluster: Cluster, make_client: Callable[..., Any], call: Callable[[BrokerClient], Any], error: type[Exception]
) -> None:
    client = make_client([A], policy=Policy(max_payload_bytes=1000))
    with pytest.raises(error):
        call(client)
    assert cluster.log == []


def test_gives_up_with_broker_unavailable_when_nobody_answers(
    cluster: Cluster, make_client: Callable[..., Any]
) -> None:
    cluster.up.clear()
    client = make_client([A, B], retry_seconds=0.1)
    with pytest.raises(BrokerUnavailable, match="gave up after"):
        client.push("q", [1])
    assert isinstance(BrokerUnavailable("x"), StoreUnavailable)


def test_gives_up_with_not_leader_during_a_long_takeover(cluster: Cluster, make_client: Callable[..., Any]) -> None:
    cluster.leader = None
    client = make_client([A, B], retry_seconds=0.1)
    with pytest.raises(NotLeader, match="no broker leads"):
        client.push("q", [1])


def test_long_poll_claim_sends_wait_and_extends_the_read_timeout(
    cluster: Cluster, make_client: Callable[..., Any]
) -> None:
    client = make_client([A], timeout=4)
    assert client.claim("w", ["q"], max_jobs=3, wait_seconds=5) == []
    claim = cluster.log[-1]
    assert orjson.loads(claim.content) == {"worker": "w", "queues": ["q"], "max_jobs": 3, "wait_seconds": 5.0}
    assert claim.extensions["timeout"]["read"] == 9  # the broker may hold the request for wait_seconds


def test_closed_client_refuses_calls(make_client: Callable[..., Any]) -> None:
    with make_client([A]) as client:
        client.push("q", [1])
    with pytest.raises(EngineError, match="closed"):
        client.push("q", [2])


@pytest.mark.parametrize(
    "kwargs",
    [{"urls": ()}, {"urls": ["ftp://x"]}, {"urls": [A], "token": ""}, {"urls": [A], "timeout": 0}],
)
def test_bad_configuration_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        BrokerClient(**{"token": TOKEN, **kwargs})


@pytest.mark.parametrize("batch", [True, False], ids=["batch", "single"])
def test_a_worker_drains_through_the_client_across_a_leader_change(
    cluster: Cluster, make_client: Callable[..., Any], batch: bool
) -> None:
    client = make_client([A, B])
    ids = client.push("q", [{"n": n} for n in range(6)])

    def handler(payload: Any) -> None:
        if payload["n"] == 2:
            cluster.leader = B  # a takeover while jobs run: A refuses from now on

    options = WorkerOptions(burst=True, concurrency=2, lease_seconds=30, backoff_seconds=0.001, batch=batch)
    stats = Worker(client, queues=["q"], handler=handler, options=options).run()
    assert (stats.completed, stats.lost) == (6, 0)
    acks = [r.url.path for r in cluster.log if r.url.path.endswith(("/ack", "/complete"))]
    assert {path.rsplit("/", 1)[1] for path in acks} == ({"ack"} if batch else {"complete"})
    assert client.leader_url == B
    doc = cluster.committer.document()
    assert doc["jobs"] == [] and doc["queues"]["q"]["completed"] == len(ids)
    claim = next(orjson.loads(r.content) for r in cluster.log if r.url.path.endswith("/claim"))
    assert claim["lease_seconds"] == 30 and "wait_seconds" not in claim  # burst: no long poll


def test_leader_discovery_on_its_own_follows_names_and_forgets_only_the_leader_it_had() -> None:
    roles = {A: ("standby", B), B: ("leader", B)}
    asked: list[str] = []

    def ask(url: str) -> tuple[str, str | None]:
        asked.append(url)
        if url not in roles:
            raise BrokerUnavailable("connection refused")
        return roles[url]

    discovery = LeaderDiscovery([C, A], ask=ask)
    assert discovery.leader is None
    assert discovery.target() == B and asked == [C, A, B]
    assert discovery.target() == B and len(asked) == 3  # cached: no more questions
    discovery.follow(None, forget=A)  # a node that is not the leader we had
    assert discovery.leader == B
    discovery.follow(None, forget=B)
    assert discovery.leader is None
    roles[B] = ("standby", None)
    with pytest.raises(NotLeader, match="no broker leads right now"):
        discovery.target()
    discovery.follow(C, forget=None)  # a not_leader answer named C
    assert discovery.target() == C


def test_execute_many_keeps_answered_outcomes_when_a_later_request_fails(
    cluster: Cluster, make_client: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wire, "MAX_BATCH_ITEMS", 1)  # one request per operation
    client = make_client([A], retry_seconds=0.05)
    client.push("q", [1, 2])
    first, second = client.claim("w", ["q"], max_jobs=2)
    acks = 0

    def second_ack_unreachable(request: httpx.Request) -> httpx.Response | None:
        nonlocal acks
        if request.url.path.endswith("/ack"):
            acks += 1
            if acks > 1:
                raise httpx.ConnectError("connection refused", request=request)
        return None

    cluster.faults.append(second_ack_unreachable)
    done, unknown = client.execute_many([complete_op(first.id, first.lease), complete_op(second.id, second.lease)])
    assert done is None and isinstance(unknown, BrokerUnavailable)
    with pytest.raises(BrokerUnavailable):  # nothing of the call answered: it raises
        client.execute_many([complete_op(second.id, second.lease)])
    assert [j["id"] for j in cluster.committer.document()["jobs"]] == [second.id]


def test_watch_leases_reads_which_leases_were_lost_and_why(cluster: Cluster,
                                                           make_client: Callable[..., BrokerClient]) -> None:
    client = make_client()
    client.push("q", [1, 2, 3])
    a, b, c = client.claim("w", ["q"], max_jobs=3)
    assert client.watch_leases([(a.id, a.lease), (b.id, b.lease)], 0) == []
    cluster.committer.purge([a.id])
    cluster.committer.requeue([b.id])

    lost = client.watch_leases([(a.id, a.lease), (b.id, b.lease), (c.id, c.lease)], 5)

    assert [(job_id, type(error)) for job_id, error in lost] == [(a.id, JobNotFound), (b.id, LeaseLost)]
    assert cluster.paths()[-1] == f"POST {A}/api/v1/leases/watch"
    with pytest.raises(ValidationError, match="wait_seconds must be between 0 and 30"):
        client.watch_leases([(c.id, c.lease)], 31)


def test_an_older_broker_without_lease_watches_is_a_plain_engine_error(
        cluster: Cluster, make_client: Callable[..., BrokerClient]) -> None:
    cluster.faults.append(lambda r: _error(404, "not_found", "no such URL") if r.url.path.endswith("/watch") else None)
    client = make_client()
    with pytest.raises(EngineError) as raised:
        client.watch_leases([("j", "l")], 1)
    assert type(raised.value) is EngineError  # the worker's sign to stop watching (engine.workerbeats)
