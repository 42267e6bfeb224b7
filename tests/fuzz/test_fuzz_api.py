"""Fuzzing every broker API endpoint (docs/api.md) through the real ASGI application.

Each example runs on a fresh leading broker (memory store). Every call must
get exactly one answer in time, a 2xx or a documented 4xx with the documented
JSON error body, never a 5xx; the stored document must still parse; a refusal
must leave it byte for byte as it was; and the node must still serve an
innocent push afterwards (see :mod:`tests.fuzz.checks`). Whatever a push
accepted must be readable by every read: the job, the document, a claim.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson
from hypothesis import assume, given
from hypothesis import strategies as st

from engine import Broker
from engine.ops import claim_op, push_op
from engine.wire import STATUS_BY_CODE
from tests.fuzz.asgi_driver import Answer, call, client_path, job_path
from tests.fuzz.checks import check_alive, check_answer, check_call, stored
from tests.fuzz.nodes import AUTH, Nodes
from tests.fuzz.strategies import (
    RawNumber,
    deep_values,
    good_ids,
    hostile_text,
    json_text,
    json_values,
    nested,
    numbers,
    odd_ids,
    path_ids,
    queue_names,
    wrong_types,
)

MISSING = object()


@st.composite
def mutated(draw: st.DrawFn, valid: st.SearchStrategy[dict[str, Any]],
            hostile: dict[str, st.SearchStrategy[Any]]) -> dict[str, Any]:
    """A valid body with zero to two mutations: a field given a hostile
    value, a field dropped, or an unknown field added. One bad value among
    good ones reaches deepest, where the checks are fewest."""
    body = dict(draw(valid))
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(["replace", "replace", "replace", "drop", "unknown"]))
        if kind == "replace":
            name = draw(st.sampled_from(sorted(hostile)))
            body[name] = draw(hostile[name])
        elif kind == "drop" and body:
            del body[draw(st.sampled_from(sorted(body)))]
        else:
            body[draw(hostile_text)] = draw(wrong_types)
    return body


simple_payloads = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
              st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=10)),
    lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(st.text(max_size=5), children,
                                                                               max_size=3)),
    max_leaves=6,
)
# Valid values nested near orjson's depth limit get their own branch: among
# arbitrary JSON, a deep value whose every leaf is valid is rare.
payloads = st.one_of(simple_payloads, deep_values(simple_payloads), json_values)
ids = st.one_of(good_ids, odd_ids, wrong_types)
valid_job = st.fixed_dictionaries(
    {"payload": st.one_of(simple_payloads, deep_values(simple_payloads))},
    optional={"id": good_ids, "max_attempts": st.integers(1, 1000), "delay_seconds": st.sampled_from([0, 0.5])},
)
hostile_job = {"payload": payloads, "id": ids, "max_attempts": numbers, "delay_seconds": numbers}
job_entries = mutated(valid_job, hostile_job)
push_bodies = st.one_of(
    mutated(st.builds(lambda job: {"queue": "q", **job}, valid_job), {"queue": queue_names, **hostile_job}),
    mutated(st.fixed_dictionaries({"queue": st.just("q"), "jobs": st.lists(job_entries, min_size=1, max_size=4)}),
            {"queue": queue_names, "jobs": st.one_of(st.lists(job_entries, max_size=2), wrong_types)}),
)


def post(path: str, body: Any, **kwargs: Any) -> Answer:
    raw = body if isinstance(body, bytes) else json_text(body).encode()
    return call("POST", path, raw, headers=kwargs.pop("headers", AUTH), **kwargs)


def get(path: str) -> Answer:
    return call("GET", path, headers=AUTH)


def expected_payloads(body: dict[str, Any]) -> dict[str, Any]:
    """Each pushed id's payload, as the exact JSON parser reads the request (first one wins)."""
    exact = json.loads(json_text(body))
    entries = exact.get("jobs", [exact])
    found: dict[str, Any] = {}
    for entry in entries:
        if isinstance(entry.get("id"), str):
            found.setdefault(entry["id"], entry["payload"])
    return found


