"""``Broker.get_job`` finds a pending job that sits in a segment object
(format 2), while its id is in the document's ``sealed`` window.

Before, ``GET /api/v1/jobs/<id>`` answered 404 for a job that was simply
pending in a segment: a client polling the job it had just pushed was told
it did not exist.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest

from engine import Broker, JobNotFound, MemoryStore, Policy
from engine.errors import SegmentUnreadable
from engine.ops import Tick, purge_op, push_op
from engine.parsing import parse_document
from engine.stores import open_store
from tests.helpers import stored, wait_for

POLICY = Policy(segment_jobs=10, head_jobs=20, refill_below=10)
IDS = [f"j{i:02d}" for i in range(40)]


def sealed_backlog(make_broker: Callable[..., Broker]) -> Broker:
    """A leader whose queue q holds 40 jobs: the first 20 in the document, the rest sealed."""
    broker = make_broker(open_store("memory://"), "http://a", policy=POLICY)
    wait_for(lambda: broker.role == "leader", what="leading")
    broker.execute(push_op("q", list(range(40)), ids=IDS, policy=POLICY))

    def sealed() -> bool:
        doc = orjson.loads(stored(broker.store))
        if {job["id"] for job in doc["jobs"]} == set(IDS[:20]):
            return True
        broker.execute(Tick())  # the keeper takes its next step as a commit lands
        return False

    wait_for(sealed, what="the tail sealed")
    # The document lands before the writer thread hands each Seal's outcome
    # to the keeper (which then keeps the segment's encoded jobs): wait for that too.
    keeper = broker._keeper
    assert keeper is not None
    wait_for(lambda: not keeper._busy, what="the seals' outcomes handled")
    return broker


def test_a_pending_job_in_a_segment_is_found_with_every_field_and_its_segment(
    make_broker: Callable[..., Broker],
) -> None:
    broker = sealed_backlog(make_broker)
    in_document = broker.get_job("j05")
    assert in_document["status"] == "pending" and "segment" not in in_document
    view = broker.get_job("j35")
    doc = orjson.loads(stored(broker.store))
    keys = {ref["key"] for ref in doc["lanes"]["q"]["segments"]}
    assert view["segment"] in keys
    assert (view["id"], view["status"], view["payload"], view["queue"]) == ("j35", "pending", 35, "q")
    # The same fields as a pending job in the document, nulls included.
    assert set(view) - {"segment"} == set(in_document)
    assert view["not_before"] is None and view["lease"] is None and view["history"] == []


def test_a_segment_the_leader_did_not_seal_is_read_from_the_store(make_broker: Callable[..., Broker]) -> None:
    broker = sealed_backlog(make_broker)
    keeper = broker._keeper
    assert keeper is not None
    keeper._held.drop_parts()  # as on a leader that took over: nothing held encoded
    store = broker.store
    assert isinstance(store, MemoryStore)
    reads = store.stats.reads
    assert broker.get_job("j25")["payload"] == 25
    # Two ranged reads (the job's entry in the id index, the job's bytes),
    # not the segment: the index itself was read once, as the tenure began.
    assert store.stats.reads - reads == 2
    reads = store.stats.reads
    assert broker.get_job("j25")["payload"] == 25  # polling it: kept
    assert store.stats.reads == reads
    # A second job in the same segment reads the segment whole and keeps it
    # (segments never change): then any job in it reads nothing more.
    assert broker.get_job("j24")["payload"] == 24
    assert store.stats.reads - reads == 1
    reads = store.stats.reads
    assert broker.get_job("j23")["payload"] == 23 and broker.get_job("j24")["payload"] == 24
    assert store.stats.reads == reads
    keeper.lookup.forget()
    keeper._held.drop_parts()
    # Within the bound only: with no read allowed, not found.
    state = parse_document("queue.json", stored(broker.store), policy=POLICY)
    refs = tuple(("q", ref) for ref in state.lanes["q"])
    assert keeper.lookup.find_pending("j25", refs, reads=0) is None
    assert keeper.lookup.find_pending("j25", refs, reads=len(refs)) is not None


def test_an_unknown_id_or_a_purged_sealed_job_is_not_found(make_broker: Callable[..., Broker]) -> None:
    broker = sealed_backlog(make_broker)
    with pytest.raises(JobNotFound):
        broker.get_job("no-such-job")
    broker.execute(purge_op(queue="q", status="pending"))
    with pytest.raises(JobNotFound):
        broker.get_job("j35")  # its id is still in the sealed window; its segment is gone


def test_a_damaged_segment_is_reported_naming_the_object_never_as_not_found(
    make_broker: Callable[..., Broker],
) -> None:
    broker = sealed_backlog(make_broker)
    keeper = broker._keeper
    assert keeper is not None
    keeper._held.drop_parts()
    key = orjson.loads(stored(broker.store))["lanes"]["q"]["segments"][-1]["key"]
    broker.store.put(key, b'{"format": 2, "kind": "pending", "jobs": []}')  # not the object the reference describes
    with pytest.raises(SegmentUnreadable, match=key):
        broker.get_job("j39")
