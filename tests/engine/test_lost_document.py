"""I10: a document that was seen is never re-created.

A node that read ``queue.json`` (or finds its creation marker) and then finds
it gone stops writing, refuses with DocumentMissing and says so, until an
operator re-initialises the store; then it resumes by itself. A fresh store
still starts by itself.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest

from engine import Broker, GroupCommitter, MemoryStore, ObjectStore
from engine.errors import DocumentMissing
from engine.lineage import InitRefused, initialise, marker_key, read_marker
from engine.ops import push_op
from engine.policy import Policy
from tests.helpers import KEY, wait_for

MARKER = marker_key(KEY)
POLICY = Policy()
BEAT = 0.05
TAKEOVER = 0.4


def seq(store: ObjectStore) -> int:
    blob = store.get(KEY)
    assert blob is not None
    return orjson.loads(blob.data)["seq"]  # type: ignore[no-any-return]


class CountingStore(MemoryStore):
    """Counts ETag checks, so a test can wait for a node's next polls."""

    def __init__(self) -> None:
        super().__init__()
        self.etag_checks = 0

    def etag(self, key: str) -> str | None:
        self.etag_checks += 1
        return super().etag(key)



def push(broker: Broker, payload: object) -> list[str]:
    return broker.execute(push_op("q", [payload], policy=POLICY))  # type: ignore[no-any-return]


# -- the committer -----------------------------------------------------------------------------


def test_creating_the_document_writes_its_marker_and_a_fresh_store_starts_by_itself() -> None:
    store = MemoryStore()
    with GroupCommitter(store) as committer:
        committer.push("q", ["a"])
    found = read_marker(store, KEY)
    assert found is not None and found[0].created_by == committer.writer_id
    assert store.list() == [KEY, MARKER]


def test_a_committer_that_read_the_document_refuses_once_it_is_gone() -> None:
    store = MemoryStore()
    with GroupCommitter(store) as committer:
        committer.push("q", ["a"])
        known = seq(store)
        store.delete(KEY)
        for _ in range(3):
            with pytest.raises(DocumentMissing) as caught:
                committer.push("q", ["b"])
            assert caught.value.code == "document_missing"
            assert store.get(KEY) is None  # no write re-created it
        assert committer.presence.missing is not None
        # The marker now records the seq the committer knew.
        found = read_marker(store, KEY)
        assert found is not None and found[0].seq_floor >= known
        # An operator re-initialises the store: the committer resumes, above the lost seq.
        initialise(store, KEY, policy=POLICY, writer="operator", force=True)
        committer.push("q", ["c"])
        assert seq(store) > known
        assert committer.presence.missing is None


def test_a_new_committer_on_a_store_whose_document_was_lost_refuses_to_start() -> None:
    store = MemoryStore()
    with GroupCommitter(store) as committer:
        committer.push("q", ["a"])
    store.delete(KEY)
    with pytest.raises(DocumentMissing, match="marker"):
        GroupCommitter(store).start()
    assert store.get(KEY) is None


def test_a_document_from_before_the_marker_gets_one_on_first_read() -> None:
    store = MemoryStore()
    with GroupCommitter(store) as committer:
        committer.push("q", ["a"])
    store.delete(MARKER)  # as a store written before markers existed
    with GroupCommitter(store) as committer:
        committer.push("q", ["b"])
    assert read_marker(store, KEY) is not None
    store.delete(KEY)
    with pytest.raises(DocumentMissing):
        GroupCommitter(store).start()


# -- initialise (what manage.py queueinit does) ------------------------------------------------


def test_initialise_creates_on_a_fresh_store_and_refuses_over_a_document_or_a_lost_one() -> None:
    store = MemoryStore()
    done = initialise(store, KEY, policy=POLICY, writer="operator")
    assert done.seq == 1 and done.previous is None
    with pytest.raises(InitRefused, match="exists"):
        initialise(store, KEY, policy=POLICY, writer="operator", force=True)
    store.delete(KEY)
    with pytest.raises(InitRefused, match="--force"):
        initialise(store, KEY, policy=POLICY, writer="operator")
    assert store.get(KEY) is None
    again = initialise(store, KEY, policy=POLICY, writer="operator", force=True)
    assert again.previous is not None and again.lineage != done.lineage


# -- the broker ---------------------------------------------------------------------------------


