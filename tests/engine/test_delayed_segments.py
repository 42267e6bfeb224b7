"""Format 3: delayed jobs due beyond a horizon move to delayed segments and
come back before they are due (sealing, refilling, purging, failover, a
missing or altered object, the upgrade), through a real broker."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from engine import Broker, DocumentError, JobNotFound, MemoryStore, Policy, SegmentUnreadable, StoreUnavailable
from engine.delaysteps import read_delayed
from engine.document import QueueState
from engine.lanes import LaneKeeper
from engine.ops import ForgetQueue, Purge, claim_op, complete_op, fail_op, purge_op, push_op, requeue_op
from engine.parsing import parse_document
from engine.segments import delayed_segment_key, segment_prefix
from engine.stores import ObjectStore, open_store
from tests.helpers import wait_for

# A queue keeps 20 jobs in front, and 20 delayed jobs in the document at least:
# beyond them, those due more than a second ahead go to delayed segments.
DELAYS = Policy(segment_jobs=10, head_jobs=20, refill_below=10, delayed_horizon_seconds=1.0)


def document(store: ObjectStore) -> dict[str, Any]:
    blob = store.get("queue.json")
    assert blob is not None
    return orjson.loads(blob.data)  # type: ignore[no-any-return]


def delayed_refs(store: ObjectStore, queue: str = "q") -> list[dict[str, Any]]:
    return document(store).get("lanes", {}).get(queue, {}).get("delayed", [])  # type: ignore[no-any-return]


def delayed_objects(store: ObjectStore, queue: str = "q") -> list[str]:
    return store.list(f"{segment_prefix('queue.json')}{queue}/delayed/")


def leader(
    make_broker: Callable[..., Broker], store: ObjectStore, policy: Policy = DELAYS, url: str = "http://a",
) -> Broker:
    broker = make_broker(store, url, policy=policy)
    wait_for(lambda: broker.role == "leader", what="leading")
    return broker


def state_of(broker: Broker) -> QueueState:
    committer = broker.committer
    assert committer is not None and committer.state is not None
    return committer.state


def keeper_of(broker: Broker) -> LaneKeeper:
    keeper = broker._keeper
    assert keeper is not None
    return keeper


def push_delayed(broker: Broker, n: int, delay: float, *, start: int = 0, queue: str = "q") -> list[str]:
    ids = [f"{queue}-d{i:05d}" for i in range(start, start + n)]
    broker.execute(push_op(queue, [{"i": i} for i in range(start, start + n)], ids=ids, policy=broker.policy,
                           delay_seconds=delay))
    return ids


def due_times(store: ObjectStore) -> dict[str, datetime]:
    """Each delayed job's not_before, as the stored version holds it: in the
    document or in a delayed segment (read and verified as a refill does)."""
    blob = store.get("queue.json")
    assert blob is not None
    state = parse_document("queue.json", blob.data, policy=DELAYS)
    due = {job.id: job.not_before for job in state.jobs.values() if job.not_before is not None}
    for ref in state.delays.get("q", []):
        due.update({job.id: job.not_before for job, _ in read_delayed(store, "q", ref) if job.not_before})
    return due


def claim_all(
    broker: Broker, expect: int, due: dict[str, datetime], *, timeout: float = 30,
) -> dict[str, tuple[datetime, datetime]]:
    """Claim and complete until ``expect`` jobs came back: id -> (claimed at, not_before)."""
    seen: dict[str, tuple[datetime, datetime]] = {}

    def step() -> bool:
        for job in broker.execute(claim_op("w", ["q"], policy=broker.policy, max_jobs=50)):
            assert job.id not in seen, f"{job.id} claimed twice"
            seen[job.id] = (datetime.now(UTC), due[job.id])
            broker.execute(complete_op(job.id, job.lease))
        return len(seen) >= expect

    wait_for(step, timeout=timeout, what=f"{expect} jobs claimed")
    return seen


def test_delayed_jobs_due_later_leave_the_document_and_it_becomes_format_3(
    make_broker: Callable[..., Broker],
) -> None:
    store = open_store("memory://")
    broker = leader(make_broker, store)
    later = push_delayed(broker, 200, 3600)

    wait_for(lambda: sum(ref["total"] for ref in delayed_refs(store)) == 180, what="sealed past the share")
    doc = document(store)
    assert doc["format"] == 3
    assert len(doc["jobs"]) == 20  # the soonest-due share stays
    refs = delayed_refs(store)
    assert sorted(ref["key"] for ref in refs) == sorted(delayed_objects(store))
    assert all("/q/delayed/" in ref["key"] for ref in refs)
    state = state_of(broker)
    assert state.pending("q") == 200 and state.delayed_away("q") == 180

    # A job pushed now is claimed now: the delayed ones never block it (nor do their segments).
    broker.execute(push_op("q", [{"now": True}], ids=["q-now"], policy=broker.policy))
    claimed = broker.execute(claim_op("w", ["q"], policy=broker.policy, max_jobs=10))
    assert [job.id for job in claimed] == ["q-now"]
    # A retried push of a sealed delayed job is answered with its id, and adds nothing.
    assert broker.execute(push_op("q", [{"i": 0}], ids=[later[-1]], policy=broker.policy, delay_seconds=3600)) \
        == [later[-1]]
    assert state_of(broker).pending("q") == 200


def test_a_delayed_segment_comes_back_before_its_jobs_are_due_and_none_runs_early(
    make_broker: Callable[..., Broker],
) -> None:
    store = open_store("memory://")
    broker = leader(make_broker, store)
    ids = push_delayed(broker, 30, 1.0) + push_delayed(broker, 60, 4.0, start=30)
    wait_for(lambda: sum(ref["total"] for ref in delayed_refs(store)) >= 50, what="the later jobs sealed")
    # The keeper counts a seal once its commit has returned, just after the store shows it.
    wait_for(lambda: keeper_of(broker).sealed_delayed >= 1, what="the keeper counting its delayed seal")

    seen = claim_all(broker, 90, due_times(store))
    assert sorted(seen) == sorted(ids)
    for job_id, (claimed_at, due) in seen.items():
        assert claimed_at >= due, f"{job_id} ran {(due - claimed_at).total_seconds():.3f} s early"
    # Back in the document before they were due: each was claimed promptly once due.
    # (Generous: a loaded test machine. A refill that waited for the due time plus a
    # heartbeat-interval plan would still pass; one that never came back would not.)
    assert max((claimed_at - due).total_seconds() for claimed_at, due in seen.values()) < 3.0
    wait_for(lambda: not delayed_refs(store) and not delayed_objects(store), what="used delayed segments deleted")
    assert keeper_of(broker).refilled_delayed >= 1


def test_a_paced_redrive_sends_its_later_jobs_to_delayed_segments_and_brings_each_back_on_time(
    make_broker: Callable[..., Broker],
) -> None:
    """A redrive at a pace makes delayed jobs like any other: those due
    beyond the horizon leave the document, and each comes back for its turn,
    in the redrive's order, never early."""
    store = open_store("memory://")
    broker = leader(make_broker, store)
    ids = [f"q-dead{i:03d}" for i in range(60)]
    broker.execute(push_op("q", [{"i": i} for i in range(60)], ids=ids, policy=broker.policy, max_attempts=1))
    while claimed := broker.execute(claim_op("w", ["q"], policy=broker.policy, max_jobs=50)):
        for job in claimed:
            broker.execute(fail_op(job.id, job.lease, error="boom", retry_in_seconds=None, policy=broker.policy))
    order = list(reversed(ids))  # not the push order: the redrive's own

    moved = broker.execute(requeue_op(order, expect=["dead"] * 60, per_second=15))

    assert moved == order
    wait_for(lambda: sum(ref["total"] for ref in delayed_refs(store)) >= 20, what="the later jobs sealed")
    due = due_times(store)
    assert len(due) == 59 and order[0] not in due  # the first is due at once
    due[order[0]] = datetime.now(UTC)
    seen = claim_all(broker, 60, due)
    assert sorted(seen, key=lambda job_id: seen[job_id][0]) == order
    for job_id, (claimed_at, due_at) in seen.items():
        assert claimed_at >= due_at, f"{job_id} ran {(due_at - claimed_at).total_seconds():.3f} s early"


