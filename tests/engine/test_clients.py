"""Both clients, DirectClient (layer 1) and GroupCommitter (layer 2), behave
the same: same methods, same outcomes, same refusals that change nothing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest

from engine import (
    Blob,
    CommitterStopped,
    DirectClient,
    FailOutcome,
    FaultyStore,
    GroupCommitter,
    InvalidPayload,
    JobNotFound,
    LatencyStore,
    LeaseLost,
    MemoryStore,
    ObjectStore,
    PayloadTooLarge,
    Policy,
    QueueClient,
    StoreUnavailable,
    ValidationError,
    open_store,
)
from engine.backoff import READ_RETRIES
from engine.errors import CommitterNotRunning
from engine.ops import complete_op, fail_op, heartbeat_op
from engine.policy import DOCUMENT_KEY
from engine.stores import WrappedStore
from tests.helpers import KEY


@pytest.fixture(params=["direct", "group"])
def make_client(request: pytest.FixtureRequest) -> Iterator[Callable[..., QueueClient]]:
    made: list[GroupCommitter] = []

    def make(store: Any, **kwargs: Any) -> QueueClient:
        if request.param == "direct":
            return DirectClient(store, **kwargs)
        committer = GroupCommitter(store, **kwargs).start()
        made.append(committer)
        return committer

    yield make
    for committer in made:
        committer.stop()


def test_same_life_of_a_job(make_client: Callable[..., QueueClient]) -> None:
    client = make_client(MemoryStore(), policy=Policy(max_attempts=2, backoff_base_seconds=0))
    a, b = client.push("q", [{"n": 1}, {"n": 2}])
    [first] = client.claim("w", ["q"])
    assert first.id == a and first.attempt == 1
    client.heartbeat(first.id, first.lease)
    assert client.fail(first.id, first.lease, error="boom").status == "pending"
    [second] = client.claim("w", ["q"])
    assert second.id == b  # the retried job went to the back of the queue
    client.complete(second.id, second.lease)
    [again] = client.claim("w", ["q"])
    assert (again.id, again.attempt) == (a, 2)
    assert client.fail(again.id, again.lease, error="boom twice").status == "dead"
    doc = client.document()
    assert doc["jobs"] == [] and [d["id"] for d in doc["dead"]] == [a]
    assert doc["dead"][0]["error"] == "boom twice"
    assert client.requeue([a]) == [a]
    assert client.purge(queue="q", status="pending") == [a]
    assert doc["queues"]["q"]["pushed"] == 2


def test_a_push_repeated_with_its_ids_enqueues_nothing_more(make_client: Callable[..., QueueClient]) -> None:
    client = make_client(MemoryStore())
    assert client.push("q", [{"n": 1}, {"n": 2}], ids=["order-1", "order-2"]) == ["order-1", "order-2"]
    # A producer that crashed before recording the first answer pushes again.
    assert client.push("q", [{"n": 1}, {"n": 2}], ids=["order-1", "order-2"]) == ["order-1", "order-2"]
    [claimed] = client.claim("w", ["q"])
    client.complete(claimed.id, claimed.lease)
    assert client.push("q", [{"n": 1}], ids=["order-1"]) == ["order-1"]  # in the dedup window after it left
    assert [j["id"] for j in client.document()["jobs"]] == ["order-2"]
    assert client.document()["queues"]["q"]["pushed"] == 2
    with pytest.raises(ValidationError, match="ids and payloads differ in length"):
        client.push("q", [1, 2], ids=["only-one"])


def test_claim_accepts_a_long_poll_wait_and_answers_at_once(make_client: Callable[..., QueueClient]) -> None:
    # The QueueClient contract takes wait_seconds; in-process clients ignore it.
    client = make_client(MemoryStore())
    started = time.monotonic()
    assert client.claim("w", ["q"], wait_seconds=30) == []
    assert time.monotonic() - started < 10
    [job_id] = client.push("q", [1])
    [job] = client.claim("w", ["q"], wait_seconds=30)
    assert job.id == job_id

def _bad_inputs(client: QueueClient, job_id: str, lease: str) -> list[tuple[Callable[[], object], type]]:
    return [
        (lambda: client.push("q", [{1, 2}]), InvalidPayload),
        (lambda: client.push("q", [object()]), InvalidPayload),
        (lambda: client.push("q", [float("nan")]), InvalidPayload),
        (lambda: client.push("q", ["x" * 2000]), PayloadTooLarge),
        (lambda: client.push("no spaces allowed", [1]), ValidationError),
        (lambda: client.push("q", []), ValidationError),
        (lambda: client.claim("w", ["q"], max_jobs=0), ValidationError),
        (lambda: client.complete(job_id, "wrong-lease"), LeaseLost),
        (lambda: client.heartbeat(job_id, "wrong-lease"), LeaseLost),
        (lambda: client.fail(job_id, "wrong-lease", error="x"), LeaseLost),
        (lambda: client.complete("no-such-job", lease), JobNotFound),
        (lambda: client.requeue(["no-such-job"]), JobNotFound),
        (lambda: client.purge(["no-such-job"]), JobNotFound),
    ]


def test_bad_input_gets_a_clear_error_and_changes_nothing(make_client: Callable[..., QueueClient]) -> None:
    store = MemoryStore()
    client = make_client(store, policy=Policy(max_payload_bytes=1000))
    [job_id] = client.push("q", ["x"])
    [claimed] = client.claim("w", ["q"])
    before = store.get(KEY)
    assert before is not None
    for call, error in _bad_inputs(client, job_id, claimed.lease):
        with pytest.raises(error) as info:
            call()
        assert str(info.value)
        after = store.get(KEY)
        assert after is not None and after.data == before.data and after.etag == before.etag


def test_ambiguous_write_that_landed_is_not_applied_twice(make_client: Callable[..., QueueClient]) -> None:
    memory = MemoryStore()
    faulty = FaultyStore(memory)
    client = make_client(faulty)
    client.push("q", ["a"])
    faulty.inject("landed")
    client.push("q", ["b"])
    assert [j["payload"] for j in client.document()["jobs"]] == ["a", "b"]


def test_a_store_that_stays_down_gives_store_unavailable(make_client: Callable[..., QueueClient]) -> None:
    memory = MemoryStore()
    faulty = FaultyStore(memory)
    client = make_client(faulty, max_retries=2)
    client.push("q", ["a"])
    faulty.inject("lost", "lost", "lost", "lost")
    faulty.fail_gets = 0
    with pytest.raises(StoreUnavailable):
        client.push("q", ["b"])


def test_clients_work_against_s3_over_http(make_client: Callable[..., QueueClient], s3_url: str) -> None:
    store = open_store(s3_url)
    client = make_client(store)
    ids = client.push("q", [{"n": n} for n in range(5)])
    claimed = client.claim("w", ["q"], max_jobs=5)
    assert [c.id for c in claimed] == ids
    for job in claimed:
        client.complete(job.id, job.lease)
    blob = store.get(KEY)
    assert blob is not None and b'"completed":5' in blob.data
    store.close()


@pytest.mark.slow
def test_threads_sharing_one_direct_client_lose_nothing() -> None:
    """Threads share one DirectClient (and so its writer id): a thread must not
    take another thread's commit for its own lost write."""
    import threading

    # A little latency makes the threads' writes overlap and collide.
    client = DirectClient(LatencyStore(MemoryStore(), latency=0.002), backoff_seconds=0.001)
    acked: list[str] = []
    lock = threading.Lock()

    def pusher(n: int) -> None:
        for i in range(20):
            ids = client.push("q", [{"thread": n, "i": i}])
            with lock:
                acked.extend(ids)

    threads = [threading.Thread(target=pusher, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stored = {job["id"] for job in client.document()["jobs"]}
    assert len(acked) == 160 and set(acked) <= stored


def test_execute_many_answers_each_operation_in_one_commit(make_client: Callable[..., QueueClient]) -> None:
    store = MemoryStore()
    client = make_client(store, policy=Policy(max_attempts=2, backoff_base_seconds=0))
    client.push("q", [1, 2, 3])
    done, failed, stolen = client.claim("w", ["q"], max_jobs=3)
    writes = store.writes
    ops = [
        complete_op(done.id, done.lease),
        fail_op(failed.id, failed.lease, error="boom", retry_in_seconds=None, policy=client.policy),
        complete_op(stolen.id, "not-the-lease"),
        heartbeat_op(stolen.id, stolen.lease),
        complete_op("0" * 32, "x"),
    ]

    outcomes = client.execute_many(ops)

    assert store.writes == writes + 1  # all of them in one write
    assert outcomes[0] is None and outcomes[1] == FailOutcome(status="pending", not_before=outcomes[1].not_before)
    assert type(outcomes[2]) is LeaseLost and outcomes[2].job_id == stolen.id
    assert isinstance(outcomes[3], datetime)
    assert type(outcomes[4]) is JobNotFound
    assert {(j["id"], j["status"]) for j in client.document()["jobs"]} == {
        (failed.id, "pending"), (stolen.id, "running")}
    assert client.execute_many([]) == []


def test_execute_many_on_a_failing_store_fails_the_call_and_changes_nothing() -> None:
    store = FaultyStore(MemoryStore())
    client = DirectClient(store, max_retries=2, backoff_seconds=0, backoff_cap_seconds=0)
    [job_id] = client.push("q", [1])
    [job] = client.claim("w", ["q"])
    store.inject("lost", "lost", "lost")
    with pytest.raises(StoreUnavailable):
        client.execute_many([complete_op(job_id, job.lease)])
    assert client.get_job(job_id)["status"] == "running"


def test_a_committer_stopped_takes_none_of_a_batch() -> None:
    committer = GroupCommitter(MemoryStore())
    with pytest.raises(CommitterStopped):
        committer.execute_many([complete_op("a", "l")])


def test_aexecute_many_awaits_every_outcome_in_one_commit() -> None:
    store = MemoryStore()
    with GroupCommitter(store) as committer:
        committer.push("q", [1, 2])
        first, second = committer.claim("w", ["q"], max_jobs=2)
        writes = store.writes
        outcomes = asyncio.run(committer.aexecute_many(
            [complete_op(first.id, first.lease), complete_op(second.id, "stale")]))
        assert outcomes[0] is None and type(outcomes[1]) is LeaseLost
        assert store.writes == writes + 1


def test_the_default_execute_many_runs_each_operation_and_returns_its_error() -> None:
    class OneByOne(QueueClient):
        def __init__(self, inner: QueueClient) -> None:
            self.inner, self.policy, self.calls = inner, inner.policy, 0

        def execute(self, op: Any) -> Any:
            self.calls += 1
            return self.inner.execute(op)

        def document(self) -> dict[str, Any]:
            return self.inner.document()

    client = OneByOne(DirectClient(MemoryStore()))
    client.push("q", [1])
    [job] = client.claim("w", ["q"])
    calls = client.calls
    outcomes = client.execute_many([complete_op(job.id, "stale"), complete_op(job.id, job.lease)])
    assert type(outcomes[0]) is LeaseLost and outcomes[1] is None and client.calls == calls + 2


class StaleFirstRead(WrappedStore):
    """Answers the first read of the document as absent, as a read that
    raced its creation by another writer does; every later call is true."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.stale = True

    def get(self, key: str) -> Blob | None:
        if key == DOCUMENT_KEY and self.stale:
            self.stale = False
            return None
        return super().get(key)


def test_a_client_whose_read_raced_the_documents_creation_reads_again(
        make_client: Callable[..., QueueClient]) -> None:
    """A read of "absent" followed by a document that is there (another writer
    created it in between: test_threads_sharing_one_direct_client_lose_nothing
    hit it) is StoreUnavailable from the presence check; the client reads
    again instead of failing the call (a committer: instead of failing to start)."""
    inner = MemoryStore()
    DirectClient(inner).push("q", ["first"])  # created by another writer, with its marker
    client = make_client(StaleFirstRead(inner))
    [pushed] = client.push("q", ["second"])
    assert [job["id"] for job in client.document()["jobs"]][-1] == pushed
    assert len(client.document()["jobs"]) == 2


class Down(WrappedStore):
    """Every read of the document fails as an unreachable store's does."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.reads = 0

    def get(self, key: str) -> Blob | None:
        self.reads += 1
        raise StoreUnavailable("connection refused")


@pytest.mark.parametrize("max_retries", [0, 1000])
def test_a_direct_client_reports_a_store_that_stays_down_after_a_few_reads(max_retries: int) -> None:
    store = Down(MemoryStore())
    client = DirectClient(store, backoff_seconds=0.001, max_retries=max_retries)
    with pytest.raises(StoreUnavailable, match="connection refused"):
        client.push("q", ["x"])
    assert store.reads == (1 if max_retries == 0 else READ_RETRIES + 1)


def test_a_committer_on_a_store_that_stays_down_fails_to_start_after_a_few_reads() -> None:
    store = Down(MemoryStore())
    committer = GroupCommitter(store, retry_backoff_seconds=0.001)  # max_retries: its default
    with pytest.raises(StoreUnavailable, match="connection refused"):
        committer.start()
    assert store.reads == READ_RETRIES + 1
    with pytest.raises(CommitterNotRunning):
        committer.push("q", ["x"])