def check_readable(queue: str, accepted: list[str], sent: dict[str, Any]) -> None:
    """Everything a push accepted can be read back: job, document, claim."""
    delayed = set()
    for job_id in accepted:
        answer = get(job_path(job_id))
        job = check_answer(answer, f"GET job {job_id!r}")
        assert answer.status == 200, f"pushed job {job_id!r} cannot be read: {answer.status} {answer.body[:300]!r}"
        assert job["id"] == job_id
        if job_id in sent:
            assert json.loads(answer.body)["payload"] == sent[job_id], f"job {job_id!r}: payload changed"
        if job.get("not_before") is not None:
            delayed.add(job_id)
    answer = get("/api/v1/document")
    doc = check_answer(answer, "GET document")
    assert answer.status == 200, f"the document cannot be read: {answer.status} {answer.body[:300]!r}"
    assert set(accepted) <= {j["id"] for j in doc["jobs"]}
    answer = post("/api/v1/claim", {"worker": "reader", "queues": [queue], "max_jobs": 1000})
    check_answer(answer, "claim")
    assert answer.status == 200, f"claiming pushed jobs failed: {answer.status} {answer.body[:300]!r}"
    got = {j["id"]: j for j in json.loads(answer.body)["jobs"]}  # the exact parser: big integers stay exact
    for job_id in set(accepted) - delayed:
        assert job_id in got, f"pushed job {job_id!r} was not handed out by a claim"
    for job_id, job in got.items():
        if job_id in sent:
            assert job["payload"] == sent[job_id], f"claimed job {job_id!r}: payload changed"
        answer = get(job_path(job_id))
        assert check_answer(answer, f"GET running job {job_id!r}")["status"] == "running"


@given(body=st.one_of(push_bodies, json_values))
def test_push(nodes: Nodes, body: Any) -> None:
    with nodes.fresh() as broker:
        before = stored(broker)
        answer = post("/api/v1/jobs", body)
        result = check_call(answer, before, broker, "push")
        if answer.status == 201:
            assert isinstance(body, dict)
            check_readable(body["queue"], result["ids"], expected_payloads(body))
        check_alive(broker, "push")


@given(ids=st.lists(st.one_of(path_ids, good_ids, odd_ids), min_size=1, max_size=3), payload=simple_payloads)
def test_pushed_ids_are_addressable(nodes: Nodes, ids: list[str], payload: Any) -> None:
    """An id a push accepts is one a URL path can carry (defect 7)."""
    with nodes.fresh() as broker:
        before = stored(broker)
        body = {"queue": "q", "jobs": [{"id": i, "payload": payload} for i in ids]}
        answer = post("/api/v1/jobs", body)
        result = check_call(answer, before, broker, "push with ids")
        if answer.status == 201:
            check_readable("q", result["ids"], expected_payloads(body))



@given(depth=st.integers(min_value=240, max_value=300), kind=st.sampled_from(["list", "dict"]),
       leaf=st.sampled_from([1, [], {}, "x", None]), many=st.booleans())
def test_deeply_nested_payloads(nodes: Nodes, depth: int, kind: str, leaf: Any, many: bool) -> None:
    """Payloads nested near orjson's limit of 254 levels: refused, or readable everywhere (defect 6).

    Arbitrary JSON rarely nests this deep with every leaf valid, so depth gets its own test.
    """
    payload = nested(depth, leaf, kind=kind)
    body = {"queue": "q", "jobs": [{"payload": payload}]} if many else {"queue": "q", "payload": payload}
    with nodes.fresh() as broker:
        before = stored(broker)
        answer = post("/api/v1/jobs", body)
        result = check_call(answer, before, broker, f"push nested {depth} deep")
        if answer.status == 201:
            check_readable("q", result["ids"], {})
        check_alive(broker, "a deep push")

# -- workers: claim, heartbeat, complete, fail -------------------------------------------------------


claim_bodies = mutated(
    st.fixed_dictionaries({"worker": st.just("w1"), "queues": st.just(["q"])},
                          optional={"max_jobs": st.integers(1, 5), "lease_seconds": st.sampled_from([1, 30.5]),
                                    "wait_seconds": st.sampled_from([0, 0.01]), "in_order": st.booleans()}),
    {"worker": hostile_text, "queues": st.one_of(st.lists(st.one_of(st.just("q"), queue_names, wrong_types),
                                                          max_size=3), wrong_types),
     "max_jobs": numbers, "lease_seconds": numbers, "in_order": st.one_of(wrong_types, numbers),
     # A valid wait makes an empty claim wait that long: keep those short.
     "wait_seconds": st.one_of(st.sampled_from([0.05, -0.001]), numbers)},
)


