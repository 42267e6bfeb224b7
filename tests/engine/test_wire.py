"""The wire format (engine.wire), both directions.

Every operation with an endpoint survives its request, every outcome its
answer, every operator operation its forwarding, and every error code means
the same on both sides: the status the broker answers with is the status of
the error a client rebuilds from it.
"""

from __future__ import annotations

import inspect
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import unquote

import orjson
import pytest

from engine import errors, forget_schedule_op, pause_schedule_op, wire
from engine.errors import (
    BrokerUnavailable,
    CommitTimeout,
    DocumentError,
    DocumentMissing,
    EngineError,
    Forbidden,
    InitRefused,
    JobNotFound,
    JobSealed,
    LeaseLost,
    NotLeader,
    PayloadTooLarge,
    SegmentUnreadable,
    StoreUnavailable,
    Unauthorized,
    ValidationError,
)
from engine.model import ClaimedJob, FailOutcome
from engine.ops import (
    Operation,
    claim_op,
    complete_op,
    fail_op,
    forget_op,
    get_job_op,
    heartbeat_op,
    limit_op,
    pause_op,
    purge_op,
    push_op,
    rate_limit_op,
    requeue_op,
    stop_op,
)
from engine.policy import Policy

POLICY = Policy()
NOW = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def over_the_wire(value: Any) -> Any:
    """``value`` encoded as the API encodes it, and parsed as a client parses it."""
    return wire.loads(orjson.dumps(value, option=orjson.OPT_UTC_Z))


# -- requests ------------------------------------------------------------------------------------


def read_back(op: Operation, request: wire.Request) -> Operation:
    """The operation the broker reads from ``request``."""
    body = over_the_wire(request.body)
    segment = request.path.split("/")[2] if request.path.startswith("/jobs/") else ""
    job_id = unquote(segment)  # as the server's URL router reads the path
    match request.path.removeprefix(f"/jobs/{segment}"):
        case "/jobs":
            return wire.push_from(body, POLICY)
        case "/claim":
            claim, wait = wire.claim_from(body, POLICY)
            assert wait == request.wait_seconds
            return claim
        case "/heartbeat":
            return wire.heartbeat_from(job_id, body)
        case "/complete":
            return wire.complete_from(job_id, body)
        case "/fail":
            return wire.fail_from(job_id, body, POLICY)
        case "":
            assert request.method == "GET" and body is None
            return get_job_op(job_id)
    raise AssertionError(f"no endpoint for {request.path}")


@pytest.mark.parametrize(
    "op",
    [
        push_op("emails", [{"to": "ada@example.com", "n": [1, 2.5, None, True]}], policy=POLICY, ids=["j1"]),
        push_op("q", ["a", 2**60, {"deep": {"er": []}}], policy=POLICY, ids=["a", "b", "c"], max_attempts=7,
                delay_seconds=12.5),
        claim_op("worker-1", ["a", "b"], policy=POLICY, max_jobs=5, lease_seconds=42.5),
        claim_op("w", ["q"], policy=POLICY),
        claim_op("w", ["high", "low"], policy=POLICY, in_order=True),
        heartbeat_op("j1", "lease-token"),
        heartbeat_op("j1", "lease-token", lease_seconds=90),
        complete_op("j1", "lease-token"),
        fail_op("j1", "lease-token", error="boom", retry_in_seconds=None, policy=POLICY),
        fail_op("j1", "lease-token", error="boom\nline 2", retry_in_seconds=3.5, policy=POLICY),
        fail_op("j1", "lease-token", error="no such handler", retry_in_seconds=None, policy=POLICY, give_up=True),
        get_job_op("job:2025.01-x_y"),
    ],
)
def test_every_operation_comes_back_from_its_request(op: Operation) -> None:
    assert read_back(op, wire.request_for(op)) == op


def test_a_long_poll_claim_sends_its_wait_and_may_leave_the_lease_to_the_broker() -> None:
    op = claim_op("w", ["q"], policy=POLICY)  # the policy's lease length
    request = wire.request_for(op, wait_seconds=12.5, send_lease=False)
    assert request.wait_seconds == 12.5 and request.body is not None
    assert "lease_seconds" not in request.body and request.body["wait_seconds"] == 12.5
    assert read_back(op, request) == op


