"""A purge by ids removes jobs pending inside segment objects (format 2).

Before, a job sealed into a segment could not be purged by id: an
all-or-nothing purge answered ``job_not_found`` for a job that was pending,
and the dashboard's conditional purge left it alone. The leader now writes
each segment holding some of the ids again without them, and swaps the
references in the commit that removes the rest (``Broker._purge_by_ids``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from engine import Broker, JobNotFound, MemoryStore, Policy, StoreError, StoreUnavailable, ValidationError
from engine.document import QueueState
from engine.errors import SegmentUnreadable
from engine.idindex import index_key
from engine.lanes import LaneKeeper
from engine.model import utc_now
from engine.ops import Excision, Purge, Tick, purge_op
from engine.parsing import parse_document
from engine.segments import SegmentRef
from engine.stores import ObjectStore, open_store
from engine.transitions import apply
from tests.engine.test_segments import TENS, document, drain, leader, push, segments
from tests.helpers import stored, wait_for


def sealed(make_broker: Callable[..., Broker], n: int = 100, policy: Policy = TENS) -> tuple[Broker, list[str]]:
    """A leader whose queue q holds ``n`` jobs, all but its front of 20 in segments of 10."""
    broker = leader(make_broker, open_store("memory://"), policy)
    ids = push(broker, "q", n)

    def settled() -> bool:
        doc = document(broker.store)
        keeper = broker._keeper
        if len(doc["jobs"]) == 20 and keeper is not None and not keeper._busy:
            return True
        broker.execute(Tick())
        return False

    wait_for(settled, what="the tail sealed")
    return broker, ids


def current(broker: Broker) -> QueueState:
    """The stored document, parsed."""
    return parse_document("queue.json", stored(broker.store), policy=broker.policy)


def refs(store: ObjectStore) -> list[dict[str, Any]]:
    return document(store).get("lanes", {}).get("q", {}).get("segments", [])  # type: ignore[no-any-return]


def holder(store: ObjectStore, job_id: str) -> str:
    """The key of the referenced segment that holds ``job_id`` (read from the objects)."""
    for ref in refs(store):
        blob = store.get(ref["key"])
        assert blob is not None
        if job_id in {job["id"] for job in orjson.loads(blob.data)["jobs"][ref["consumed"]:]}:
            return ref["key"]  # type: ignore[no-any-return]
    raise AssertionError(f"{job_id} is in no segment")


def test_a_purge_by_ids_removes_jobs_from_inside_their_segments_in_one_commit(
    make_broker: Callable[..., Broker],
) -> None:
    broker, ids = sealed(make_broker)
    store = broker.store
    before = {ref["key"]: ref for ref in refs(store)}
    first_before = refs(store)[0]
    # One job in the document; the first job of the first segment; one from the
    # middle of another; and every job of a third segment (its reference goes).
    gone = [ids[3], ids[20], ids[45], *ids[60:70]]
    touched = {holder(store, job_id) for job_id in gone[1:]}
    assert len(touched) == 3

    assert sorted(broker.execute(purge_op(gone))) == sorted(gone)

    doc = current(broker)
    assert doc.pending("q") == 100 - len(gone)
    assert doc.queues["q"].purged == len(gone)
    after = {ref.key: ref for ref in doc.lanes["q"]}
    assert not touched & after.keys()  # each rewritten or dropped, never changed in place
    assert len(after) == len(before) - 1  # the emptied one went
    assert all(ref.epoch == doc.broker.epoch for key, ref in after.items() if key not in before)
    first = doc.lanes["q"][0]
    # The first segment lost its first job: its next one is the queue's frontier now.
    assert (first.front, first.total, first.consumed) == (first_before["front"] + 1, 9, 0)
    # Every referenced segment has its id index; the old objects go after the grace.
    wait_for(lambda: sorted(segments(store)) == sorted(after), what="the old segments deleted")
    assert all(store.get(index_key("queue.json", key)) is not None for key in after)

    # FIFO for the rest (I7), and a retried push of a purged id adds nothing.
    assert drain(broker, "q", expect=100 - len(gone)) == [i for i in ids if i not in gone]


def test_a_purge_that_empties_one_segment_and_cuts_a_later_one_swaps_the_right_references(
    make_broker: Callable[..., Broker],
) -> None:
    """The dropped reference comes first: the later one's place moves down by one."""
    broker, ids = sealed(make_broker)
    gone = [*ids[30:40], ids[45], ids[71]]
    assert len({holder(broker.store, job_id) for job_id in gone}) == 3

    assert sorted(broker.execute(purge_op(gone))) == sorted(gone)

    state = current(broker)
    assert state.pending("q") == 100 - len(gone)
    left = [job_id for ref in state.lanes["q"] for job_id in jobs_in(broker.store, ref)]
    assert left == [i for i in ids[20:] if i not in gone]  # each segment's jobs, in FIFO order


def jobs_in(store: ObjectStore, ref: SegmentRef) -> list[str]:
    blob = store.get(ref.key)
    assert blob is not None
    return [job["id"] for job in orjson.loads(blob.data)["jobs"][ref.consumed:]]


def test_a_conditional_purge_takes_the_jobs_it_finds_in_segments_and_skips_the_rest(
    make_broker: Callable[..., Broker],
) -> None:
    broker, ids = sealed(make_broker)
    asked = [ids[2], ids[55], "never-pushed", ids[90]]

    removed = broker.execute(purge_op(asked, expect=["pending"] * len(asked)))

    assert sorted(removed) == sorted([ids[2], ids[55], ids[90]])
    assert current(broker).pending("q") == 97