def seeded(broker: Broker, count: int = 3) -> list[str]:
    ids: list[str] = broker.execute(push_op("q", list(range(count)), policy=broker.policy))
    return ids


@given(body=claim_bodies)
def test_claim(nodes: Nodes, body: dict[str, Any]) -> None:
    wait = body.get("wait_seconds")
    assume(not isinstance(wait, int | float) or isinstance(wait, bool) or not wait > 0.1)
    with nodes.fresh() as broker:
        seeded(broker)
        before = stored(broker)
        answer = post("/api/v1/claim", body)
        result = check_call(answer, before, broker, "claim")
        if answer.status == 200:
            for job in result["jobs"]:
                beat = post(job_path(job["id"], "/heartbeat"), {"lease": job["lease"]})
                assert check_answer(beat, "heartbeat of a claimed job") and beat.status == 200, beat.body
        check_alive(broker, "claim")


VALID = {
    "heartbeat": st.fixed_dictionaries({}, optional={"lease_seconds": st.sampled_from([1, 60.5])}),
    "complete": st.just({}),
    "fail": st.fixed_dictionaries({"error": st.just("boom")},
                                  optional={"retry_in_seconds": st.sampled_from([0, 2.5]),
                                            "give_up": st.booleans()}),
}
HOSTILE = {
    "heartbeat": {"lease": wrong_types, "lease_seconds": numbers},
    "complete": {"lease": wrong_types},
    "fail": {"lease": wrong_types, "error": st.one_of(hostile_text, wrong_types), "retry_in_seconds": numbers,
             "give_up": wrong_types},
}


@st.composite
def lease_calls(draw: st.DrawFn) -> tuple[str, str, str, dict[str, Any]]:
    """(action, which job, which lease, body): the real ones, wrong ones, junk.
    The body's ``lease`` is the placeholder LEASE, replaced by the real token."""
    action = draw(st.sampled_from(sorted(VALID)))
    job = draw(st.one_of(st.sampled_from(["claimed", "claimed", "pending", "unknown"]), odd_ids))
    lease = draw(st.one_of(st.sampled_from(["real", "real", "wrong", "other"]), hostile_text))
    body = draw(mutated(st.builds(lambda b: {"lease": "LEASE", **b}, VALID[action]), HOSTILE[action]))
    return action, job, lease, body


@given(case=lease_calls())
def test_lease_calls(nodes: Nodes, case: tuple[str, str, str, dict[str, Any]]) -> None:
    action, which, lease, body = case
    with nodes.fresh() as broker:
        pending, _, _ = seeded(broker)
        [claimed] = broker.execute(claim_op("w1", ["q"], policy=broker.policy))
        [other] = broker.execute(claim_op("w2", ["q"], policy=broker.policy))
        job_id = {"claimed": claimed.id, "pending": pending, "unknown": "no-such-job"}.get(which, which)
        if body.get("lease") == "LEASE":
            body["lease"] = {"real": claimed.lease, "wrong": "0" * 24, "other": other.lease}.get(lease, lease)
        before = stored(broker)
        answer = post(job_path(job_id, f"/{action}"), body)
        result = check_call(answer, before, broker, action)
        if answer.status == 200:
            after = get(job_path(claimed.id))
            view = check_answer(after, f"GET job after {action}")
            if action == "complete":
                assert after.status == 404, f"a completed job is still there: {view}"
            elif action == "fail":
                assert view["status"] == result["status"]
            else:
                assert view["status"] == "running"
        check_alive(broker, action)


