"""A leading broker whose wall clock steps back (an NTP step, a VM restored from a snapshot): its next
heartbeat keeps every running lease within its length and every rate window within one window of the new
clock, so a dead worker's job is handed out again on time and a rate-limited queue is not held for the
difference (engine.transitions.clock_behind; the pure cases are in tests/engine/transitions/test_clock_behind.py).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson

from engine import Broker, ClaimedJob, DirectClient, MemoryStore, Policy
from tests.helpers import KEY, wait_for

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
HEARTBEAT = 0.05


class SteppedClock:
    """A wall clock the test sets; the broker reads it for every batch."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def _stored(store: MemoryStore) -> dict[str, object]:
    blob = store.get(KEY)
    assert blob is not None
    raw: dict[str, object] = orjson.loads(blob.data)
    return raw


def test_a_leader_whose_clock_steps_back_an_hour_hands_a_dead_workers_job_out_again_within_its_lease() -> None:
    clock = SteppedClock(T0 + timedelta(hours=1))
    store = MemoryStore()
    broker = Broker(store, url="http://leader", key=KEY, policy=Policy(), clock=clock,
                    heartbeat_seconds=HEARTBEAT).start()
    try:
        wait_for(lambda: broker.role == "leader", what="a leader")
        committer = broker.committer
        assert committer is not None
        committer.push("q", [{"n": 1}], ids=["job-1"])
        [first] = committer.claim("worker-that-dies", ["q"], lease_seconds=30)

        clock.now = T0  # the step: an hour back

        def lease_expires_at() -> str | None:
            jobs = _stored(store)["jobs"]
            assert isinstance(jobs, list)
            lease = jobs[0].get("lease") if jobs else None
            return lease["expires_at"] if lease else None

        # The next heartbeat writes the lease within 30 s of the new clock, not 1 h 30 s.
        wait_for(lambda: lease_expires_at() == "2026-12-06T12:00:30Z", what="the lease brought within its length")
        assert committer.claim("w2", ["q"]) == []  # still leased: its 30 s are not up

        clock.now = T0 + timedelta(seconds=30)
        again: list[ClaimedJob] = []

        def handed_out() -> bool:
            again.extend(committer.claim("w2", ["q"]))
            return bool(again)

        wait_for(handed_out, what="the job handed out again")  # at the next heartbeat's expiry
        assert [(job.id, job.attempt) for job in again] == [(first.id, 2)]
    finally:
        broker.stop(timeout=10)


def test_a_standby_measures_the_leaders_quiet_time_on_its_own_monotonic_clock() -> None:
    """What the standby's dashboard shows as the last commit's age, whatever the two wall clocks say
    (queueadmin/dashboard/clocks.py): the time since its watch saw the document change."""
    store = MemoryStore()
    leader = Broker(store, url="http://leader", key=KEY, heartbeat_seconds=30, takeover_seconds=60).start()
    mono = [100.0]
    standby = Broker(store, url="http://standby", key=KEY, heartbeat_seconds=0.02, takeover_seconds=60,
                     monotonic=lambda: mono[0])
    try:
        wait_for(lambda: leader.role == "leader", what="a leader")
        standby.start()
        wait_for(lambda: standby.seq == leader.seq, what="the standby's first read")
        assert standby.quiet() is None  # a first read is not a change it saw happen

        committer = leader.committer
        assert committer is not None
        committer.push("q", [{"n": 1}])
        wait_for(lambda: standby.quiet() is not None, what="the standby seeing the push's commit")
        assert standby.quiet() == (leader.seq, 0.0)
        mono[0] = 107.5
        assert standby.quiet() == (leader.seq, 7.5)
        assert standby.role == "standby"  # 7.5 of its 60 s
        assert leader.quiet() is None  # the leader knows its own commits

        leader.stop(timeout=10)
        mono[0] = 200.0  # 100 s of its clock without a change: it takes over
        wait_for(lambda: standby.role == "leader", what="the takeover")
        assert standby.quiet() is None
    finally:
        standby.stop(timeout=10)
        leader.stop(timeout=10)


def test_a_direct_client_whose_clock_reads_behind_the_last_writers_keeps_its_leases_within_their_length() -> None:
    """Two engine.DirectClients on one store, one clock an hour ahead of the other: the version the first
    wrote carries its clock (``written_at``), and the second's next call, a claim that finds nothing,
    brings the lease the first stamped within 30 s of its own clock and writes it (docs/format.md, "Clocks")."""
    store = MemoryStore()
    ahead = DirectClient(store, key=KEY, clock=lambda: T0 + timedelta(hours=1))
    behind = DirectClient(store, key=KEY, clock=lambda: T0)
    ahead.push("q", [{"n": 1}], ids=["job-1"])
    [leased] = ahead.claim("dies", ["q"], lease_seconds=30)

    assert behind.claim("w2", ["q"]) == []

    [job] = _stored(store)["jobs"]  # type: ignore[misc]
    assert job["id"] == leased.id and job["lease"]["expires_at"] == "2026-12-06T12:00:30Z"
    assert behind.get_job("job-1")["status"] == "running"
