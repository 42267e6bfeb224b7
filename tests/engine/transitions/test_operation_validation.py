"""Pure transition tests (engine.transitions). The operation builders' validation, the error types and
the policy's limits. The builders and the test clock are in builders.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from engine.errors import (
    EngineError,
    InvalidPayload,
    JobNotFound,
    LeaseLost,
    PayloadTooLarge,
    QueueError,
    ValidationError,
)
from engine.model import FailOutcome
from engine.ops import (
    Purge,
    claim_op,
    complete_op,
    fail_op,
    heartbeat_op,
    purge_op,
    push_op,
    requeue_op,
)
from engine.policy import MAX_CLAIM_JOBS, MAX_DELAY_SECONDS, MAX_LEASE_SECONDS, Policy

# -- builders: validation ------------------------------------------------------------------------------


BAD_QUEUE_NAMES: list[Any] = ["", "-q", "_q", ".q", "a b", "a/b", "a" * 101, "caf\u00e9", "q\nx", None, 5, b"q"]


@pytest.mark.parametrize("name", BAD_QUEUE_NAMES)
def test_push_and_claim_refuse_bad_queue_names(name: Any) -> None:
    with pytest.raises(ValidationError, match="queue name"):
        push_op(name, [1], policy=Policy())
    with pytest.raises(ValidationError, match="queue name"):
        claim_op("w", [name], policy=Policy())


@pytest.mark.parametrize("name", ["q\n", "a" * 100 + "\n"])
def test_push_and_claim_refuse_queue_name_with_trailing_newline(name: str) -> None:
    with pytest.raises(ValidationError, match="queue name"):
        push_op(name, [1], policy=Policy())


@pytest.mark.parametrize("name", ["q", "Q", "0", "a" * 100, "emails.high:v2-x_y"])
def test_push_and_claim_accept_good_queue_names(name: str) -> None:
    assert push_op(name, [1], policy=Policy()).queue == name
    assert claim_op("w", name, policy=Policy()).queues == (name,)


def test_purge_by_queue_refuses_bad_queue_name() -> None:
    with pytest.raises(ValidationError):
        purge_op(queue="bad name", status="pending")


@pytest.mark.parametrize("payloads", [[], (), "abc", b"abc", {"a": 1}, 5, None])
def test_push_refuses_empty_or_non_list_payloads(payloads: Any) -> None:
    with pytest.raises(ValidationError):
        push_op("q", payloads, policy=Policy())


def test_push_accepts_a_tuple_of_payloads() -> None:
    assert len(push_op("q", (1, 2), policy=Policy()).jobs) == 2


class _Point:
    pass


@pytest.mark.parametrize(
    "payload",
    [
        {1, 2},
        b"bytes",
        object(),
        _Point(),
        float("nan"),
        float("inf"),
        float("-inf"),
        [1, {"deep": float("nan")}],
        {"x": [float("inf")]},
        {1: "int key"},
        2**64,
        datetime(2020, 1, 1, tzinfo=UTC),
        FailOutcome(status="dead"),
    ],
    ids=lambda p: type(p).__name__ + ":" + repr(p)[:20],
)
def test_push_refuses_non_json_payloads(payload: Any) -> None:
    with pytest.raises(InvalidPayload) as info:
        push_op("q", [1, payload], policy=Policy())
    assert isinstance(info.value, ValidationError)
    assert info.value.code == "invalid_payload"


def test_push_accepts_strings_that_merely_contain_nan_or_infinity() -> None:
    op = push_op("q", ["NaN", {"Infinity": "-Infinity"}], policy=Policy())
    assert [j.payload for j in op.jobs] == [b'"NaN"', b'{"Infinity":"-Infinity"}']


def test_push_refuses_payload_over_the_limit_and_accepts_one_at_it() -> None:
    policy = Policy(max_payload_bytes=10)
    assert push_op("q", ["x" * 8], policy=policy).jobs[0].payload == b'"xxxxxxxx"'  # 10 bytes

    with pytest.raises(PayloadTooLarge) as info:
        push_op("q", ["ok", "x" * 9], policy=policy)

    assert (info.value.size, info.value.limit) == (11, 10)
    assert info.value.code == "payload_too_large"
    assert isinstance(info.value, ValidationError)
    assert "11" in str(info.value)
    assert "10" in str(info.value)


@pytest.mark.parametrize("max_jobs", [0, -1, MAX_CLAIM_JOBS + 1, 1.5, True, "3", None])
def test_claim_refuses_bad_max_jobs(max_jobs: Any) -> None:
    with pytest.raises(ValidationError, match="max_jobs"):
        claim_op("w", ["q"], policy=Policy(), max_jobs=max_jobs)


def test_claim_accepts_max_jobs_at_the_limits() -> None:
    assert claim_op("w", ["q"], policy=Policy(), max_jobs=1).max_jobs == 1
    assert claim_op("w", ["q"], policy=Policy(), max_jobs=MAX_CLAIM_JOBS).max_jobs == MAX_CLAIM_JOBS


@pytest.mark.parametrize("lease_seconds", [0, -1, 0.0, float("nan"), float("inf"), MAX_LEASE_SECONDS + 1, True, "5"])
def test_claim_and_heartbeat_refuse_bad_lease_seconds(lease_seconds: Any) -> None:
    with pytest.raises(ValidationError, match="lease_seconds"):
        claim_op("w", ["q"], policy=Policy(), lease_seconds=lease_seconds)
    with pytest.raises(ValidationError, match="lease_seconds"):
        heartbeat_op("job", "lease", lease_seconds=lease_seconds)


@pytest.mark.parametrize("delay", [-1, -0.001, float("nan"), float("inf"), MAX_DELAY_SECONDS + 1, True, "1", None])
def test_push_refuses_bad_delay(delay: Any) -> None:
    with pytest.raises(ValidationError, match="delay_seconds"):
        push_op("q", [1], policy=Policy(), delay_seconds=delay)


@pytest.mark.parametrize("max_attempts", [0, -3, 1001, 2.0, True, False, "3"])
def test_push_refuses_bad_max_attempts(max_attempts: Any) -> None:
    with pytest.raises(ValidationError, match="max_attempts"):
        push_op("q", [1], policy=Policy(), max_attempts=max_attempts)


@pytest.mark.parametrize("retry", [-1, float("nan"), True, "2", MAX_DELAY_SECONDS + 1])
def test_fail_refuses_bad_retry_in_seconds(retry: Any) -> None:
    with pytest.raises(ValidationError, match="retry_in_seconds"):
        fail_op("job", "lease", error="e", retry_in_seconds=retry, policy=Policy())


def test_fail_refuses_non_string_error() -> None:
    with pytest.raises(ValidationError, match="error"):
        fail_op("job", "lease", error=None, retry_in_seconds=None, policy=Policy())  # type: ignore[arg-type]


@pytest.mark.parametrize("worker", ["", None, 7, "w" * 201])
def test_claim_refuses_bad_worker(worker: Any) -> None:
    with pytest.raises(ValidationError, match="worker"):
        claim_op(worker, ["q"], policy=Policy())


def test_claim_refuses_no_queues_and_dedups_repeated_ones() -> None:
    with pytest.raises(ValidationError, match="at least one queue"):
        claim_op("w", [], policy=Policy())
    assert claim_op("w", ["b", "a", "b"], policy=Policy()).queues == ("b", "a")


@pytest.mark.parametrize("job_id", ["", None, 5, "x" * 201])
def test_builders_refuse_bad_job_ids_and_leases(job_id: Any) -> None:
    policy = Policy()
    for build in (
        lambda: heartbeat_op(job_id, "lease"),
        lambda: heartbeat_op("job", job_id),
        lambda: complete_op(job_id, "lease"),
        lambda: complete_op("job", job_id),
        lambda: fail_op(job_id, "lease", error="e", retry_in_seconds=None, policy=policy),
        lambda: requeue_op([job_id]),
        lambda: purge_op([job_id]),
        lambda: push_op("q", [1], policy=policy, ids=[job_id]),
    ):
        with pytest.raises(ValidationError):
            build()


def test_push_refuses_ids_of_a_different_length() -> None:
    with pytest.raises(ValidationError, match="differ in length"):
        push_op("q", [1, 2], policy=Policy(), ids=["a"])


def test_requeue_refuses_no_ids_and_dedups() -> None:
    with pytest.raises(ValidationError):
        requeue_op([])
    assert requeue_op(["a", "b", "a"]).job_ids == ("a", "b")
    assert requeue_op("a").job_ids == ("a",)


def test_purge_needs_ids_or_queue_and_status() -> None:
    with pytest.raises(ValidationError):
        purge_op()
    with pytest.raises(ValidationError):
        purge_op([])
    with pytest.raises(ValidationError):
        purge_op(queue="q")
    with pytest.raises(ValidationError):
        purge_op(status="pending")
    with pytest.raises(ValidationError):
        purge_op(queue="q", status="completed")
    with pytest.raises(ValidationError, match="not both"):
        purge_op(["a"], queue="q", status="pending")
    assert purge_op(["a", "a", "b"]).job_ids == ("a", "b")
    assert purge_op(queue="q", status="dead") == Purge(queue="q", status="dead")


def test_error_types_share_one_root_and_carry_codes() -> None:
    for cls in (JobNotFound, LeaseLost, ValidationError, InvalidPayload, PayloadTooLarge):
        assert issubclass(cls, QueueError)
        assert issubclass(cls, EngineError)
    assert {ValidationError.code, InvalidPayload.code, PayloadTooLarge.code, JobNotFound.code, LeaseLost.code} == {
        "invalid",
        "invalid_payload",
        "payload_too_large",
        "job_not_found",
        "lease_lost",
    }


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"lease_seconds": 0},
        {"lease_seconds": MAX_LEASE_SECONDS + 1},
        {"max_payload_bytes": 0},
        {"dead_letter_limit": -1},
        {"max_error_chars": 0},
        {"backoff_base_seconds": -1},
        {"backoff_base_seconds": 10, "backoff_cap_seconds": 5},
    ],
)
def test_policy_refuses_bad_limits(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Policy(**kwargs)
