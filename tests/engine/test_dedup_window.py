"""The dedup window (defect 10c of issue 9): a push retried after its answer
was lost is not run twice, even once the job has completed and left the
document, for a window bounded in count and in age."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from engine import DirectClient, MemoryStore
from engine.document import FORMAT
from engine.errors import DocumentError
from engine.ops import claim_op, complete_op, fail_op, purge_op, push_op
from engine.parsing import empty_state, parse_document
from engine.policy import DEDUP_WINDOW_IDS, DEDUP_WINDOW_SECONDS, Policy
from engine.transitions import apply_batch
from tests.helpers import KEY

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def run(state: Any, op: Any, now: datetime = T0) -> Any:
    [result] = apply_batch(state, [op], now)
    if isinstance(result, Exception):
        raise result
    return result


def push(state: Any, job_id: str, now: datetime = T0) -> list[str]:
    result: list[str] = run(state, push_op("q", [{"id": job_id}], policy=state.policy, ids=[job_id]), now)
    return result


def finish(state: Any, job_id: str, now: datetime = T0) -> None:
    """Push ``job_id``, claim it and complete it."""
    push(state, job_id, now)
    [claimed] = run(state, claim_op("w", ["q"], policy=state.policy), now)
    assert claimed.id == job_id
    run(state, complete_op(claimed.id, claimed.lease), now)


def round_trip(state: Any, now: datetime = T0) -> Any:
    data = b"".join(state.encode(seq=state.seq + 1, writer="w", now=now))
    return parse_document(KEY, data, policy=state.policy)


def test_the_window_defaults_are_named_and_documented() -> None:
    assert (DEDUP_WINDOW_IDS, DEDUP_WINDOW_SECONDS) == (10_000, 900.0)
    assert (Policy().dedup_window_ids, Policy().dedup_window_seconds) == (10_000, 900.0)
    with pytest.raises(ValueError, match="dedup window"):
        Policy(dedup_window_ids=-1)
    with pytest.raises(ValueError, match="dedup window"):
        Policy(dedup_window_seconds=float("inf"))


def test_a_push_retried_after_the_job_completed_is_not_run_again() -> None:
    # The path a producer takes: its push landed, the answer was lost, a
    # worker ran and completed the job, and then the producer retried.
    clock = [T0]
    client = DirectClient(MemoryStore(), clock=lambda: clock[0])
    op = push_op("emails", [{"to": "ada"}], policy=client.policy, ids=["order-42"])
    assert client.execute(op) == ["order-42"]
    [job] = client.claim("worker", ["emails"])
    client.complete(job.id, job.lease)
    clock[0] = at(60)

    assert client.execute(op) == ["order-42"]  # answered as a success, with the same id

    assert client.claim("worker", ["emails"]) == []
    document = client.document()
    assert document["jobs"] == []
    assert document["queues"]["emails"]["pushed"] == 1
    assert document["finished"] == [[T0.isoformat().replace("+00:00", "Z"), "order-42"]]


def test_purged_and_dropped_ids_are_in_the_window_too() -> None:
    state = empty_state(policy=Policy(max_attempts=1, dead_letter_limit=1))
    for job_id in ("purged", "dropped", "dead"):
        push(state, job_id)
    run(state, purge_op(["purged"]))
    for _ in range(2):  # "dropped" dies first, then "dead" pushes it out of the full list
        [claimed] = run(state, claim_op("w", ["q"], policy=state.policy))
        run(state, fail_op(claimed.id, claimed.lease, error="x", retry_in_seconds=None, policy=state.policy))
    assert list(state.dead) == ["dead"]

    for job_id in ("purged", "dropped", "dead"):
        assert push(state, job_id, at(1)) == [job_id]

    assert state.jobs == {}
    assert sorted(job_id for job_id, _ in state.finished) == ["dropped", "purged"]


def test_the_window_survives_a_commit_and_a_new_leader() -> None:
    state = empty_state(policy=Policy())
    finish(state, "a")

    reread = round_trip(state)

    assert "a" in reread.finished
    push(reread, "a", at(1))
    assert reread.jobs == {}


def test_the_window_is_bounded_by_count_oldest_forgotten_first() -> None:
    state = empty_state(policy=Policy(dedup_window_ids=3))
    for n in range(5):
        finish(state, f"j{n}", at(n))

    assert [job_id for job_id, _ in state.finished] == ["j2", "j3", "j4"]
    doc = orjson.loads(b"".join(state.encode(seq=1, writer="w", now=at(5))))
    assert sum(len(ids.split()) for _, ids in doc["finished"]) == 3
    push(state, "j4", at(6))
    push(state, "j1", at(6))
    assert list(state.jobs) == ["j1"]  # forgotten, so it is a new job again


def test_the_window_is_bounded_by_age() -> None:
    state = empty_state(policy=Policy(dedup_window_seconds=60))
    finish(state, "old", at(0))
    finish(state, "new", at(30))

    push(state, "old", at(59.9))
    assert state.jobs == {}
    push(state, "old", at(60))  # 60 s after it left: out of the window

    assert list(state.jobs) == ["old"]
    assert [job_id for job_id, _ in state.finished] == ["new"]


def test_a_whole_batch_of_completions_is_one_compact_group() -> None:
    state = empty_state(policy=Policy())
    ids = [f"job-{n}" for n in range(100)]
    run(state, push_op("q", [1] * 100, policy=state.policy, ids=ids))
    claimed = run(state, claim_op("w", ["q"], policy=state.policy, max_jobs=100))
    apply_batch(state, [complete_op(c.id, c.lease) for c in claimed], at(1))

    doc = orjson.loads(b"".join(state.encode(seq=1, writer="w", now=at(1))))

    assert doc["finished"] == [[at(1).isoformat().replace("+00:00", "Z"), " ".join(ids)]]


def test_an_unchanged_window_is_not_encoded_again() -> None:
    state = empty_state(policy=Policy())
    finish(state, "a", at(0))
    first = list(state.finished.parts())
    push(state, "b", at(1))  # changes the jobs, not the window

    second = list(state.finished.parts())

    assert len(first) == len(second) == 1 and second[0] is first[0]
    [claimed] = run(state, claim_op("w", ["q"], policy=state.policy), at(2))
    run(state, complete_op(claimed.id, claimed.lease), at(2))
    assert b'"b"]' in b"".join(state.finished.parts())


def test_pruning_alone_does_not_make_an_idle_node_write() -> None:
    state = empty_state(policy=Policy(dedup_window_seconds=60))
    finish(state, "a", at(0))
    state.encoded(seq=1, writer="w")

    apply_batch(state, [], at(3600))

    assert state.dirty is False
    assert len(state.finished) == 0


def test_a_document_without_the_window_still_loads() -> None:
    # Written before the window existed: no "finished" field, same format.
    state = empty_state(policy=Policy())
    push(state, "a")
    doc = orjson.loads(b"".join(state.encode(seq=1, writer="w", now=T0)))
    del doc["finished"]

    old = parse_document(KEY, orjson.dumps(doc), policy=Policy())

    assert FORMAT == 1
    assert list(old.jobs) == ["a"] and len(old.finished) == 0
    assert orjson.loads(b"".join(old.encode(seq=2, writer="w", now=T0)))["finished"] == []


@pytest.mark.parametrize(
    "finished", ['"a b"', "[1]", '[["2026-01-01T00:00:00Z"]]', '[["yesterday", "a"]]', '[["2026-01-01T00:00:00Z", 5]]']
)
def test_a_malformed_window_is_refused_like_any_malformed_field(finished: str) -> None:
    state = empty_state(policy=Policy())
    data = b"".join(state.encode(seq=1, writer="w", now=T0)).replace(
        b'"finished":[]', b'"finished":' + finished.encode()
    )
    with pytest.raises(DocumentError, match="finished"):
        parse_document(KEY, data, policy=Policy())