def test_purging_a_queue_drops_its_delayed_segments_in_one_commit(make_broker: Callable[..., Broker]) -> None:
    store = open_store("memory://")
    broker = leader(make_broker, store)
    push_delayed(broker, 120, 3600)
    wait_for(lambda: sum(ref["total"] for ref in delayed_refs(store)) == 100, what="sealed")
    seq = document(store)["seq"]

    broker.execute(Purge(queue="q", status="pending"))
    doc = document(store)
    assert doc["seq"] == seq + 1 and doc["jobs"] == [] and "q" not in doc["lanes"]
    assert doc["queues"]["q"]["purged"] == 120
    assert state_of(broker).pending("q") == 0
    wait_for(lambda: not delayed_objects(store), what="the dropped objects deleted after their grace")


def test_a_purge_bounded_by_pos_drops_only_delayed_segments_wholly_below_it(
    make_broker: Callable[..., Broker],
) -> None:
    store = open_store("memory://")
    broker = leader(make_broker, store)
    push_delayed(broker, 60, 3600)
    wait_for(lambda: sum(ref["total"] for ref in delayed_refs(store)) == 40, what="the first sealed")
    counted_at = document(store)["next_pos"]  # what an operator's dry run counted
    # Due sooner: the soonest-due share in the document is theirs now, and the
    # next delayed segment holds the 20 earlier jobs due last with 20 of these.
    push_delayed(broker, 40, 3000, start=60)
    wait_for(lambda: len(delayed_refs(store)) == 2, what="the second sealed")
    refs = delayed_refs(store)
    below = [ref["key"] for ref in refs if ref["max_pos"] < counted_at]
    straddling = [ref["key"] for ref in refs if ref["min_pos"] < counted_at <= ref["max_pos"]]
    assert len(below) == 1 and len(straddling) == 1

    outcome = broker.execute(purge_op(queue="q", status="pending", before_pos=counted_at))
    assert [ref["key"] for ref in delayed_refs(store)] == straddling  # holds later jobs too: kept whole
    assert outcome.kept_whole == straddling[0]
    assert outcome.in_segments == 40 and outcome.count == 40
    assert state_of(broker).pending("q") == 60


