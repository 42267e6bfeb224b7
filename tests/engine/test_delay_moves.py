"""The delayed-lane transitions (``engine.delaymoves``) and format 3's
encoding and parsing, as pure functions of a QueueState with made-up
references: what a SealDelayed or RefillDelayed refuses, changing nothing,
and what a round trip through the document keeps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson
import pytest

from engine import DocumentError, Policy, ValidationError, empty_state
from engine.document import QueueState
from engine.ops import RefillDelayed, SealDelayed, claim_op, fail_op, push_op
from engine.parsing import parse_document
from engine.segments import DelayedRef
from engine.transitions import apply, apply_batch

POLICY = Policy(segment_jobs=10, head_jobs=20, refill_below=10, delayed_horizon_seconds=60)
NOW = datetime(2026, 1, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def delayed(n: int = 30) -> tuple[QueueState, list[str]]:
    """Queue q in format 2 with ``n`` jobs due in an hour."""
    state = empty_state(policy=POLICY)
    apply_batch(state, [], NOW)
    op = push_op("q", list(range(n)), ids=[f"d{i:02d}" for i in range(n)], policy=POLICY, delay_seconds=3600)
    ids: list[str] = apply(state, op, NOW)
    return state, ids


def seal_of(state: QueueState, ids: list[str], key: str = "queue.json.seg/q/delayed/e1-p0-aa-kbb.json") -> SealDelayed:
    jobs = tuple((job_id, state.pos[job_id]) for job_id in ids)
    due = [state.jobs[job_id].not_before for job_id in ids]
    assert all(d is not None for d in due)
    ref = DelayedRef(key=key, total=len(ids), size=10, sha256="x", epoch=1, sealed_at=NOW,
                     first_due=min(due), last_due=max(due),  # type: ignore[type-var]
                     min_pos=min(p for _, p in jobs), max_pos=max(p for _, p in jobs))
    return SealDelayed(queue="q", ref=ref, jobs=jobs, parts=tuple(state.encoded_job(i) for i in ids))


def encoded(state: QueueState) -> bytes:
    return b"".join(state.encode(seq=state.seq + 1, writer="w", now=NOW))


def test_a_delayed_seal_moves_the_jobs_out_and_the_document_round_trips_as_format_3() -> None:
    state, ids = delayed()
    op = seal_of(state, ids[10:])
    assert apply(state, op, NOW) == 20
    assert state.format == 3 and len(state.jobs) == 10
    assert state.pending("q") == 30 and state.delayed_away("q") == 20
    assert all(job_id in state.sealed for job_id in ids[10:])  # a retried push is answered
    assert state.next_due() == {"q": NOW + HOUR}  # the index holds only what is here
    assert state.delayed_entries() == {"q": 10} and len(state.delayed_in_order("q")) == 10  # tidied

    data = encoded(state)
    assert orjson.loads(data)["lanes"]["q"]["delayed"][0]["key"] == op.ref.key
    again = parse_document("queue.json", data, policy=POLICY)
    assert again.format == 3 and again.delays == {"q": [op.ref]}
    assert again.pending("q") == 30 and again.next_pos == state.next_pos


def test_a_delayed_seal_of_a_job_that_changed_is_refused_and_changes_nothing() -> None:
    state, ids = delayed()
    op = seal_of(state, ids[10:])
    # The jobs were claimed once due (another clock), failed, and wait for their
    # retry: same ids, other pos and other not_before.
    for job in apply(state, claim_op("w", ["q"], policy=POLICY, max_jobs=30), NOW + 2 * HOUR):
        apply(state, fail_op(job.id, job.lease, error="boom", retry_in_seconds=None, policy=POLICY), NOW + 2 * HOUR)
    assert all(state.jobs[i].status == "pending" and state.jobs[i].not_before for i in ids)
    before = encoded(state)
    with pytest.raises(ValidationError, match=ids[10]):
        apply(state, op, NOW)
    assert encoded(state) == before and not state.delays


@pytest.mark.parametrize("change", ["count", "positions", "due", "twice"])
def test_a_delayed_seal_whose_reference_does_not_describe_its_jobs_is_refused(change: str) -> None:
    state, ids = delayed()
    op = seal_of(state, ids[10:])
    if change == "count":
        op = SealDelayed(queue="q", ref=op.ref._replace(total=19), jobs=op.jobs, parts=op.parts)
    elif change == "positions":
        op = SealDelayed(queue="q", ref=op.ref._replace(min_pos=op.ref.min_pos + 1), jobs=op.jobs, parts=op.parts)
    elif change == "due":
        op = SealDelayed(queue="q", ref=op.ref._replace(last_due=NOW), jobs=op.jobs, parts=op.parts)
    else:
        apply(state, seal_of(state, ids[:10], key=op.ref.key), NOW)
    before = encoded(state)
    with pytest.raises(ValidationError):
        apply(state, op, NOW)
    assert encoded(state) == before


def test_a_delayed_refill_puts_every_job_back_with_its_pos_and_due_time() -> None:
    state, ids = delayed()
    kept = {job_id: (state.jobs[job_id], state.pos[job_id]) for job_id in ids[10:]}
    op = seal_of(state, ids[10:])
    apply(state, op, NOW)

    assert apply(state, RefillDelayed(queue="q", key=op.ref.key, jobs=tuple(kept.values())), NOW) == 20
    assert not state.delays and state.dropped_segments == [op.ref.key]
    assert {job_id: (state.jobs[job_id], state.pos[job_id]) for job_id in ids[10:]} == kept
    # Due in an hour, claimable then, in pos order.
    assert apply(state, claim_op("w", ["q"], policy=POLICY, max_jobs=50), NOW) == []
    claimed = apply(state, claim_op("w", ["q"], policy=POLICY, max_jobs=50), NOW + HOUR)
    assert [job.id for job in claimed] == ids


def test_a_delayed_refill_of_a_reference_that_went_is_refused() -> None:
    state, ids = delayed()
    jobs = tuple((state.jobs[i], state.pos[i]) for i in ids[10:])
    op = seal_of(state, ids[10:])
    apply(state, op, NOW)
    refill = RefillDelayed(queue="q", key=op.ref.key, jobs=jobs)
    apply(state, refill, NOW)
    before = encoded(state)
    with pytest.raises(ValidationError, match="no longer references"):
        apply(state, refill, NOW)
    with pytest.raises(ValidationError, match="holds 20 jobs"):
        state2, _ = delayed()
        apply(state2, seal_of(state2, ids[10:]), NOW)
        apply(state2, RefillDelayed(queue="q", key=op.ref.key, jobs=jobs[:5]), NOW)
    assert encoded(state) == before


def test_a_delayed_job_whose_id_was_pushed_again_comes_back_as_purged() -> None:
    state, ids = delayed()
    jobs = tuple((state.jobs[i], state.pos[i]) for i in ids[10:])
    op = seal_of(state, ids[10:])
    apply(state, op, NOW)
    # The id left the sealed window and was pushed again: that job stays, this copy goes.
    state.sealed.prune(NOW + 2 * HOUR, max_ids=0, max_seconds=0)
    apply(state, push_op("q", ["again"], ids=[ids[12]], policy=POLICY), NOW)
    assert apply(state, RefillDelayed(queue="q", key=op.ref.key, jobs=jobs), NOW) == 19
    assert state.jobs[ids[12]].payload == b'"again"'
    assert state.queues["q"].purged == 1


@pytest.mark.parametrize(("lane", "problem"), [
    ({"segments": [], "delayed": [{"key": "k"}]}, "total"),
    ({"segments": [], "delayed": "nope"}, "delayed"),
])
def test_a_document_with_a_malformed_delayed_reference_is_refused(lane: dict[str, object], problem: str) -> None:
    state, ids = delayed()
    apply(state, seal_of(state, ids[10:]), NOW)
    doc = orjson.loads(encoded(state))
    doc["lanes"]["q"] = lane
    with pytest.raises(DocumentError, match=problem):
        parse_document("queue.json", orjson.dumps(doc), policy=POLICY)


def test_a_format_2_document_naming_delayed_segments_is_refused() -> None:
    state, ids = delayed()
    apply(state, seal_of(state, ids[10:]), NOW)
    doc = orjson.loads(encoded(state))
    doc["format"] = 2
    with pytest.raises(DocumentError, match="delayed segments need format 3"):
        parse_document("queue.json", orjson.dumps(doc), policy=POLICY)


def test_delayed_references_out_of_due_order_are_refused() -> None:
    state, ids = delayed()
    apply(state, seal_of(state, ids[10:20], key="queue.json.seg/q/delayed/a.json"), NOW)
    apply(state, seal_of(state, ids[20:], key="queue.json.seg/q/delayed/b.json"), NOW)
    doc = orjson.loads(encoded(state))
    doc["lanes"]["q"]["delayed"].reverse()
    with pytest.raises(DocumentError, match="due order"):
        parse_document("queue.json", orjson.dumps(doc), policy=POLICY)


def test_a_seal_plan_found_fruitless_counts_growth_from_the_lowest_document_since() -> None:
    """A queue whose document held many delayed jobs (none sealable into the
    FIFO lane) memoizes a fruitless seal plan at that height; once they left
    (here: purged; in the benchmark, sealed into delayed segments), ready
    pushes past the front and a seal share must be sealed, not held back
    until the document is as full again."""
    from engine.lanes import LaneKeeper
    from engine.lanetasks import Shares
    from engine.ops import purge_op
    from engine.stores import MemoryStore

    policy = Policy(segment_jobs=10, head_jobs=20, refill_below=10)
    state = empty_state(policy=policy)
    apply_batch(state, [], NOW)
    apply(state, push_op("q", list(range(100)), policy=policy, delay_seconds=3600), NOW)
    keeper = LaneKeeper(MemoryStore(), key="queue.json", policy=policy, execute=lambda op: None, epoch=1,
                        clock=lambda: NOW, grace_seconds=0, collect_seconds=3600, retry_seconds=0)
    shares = Shares.of(policy, 1)
    assert keeper._seal_task(state, "q", shares) is None  # all delayed: fruitless, at 100 jobs here

    apply(state, purge_op(queue="q", status="pending"), NOW)
    assert keeper._seal_task(state, "q", shares) is None  # the version without them lands: nothing to seal
    apply(state, push_op("q", list(range(40)), policy=policy), NOW)
    task = keeper._seal_task(state, "q", shares)
    assert task is not None and len(task.jobs) == 20  # the tail past the front of 20


def test_a_delayed_refill_brings_back_the_first_jobs_and_swaps_in_the_rest_in_one_commit() -> None:
    state, ids = delayed()
    jobs = tuple((state.jobs[i], state.pos[i]) for i in ids[10:])
    op = seal_of(state, ids[10:])
    apply(state, op, NOW)
    rest = op.ref._replace(key="queue.json.seg/q/delayed/e1-p15-cc-kbb.json", total=15,
                           min_pos=jobs[5][1], max_pos=jobs[-1][1])
    before = encoded(state)
    # Split in two, as a refill of a due rest writes it: the same key twice is refused.
    # (Due at the same time, they are in key order: a leader's keys name their first pos.)
    first = rest._replace(total=5, max_pos=jobs[9][1], last_due=jobs[9][0].not_before)
    second = rest._replace(key="queue.json.seg/q/delayed/e1-p20-dd-kbb.json", total=10, min_pos=jobs[10][1],
                           first_due=jobs[10][0].not_before)
    for bad in ((rest._replace(total=14),), (rest._replace(min_pos=op.ref.min_pos - 1),),
                (rest._replace(key=op.ref.key),), (first, first._replace(total=10)), (first,)):
        with pytest.raises(ValidationError):
            apply(state, RefillDelayed(queue="q", key=op.ref.key, jobs=jobs[:5], rests=bad), NOW)
        assert encoded(state) == before

    state2 = parse_document("queue.json", before, policy=state.policy)
    assert apply(state2, RefillDelayed(queue="q", key=op.ref.key, jobs=jobs[:5], rests=(second, first)), NOW) == 5
    assert state2.delays == {"q": [first, second]} and state2.delayed_away("q") == 15

    assert apply(state, RefillDelayed(queue="q", key=op.ref.key, jobs=jobs[:5], rests=(rest,)), NOW) == 5
    assert state.delays == {"q": [rest]} and state.dropped_segments == [op.ref.key]
    assert all(job_id in state.jobs for job_id in ids[10:15]) and not any(job_id in state.jobs for job_id in ids[15:])
    assert state.pending("q") == 30 and state.delayed_away("q") == 15


def test_a_delayed_merge_swaps_the_references_for_one_that_describes_them_all() -> None:
    from engine.ops import MergeDelayed

    state, ids = delayed()
    one = seal_of(state, ids[10:20], key="queue.json.seg/q/delayed/a.json")
    apply(state, one, NOW)
    two = seal_of(state, ids[20:], key="queue.json.seg/q/delayed/b.json")
    apply(state, two, NOW)
    merged = one.ref._replace(key="queue.json.seg/q/delayed/m.json", total=20, min_pos=one.ref.min_pos,
                              max_pos=two.ref.max_pos, last_due=two.ref.last_due)
    keys = (one.ref.key, two.ref.key)
    before = encoded(state)
    for bad_keys, bad in (((one.ref.key,), merged), (keys, merged._replace(total=19)),
                          (keys, merged._replace(max_pos=merged.max_pos + 1)),
                          ((one.ref.key, "queue.json.seg/q/delayed/gone.json"), merged)):
        with pytest.raises(ValidationError):
            apply(state, MergeDelayed(queue="q", keys=bad_keys, ref=bad), NOW)
        assert encoded(state) == before

    assert apply(state, MergeDelayed(queue="q", keys=keys, ref=merged), NOW) == 2
    assert state.delays == {"q": [merged]} and sorted(state.dropped_segments) == sorted(keys)
    assert state.pending("q") == 30 and state.delayed_away("q") == 20


def test_one_delayed_merge_is_planned_at_a_time_for_the_whole_keeper() -> None:
    """Each merge waits for the keeper's one merge lock on a thread of its own:
    ten queues' merges planned at once held ten of its 16 threads while the
    seals of pushes waited for one."""
    from unittest import mock

    import engine.delayplans as delayplans
    from engine.lanes import LaneKeeper
    from engine.lanetasks import DelayedMergeTask, Shares
    from engine.stores import MemoryStore

    policy = Policy(segment_jobs=3, head_jobs=2, refill_below=1, merge_jobs=12, delayed_horizon_seconds=60)
    state = empty_state(policy=policy)
    apply_batch(state, [], NOW)
    for queue in ("a", "b"):
        for n in range(3):  # three small delayed segments a queue, due in an hour
            ids: list[str] = apply(state, push_op(queue, [1, 2], ids=[f"{queue}{n}x", f"{queue}{n}y"], policy=policy,
                                                  delay_seconds=3600 + n), NOW)
            op = seal_of(state, ids, key=f"queue.json.seg/{queue}/delayed/e1-p{n}-aa-kbb.json")
            apply(state, SealDelayed(queue=queue, ref=op.ref, jobs=op.jobs, parts=op.parts), NOW)
    keeper = LaneKeeper(MemoryStore(), key="queue.json", policy=policy, execute=lambda op: None, epoch=1,
                        clock=lambda: NOW, grace_seconds=0, collect_seconds=3600, retry_seconds=0)
    shares = Shares.of(policy, 2)
    with mock.patch.object(delayplans, "MAX_MERGE_RUN", 2):  # each queue's first two make a run
        merges = [t for t in keeper._delay_tasks(state, shares, set()) if isinstance(t, DelayedMergeTask)]
        assert len(merges) == 1 and len(merges[0].refs) == 2
        assert keeper._delay_tasks(state, shares, set(), merging=True) == []
