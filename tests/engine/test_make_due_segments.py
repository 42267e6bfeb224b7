"""Run now through a leader's broker, format 3: a delayed job waiting in a
delayed segment is written out of it and put back into the document, due,
at its place, in one commit (engine.duenow)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engine import Broker, JobNotFound, ValidationError
from engine.delaysteps import read_delayed
from engine.ops import claim_op, complete_op, make_due_op, push_op
from engine.stores import open_store
from tests.engine.test_delayed_segments import (
    delayed_objects,
    delayed_refs,
    document,
    keeper_of,
    leader,
    push_delayed,
    state_of,
)
from tests.helpers import wait_for


def claimed_ids(broker: Broker, max_jobs: int = 10) -> list[str]:
    jobs = broker.execute(claim_op("w", ["q"], policy=broker.policy, max_jobs=max_jobs))
    for job in jobs:
        broker.execute(complete_op(job.id, job.lease))
    return [job.id for job in jobs]


def test_a_job_in_a_delayed_segment_is_made_due_in_its_place_in_one_commit(
    make_broker: Callable[..., Broker],
) -> None:
    store = open_store("memory://")
    broker = leader(make_broker, store)
    ids = push_delayed(broker, 60, 3600)
    wait_for(lambda: sum(ref["total"] for ref in delayed_refs(store)) == 40, what="sealed")
    (old,) = delayed_refs(store)
    sealed, here = ids[-1], ids[0]
    assert {sealed, here} & {job["id"] for job in document(store)["jobs"]} == {here}
    broker.execute(push_op("q", [{"now": True}], ids=["q-now"], policy=broker.policy))
    keeper_of(broker).lookup.forget()  # as a new leader would: through the id index
    seq = document(store)["seq"]

    assert broker.execute(make_due_op([sealed, here])) == [sealed, here]

    doc = document(store)
    assert doc["seq"] == seq + 1  # one commit
    (new,) = delayed_refs(store)
    assert new["key"] != old["key"] and new["total"] == 39
    assert sealed not in {job.id for job, _ in read_delayed(store, "q", state_of(broker).delays["q"][0])}
    job = broker.get_job(sealed)
    assert job["status"] == "pending" and job["not_before"] is None and "segment" not in job
    assert state_of(broker).pending("q") == 61  # nothing lost, nothing twice
    # Each in its FIFO place: both were pushed before q-now.
    assert claimed_ids(broker) == [here, sealed, "q-now"]
    wait_for(lambda: old["key"] not in delayed_objects(store), what="the old object deleted after its grace")


def test_run_now_refuses_an_unknown_or_running_job_and_writes_nothing(make_broker: Callable[..., Broker]) -> None:
    store = open_store("memory://")
    broker = leader(make_broker, store)
    ids = push_delayed(broker, 60, 3600)
    wait_for(lambda: sum(ref["total"] for ref in delayed_refs(store)) == 40, what="sealed")
    before, objects = delayed_refs(store), delayed_objects(store)
    broker.execute(push_op("q", [{"now": True}], ids=["q-running"], policy=broker.policy))
    [running] = broker.execute(claim_op("w", ["q"], policy=broker.policy, max_jobs=1))
    assert running.id == "q-running"

    with pytest.raises(JobNotFound):
        broker.execute(make_due_op([ids[-1], "no-such-job"]))
    with pytest.raises(ValidationError, match="is running: only a pending job can be made due"):
        broker.execute(make_due_op([ids[-1], "q-running"]))

    assert delayed_refs(store) == before and delayed_objects(store) == objects  # nothing swapped, nothing left
    assert broker.get_job(ids[-1])["not_before"] is not None
    assert broker.get_job("q-running")["status"] == "running"


def test_run_now_of_a_job_already_due_in_a_fifo_segment_changes_nothing(make_broker: Callable[..., Broker]) -> None:
    store = open_store("memory://")
    broker = leader(make_broker, store)
    ids = [f"q-{i:03d}" for i in range(60)]
    broker.execute(push_op("q", [{"i": i} for i in range(60)], ids=ids, policy=broker.policy))
    wait_for(lambda: bool(document(store).get("lanes", {}).get("q", {}).get("segments")), what="sealed")
    in_segment = next(i for i in reversed(ids) if i not in document(store)["jobs"])
    objects = store.list("queue.json.seg/")
    assert broker.execute(make_due_op([in_segment])) == []
    assert broker.execute(make_due_op([in_segment], expect=["pending"])) == []
    assert store.list("queue.json.seg/") == objects  # no segment written again
    assert claimed_ids(broker, max_jobs=60)[0] == ids[0]