def test_a_queue_with_delayed_segments_cannot_be_forgotten(make_broker: Callable[..., Broker]) -> None:
    store = open_store("memory://")
    broker = leader(make_broker, store)
    push_delayed(broker, 60, 3600)
    wait_for(lambda: bool(delayed_refs(store)), what="sealed")
    broker.execute(purge_op(job_ids=[job["id"] for job in document(store)["jobs"]]))
    with pytest.raises(Exception, match="not empty: it holds 40 jobs"):
        broker.execute(ForgetQueue(queue="q"))


def test_a_new_leader_brings_the_delayed_segments_back_on_time(make_broker: Callable[..., Broker]) -> None:
    store = open_store("memory://")
    first = leader(make_broker, store)
    ids = push_delayed(first, 20, 0.5) + push_delayed(first, 60, 4.0, start=20)
    wait_for(lambda: sum(ref["total"] for ref in delayed_refs(store)) == 60, what="sealed")
    keys = {ref["key"] for ref in delayed_refs(store)}
    due = due_times(store)
    first.stop(timeout=10)

    second = leader(make_broker, store, url="http://b")
    assert set(delayed_objects(store)) >= keys  # referenced: never an orphan to the new collector
    seen = claim_all(second, 80, due)
    assert sorted(seen) == sorted(ids)
    assert all(claimed_at >= due for claimed_at, due in seen.values())


@pytest.mark.parametrize("damage", ["missing", "altered"])
def test_a_missing_or_altered_delayed_segment_is_reported_and_never_dropped(
    make_broker: Callable[..., Broker], damage: str,
) -> None:
    store = open_store("memory://")
    broker = leader(make_broker, store)
    push_delayed(broker, 60, 5.0)  # beyond two refill leads (2.1 s here): sealed
    wait_for(lambda: bool(delayed_refs(store)), what="sealed")
    ref = delayed_refs(store)[0]
    due = due_times(store)
    if damage == "missing":
        store.delete(ref["key"])
    else:
        store.put(ref["key"], b'{"format": 2, "kind": "delayed", "jobs": []}')

    # The 20 kept in the document, due with the segment's, fill the queue's
    # share: the segment is read once claims make room for it.
    claim_all(broker, 20, due)
    wait_for(lambda: "q" in broker.segment_problems, timeout=10, what="the problem reported")
    assert ref["key"] in broker.segment_problems["q"]
    time.sleep(0.3)  # several heartbeats: the reference stays, and so do its jobs' counts
    assert [r["key"] for r in delayed_refs(store)] == [ref["key"]]
    assert state_of(broker).pending("q") == 60 - 20
    if damage == "altered":
        altered = store.get(ref["key"])
        assert altered is not None and altered.data == b'{"format": 2, "kind": "delayed", "jobs": []}'