def test_an_all_or_nothing_purge_with_an_unknown_id_changes_nothing_and_leaves_no_object(
    make_broker: Callable[..., Broker],
) -> None:
    broker, ids = sealed(make_broker)
    store = broker.store
    before, keys = refs(store), sorted(segments(store))

    with pytest.raises(JobNotFound):
        broker.execute(purge_op([ids[50], "never-pushed"]))

    assert refs(store) == before and document(store)["queues"]["q"]["purged"] == 0
    assert sorted(segments(store)) == keys  # the rewritten segment was deleted: nothing names it
    assert current(broker).pending("q") == 100


def test_a_purge_whose_segment_cannot_be_read_is_refused_and_changes_nothing(
    make_broker: Callable[..., Broker],
) -> None:
    broker, ids = sealed(make_broker)
    store = broker.store
    key = holder(store, ids[75])
    keeper = broker._keeper
    assert keeper is not None
    keeper.lookup.forget()  # as a leader that has not read it yet
    blob = store.get(key)
    assert blob is not None
    store.delete(key)
    store.put(key, blob.data[:-20] + b"x" * 20)  # altered: its size stands, its digest does not
    before = refs(store)

    with pytest.raises(SegmentUnreadable) as refused:
        broker.execute(purge_op([ids[75]]))

    assert refused.value.key == key
    assert refs(store) == before and current(broker).pending("q") == 100


def test_a_segment_that_moved_on_refuses_the_excision_and_the_purge_looks_again(
    make_broker: Callable[..., Broker], monkeypatch: pytest.MonkeyPatch,
) -> None:
    broker, ids = sealed(make_broker)
    store = broker.store
    keeper = broker._keeper
    assert keeper is not None
    made: list[Excision] = []
    real = LaneKeeper.excise

    def stale_first(self: LaneKeeper, job_ids: Any, found_in: Any, **kwargs: Any) -> tuple[list[Excision], list[str]]:
        excisions, missing = real(self, job_ids, found_in, **kwargs)
        made.extend(excisions)
        if len(made) == 1:  # the first time, as if a refill took a job from it meanwhile
            excisions = [excisions[0]._replace(consumed=excisions[0].consumed + 1)]
        return excisions, missing

    monkeypatch.setattr(LaneKeeper, "excise", stale_first)

    assert broker.execute(purge_op([ids[44]])) == [ids[44]]

    assert len(made) == 2  # refused once, looked again
    stale = made[0].ref
    assert stale is not None and stale.key not in segments(store)  # the refused one's object went at once
    assert made[1].ref is not None and made[1].ref.key in {ref["key"] for ref in refs(store)}
    assert current(broker).pending("q") == 99


def test_the_transition_refuses_a_stale_excision_without_changing_anything(
    make_broker: Callable[..., Broker],
) -> None:
    broker, ids = sealed(make_broker)
    state = current(broker)
    first = state.lanes["q"][0]
    stale = Excision(queue="q", key=first.key, consumed=first.consumed + 1, ref=None, jobs=())
    before = (list(state.lanes["q"]), dict(state.jobs), state.queues["q"].purged)

    with pytest.raises(ValidationError):
        apply(state, Purge(job_ids=(ids[0],), excisions=(stale,)), utc_now())

    assert (list(state.lanes["q"]), dict(state.jobs), state.queues["q"].purged) == before
    # And with seek, ids that may be in a segment refuse it, naming them all.
    with pytest.raises(JobNotFound) as sought:
        apply(state, Purge(job_ids=(ids[0], ids[30], ids[31]), seek=True), utc_now())
    assert getattr(sought.value, "job_ids", ()) == (ids[30], ids[31])
    assert (list(state.lanes["q"]), dict(state.jobs), state.queues["q"].purged) == before


class FailingSegmentWrites(MemoryStore):
    """A memory store whose segment and index writes fail while ``failing`` is set
    (after the request reached the store: the object may exist, as on a timeout)."""

    failing = False

    def put(self, key: str, data: bytes, **kwargs: Any) -> str:
        etag = super().put(key, data, **kwargs)
        if self.failing and (".seg/" in key or ".idx/" in key):
            raise StoreUnavailable(f"{key}: the reply was lost")
        return etag


def test_a_purge_whose_rewritten_segment_cannot_be_written_changes_nothing_and_leaves_no_object(
    make_broker: Callable[..., Broker],
) -> None:
    store = FailingSegmentWrites()
    broker = leader(make_broker, store, TENS)
    ids = push(broker, "q", 100)
    wait_for(lambda: len(document(store)["jobs"]) == 20 and broker._keeper is not None
             and not broker._keeper._busy, what="the tail sealed")
    before, objects = refs(store), sorted(segments(store))
    store.failing = True

    with pytest.raises(StoreError):
        broker.execute(purge_op([ids[3], ids[64]]))

    assert refs(store) == before and current(broker).pending("q") == 100  # not even the job in the document
    assert sorted(segments(store)) == objects  # the object that landed despite the error was deleted
    store.failing = False
    assert sorted(broker.execute(purge_op([ids[3], ids[64]]))) == sorted([ids[3], ids[64]])
