"""A Seal names exactly the jobs its segment holds (``engine.ops.Seal``).

The lane keeper plans a seal from the committer's state when a write lands;
that state already holds the operations staged for the next write. If that
write then fails, they are applied again to a fresh read: a push applied
again keeps its ids and its ``pos`` but gets another ``enqueued_at``. A Seal
checked by ``(id, pos)`` alone would then replace the jobs in the document by
the segment's stale copies. With ``parts`` it is refused and changes nothing.

And a segment whose Seal was never submitted (its committer or keeper had
stopped) is deleted by the keeper that wrote it.

The Seal tests are pure transitions on a QueueState, with a made-up reference.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import orjson
import pytest

from engine import Broker, Policy, ValidationError, empty_state
from engine.document import QueueState
from engine.errors import StoreUnavailable
from engine.ops import Seal, push_op
from engine.parsing import parse_document
from engine.segments import SegmentRef, decode_segment, segment_prefix
from engine.stores import ObjectStore, open_store
from engine.stores.wrappers import FaultyStore
from engine.transitions import apply, apply_batch
from tests.helpers import wait_for

POLICY = Policy(segment_jobs=10, head_jobs=20, refill_below=10)
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def pushed(at: datetime) -> tuple[QueueState, list[str]]:
    """Queue q in format 2 with 30 jobs pushed at ``at`` (fixed ids, so a push applied again keeps them)."""
    state = empty_state(policy=POLICY)
    apply_batch(state, [], NOW)  # a node with segments on writes format 2
    op = push_op("q", list(range(30)), ids=[f"j{i:02d}" for i in range(30)], policy=POLICY)
    ids: list[str] = apply(state, op, at)
    return state, ids


def plan(state: QueueState, ids: list[str]) -> tuple[tuple[tuple[str, int], ...], tuple[bytes, ...]]:
    """What the keeper's plan takes: the tail's (id, pos) and encodings."""
    tail = ids[20:]
    return tuple((i, state.pos[i]) for i in tail), tuple(state.encoded_job(i) for i in tail)


def ref_for(jobs: tuple[tuple[str, int], ...]) -> SegmentRef:
    return SegmentRef(key="seg/q/0", total=len(jobs), consumed=0, front=jobs[0][1], last_pos=jobs[-1][1], size=1,
                      sha256="x", oldest_enqueued_at=NOW, epoch=1, sealed_at=NOW)


def test_a_seal_whose_jobs_were_applied_again_with_other_times_is_refused_and_changes_nothing() -> None:
    planned_on, ids = pushed(NOW)
    jobs, parts = plan(planned_on, ids)
    # The write failed; the same push, applied again to a fresh read, 5 ms later.
    state, again = pushed(NOW + timedelta(milliseconds=5))
    assert again == ids and plan(state, again)[0] == jobs  # same ids, same pos...
    assert plan(state, again)[1] != parts  # ...other times
    before = state.encode(seq=2, writer="w", now=NOW)

    with pytest.raises(ValidationError, match="changed since the seal began"):
        apply(state, Seal(queue="q", ref=ref_for(jobs), jobs=jobs, after=None, parts=parts), NOW)

    assert state.encode(seq=2, writer="w", now=NOW) == before
    assert "q" not in state.lanes and all(i in state.jobs for i in ids)


def test_a_seal_of_the_jobs_as_planned_lands() -> None:
    state, ids = pushed(NOW)
    jobs, parts = plan(state, ids)
    assert apply(state, Seal(queue="q", ref=ref_for(jobs), jobs=jobs, after=None, parts=parts), NOW) == 10
    assert [ref.key for ref in state.lanes["q"]] == ["seg/q/0"] and not any(i in state.jobs for i in ids[20:])


def test_a_seal_with_fewer_parts_than_jobs_is_refused() -> None:
    state, ids = pushed(NOW)
    jobs, parts = plan(state, ids)
    with pytest.raises(ValidationError):
        apply(state, Seal(queue="q", ref=ref_for(jobs), jobs=jobs, after=None, parts=parts[:-1]), NOW)
    assert "q" not in state.lanes


@pytest.mark.parametrize("when", ["committer stopped", "keeper stopped"])
def test_a_segment_whose_seal_was_never_submitted_is_deleted_at_once(when: str) -> None:
    """A fenced leader's seal whose segment write returns late finds its
    committer stopped (or its keeper stopped, at the step-down): the Seal is
    in no write, now or later, so the keeper deletes the object itself
    instead of leaving it to a later leader's collector (whose next pass, on
    an idle cluster, is an hour away)."""
    from engine.errors import CommitterNotRunning
    from engine.lanes import LaneKeeper
    from engine.lanetasks import SealTask

    state, ids = pushed(NOW)
    jobs, parts = plan(state, ids)
    store = open_store("memory://")
    submitted: list[object] = []

    def execute(op: object, queued: object = None) -> None:
        submitted.append(op)
        raise CommitterNotRunning("the committer is not running; call start()")

    keeper = LaneKeeper(store, key="queue.json", policy=POLICY, execute=execute, epoch=1,
                        clock=lambda: NOW, grace_seconds=0, collect_seconds=3600, retry_seconds=0.1)
    if when == "keeper stopped":
        keeper._stopping = True  # what stop() sets; the thread running the seal goes on to its end
    task = SealTask(queue="q", jobs=jobs, parts=parts, after=None, oldest=NOW)
    if when == "committer stopped":
        with pytest.raises(CommitterNotRunning):
            keeper._seal(task)
        assert len(submitted) == 1
    else:
        keeper._seal(task)
        assert submitted == []
    assert task.key and store.get(task.key[0]) is None  # written, then deleted
    assert keeper.abandoned == 1 and keeper.sealed == 0


def test_a_seal_planned_from_a_write_that_failed_is_refused_and_the_jobs_are_sealed_as_they_landed(
    make_broker: Callable[..., Broker],
) -> None:
    """Through a leader: the keeper plans a seal from a write as it starts
    (``LaneKeeper.writing``), writes its segment and submits its Seal while
    that write is in flight. The write fails without landing; its push is
    applied again, later, to a fresh read. The Seal, which names the jobs as
    the failed write held them, is refused and its object deleted; the jobs
    are sealed afterwards as they landed. Without ``Seal.parts`` the segment
    would hold copies with the failed write's ``enqueued_at``."""
    store = _FailNextDocumentPut(open_store("memory://"))
    broker = make_broker(store, "http://a", policy=POLICY)
    wait_for(lambda: broker.role == "leader", what="leading")
    keeper = broker._keeper
    assert keeper is not None

    store.armed = True
    op = push_op("q", list(range(30)), ids=[f"j{i:02d}" for i in range(30)], policy=POLICY)
    assert broker.execute(op) == [f"j{i:02d}" for i in range(30)]  # acknowledged once the second write landed
    assert store.failed == 1
    wait_for(lambda: keeper.abandoned >= 1 and keeper.sealed >= 1, what="the first seal refused, the next landed")

    data = store.get("queue.json").data  # type: ignore[union-attr]
    doc = orjson.loads(data)
    (ref,) = parse_document("queue.json", data, policy=POLICY).lanes["q"]
    assert set(store.list(segment_prefix("queue.json"))) == {ref.key}  # the refused one was deleted
    blob = store.get(ref.key)
    assert blob is not None
    sealed = decode_segment(ref, blob.data)
    landed = {job["enqueued_at"] for job in doc["jobs"]}
    assert len(landed) == 1  # one push, applied once for good
    assert [job["id"] for job in sealed] == [f"j{i:02d}" for i in range(20, 30)]
    assert {job["enqueued_at"] for job in sealed} == landed


class _FailNextDocumentPut(FaultyStore):
    """Once ``armed``, the next put of the document waits 0.3 s (time for the
    keeper to write a segment and submit its Seal) and fails without
    landing. Other puts pass."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.armed = False
        self.failed = 0

    def put_parts(
        self, key: str, parts: Sequence[bytes], *, if_match: str | None = None, if_none_match: bool = False
    ) -> str:
        if key == "queue.json" and self.armed:
            self.armed = False
            time.sleep(0.3)
            self.failed += 1
            raise StoreUnavailable("injected: put timed out before landing")
        return self.inner.put_parts(key, parts, if_match=if_match, if_none_match=if_none_match)