@pytest.mark.parametrize(
    "op", [requeue_op(["a"]), stop_op(["a"]), purge_op(queue="q", status="dead"), pause_op("q"), forget_op("q"),
           wire.operator_from_json({"kind": "pause", "queue": "q", "paused": False}, policy=POLICY),
           pause_schedule_op("nightly"), forget_schedule_op("nightly"), limit_op("q", 3),
           rate_limit_op("q", 10, 1)],
)
def test_operator_actions_have_no_request(op: Operation) -> None:
    with pytest.raises(EngineError, match="operator action with no broker API endpoint"):
        wire.request_for(op)


@pytest.mark.parametrize(
    "op",
    [
        requeue_op(["a", "b"]),
        requeue_op(["a", "b"], expect=["running", "dead"]),
        requeue_op(["a", "b"], expect=["dead", "dead"], per_second=2.5),
        stop_op(["a", "b"]),
        stop_op(["a", "b"], expect=["running", "running"]),
        purge_op(["a"]),
        purge_op(["a", "b"], expect=["pending", "dead"]),
        purge_op(queue="emails", status="dead"),
        pause_op("emails"),
        pause_op("emails", paused=False),
        forget_op("emails"),
        limit_op("emails", 5),
        limit_op("emails", None),
        rate_limit_op("emails", 10, 1),
        rate_limit_op("emails", 1000, 3600.5),
        rate_limit_op("emails", None),
        pause_schedule_op("nightly-report"),
        pause_schedule_op("nightly-report", paused=False),
        forget_schedule_op("nightly-report"),
        push_op("emails", [{"to": "ada@example.com"}], policy=POLICY, ids=["j"], max_attempts=4, delay_seconds=30),
    ],
)
def test_every_operator_operation_comes_back_from_its_json(op: Operation) -> None:
    assert wire.operator_from_json(over_the_wire(wire.operator_json(op)), policy=POLICY) == op


def test_a_paced_requeue_is_its_own_kind_so_an_older_leader_refuses_it() -> None:
    """A leader that knows only "requeue" would requeue every job at once."""
    assert wire.operator_json(requeue_op(["a"], per_second=1))["kind"] == "requeue_paced"
    assert wire.operator_json(requeue_op(["a"]))["kind"] == "requeue"


def test_a_schedule_pause_forwarded_with_a_paused_that_is_not_a_bool_is_refused() -> None:
    """A node must never read "false" as a pause."""
    with pytest.raises(ValidationError, match="paused must be true or false"):
        wire.operator_from_json({"kind": "pause_schedule", "name": "n", "paused": "false"}, policy=POLICY)


def test_a_bad_field_is_named_in_the_refusal() -> None:
    with pytest.raises(ValidationError, match=r"^jobs\[1\]: "):
        wire.push_from({"queue": "q", "jobs": [{"payload": 1}, {"payload": 1, "max_attempts": 0}]}, POLICY)
    with pytest.raises(ValidationError, match=r"unknown field 'jobs\[0\]\.colour'; jobs\[0\] takes"):
        wire.push_from({"queue": "q", "jobs": [{"payload": 1, "colour": "red"}]}, POLICY)
    with pytest.raises(ValidationError, match=r"^'lease' must be a string, not a number$"):
        wire.complete_from("j", {"lease": 5})


# -- answers -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "outcome"),
    [
        (push_op("q", [1, 2], policy=POLICY, ids=["a", "b"]), ["a", "b"]),
        (claim_op("w", ["q"], policy=POLICY), []),
        (claim_op("w", ["q"], policy=POLICY, max_jobs=2), [
            ClaimedJob(id="a", queue="q", payload={"x": [1, None]}, attempt=1, lease="t1", lease_expires_at=NOW),
            ClaimedJob(id="b", queue="q", payload="s", attempt=3, lease="t2", lease_expires_at=NOW + timedelta(1)),
        ]),
        (heartbeat_op("j", "t"), NOW),
        (complete_op("j", "t"), None),
        (fail_op("j", "t", error="e", retry_in_seconds=None, policy=POLICY), FailOutcome(status="dead")),
        (fail_op("j", "t", error="e", retry_in_seconds=5, policy=POLICY),
         FailOutcome(status="pending", not_before=NOW)),
        (get_job_op("j"), {"id": "j", "status": "pending", "payload": [1]}),
    ],
)
def test_every_outcome_comes_back_from_its_answer(op: Operation, outcome: Any) -> None:
    assert wire.outcome_from(op, over_the_wire(wire.outcome_json(op, outcome))) == outcome


