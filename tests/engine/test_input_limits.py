"""What the operation builders refuse, so that whatever they accept can be
committed and read back by every reader (defects 3, 6 and 7 of issue 9).

* Payloads nested too deep, huge integers and text with lone surrogates
  encode badly or not at all somewhere downstream: refused at push.
* A ``worker`` or ``error`` that UTF-8 cannot encode: refused, not left to
  fail inside a commit.
* Job ids a URL path cannot carry as they are (``.``, ``..``, ``/``, ...).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import InvalidPayload, ValidationError
from engine.ops import (
    MAX_PAYLOAD_DEPTH,
    claim_op,
    complete_op,
    fail_op,
    get_job_op,
    heartbeat_op,
    purge_op,
    push_op,
    requeue_op,
)
from engine.parsing import empty_state, parse_document
from engine.policy import Policy
from engine.transitions import apply_batch, claim, get_job, push
from tests.helpers import KEY

POLICY = Policy()
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _nested(depth: int, inner: Any = 1, *, objects: bool = False) -> Any:
    value = inner
    for i in range(depth):
        value = {"k": value} if objects and i % 2 else [value]
    return value


def _every_read(payload: Any) -> None:
    """Push ``payload``, then do what every reader does, as the API shapes
    it: commit the document, parse it back, claim the job, show the job and
    the whole document. Raises if any step cannot."""
    state = empty_state(policy=POLICY)
    [job_id] = push(state, push_op("q", [payload], policy=POLICY), NOW)
    data = b"".join(state.encode(seq=1, writer="w", now=NOW))
    parsed = parse_document(KEY, data, policy=POLICY)
    orjson.dumps({"document": orjson.loads(data)})  # GET /api/v1/document
    orjson.dumps({"job": get_job(parsed, get_job_op(job_id), NOW)})  # GET /api/v1/jobs/<id>
    [claimed] = claim(parsed, claim_op("worker", ["q"], policy=POLICY), NOW)
    assert claimed.payload == orjson.loads(orjson.dumps(payload))
    orjson.dumps({"jobs": [{"id": claimed.id, "payload": claimed.payload}]})  # POST /api/v1/claim
    again = b"".join(parsed.encode(seq=2, writer="w", now=NOW))  # the commit that records the claim
    parse_document(KEY, again, policy=POLICY)


# -- defect 6: whatever push accepts, every read can return ----------------------


@pytest.mark.parametrize("objects", [False, True])
def test_the_deepest_accepted_payload_is_readable_everywhere(objects: bool) -> None:
    _every_read(_nested(MAX_PAYLOAD_DEPTH, objects=objects))


@pytest.mark.parametrize("depth", [MAX_PAYLOAD_DEPTH + 1, 200, 252, 254, 255, 1000])
def test_a_payload_nested_too_deep_is_refused_at_push(depth: int) -> None:
    with pytest.raises(InvalidPayload, match=f"nested more than {MAX_PAYLOAD_DEPTH} levels"):
        push_op("q", [_nested(depth)], policy=POLICY)


def test_brackets_inside_strings_do_not_count_as_depth() -> None:
    payload = {"text": "[" * 10_000 + "{" * 10_000}
    push_op("q", [payload], policy=POLICY)
    _every_read(payload)


@pytest.mark.parametrize("payload", [2**64, -(2**63) - 1, {"n": [10**30]}, "\ud800", {"\udfff": 1}, ["a\ud83d"]])
def test_what_json_cannot_round_trip_is_refused_at_push(payload: Any) -> None:
    with pytest.raises(InvalidPayload):
        push_op("q", [payload], policy=POLICY)


_CHARS = st.characters(codec=None, exclude_categories=()) | st.sampled_from(["\ud800", "\udfff", "[", "{", "\x00"])
_TEXT = st.text(_CHARS, max_size=8)  # lone surrogates included, often
_EDGE_INTS = st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1])
_SCALARS = st.none() | st.booleans() | st.integers() | _EDGE_INTS | st.floats() | _TEXT
_JSON = st.recursive(
    _SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3), max_leaves=12
)

_DEEP = st.builds(_nested, st.integers(0, 300), _JSON, objects=st.booleans())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_JSON, _DEEP))
def test_whatever_push_accepts_every_reader_can_return(payload: Any) -> None:
    try:
        push_op("q", [payload], policy=POLICY)
    except InvalidPayload:
        return
    _every_read(payload)


# -- defect 3: text UTF-8 cannot encode is refused before any commit -------------


def test_a_worker_with_a_lone_surrogate_is_refused() -> None:
    with pytest.raises(ValidationError, match="worker is not valid text"):
        claim_op("w\ud800", ["q"], policy=POLICY)


def test_an_error_with_a_lone_surrogate_is_refused() -> None:
    with pytest.raises(ValidationError, match="error is not valid text"):
        fail_op("job", "lease", error="boom \udc80", retry_in_seconds=None, policy=POLICY)


def test_text_with_surrogates_never_reaches_a_commit() -> None:
    # The whole cycle with the worst strings that are accepted: they encode.
    state = empty_state(policy=POLICY)
    apply_batch(state, [push_op("q", [{"emoji": "\U0001f600", "nul": "\x00"}], policy=POLICY)], NOW)
    [claimed] = claim(state, claim_op("w\U0001f600\x00", ["q"], policy=POLICY), NOW)
    apply_batch(state, [fail_op(claimed.id, claimed.lease, error="\U0001f4a5\x00", retry_in_seconds=0,
                                policy=POLICY)], NOW)
    parse_document(KEY, b"".join(state.encode(seq=1, writer="w", now=NOW)), policy=POLICY)


# -- defect 7: ids a URL path can carry as they are --------------------------------

BAD_IDS = [".", "..", "...", "", "a/b", "a?b", "a#b", "a%2e", "a b", "a\tb", "a\nb", "\x00", "é", "a\ud800",
           "x" * 201]


@pytest.mark.parametrize("job_id", BAD_IDS)
def test_ids_no_url_can_carry_are_refused(job_id: str) -> None:
    builders = [
        lambda: push_op("q", [1], policy=POLICY, ids=[job_id]),
        lambda: get_job_op(job_id),
        lambda: complete_op(job_id, "lease"),
        lambda: heartbeat_op(job_id, "lease"),
        lambda: fail_op(job_id, "lease", error="e", retry_in_seconds=None, policy=POLICY),
        lambda: requeue_op([job_id]),
        lambda: purge_op([job_id]),
    ]
    for build in builders:
        with pytest.raises(ValidationError, match="must be 1-200"):
            build()


@pytest.mark.parametrize("job_id", ["a", ".a", "a.", "a..b", "..a", "-", "_", ":", "task:1.2-x_y", "x" * 200])
def test_ids_with_dots_among_other_characters_are_fine(job_id: str) -> None:
    op = push_op("q", [1], policy=POLICY, ids=[job_id])
    assert op.jobs[0].id == job_id
