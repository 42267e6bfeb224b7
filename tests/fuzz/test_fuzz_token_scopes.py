"""Fuzzing narrowed API tokens (queueadmin.api.grants) through the real ASGI
application.

Each example makes a database token with random queue patterns and calls,
then runs random calls with it: pushes, claims (alone or riding an ack),
acks, heartbeats, job reads, the document. Its jobs are set up with the
full token, in queues some patterns match and some nearly match. An oracle
written apart from the code under test says which calls the scope allows:

* a call it refuses must answer 403 ``forbidden`` and leave the stored
  document byte for byte as it was;
* a call it allows must never answer 403; a job read, or a lease call
  (complete, heartbeat, an ack's item), of a job of a queue outside the
  scope must answer exactly what an unknown job does and change nothing,
  even with the job's own lease; one inside the scope must succeed;
* a lease watch names a job of a queue outside the scope as lost
  (job_not_found) only with the job's own lease, and with any other lease
  answers nothing, as for an unknown job; a job inside it, never.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine import Broker
from engine.ops import claim_op, push_op
from tests.fuzz.asgi_driver import call, job_path
from tests.fuzz.checks import check_call, stored
from tests.fuzz.nodes import AUTH, Nodes
from tests.fuzz.profiles import scaled
from tests.queueadmin.dashboard_fixtures import make_token

QUEUES = ["billing", "billing-eu", "billingx", "mail", "mail-eu", "b1"]
PATTERNS = ["billing", "billing-*", "*-eu", "mail", "b?", "[bm]ail*", "nothing"]


def allowed_queue(patterns: list[str], queue: str) -> bool:
    """The oracle's own matching: a pattern as an anchored regular expression."""
    if not patterns:
        return True

    def regex(pattern: str) -> str:
        return "".join({"*": ".*", "?": "."}.get(c, c if c in "[]" else re.escape(c)) for c in pattern)

    return any(re.fullmatch(regex(p), queue) for p in patterns)


scopes = st.fixed_dictionaries({
    "patterns": st.lists(st.sampled_from(PATTERNS), max_size=3, unique=True),
    "calls": st.sampled_from(["both", "push", "work"]),
})

calls = st.one_of(
    st.tuples(st.just("push"), st.sampled_from(QUEUES)),
    st.tuples(st.just("claim"), st.lists(st.sampled_from(QUEUES), min_size=1, max_size=3, unique=True)),
    st.tuples(st.just("ack"), st.lists(st.sampled_from(QUEUES), max_size=2, unique=True)),
    st.tuples(st.just("complete"), st.sampled_from(QUEUES)),
    st.tuples(st.just("heartbeats"), st.sampled_from(QUEUES)),
    st.tuples(st.just("watch"), st.tuples(st.sampled_from(QUEUES), st.booleans())),
    st.tuples(st.just("read"), st.sampled_from(QUEUES)),
    st.tuples(st.just("document"), st.just(None)),
)


def expected(scope: dict[str, Any], kind: str, arg: Any) -> bool:
    """Whether ``scope`` allows the call (the rules of docs/api.md, "Token scopes")."""
    patterns, may_push, may_work = scope["patterns"], scope["calls"] != "work", scope["calls"] != "push"
    if kind == "push":
        return may_push and allowed_queue(patterns, arg)
    if kind in ("claim", "ack"):
        return may_work and all(allowed_queue(patterns, q) for q in arg)
    if kind in ("complete", "heartbeats", "watch"):
        return may_work
    if kind == "read":
        return True  # out of scope it is "not found", never "forbidden"
    return not patterns and may_push and may_work