def test_no_answer_carries_a_lease_token() -> None:
    job = {"id": "j", "status": "running", "lease": {"worker": "w", "token": "secret"}}
    answer = wire.outcome_json(get_job_op("j"), job)
    assert answer["lease"] == {"worker": "w", "token": wire.HIDDEN_TOKEN}
    document = {"jobs": [{"id": "a", "lease": {"token": "secret"}}, {"id": "b", "lease": None}]}
    wire.hide_tokens(document)
    assert b"secret" not in orjson.dumps(document)
    assert document["jobs"][0]["lease"] == {"token": wire.HIDDEN_TOKEN}


@pytest.mark.parametrize(
    ("op", "answer"),
    [
        (push_op("q", [1], policy=POLICY), {"ids": "a"}),
        (claim_op("w", ["q"], policy=POLICY), {"jobs": [{"id": "a"}]}),
        (heartbeat_op("j", "t"), {"lease_expires_at": "2025-01-02T03:04:05"}),  # no timezone
        (fail_op("j", "t", error="e", retry_in_seconds=None, policy=POLICY), {"status": "done"}),
        (get_job_op("j"), ["not", "an", "object"]),
    ],
)
def test_a_malformed_answer_is_an_engine_error(op: Operation, answer: Any) -> None:
    with pytest.raises(EngineError, match="the broker"):
        wire.outcome_from(op, answer)


def test_health_names_the_role_and_a_checked_leader_url() -> None:
    assert wire.health_from({"role": "standby", "broker": {"url": "http://a:8000/"}}) == ("standby", "http://a:8000")
    assert wire.health_from({"role": "leader", "broker": {"url": "ftp://a"}}) == ("leader", None)
    with pytest.raises(EngineError, match="no role"):
        wire.health_from({"broker": {}})


# -- errors --------------------------------------------------------------------------------------

EXTRA = {"not_leader": {"leader_url": "http://b:8000"}, "payload_too_large": {"size": 9, "limit": 5}}


@pytest.mark.parametrize("code", sorted(wire.ERROR_BY_CODE))
def test_each_code_a_client_rebuilds_maps_back_to_the_same_status(code: str) -> None:
    status = wire.STATUS_BY_CODE[code]
    exc = wire.error_from_answer(status, {"error": code, "message": "the broker's words", **EXTRA.get(code, {})})
    assert type(exc) is wire.ERROR_BY_CODE[code]
    assert "the broker's words" in str(exc)
    back = wire.error_code(exc)
    # malformed_json is the one code a client reads as a plain ValidationError ("invalid").
    assert back == ("invalid" if code == "malformed_json" else code)
    assert wire.STATUS_BY_CODE[back] == status


def engine_errors() -> list[EngineError]:
    """One instance of every error class in engine.errors."""
    made: dict[type[EngineError], EngineError] = {
        NotLeader: NotLeader("http://b:8000"),
        JobNotFound: JobNotFound("j"),
        JobSealed: JobSealed("j", ()),
        LeaseLost: LeaseLost("j"),
        PayloadTooLarge: PayloadTooLarge(9, 5),
        DocumentError: DocumentError("queue.json", "not JSON"),
        DocumentMissing: DocumentMissing("queue.json", "seen at seq 4"),
        SegmentUnreadable: SegmentUnreadable("queue.json.seg/q/e1-p1-ab.json", "the object is missing"),
    }
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, EngineError)]
    assert len(classes) >= 16, classes
    return [made.get(c) or c("refused") for c in classes]