# One field at a time: every field of every call gets a hostile value in an
# otherwise valid request on a real job with its real lease, so each value
# reaches as deep as a valid one would.
CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "push": ("/api/v1/jobs", {"queue": "q", "payload": {"n": 1}, "id": "new-job", "max_attempts": 2,
                              "delay_seconds": 0}),
    "push many": ("/api/v1/jobs", {"queue": "q", "jobs": [{"payload": 1, "id": "new-job"}]}),
    "claim": ("/api/v1/claim", {"worker": "w2", "queues": ["q"], "max_jobs": 1, "lease_seconds": 30,
                                "wait_seconds": 0}),
    "heartbeat": ("/heartbeat", {"lease": "LEASE", "lease_seconds": 30}),
    "complete": ("/complete", {"lease": "LEASE"}),
    "fail": ("/fail", {"lease": "LEASE", "error": "boom", "retry_in_seconds": 1, "give_up": False}),
}
TEXT_FIELDS = [(c, f) for c, (_, b) in CALLS.items() for f, v in b.items() if isinstance(v, str)] + [
    ("claim", "queues[0]"), ("push many", "jobs[0].id")]
NUMBER_FIELDS = [(c, f) for c, (_, b) in CALLS.items() for f, v in b.items() if type(v) in (int, float)] + [
    ("fail", "give_up")]


def _one_call(broker: Broker, call_name: str, field: str, value: Any) -> tuple[str, dict[str, Any], Any]:
    """The path and body of ``call_name`` with ``field`` set to ``value``, on a claimed job."""
    ids = seeded(broker, 2)
    [claimed] = broker.execute(claim_op("w1", ["q"], policy=broker.policy))
    path, template = CALLS[call_name]
    body = orjson.loads(orjson.dumps(template))
    if body.get("lease") == "LEASE":
        body["lease"] = claimed.lease
    if path.startswith("/") and not path.startswith("/api"):
        path = job_path(claimed.id, path)
    if field == "queues[0]":
        body["queues"][0] = value
    elif field == "jobs[0].id":
        body["jobs"][0]["id"] = value
    else:
        body[field] = value
    return path, body, ids


def _check_one_field(nodes: Nodes, case: tuple[str, str], value: Any) -> None:
    """One call with ``value`` in one field: one documented answer, nothing
    changed on a refusal, and the node still serves."""
    call_name, field = case
    with nodes.fresh() as broker:
        path, body, _ = _one_call(broker, call_name, field, value)
        before = stored(broker)
        answer = post(path, body)
        check_call(answer, before, broker, f"{call_name} with {field}={value!r}")
        check_alive(broker, f"{call_name} with {field}={value!r}")


@given(case=st.sampled_from(TEXT_FIELDS), value=hostile_text)
def test_each_text_field(nodes: Nodes, case: tuple[str, str], value: str) -> None:
    _check_one_field(nodes, case, value)


@given(case=st.sampled_from(NUMBER_FIELDS), value=numbers)
def test_each_number_field(nodes: Nodes, case: tuple[str, str], value: Any) -> None:
    _check_one_field(nodes, case, value)


# -- raw bodies, reads, methods, headers -------------------------------------------------------------

POST_PATHS = ["/api/v1/jobs", "/api/v1/claim", "/api/v1/jobs/JOB/heartbeat", "/api/v1/jobs/JOB/complete",
              "/api/v1/jobs/JOB/fail"]

raw_bodies = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda v: json_text(v).encode(), json_values),
    st.builds(lambda v, n: json_text(v).encode()[:n], json_values, st.integers(0, 50)),
    st.sampled_from([b"", b"{", b"NaN", b'{"queue": NaN}', b"\xef\xbb\xbf{}", b'"\\ud800"', b"[" * 10000,
                     b'{"queue": "q", "payload": 1, "queue": "r"}', b"\xff\xfe", b"{}" * 3, b"null", b"1e400",
                     b'{"worker": "\\udfff", "queues": ["q"]}', b'{"lease": "\\ud800\\udc00"}']),
)


@given(path=st.sampled_from(POST_PATHS), raw=raw_bodies)
def test_raw_bodies(nodes: Nodes, path: str, raw: bytes) -> None:
    with nodes.fresh() as broker:
        [job_id] = seeded(broker, 1)
        broker.execute(claim_op("w1", ["q"], policy=broker.policy))
        before = stored(broker)
        answer = call("POST", path.replace("JOB", job_id), raw, headers=AUTH)
        check_call(answer, before, broker, f"POST {path} {raw[:80]!r}")
        check_alive(broker, f"POST {path}")