def request(broker: Broker, kind: str, arg: Any) -> tuple[str, str, Any]:
    """The call's method, path and body; jobs it needs are made with the full token."""
    if kind == "push":
        return "POST", "/api/v1/jobs", {"queue": arg, "payload": {"n": 1}}
    if kind == "claim":
        return "POST", "/api/v1/claim", {"worker": "fz", "queues": arg}
    if kind == "read":
        [job_id] = broker.execute(push_op(arg, [{"n": 2}], policy=broker.policy))
        return "GET", job_path(job_id), None
    if kind == "document":
        return "GET", "/api/v1/document", None
    queue = "billing" if kind == "ack" else arg[0] if kind == "watch" else arg
    broker.execute(push_op(queue, [{"n": 3}], policy=broker.policy))
    [job] = broker.execute(claim_op("fz", [queue], policy=broker.policy))
    if kind == "complete":
        return "POST", job_path(job.id, "/complete"), {"lease": job.lease}
    if kind == "watch":  # arg: (queue, whether the watch guesses the lease)
        return "POST", "/api/v1/leases/watch", {"leases": [{"id": job.id, "lease": "guessed" if arg[1] else job.lease}]}
    if kind == "heartbeats":
        return "POST", "/api/v1/heartbeat", {"leases": [{"id": job.id, "lease": job.lease}]}
    body: dict[str, Any] = {"acks": [{"id": job.id, "lease": job.lease, "outcome": "complete"}]}
    if arg:
        body["claim"] = {"worker": "fz", "queues": arg}
    return "POST", "/api/v1/ack", body


def check_lease_call(scope: dict[str, Any], kind: str, arg: Any, status: int, result: Any, before: bytes,
                     broker: Broker, what: str) -> None:
    """An allowed lease call on a job it holds the lease of: done if the job's
    queue is in scope, else not found (alone, in a batch) and nothing changed."""
    queue = "billing" if kind == "ack" else arg
    item = result if kind == "complete" else result["results"][0]
    if allowed_queue(scope["patterns"], queue):
        assert status == 200 and "error" not in item, f"{what}: {status} {result}"
        return
    assert item.get("error") == "job_not_found", f"{what}: {status} {result}"
    assert status == (404 if kind == "complete" else 200), f"{what}: {status} {result}"
    if kind != "ack" or "claim" not in result:
        assert stored(broker) == before, what  # a claim riding the ack may lease a job


@settings(max_examples=scaled(40))
@given(scope=scopes, steps=st.lists(calls, min_size=1, max_size=6))
# Always: a watch probing another queue's job, with a guessed lease and with its own.
@example(scope={"patterns": ["mail"], "calls": "work"},
         steps=[("watch", ("billing", True)), ("watch", ("billing", False))])
def test_a_narrowed_token_does_exactly_what_its_scope_allows(nodes: Nodes, fresh_token_cache: None,
                                                             scope: dict[str, Any],
                                                             steps: list[tuple[str, Any]]) -> None:
    _, token = make_token(f"fuzz-{uuid.uuid4().hex[:12]}", queues=" ".join(scope["patterns"]),
                          may_push=scope["calls"] != "work", may_work=scope["calls"] != "push")
    mine = {"authorization": f"Bearer {token}"}
    with nodes.fresh() as broker:
        for kind, arg in steps:
            method, path, body = request(broker, kind, arg)
            content = b"" if body is None else orjson.dumps(body)
            what = f"{kind} {arg!r} with {scope}"
            before = stored(broker)
            answer = call(method, path, content, headers=mine)
            result = check_call(answer, before, broker, what)
            if not expected(scope, kind, arg):
                assert answer.status == 403 and result["error"] == "forbidden", f"{what}: {answer.status} {result}"
                assert stored(broker) == before, what
                continue
            assert answer.status != 403, f"{what}: refused: {result}"
            if kind == "read" and not allowed_queue(scope["patterns"], arg):
                unknown = call("GET", job_path("no-such-job"), b"", headers=mine).json()
                assert answer.status == 404 and result["error"] == unknown["error"], what
            elif kind == "read":
                assert answer.status == 200 and result["queue"] == arg, what
            elif kind in ("complete", "heartbeats", "ack"):
                check_lease_call(scope, kind, arg, answer.status, result, before, broker, what)
            elif kind == "watch":
                queue, guessed = arg
                told = not allowed_queue(scope["patterns"], queue) and not guessed  # only its holder is told
                assert answer.status == 200 and stored(broker) == before, f"{what}: {answer.status} {result}"
                assert [item["error"] for item in result["lost"]] == (["job_not_found"] if told else []), what
            # The full token still does everything.
            assert call("GET", "/api/v1/document", b"", headers=AUTH).status == 200