@pytest.mark.parametrize("exc", engine_errors(), ids=lambda e: type(e).__name__)
def test_an_engine_error_answered_by_the_broker_is_rebuilt_by_a_client(exc: EngineError) -> None:
    body = over_the_wire(wire.error_json(exc))
    status = wire.STATUS_BY_CODE[body["error"]]
    back = wire.error_from_answer(status, body, job_id="j", key="queue.json")
    # The client's own (EngineError, BrokerUnavailable) and a node's own (the
    # heartbeat's CommitTimeout, queueinit's InitRefused): no broker answers them.
    if type(exc) in (EngineError, BrokerUnavailable, CommitTimeout, InitRefused):
        assert body["error"] == "internal_error" and type(back) is EngineError
        return
    assert body["error"] == wire.ENGINE_ALIASES.get(exc.code, exc.code) != "internal_error"
    if exc.code not in wire.ENGINE_ALIASES:  # an alias (StoreError, QueueError, ...) comes back as what it stands for
        assert isinstance(exc, wire.ERROR_BY_CODE[body["error"]])
    assert type(back) is wire.ERROR_BY_CODE[body["error"]]
    assert wire.STATUS_BY_CODE[wire.error_code(back)] == status
    assert str(exc) in str(back)
    # An alias names its own object (a segment's key); the client knows only the document's.
    for name in ("leader_url", "size", "limit", "job_id", *(() if exc.code in wire.ENGINE_ALIASES else ("key",))):
        assert getattr(back, name, None) == getattr(exc, name, None)


def test_error_json_names_where_and_the_leader() -> None:
    assert wire.error_json(ValidationError("bad"), where="jobs[3]") == {"error": "invalid", "message": "jobs[3]: bad"}
    stopped = wire.error_json(StoreUnavailable("slow"))
    assert stopped == {"error": "store_unavailable", "message": "slow"}
    known = wire.error_json(NotLeader(None), leader_url="http://a:8000")
    assert known["error"] == "not_leader" and known["leader_url"] is None  # the error's own, even when None
    assert wire.error_json(PayloadTooLarge(9, 5))["size"] == 9


def test_answers_without_a_known_code() -> None:
    assert type(wire.error_from_answer(503, {}, reason="Service Unavailable")) is BrokerUnavailable
    assert type(wire.error_from_answer(429, {})) is BrokerUnavailable
    assert type(wire.error_from_answer(401, {})) is Unauthorized
    assert type(wire.error_from_answer(401, {"error": "forbidden"})) is Unauthorized


def test_a_forbidden_answer_is_a_refused_token_with_the_brokers_reason() -> None:
    """A token whose scope does not allow the call: retrying cannot help, so
    it is an Unauthorized, which workers and the client's failover stop on."""
    message = "the API token 'p' may not push to 'mail': its queues are billing"
    exc = wire.error_from_answer(403, {"error": "forbidden", "message": message})
    assert type(exc) is Forbidden and isinstance(exc, Unauthorized) and str(exc) == message
    other = wire.error_from_answer(404, {"error": "not_found", "message": "no such URL"}, where="GET /x")
    assert type(other) is EngineError and str(other) == "GET /x: the broker answered 404 not_found: no such URL"
    assert str(wire.error_from_answer(500, {}, reason="Internal Server Error", where="GET /x")) == (
        "GET /x: the broker answered 500: HTTP 500 Internal Server Error"
    )


def test_a_401_is_unauthorized_except_for_the_codes_read_before_it() -> None:
    # Kept as the client has always read answers; no broker sends these with a 401.
    assert type(wire.error_from_answer(401, {"error": "lease_lost"}, job_id="j")) is LeaseLost
    assert type(wire.error_from_answer(401, {"error": "document_error"})) is Unauthorized


def test_a_not_leader_answer_naming_no_url_is_refused() -> None:
    with pytest.raises(ValueError, match="absolute http"):
        wire.error_from_answer(503, {"error": "not_leader", "leader_url": "leader-b"})
    assert wire.error_from_answer(503, {"error": "not_leader", "leader_url": ""}).leader_url is None  # type: ignore[attr-defined]


# -- limits and reading --------------------------------------------------------------------------


def test_the_longest_wait_is_one_limit_for_client_worker_and_api() -> None:
    from engine import http_client, workeroptions

    assert wire.MAX_WAIT_SECONDS == 30.0
    assert vars(http_client)["MAX_WAIT_SECONDS"] is wire.MAX_WAIT_SECONDS
    assert vars(workeroptions)["MAX_WAIT_SECONDS"] is wire.MAX_WAIT_SECONDS


