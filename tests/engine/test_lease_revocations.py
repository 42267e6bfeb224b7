"""Which revoked leases a lease watch may report (engine.leasewatch,
``QueueState.revocation_landed``): only those whose revoking write has
landed. The committer pipelines writes, so the state a watch reads may hold
a revocation still being written, or one that is never written at all."""

from __future__ import annotations

import threading

import pytest

from engine import FaultyStore, GroupCommitter, MemoryStore, StoreUnavailable
from engine.errors import JobNotFound, LeaseLost
from engine.leasewatch import lost_leases
from engine.ops import claim_op, purge_op, requeue_op
from tests.engine.test_committer import GatedStore

TIMEOUT = 5.0


class HeldStore(GatedStore):
    """A GatedStore that holds the document's puts only while ``holding``."""

    holding = False

    def put(self, key: str, data: bytes, *, if_match: str | None = None, if_none_match: bool = False) -> str:
        if not self.holding:
            return self.inner.put(key, data, if_match=if_match, if_none_match=if_none_match)
        return super().put(key, data, if_match=if_match, if_none_match=if_none_match)


def running(committer: GroupCommitter, n: int) -> list[tuple[str, str]]:
    committer.push("q", list(range(n)))
    claimed = committer.execute(claim_op("w", ["q"], policy=committer.policy, max_jobs=n))
    return [(job.id, job.lease) for job in claimed]


def lost(committer: GroupCommitter, leases: list[tuple[str, str]]) -> list[tuple[str, type]]:
    state = committer.state
    assert state is not None
    return [(job_id, type(error)) for job_id, error in lost_leases(state, leases)]


def in_background(call: object) -> threading.Event:
    done = threading.Event()
    threading.Thread(target=lambda: (call(), done.set()), daemon=True).start()  # type: ignore[operator]
    return done


def test_a_revocation_answers_only_once_its_write_has_landed() -> None:
    store = HeldStore(MemoryStore())
    committer = GroupCommitter(store).start()
    try:
        leases = running(committer, 2)
        [(a, _), (b, _)] = leases
        store.holding = True

        purged = in_background(lambda: committer.execute(purge_op([a])))
        assert store.entered.acquire(timeout=TIMEOUT)  # the purge's write is in flight
        state = committer.state
        assert state is not None and a not in state.jobs  # the state shows it already...
        assert lost(committer, leases) == []  # ...but no watch is told before it lands

        requeued = in_background(lambda: committer.execute(requeue_op([b])))
        store.gate.release()  # the purge lands; the requeue rides the next write
        assert purged.wait(TIMEOUT) and store.entered.acquire(timeout=TIMEOUT)
        assert not requeued.is_set()
        assert lost(committer, leases) == [(a, JobNotFound)]  # the requeue is applied, not landed

        store.gate.release()
        assert requeued.wait(TIMEOUT)
        assert lost(committer, leases) == [(a, JobNotFound), (b, LeaseLost)]
    finally:
        store.holding = False
        store.gate.release(2)
        committer.stop()


def test_a_revocation_whose_write_never_lands_is_never_reported() -> None:
    """Every write of the purge is lost: it fails, the state it was applied
    to is thrown away, and no watch ever hears of it."""
    store = FaultyStore(MemoryStore())
    committer = GroupCommitter(store, max_retries=2, retry_backoff_seconds=0.001).start()
    try:
        leases = running(committer, 1)
        store.inject(*["lost"] * 4)
        with pytest.raises(StoreUnavailable):
            committer.execute(purge_op([leases[0][0]]))
        committer.push("q", ["later"])  # a write that lands, from the document read again
        assert lost(committer, leases) == []
    finally:
        committer.stop()
