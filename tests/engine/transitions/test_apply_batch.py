"""Pure transition tests (engine.transitions). Apply_batch: errors isolated per operation, and refused
operations change nothing. The builders and the test clock are in builders.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from engine import transitions
from engine.document import QueueState
from engine.errors import (
    JobNotFound,
    LeaseLost,
    QueueError,
    ValidationError,
)
from engine.model import ClaimedJob
from engine.ops import (
    Expire,
    Fail,
    claim_op,
    complete_op,
    heartbeat_op,
    purge_op,
    push_op,
    requeue_op,
)
from engine.policy import Policy
from tests.engine.transitions.builders import (
    T0,
    at,
    claim_one,
    counters,
    kill,
    new_state,
    push,
    snapshot,
    zero_counters,
)

# -- apply_batch -----------------------------------------------------------------------------------------


def test_apply_batch_isolates_errors_and_applies_the_other_ops() -> None:
    state = new_state()
    policy = state.policy
    [a] = push(state, "q", [1])
    c = claim_one(state)

    results = transitions.apply_batch(
        state,
        [
            push_op("q", [2], policy=policy, ids=["b"]),
            complete_op(c.id, "wrong"),
            heartbeat_op("missing", "x"),
            requeue_op(["b"]),
            claim_op("w2", ["q"], policy=policy, max_jobs=5),
            complete_op(c.id, c.lease),
        ],
        at(1),
    )

    assert results[0] == ["b"]
    assert isinstance(results[1], LeaseLost)
    assert isinstance(results[2], JobNotFound)
    assert isinstance(results[3], ValidationError)
    assert [j.id for j in results[4]] == ["b"]
    assert results[5] is None
    assert list(state.jobs) == ["b"]
    assert a not in state.jobs
    assert counters(state) == zero_counters(pushed=2, completed=1)


def test_apply_batch_ops_see_each_others_effects_in_order() -> None:
    state = new_state()
    policy = state.policy

    results = transitions.apply_batch(
        state,
        [
            claim_op("w", ["q"], policy=policy),
            push_op("q", [1], policy=policy, ids=["x"]),
            claim_op("w", ["q"], policy=policy),
        ],
        T0,
    )

    assert results[0] == []
    assert [j.id for j in results[2]] == ["x"]


def test_apply_batch_expires_before_applying_the_ops() -> None:
    state = new_state()
    push(state, "q", [1])
    old = claim_one(state, lease_seconds=5)

    [claimed] = transitions.apply_batch(state, [claim_op("w2", ["q"], policy=state.policy)], at(5))

    assert [j.id for j in claimed] == [old.id]


# -- refused operations change nothing ----------------------------------------------------------------


def _populated() -> tuple[QueueState, ClaimedJob]:
    state = new_state(max_attempts=2)
    push(state, "q", [0], ids=["dead"])
    kill(state, "dead")
    push(state, "q", [1, 2, 3], ids=["run", "pend", "later"])
    run = claim_one(state, lease_seconds=100)
    assert run.id == "run"
    push(state, "q", [5], ids=["delayed"], delay_seconds=50)
    state.encoded(seq=1, writer="w")
    assert state.dirty is False
    return state, run


REFUSED: list[tuple[str, Any, type[Exception] | None]] = [
    ("heartbeat-wrong-token", lambda run: heartbeat_op("run", "wrong"), LeaseLost),
    ("heartbeat-unknown", lambda run: heartbeat_op("ghost", run.lease), JobNotFound),
    ("heartbeat-pending", lambda run: heartbeat_op("pend", run.lease), LeaseLost),
    ("heartbeat-dead", lambda run: heartbeat_op("dead", run.lease), LeaseLost),
    ("complete-wrong-token", lambda run: complete_op("run", "wrong"), LeaseLost),
    ("complete-unknown", lambda run: complete_op("ghost", run.lease), JobNotFound),
    ("fail-wrong-token", lambda run: Fail(job_id="run", lease="wrong", error="e"), LeaseLost),
    ("fail-unknown", lambda run: Fail(job_id="ghost", lease=run.lease, error="e"), JobNotFound),
    ("requeue-pending", lambda run: requeue_op(["pend"]), ValidationError),
    ("requeue-mixed-unknown", lambda run: requeue_op(["run", "dead", "ghost"]), JobNotFound),
    ("purge-mixed-unknown", lambda run: purge_op(["pend", "run", "dead", "ghost"]), JobNotFound),
    ("claim-empty-queue", lambda run: claim_op("w", ["empty"], policy=Policy()), None),
    ("purge-status-no-match", lambda run: purge_op(queue="empty", status="dead"), None),
    ("push-known-ids", lambda run: push_op("q", [0, 0, 0], policy=Policy(), ids=["run", "pend", "dead"]), None),
    ("expire-nothing-due", lambda run: Expire(), None),
]


@pytest.mark.parametrize(("name", "make_op", "error"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_or_empty_op_leaves_state_clean_and_bytes_unchanged(
    name: str, make_op: Any, error: type[Exception] | None
) -> None:
    state, run = _populated()
    before = snapshot(state)
    jobs_before = dict(state.jobs)
    dead_before = dict(state.dead)

    [result] = transitions.apply_batch(state, [make_op(run)], at(1))

    if error is None:
        assert not isinstance(result, Exception)
    else:
        assert isinstance(result, error)
        assert isinstance(result, QueueError)
    assert state.dirty is False
    assert snapshot(state) == before
    assert state.jobs == jobs_before
    assert state.dead == dead_before


def test_refused_op_in_a_batch_does_not_undo_the_good_ops_around_it() -> None:
    state, run = _populated()

    results = transitions.apply_batch(
        state, [complete_op("pend", "bad"), complete_op("run", run.lease), requeue_op(["pend"])], at(1)
    )

    assert [type(r) for r in results] == [LeaseLost, type(None), ValidationError]
    assert "run" not in state.jobs
    assert state.dirty is True