@pytest.mark.parametrize("wait", [0, 0.5, 30, 30.0])
def test_a_claim_may_wait_up_to_the_limit(wait: float) -> None:
    _, got = wire.claim_from({"worker": "w", "queues": ["q"], "wait_seconds": wait}, POLICY)
    assert got == wait and type(got) is float


def test_a_claim_says_in_order_only_when_it_is_so_that_older_brokers_take_every_other_claim() -> None:
    assert "in_order" not in (wire.request_for(claim_op("w", ["a", "b"], policy=POLICY)).body or {})
    body = wire.request_for(claim_op("w", ["a", "b"], policy=POLICY, in_order=True)).body
    assert body is not None and body["in_order"] is True


@pytest.mark.parametrize("value", [1, 0, "true", None, [True]])
def test_a_claims_in_order_must_be_a_boolean(value: Any) -> None:
    body = {"worker": "w", "queues": ["q"], "in_order": value}
    if value is None:  # null is absent
        assert wire.claim_from(body, POLICY)[0].in_order is False
        return
    with pytest.raises(ValidationError, match="in_order must be true or false"):
        wire.claim_from(body, POLICY)


@pytest.mark.parametrize("wait", [-0.001, 30.001, 31, float("inf"), float("nan"), True, "5", [1]])
def test_a_claim_may_not_wait_past_the_limit(wait: Any) -> None:
    with pytest.raises(ValidationError, match=r"'wait_seconds' must be a number from 0 to 30, got"):
        wire.claim_from({"worker": "w", "queues": ["q"], "wait_seconds": wait}, POLICY)


def test_loads_is_exact_and_refuses_what_is_not_json_text() -> None:
    assert wire.loads(b'{"n": 123456789012345678901234567890}') == {"n": 123456789012345678901234567890}
    for body in (b"{", b"NaN", b'"\\ud800"', b'{"a": ["\\udfff"]}', b"\xff"):
        with pytest.raises(wire.MalformedJson) as caught:
            wire.loads(body)
        assert caught.value.code == "malformed_json" and wire.STATUS_BY_CODE[wire.error_code(caught.value)] == 400
    assert wire.lone_surrogate_at({"a": [1, {"b\ud800": 2}]}) == "a key of body.a[1]"


# -- batches: POST /ack and POST /heartbeat ------------------------------------------------------

ACKS = [
    complete_op("j1", "l1"),
    fail_op("j2", "l2", error="boom", retry_in_seconds=None, policy=POLICY),
    fail_op("j3", "l3", error="later", retry_in_seconds=2.5, policy=POLICY),
    fail_op("j4", "l4", error="never", retry_in_seconds=None, policy=POLICY, give_up=True),
]


def test_acks_come_back_from_their_request_in_order() -> None:
    request = wire.ack_request(ACKS)
    assert (request.method, request.path) == ("POST", "/ack")
    assert wire.ack_from(over_the_wire(request.body), POLICY) == ACKS


def test_acks_and_a_claim_come_back_from_their_request_and_the_claim_from_its_answer() -> None:
    claim = claim_op("w", ["a", "b"], policy=POLICY, max_jobs=7, lease_seconds=12.5)
    request = wire.ack_request(ACKS, claim=claim)
    assert "wait_seconds" not in request.body["claim"]  # type: ignore[index]
    assert wire.ack_claim_from(over_the_wire(request.body), POLICY) == (ACKS, claim)
    assert wire.ack_claim_from(over_the_wire(wire.ack_request(ACKS).body), POLICY) == (ACKS, None)
    with pytest.raises(ValidationError, match="claim"):
        wire.ack_from(over_the_wire(request.body), POLICY)  # the plain reader takes no claim
    job = ClaimedJob(id="j", queue="a", payload={"x": 1}, attempt=1, lease="t", lease_expires_at=NOW)
    answer = over_the_wire({"results": [], "claim": wire.claim_json(claim, [job])})
    assert wire.claim_outcome_from(answer, claim) == [job]
    with pytest.raises(EngineError, match="no claim"):
        wire.claim_outcome_from({"results": []}, claim)