paths = st.one_of(
    st.sampled_from(["/api/v1/jobs", "/api/v1/claim", "/api/v1/document", "/api/v1/health", "/api/v1/operator",
                     "/api/v1/jobs/JOB", "/api/v1/jobs/JOB/heartbeat", "/api/v1/jobs/JOB/complete",
                     "/api/v1/jobs/JOB/fail", "/api/", "/api/v2/jobs", "/api/v1/jobs/JOB/nope", "/api/v1//jobs"]),
    st.builds(lambda i, a: job_path(i, a), odd_ids, st.sampled_from(["", "/heartbeat", "/complete", "/fail"])),
    st.builds(lambda t: client_path("/api/v1/" + "".join(c if c.isascii() and c.isprintable() and c not in " #?"
                                                          else "%25" for c in t)), st.text(max_size=20)),
)


@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]), path=paths,
       query=st.sampled_from(["", "?", "?a=b", "?status=pending&queue=q", "?%ff=%00"]))
def test_every_method_and_path(nodes: Nodes, method: str, path: str, query: str) -> None:
    with nodes.fresh() as broker:
        [job_id] = seeded(broker, 1)
        before = stored(broker)
        answer = call(method, path.replace("JOB", job_id) + query, b"{}", headers=AUTH)
        what = f"{method} {path}{query}"
        if method == "HEAD" and not answer.body:
            assert answer.status < 500, f"{what}: {answer.status}"
        else:
            check_call(answer, before, broker, what)
        if method != "POST" and answer.status < 300:
            assert stored(broker) == before, f"{what} changed the document"


hosts = st.one_of(
    st.sampled_from(["testserver", "localhost", "127.0.0.1", "localhost:8000", "127.0.0.1:80"]),
    st.sampled_from(["evil.example", "", "localhost:99999", "[::1]", "a" * 300, "..", "localhost.", "exa mple",
                     "local\x00host", "ünïcode.example", "localhost:8000:1", "10.0.0.1", "LOCALHOST"]),
    st.text(st.characters(max_codepoint=255, exclude_categories=["Cc"]), max_size=20),
)
auths = st.one_of(st.just(AUTH), st.sampled_from([
    {}, {"authorization": "Bearer wrong"}, {"authorization": "Basic abc"}, {"authorization": "Bearer"},
    {"authorization": "bearer " + AUTH["authorization"].split()[1]}, {"authorization": "Bearer  \t"},
]), st.builds(lambda t: {"authorization": "Bearer " + t}, st.text(st.characters(max_codepoint=255,
                                                                                  exclude_categories=["Cc"]))))


@given(host=st.one_of(st.none(), hosts), auth=auths,
       length=st.one_of(st.just(True), st.none(), st.integers(-5, 100),
                        st.sampled_from([10**12, 2**63, 2**64, 10**30])),
       path=st.sampled_from(["/api/v1/jobs", "/api/v1/claim", "/api/v1/document", "/api/v1/health"]))
def test_headers(nodes: Nodes, host: str | None, auth: dict[str, str], length: int | bool | None,
                 path: str) -> None:
    """Odd Host, Authorization and Content-Length headers: still one JSON answer."""
    with nodes.fresh() as broker:
        seeded(broker, 1)
        before = stored(broker)
        body = orjson.dumps({"queue": "q", "payload": 1} if path == "/api/v1/jobs"
                            else {"worker": "w", "queues": ["q"]})
        method = "POST" if path in ("/api/v1/jobs", "/api/v1/claim") else "GET"
        answer = call(method, path, body, headers=auth, host=host, content_length=length)
        check_call(answer, before, broker, f"{method} {path} host={host!r} length={length!r}")


# -- operator -------------------------------------------------------------------------------------


SECRET = "fuzz-secret-key-not-the-development-one-0123456789"
DEV_KEY = "django-insecure-queueadmin-local-development-only"