def test_a_leader_whose_document_is_deleted_stops_and_resumes_after_reinit(
    make_broker: Callable[..., Broker],
) -> None:
    store = CountingStore()
    a = make_broker(store, "http://a")
    wait_for(lambda: a.role == "leader")
    push(a, "x")
    wait_for(lambda: seq(store) >= 3)
    store.delete(KEY)
    # Within a heartbeat: the leader's commit finds the document gone and it steps down.
    wait_for(lambda: a.document_missing is not None and a.role == "standby")
    with pytest.raises(DocumentMissing):
        push(a, "y")
    checks = store.etag_checks
    wait_for(lambda: store.etag_checks >= checks + 10)  # many polls, and a takeover interval, later...
    assert store.get(KEY) is None  # ...nothing re-created it
    assert "missing" in (a.last_error or "")
    lost = read_marker(store, KEY)
    assert lost is not None and lost[0].seq_floor >= 3 and lost[0].epoch_floor >= 1
    done = initialise(store, KEY, policy=POLICY, writer="operator", force=True)
    wait_for(lambda: a.role == "leader")
    assert a.document_missing is None
    push(a, "z")
    assert seq(store) > done.seq > lost[0].seq_floor
    assert a.leader.epoch > lost[0].epoch_floor


@pytest.mark.slow
def test_a_standby_that_saw_the_document_does_not_take_over_a_deleted_one(
    make_broker: Callable[..., Broker],
) -> None:
    store = CountingStore()
    a = make_broker(store, "http://a")
    wait_for(lambda: a.role == "leader")
    b = make_broker(store, "http://b")
    wait_for(lambda: b.leader.id == a.id)
    a.stop(timeout=10)  # the leader is gone, and then so is the document
    store.delete(KEY)
    wait_for(lambda: b.document_missing is not None)
    checks = store.etag_checks
    wait_for(lambda: store.etag_checks >= checks + 3 * int(TAKEOVER / BEAT))  # three takeover intervals
    assert store.get(KEY) is None and b.role == "standby"
    with pytest.raises(DocumentMissing):
        push(b, "y")
    initialise(store, KEY, policy=POLICY, writer="operator", force=True)
    wait_for(lambda: b.role == "leader")
    push(b, "z")


@pytest.mark.slow
def test_a_node_started_on_a_store_with_a_lost_document_waits_for_an_operator(
    make_broker: Callable[..., Broker],
) -> None:
    store = CountingStore()
    with GroupCommitter(store) as committer:
        committer.push("q", ["a"])
    store.delete(KEY)
    a = make_broker(store, "http://a")
    wait_for(lambda: a.document_missing is not None)
    checks = store.etag_checks
    wait_for(lambda: store.etag_checks >= checks + 3 * int(TAKEOVER / BEAT))
    assert store.get(KEY) is None and a.role == "standby"
    initialise(store, KEY, policy=POLICY, writer="operator", force=True)
    wait_for(lambda: a.role == "leader")


def test_the_direct_client_does_not_re_create_a_lost_document_either() -> None:
    from engine import DirectClient

    store = MemoryStore()
    client = DirectClient(store)
    client.push("q", ["a"])
    assert read_marker(store, KEY) is not None
    store.delete(KEY)
    with pytest.raises(DocumentMissing):
        client.push("q", ["b"])
    with pytest.raises(DocumentMissing):
        DirectClient(store).push("q", ["c"])  # a new client learns it from the marker
    assert store.get(KEY) is None


class BlinkingStore(MemoryStore):
    """Reports the document absent to the next ``blinks`` reads, though it exists."""

    def __init__(self) -> None:
        super().__init__()
        self.blinks = 0

    def get(self, key: str):  # type: ignore[no-untyped-def]
        if key == KEY and self.blinks > 0:
            self.blinks -= 1
            return None
        return super().get(key)


def test_a_document_that_reads_as_absent_once_is_not_declared_lost() -> None:
    store = BlinkingStore()
    with GroupCommitter(store) as committer:
        committer.push("q", ["a"])
        store.put(KEY, store.get(KEY).data)  # type: ignore[union-attr]  # another writer: our next write must re-read
        store.blinks = 1
        committer.push("q", ["b"])  # the re-read blinks, the check after it does not: retried, not lost
        assert committer.presence.missing is None
    assert [j["payload"] for j in orjson.loads(store.get(KEY).data)["jobs"]] == ["a", "b"]  # type: ignore[union-attr]