@pytest.mark.parametrize("lease_seconds", [None, 42.5])
def test_heartbeats_come_back_from_their_request_with_one_lease_length(lease_seconds: float | None) -> None:
    ops = [heartbeat_op(f"j{i}", f"l{i}", lease_seconds=lease_seconds) for i in range(3)]
    request = wire.heartbeats_request(ops)
    assert (request.method, request.path) == ("POST", "/heartbeat")
    assert request.body is not None and ("lease_seconds" in request.body) == (lease_seconds is not None)
    assert wire.heartbeats_from(over_the_wire(request.body)) == ops


def test_a_batch_request_refuses_what_it_cannot_carry() -> None:
    with pytest.raises(ValueError, match="cannot be acknowledged"):
        wire.ack_request([heartbeat_op("j", "l")])
    with pytest.raises(ValueError, match="one lease length"):
        wire.heartbeats_request([heartbeat_op("a", "l"), heartbeat_op("b", "l", lease_seconds=5)])
    with pytest.raises(ValueError, match="1 to 1000"):
        wire.ack_request([])
    with pytest.raises(ValueError, match="1 to 1000"):
        wire.ack_request([complete_op(f"j{i}", "l") for i in range(wire.MAX_BATCH_ITEMS + 1)])


def test_each_bad_item_is_refused_alone_and_named() -> None:
    items = wire.ack_from(
        {
            "acks": [
                {"id": "ok", "lease": "l", "outcome": "complete"},
                {"id": "x", "lease": "l", "outcome": "finish"},
                {"id": "y", "lease": "l", "outcome": "fail"},  # no error text
                {"lease": "l", "outcome": "complete"},
                {"id": 7, "lease": "l", "outcome": "complete"},
                "not an object",
                {"id": "z", "lease": "l", "outcome": "complete", "extra": 1},
                {"id": "w", "lease": "l", "outcome": "fail", "error": "e", "give_up": "yes"},
            ]
        },
        POLICY,
    )
    assert items[0] == complete_op("ok", "l")
    bad = items[1:]
    assert all(isinstance(item, wire.InvalidItem) and item.code == "invalid" for item in bad)
    assert [item.job_id for item in bad] == ["x", "y", None, None, None, "z", "w"]  # type: ignore[union-attr]
    messages = [str(item) for item in bad]
    assert messages[0].startswith("acks[1]: ") and "'outcome'" in messages[0]
    assert "'error'" in messages[1] and "'id'" in messages[2] and "'id'" in messages[3]
    assert "JSON object" in messages[4] and "'extra'" in messages[5] and "give_up" in messages[6]


def test_a_heartbeat_item_may_not_ask_for_its_own_lease_length() -> None:
    [item] = wire.heartbeats_from({"leases": [{"id": "a", "lease": "l", "lease_seconds": 5}]})
    assert isinstance(item, wire.InvalidItem) and "'lease_seconds'" in str(item)


@pytest.mark.parametrize(
    ("read", "body", "match"),
    [
        ("ack", [], "JSON object"),
        ("ack", {}, "missing field 'acks'"),
        ("ack", {"acks": {}}, "must be an array"),
        ("ack", {"acks": []}, "at least one"),
        ("ack", {"acks": [{"id": "a", "lease": "l", "outcome": "complete"}], "more": 1}, "unknown field 'more'"),
        ("heartbeat", {"leases": []}, "at least one"),
        ("heartbeat", {"leases": [{"id": "a", "lease": "l"}], "lease_seconds": -1}, "lease_seconds"),
        ("heartbeat", {"leases": [{"id": "a", "lease": "l"}], "lease_seconds": "5"}, "lease_seconds"),
    ],
)
def test_a_body_that_is_not_a_batch_is_refused_whole(read: str, body: Any, match: str) -> None:
    with pytest.raises(ValidationError, match=match) as caught:
        wire.ack_from(body, POLICY) if read == "ack" else wire.heartbeats_from(body)
    assert not isinstance(caught.value, wire.TooManyItems)