operator_data = st.one_of(
    json_values,
    mutated(st.sampled_from([{"kind": "pause", "queue": "q", "paused": True}, {"kind": "requeue", "job_ids": ["x"]},
                             {"kind": "purge", "job_ids": ["x"]}, {"kind": "purge", "queue": "q", "status": "dead"},
                             {"kind": "forget", "queue": "q"},
                             {"kind": "limit", "queue": "q", "max_running": 2},
                             {"kind": "limit", "queue": "q", "max_running": None},
                             {"kind": "rate_limit", "queue": "q", "jobs": 5, "seconds": 1},
                             {"kind": "rate_limit", "queue": "q", "jobs": None, "seconds": None},
                             {"kind": "pause_schedule", "name": "nightly", "paused": True},
                             {"kind": "forget_schedule", "name": "nightly"},
                             {"kind": "push", "queue": "q", "jobs": [{"id": "a", "payload": 1, "max_attempts": 3,
                                                                       "delay_seconds": 0}]}]),
            {"kind": st.sampled_from(["requeue", "purge", "pause", "forget", "push", "limit", "rate_limit",
                                      "pause_schedule", "forget_schedule", "nope"]) | wrong_types,
             "max_running": st.integers(-2, 100_002) | numbers | wrong_types,
             "jobs": st.integers(-2, 1_000_002) | numbers | st.lists(job_entries, max_size=2) | wrong_types,
             "seconds": numbers | st.sampled_from([0.001, 0.01, 86_400, 86_401]) | wrong_types,
             "name": hostile_text | wrong_types,
             "job_ids": st.lists(ids, max_size=3) | wrong_types, "queue": queue_names | wrong_types,
             "status": st.sampled_from(["pending", "running", "dead"]) | wrong_types,
             "paused": st.booleans() | wrong_types}),
)


def use_key(settings: Any, key: str) -> None:
    """Set the secret key once per test, not once per example: each assignment
    to pytest-django's ``settings`` stacks one more override, and after about
    a thousand examples (``HYPOTHESIS_PROFILE=long``) reading any setting
    recursed too deep (RecursionError in django.conf)."""
    if key != settings.SECRET_KEY:
        settings.SECRET_KEY = key


@given(data=operator_data, signed=st.booleans(), junk=st.binary(max_size=50))
def test_operator(nodes: Nodes, settings: Any, data: Any, signed: bool, junk: bytes) -> None:
    """Signed or not, any operator body gets a documented answer, never a 500."""
    from django.core import signing

    from queueadmin.api.forward import SALT

    use_key(settings, SECRET)
    with nodes.fresh() as broker:
        seeded(broker)
        before = stored(broker)
        raw = signing.dumps(_plain(data), salt=SALT, compress=True).encode() if signed else junk
        answer = call("POST", "/api/v1/operator", raw, headers={"content-type": "text/plain"})
        check_call(answer, before, broker, f"operator {data!r}")
        if not signed:
            assert answer.status in (400, 403), f"an unsigned operator request got {answer.status}"
        check_alive(broker, "operator")


def _plain(value: Any) -> Any:
    """``value`` with RawNumber leaves made plain numbers (the signer writes JSON itself)."""
    if isinstance(value, RawNumber):
        number = json.loads(value.text)
        return number if math.isfinite(number) else 0
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@given(queue=st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True), paused=st.booleans())
def test_a_signed_operator_request_is_used_once(nodes: Nodes, settings: Any, queue: str, paused: bool) -> None:
    """Replaying the same signed request is refused (defect 9)."""
    from engine.ops import pause_op
    from queueadmin.api.forward import sign

    use_key(settings, SECRET)
    with nodes.fresh() as broker:
        raw = sign(pause_op(queue, paused=paused)).encode()
        first = call("POST", "/api/v1/operator", raw, headers={"content-type": "text/plain"})
        assert check_answer(first, "operator") and first.status == 200, first.body
        before = stored(broker)
        again = call("POST", "/api/v1/operator", raw, headers={"content-type": "text/plain"})
        check_call(again, before, broker, "replayed operator request")
        assert again.status == 403, f"a replayed signed operator request was answered {again.status}"


@given(queue=st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True))
def test_the_public_development_key_is_never_trusted(nodes: Nodes, settings: Any, queue: str) -> None:
    """Anyone can sign with the public development key: loopback alone is no proof (defect 9)."""
    from engine.ops import pause_op
    from queueadmin.api.forward import sign

    use_key(settings, DEV_KEY)
    with nodes.fresh() as broker:
        before = stored(broker)
        answer = call("POST", "/api/v1/operator", sign(pause_op(queue)).encode(),
                      headers={"content-type": "text/plain"})
        check_call(answer, before, broker, "operator signed with the development key")
        assert answer.status == 403, f"a request signed with the public key was answered {answer.status}"