def test_a_node_that_reads_only_format_2_refuses_format_3_without_writing(
    make_broker: Callable[..., Broker], monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = open_store("memory://")
    new = leader(make_broker, store)
    push_delayed(new, 60, 3600)
    wait_for(lambda: bool(delayed_refs(store)), what="sealed")
    new.stop(timeout=10)
    blob = store.get("queue.json")
    assert blob is not None and orjson.loads(blob.data)["format"] == 3

    # A node of the release before reads formats 1 and 2 only.
    monkeypatch.setattr("engine.parsing.READABLE_FORMATS", (1, 2))
    with pytest.raises(DocumentError, match="unsupported format version 3"):
        parse_document("queue.json", blob.data, policy=Policy(segment_jobs=10))
    old = make_broker(store, "http://old", policy=Policy(segment_jobs=10))
    wait_for(lambda: old.document_problem is not None, what="the old node reports it")
    assert old.role == "standby"
    after = store.get("queue.json")
    assert after is not None and after.data == blob.data  # I6: nothing written


def test_format_2_stays_format_2_until_a_delayed_segment_is_referenced(make_broker: Callable[..., Broker]) -> None:
    store = open_store("memory://")
    broker = leader(make_broker, store)
    push_delayed(broker, 15, 3600)  # fewer than the share: nothing to seal
    wait_for(lambda: document(store)["format"] == 2, what="upgraded to format 2")
    time.sleep(0.3)
    assert document(store)["format"] == 2 and not delayed_refs(store)


def test_a_node_with_delayed_segments_off_still_brings_them_back(make_broker: Callable[..., Broker]) -> None:
    store = open_store("memory://")
    first = leader(make_broker, store)
    ids = push_delayed(first, 60, 3.0)
    wait_for(lambda: bool(delayed_refs(store)), what="sealed")
    due = due_times(store)
    first.stop(timeout=10)

    # Turned off (a horizon of 0): it seals no more, but what is sealed comes back.
    second = leader(make_broker, store, Policy(segment_jobs=10, head_jobs=20, refill_below=10), url="http://b")
    assert sorted(claim_all(second, 60, due)) == sorted(ids)
    assert document(store)["format"] == 3  # a format-3 document stays format 3


def test_a_job_in_a_delayed_segment_is_found_by_id_and_purged_by_id(make_broker: Callable[..., Broker]) -> None:
    store = open_store("memory://")
    broker = leader(make_broker, store)
    ids = push_delayed(broker, 60, 3600)
    wait_for(lambda: sum(ref["total"] for ref in delayed_refs(store)) == 40, what="sealed")
    (old,) = delayed_refs(store)
    sealed = ids[-1]
    keeper_of(broker).lookup.forget()  # as a new leader would: through the id index

    view = broker.get_job(sealed)
    assert view["id"] == sealed and view["status"] == "pending" and view["not_before"]
    assert view["segment"] == old["key"]

    # Purged by id: the segment is written again without it, in the purge's own commit.
    assert broker.execute(purge_op(job_ids=[sealed, ids[0]])) == [ids[0], sealed]
    (new,) = delayed_refs(store)
    assert new["key"] != old["key"] and new["total"] == 39 and "/q/delayed/" in new["key"]
    assert state_of(broker).pending("q") == 58
    with pytest.raises(JobNotFound):
        broker.get_job(sealed)
    assert sealed not in {job.id for job, _ in read_delayed(store, "q", state_of(broker).delays["q"][0])}
    wait_for(lambda: old["key"] not in delayed_objects(store), what="the old object deleted after its grace")


def test_a_new_leader_collects_an_older_leaders_orphan_delayed_segment_and_nothing_it_references(
    make_broker: Callable[..., Broker],
) -> None:
    store = open_store("memory://")
    first = leader(make_broker, store)
    ids = push_delayed(first, 60, 3.0)
    wait_for(lambda: bool(delayed_refs(store)), what="sealed")
    epoch = document(store)["broker"]["epoch"]
    due = due_times(store)
    first.stop(timeout=10)
    # What a leader leaves when it dies between writing a delayed segment and
    # committing the SealDelayed that names it:
    orphan = delayed_segment_key("queue.json", queue="q", epoch=epoch, first_pos=10**9)
    store.put(orphan, b"{}")
    referenced = {ref["key"] for ref in delayed_refs(store)}

    second = leader(make_broker, store, url="http://b")
    wait_for(lambda: orphan not in delayed_objects(store), timeout=20, what="the orphan collected")
    assert referenced <= set(delayed_objects(store)) or not delayed_refs(store)  # kept until refilled
    assert sorted(claim_all(second, 60, due)) == sorted(ids)


def test_a_large_delayed_segment_comes_back_a_front_share_at_a_time(make_broker: Callable[..., Broker]) -> None:
    """A refill brings back at most the queue's front share (20 here) and
    writes the others to a new delayed segment in its place, in the same
    commit: a delayed segment of 16,384 jobs coming back whole would be a
    commit of several megabytes."""
    store = open_store("memory://")
    broker = leader(make_broker, store)
    ids = push_delayed(broker, 100, 4.0)
    wait_for(lambda: [ref["total"] for ref in delayed_refs(store)] == [80], what="sealed in one delayed segment")
    due = due_times(store)
    seen = claim_all(broker, 100, due)
    assert sorted(seen) == sorted(ids) and all(claimed_at >= when for claimed_at, when in seen.values())
    assert keeper_of(broker).refilled_delayed == 4  # 80 jobs, 20 a refill
    wait_for(lambda: not delayed_objects(store), what="every delayed object deleted once used")


def test_small_delayed_segments_are_merged_and_keep_every_job(make_broker: Callable[..., Broker]) -> None:
    """Seals under a trickle of pushes make small delayed segments; each
    reference costs every commit about 330 bytes, so adjacent small ones (in
    due order, none due soon) are merged into one, up to merge_jobs."""
    store = open_store("memory://")
    broker = leader(make_broker, store, Policy(segment_jobs=10, head_jobs=20, refill_below=10, merge_jobs=100,
                                               delayed_horizon_seconds=1))
    ids: list[str] = []
    for n in range(12):
        ids += push_delayed(broker, 12, 3600 + n, start=12 * n)
        if len(ids) - 20 >= 10:
            # A trickle: each push sealed before the next, so every seal is small. Pushed
            # faster than the keeper seals, a seal took two or three pushes (not small), and
            # a run of small ones could end the list, waiting to grow: no merge (1 run in 8).
            sealed = len(ids) - 20
            wait_for(lambda sealed=sealed: sum(ref["total"] for ref in delayed_refs(store)) == sealed,
                     what="the push sealed but the soonest-due share")
    wait_for(lambda: keeper_of(broker).merged_delayed >= 1, what="a merge of small delayed segments")
    wait_for(lambda: not keeper_of(broker)._delayed_busy, what="the keeper idle")
    refs = delayed_refs(store)
    assert len(refs) < keeper_of(broker).sealed_delayed  # fewer references than seals (none came due)

    def every_job_once() -> bool:  # in the document or in one delayed segment, read as one version has them
        try:
            return sorted(due_times(store)) == sorted(ids)
        except SegmentUnreadable:  # merged away (and deleted) since that version: read the next one
            return False

    wait_for(every_job_once, what="every job held once")
    assert state_of(broker).pending("q") == len(ids)
    wait_for(lambda: sorted(ref["key"] for ref in delayed_refs(store)) == sorted(delayed_objects(store)),
             what="the merged-away objects deleted after their grace")


def test_delayed_jobs_that_come_due_together_wait_in_their_segment_until_claims_make_room(
    make_broker: Callable[..., Broker],
) -> None:
    """A batch due at once (a newsletter scheduled for 9:00, a retry storm's
    backoff running out) comes back only as claims make room: the queue's
    due delayed jobs in the document stay within about two front shares,
    however many are due, as pending jobs stay within the front. Without the
    bound every landed version brought another share back, and a backlog due
    at once filled the document with all of it."""
    store = open_store("memory://")
    broker = leader(make_broker, store)
    ids = push_delayed(broker, 400, 3.0)
    wait_for(lambda: sum(ref["total"] for ref in delayed_refs(store)) >= 300, what="sealed")
    due = due_times(store)
    time.sleep(max(0.0, (max(due.values()) - datetime.now(UTC)).total_seconds()) + 3.0)  # all due, none claimed
    held = len(state_of(broker).jobs)
    assert held <= 2 * DELAYS.head_jobs + DELAYS.segment_jobs, f"{held} jobs back in the document"
    seen = claim_all(broker, DELAYS.head_jobs, due)
    # The next refill wrote the due rest as segments of a share: each later
    # one reads a share and writes nothing.
    wait_for(lambda: max(ref["total"] for ref in delayed_refs(store)) <= DELAYS.head_jobs, what="the rest split")
    seen |= claim_all(broker, 400 - len(seen), due)
    assert sorted(seen) == sorted(ids) and all(claimed_at >= when for claimed_at, when in seen.values())
    wait_for(lambda: not delayed_objects(store), what="every delayed object deleted once used")


def test_a_batch_pushed_due_within_the_horizon_leaves_the_document_when_it_is_large(
    make_broker: Callable[..., Broker],
) -> None:
    """The horizon spares jobs due soon a seal and a refill, but not a batch
    of them: past four front shares the queue's delayed jobs due beyond two
    refill leads are sealed too, and still come back on time."""
    store = open_store("memory://")
    broker = leader(make_broker, store, policy=replace(DELAYS, delayed_horizon_seconds=60.0))
    few = push_delayed(broker, 4 * DELAYS.head_jobs, 5.0)  # as many as four shares: kept
    time.sleep(0.3)  # heartbeats: nothing sealed
    assert not delayed_refs(store)
    ids = few + push_delayed(broker, 300, 5.0, start=len(few))
    wait_for(lambda: sum(ref["total"] for ref in delayed_refs(store)) >= 300, what="sealed within the horizon")
    assert sum(1 for job in document(store)["jobs"] if job.get("not_before")) <= 4 * DELAYS.head_jobs
    seen = claim_all(broker, len(ids), due_times(store))
    assert sorted(seen) == sorted(ids) and all(claimed_at >= when for claimed_at, when in seen.values())


class FailsOneDelayedWrite(MemoryStore):
    """A memory store whose ``nth`` write of a delayed segment (id indexes
    aside), counted from ``arm()``, fails before landing, as a timeout would."""

    def __init__(self, nth: int) -> None:
        super().__init__()
        self.nth, self.count, self.armed, self.failed = nth, 0, False, False

    def arm(self) -> None:
        self.armed = True

    def put(self, key: str, data: bytes, **kwargs: Any) -> str:
        if self.armed and key.startswith(segment_prefix("queue.json")) and "/delayed/" in key:
            self.count += 1
            if self.count == self.nth:
                self.failed = True
                raise StoreUnavailable("injected: put timed out before landing")
        return super().put(key, data, **kwargs)


def test_a_refill_whose_rest_fails_to_write_deletes_what_it_wrote_and_tries_again(
    make_broker: Callable[..., Broker],
) -> None:
    """A refill writes a due rest as several segments at once; when one
    write fails, the others are deleted (nothing names them) and the refill
    is tried again: every job comes back once, and no object is left."""
    store = FailsOneDelayedWrite(nth=3)
    broker = leader(make_broker, store)
    ids = push_delayed(broker, 200, 3.0)
    wait_for(lambda: sum(ref["total"] for ref in delayed_refs(store)) == 180, what="sealed")
    due = due_times(store)
    store.arm()
    time.sleep(max(0.0, (max(due.values()) - datetime.now(UTC)).total_seconds()) + 0.5)
    seen = claim_all(broker, 200, due)
    assert store.failed
    assert sorted(seen) == sorted(ids) and all(claimed_at >= when for claimed_at, when in seen.values())
    wait_for(lambda: not delayed_objects(store), what="every delayed object deleted, the failed refill's too")