def test_more_than_the_limit_is_refused_whole_as_too_large() -> None:
    items = [{"id": f"j{i}", "lease": "l"} for i in range(wire.MAX_BATCH_ITEMS + 1)]
    with pytest.raises(wire.TooManyItems, match="limit is 1000") as caught:
        wire.heartbeats_from({"leases": items})
    assert wire.error_code(caught.value) == "payload_too_large"
    assert wire.STATUS_BY_CODE[wire.error_code(caught.value)] == 413
    assert len(wire.heartbeats_from({"leases": items[:-1]})) == wire.MAX_BATCH_ITEMS


def test_batch_results_come_back_one_per_operation_with_their_errors() -> None:
    ops = [*ACKS, complete_op("gone", "l"), complete_op("stolen", "l"), complete_op("down", "l")]
    not_before = NOW + timedelta(seconds=2.5)
    outcomes: list[Any] = [
        None,
        FailOutcome(status="pending", not_before=None),
        FailOutcome(status="pending", not_before=not_before),
        FailOutcome(status="dead", not_before=None),
        JobNotFound("gone"),
        LeaseLost("stolen", "the lease expired"),
        NotLeader("http://b:8000"),
    ]
    answer = over_the_wire(wire.batch_results_json(ops, outcomes))
    assert [r["id"] for r in answer["results"]] == ["j1", "j2", "j3", "j4", "gone", "stolen", "down"]
    assert answer["results"][0] == {"id": "j1", "ok": True}
    assert answer["results"][5] == {"id": "stolen", "error": "lease_lost", "message": "job 'stolen': the lease expired"}
    back = wire.batch_results_from(answer, ops)
    assert back[:4] == outcomes[:4]
    gone, stolen, down = back[4:]
    assert type(gone) is JobNotFound and gone.job_id == "gone"
    assert type(stolen) is LeaseLost and stolen.job_id == "stolen" and str(stolen) == "job 'stolen': the lease expired"
    assert type(down) is NotLeader and down.leader_url == "http://b:8000"


def test_heartbeat_results_come_back_as_deadlines() -> None:
    ops = [heartbeat_op("a", "l"), heartbeat_op("b", "l")]
    answer = over_the_wire(wire.batch_results_json(ops, [NOW, LeaseLost("b")]))
    assert answer == {"results": [{"id": "a", "lease_expires_at": "2025-01-02T03:04:05.678901Z"},
                                  {"id": "b", "error": "lease_lost", "message": "job 'b': lease is not current"}]}
    at, lost = wire.batch_results_from(answer, ops)
    assert at == NOW and isinstance(lost, LeaseLost)


def test_an_invalid_item_is_answered_with_its_own_id_and_message() -> None:
    items = wire.ack_from({"acks": [{"id": "a", "lease": "l", "outcome": "?"}, {"lease": "l"}]}, POLICY)
    answer = wire.batch_results_json(items, items)
    assert [(r["id"], r["error"]) for r in answer["results"]] == [("a", "invalid"), (None, "invalid")]
    assert answer["results"][0]["message"].startswith("acks[0]: ")
    with pytest.raises(ValueError, match="2 items but 1 outcomes"):
        wire.batch_results_json(items, items[:1])


@pytest.mark.parametrize(
    "answer",
    [
        None,
        {"results": {}},
        {"results": [{"id": "a", "ok": True}]},  # one result for two operations
        {"results": [{"id": "b", "ok": True}, {"id": "a", "ok": True}]},  # out of order
        {"results": [{"id": "a", "ok": True}, "b"]},
        {"results": [{"id": "a", "ok": True}, {"id": "b", "status": "gone"}]},
    ],
)
def test_a_batch_answer_that_does_not_match_is_an_engine_error(answer: Any) -> None:
    ops = [complete_op("a", "l"), fail_op("b", "l", error="e", retry_in_seconds=None, policy=POLICY)]
    with pytest.raises(EngineError, match="broker"):
        wire.batch_results_from(answer, ops)


def test_an_unknown_item_code_is_a_plain_engine_error_not_a_success() -> None:
    [outcome] = wire.batch_results_from({"results": [{"id": "a", "error": "weird", "message": "m"}]},
                                        [complete_op("a", "l")])
    assert type(outcome) is EngineError and "weird" in str(outcome)
