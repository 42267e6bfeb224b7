"""The committer's ``on_departures`` listener: every job that leaves the
document (completed, purged, a dead letter dropped) is reported once, after
the write that removed it has landed, and a failing listener never breaks a
commit."""

from __future__ import annotations

import threading

import pytest

from engine import DeadLetter, Departure, FaultyStore, GroupCommitter, Job, MemoryStore, Policy
from engine.ops import claim_op, fail_op


class Listener:
    def __init__(self) -> None:
        self.calls: list[list[Departure]] = []
        self.lock = threading.Lock()

    def __call__(self, departures: list[Departure]) -> None:
        with self.lock:
            self.calls.append(list(departures))

    @property
    def all(self) -> list[Departure]:
        with self.lock:
            return [d for call in self.calls for d in call]


def test_a_completed_job_is_reported_with_its_final_lease() -> None:
    heard = Listener()
    with GroupCommitter(MemoryStore(), on_departures=heard) as c:
        [job_id] = c.push("q", [{"n": 1}])
        [claimed] = c.claim("w1", ["q"])
        assert heard.all == []
        c.complete(claimed.id, claimed.lease)
        [gone] = heard.all
    assert gone.how == "completed" and isinstance(gone.item, Job)
    assert gone.item.id == job_id and gone.item.attempts == 1
    assert gone.item.lease is not None and gone.item.lease.worker == "w1"


def test_purged_jobs_and_dead_letters_are_reported_as_purged() -> None:
    heard = Listener()
    policy = Policy(max_attempts=1)
    with GroupCommitter(MemoryStore(), policy=policy, on_departures=heard) as c:
        [dying, pending] = c.push("q", ["a", "b"])  # FIFO: the first is claimed
        [claimed] = c.claim("w1", ["q"])
        c.fail(claimed.id, claimed.lease, error="boom")
        assert heard.all == []  # a dead letter is still in the document
        c.purge(job_ids=[pending, dying])
    assert [(d.how, d.item.id, type(d.item)) for d in heard.all] == [
        ("purged", pending, Job),
        ("purged", dying, DeadLetter),
    ]


def test_a_dead_letter_pushed_out_of_the_full_list_is_reported_as_dropped() -> None:
    heard = Listener()
    policy = Policy(max_attempts=1, dead_letter_limit=1)
    with GroupCommitter(MemoryStore(), policy=policy, on_departures=heard) as c:
        first, _second = c.push("q", ["a", "b"])
        for _ in range(2):
            [claimed] = c.claim("w1", ["q"])
            c.execute(
                fail_op(claimed.id, claimed.lease, error=f"boom {claimed.id}", retry_in_seconds=None, policy=policy)
            )
    [dropped] = heard.all
    assert dropped.how == "dropped" and dropped.item.id == first
    assert isinstance(dropped.item, DeadLetter) and dropped.item.error == f"boom {first}"


def test_nothing_is_reported_for_a_write_that_did_not_land_and_a_retried_one_reports_once() -> None:
    memory = MemoryStore()
    faulty = FaultyStore(memory)
    heard = Listener()
    with GroupCommitter(faulty, on_departures=heard) as c:
        [job_id] = c.push("q", ["x"])
        [claimed] = c.claim("w1", ["q"])
        faulty.inject("conflict", "lost")  # two failed writes, then it lands
        c.complete(claimed.id, claimed.lease)
    assert [(d.how, d.item.id) for d in heard.all] == [("completed", job_id)]


def test_an_ambiguous_write_that_landed_reports_its_departures() -> None:
    faulty = FaultyStore(MemoryStore())
    heard = Listener()
    with GroupCommitter(faulty, on_departures=heard) as c:
        [job_id] = c.push("q", ["x"])
        [claimed] = c.claim("w1", ["q"])
        faulty.inject("landed")
        c.complete(claimed.id, claimed.lease)
    assert [(d.how, d.item.id) for d in heard.all] == [("completed", job_id)]


def test_a_listener_that_raises_does_not_break_commits(caplog: pytest.LogCaptureFixture) -> None:
    def broken(departures: list[Departure]) -> None:
        raise RuntimeError("the database is down")

    with GroupCommitter(MemoryStore(), on_departures=broken) as c:
        c.push("q", ["x", "y"])
        for _ in range(2):
            [claimed] = c.claim("w1", ["q"])
            c.complete(claimed.id, claimed.lease)
        assert c.document()["jobs"] == []
        assert c.document()["queues"]["q"]["completed"] == 2
    assert "on_departures listener failed" in caplog.text


def test_without_a_listener_no_departures_are_kept() -> None:
    with GroupCommitter(MemoryStore()) as c:
        c.push("q", ["x"])
        [claimed] = c.execute(claim_op("w1", ["q"], policy=c.policy))
        c.complete(claimed.id, claimed.lease)
        assert c.state is not None and c.state.departures is None