# -- the batch calls: POST /api/v1/ack and POST /api/v1/heartbeat ------------------------------------

ACK_ITEM = {
    "complete": st.just({"outcome": "complete"}),
    "fail": st.fixed_dictionaries({"outcome": st.just("fail"), "error": st.just("boom")},
                                  optional={"retry_in_seconds": st.sampled_from([0, 2.5]), "give_up": st.booleans()}),
}
ACK_HOSTILE = {"outcome": st.one_of(hostile_text, wrong_types), "error": st.one_of(hostile_text, wrong_types),
               "retry_in_seconds": numbers, "give_up": wrong_types, "id": st.one_of(odd_ids, wrong_types),
               "lease": st.one_of(hostile_text, wrong_types)}


@st.composite
def batch_items(draw: st.DrawFn, heartbeat: bool) -> list[tuple[str, str, dict[str, Any]]]:
    """One to five (which job, which lease, item) triples; an item's ``id`` and
    ``lease`` are placeholders, replaced by the real ones unless mutated."""
    count = draw(st.integers(1, 5))
    items = []
    for _ in range(count):
        job = draw(st.sampled_from(["a", "b", "a", "pending", "unknown"]))
        lease = draw(st.sampled_from(["real", "real", "wrong", "other"]))
        valid = st.just({}) if heartbeat else draw(st.sampled_from([ACK_ITEM["complete"], ACK_ITEM["fail"]]))
        item = draw(mutated(st.builds(lambda b: {"id": "ID", "lease": "LEASE", **b}, valid), ACK_HOSTILE))
        items.append((job, lease, item))
    return items


@given(heartbeat=st.booleans(), data=st.data())
def test_batch_calls(nodes: Nodes, heartbeat: bool, data: st.DataObject) -> None:
    """Every item gets exactly one result, in order, with its own outcome; an
    item refused alone changes nothing of its job; the node serves on."""
    items = data.draw(batch_items(heartbeat))
    extra = data.draw(st.one_of(st.just({}), st.fixed_dictionaries({"lease_seconds": numbers}))) if heartbeat else {}
    with nodes.fresh() as broker:
        [pending, *_] = seeded(broker, 4)
        a, b = broker.execute(claim_op("w1", ["q"], policy=broker.policy, max_jobs=2))
        [other] = broker.execute(claim_op("w2", ["q"], policy=broker.policy))
        jobs = {"a": a, "b": b}
        sent = []
        for which, lease, item in items:
            job = jobs.get(which)
            if item.get("id") == "ID":
                item["id"] = job.id if job else {"pending": pending}.get(which, "no-such-job")
            if item.get("lease") == "LEASE":
                item["lease"] = {"real": job.lease if job else "0" * 24, "wrong": "0" * 24,
                                 "other": other.lease}[lease]
            sent.append(item)
        if not heartbeat:  # the claim that may ride the acks, valid or not
            extra = data.draw(st.one_of(st.just({}), st.fixed_dictionaries(
                {"claim": st.one_of(claim_bodies, hostile_text, wrong_types)})))
        body = {"leases": sent, **extra} if heartbeat else {"acks": sent, **extra}
        before = stored(broker)
        answer = post("/api/v1/heartbeat" if heartbeat else "/api/v1/ack", body)
        result = check_call(answer, before, broker, "heartbeat batch" if heartbeat else "ack")
        if answer.status == 200:
            if extra.get("claim") is not None:  # answered as POST /api/v1/claim would be, or refused alone
                # (a null claim is no claim, as every optional field's null is its absence)
                claimed = result["claim"]
                assert isinstance(claimed.get("jobs"), list) or claimed.get("error") in STATUS_BY_CODE, claimed
            else:
                assert "claim" not in result, result
            results = result["results"]
            assert len(results) == len(sent), f"{len(sent)} items, {len(results)} results: {results}"
            for item, got in zip(sent, results, strict=True):
                if "error" in got:
                    assert got["error"] in STATUS_BY_CODE, got
                    assert STATUS_BY_CODE[got["error"]] < 500, f"an item failed with a server error: {got}"
                else:
                    assert got["id"] == item["id"], (item, got)
        check_alive(broker, "batch")
