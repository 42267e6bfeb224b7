"""Pure transition tests (engine.transitions). The committing clock reads earlier than a time the state
was already stamped with: the leader's clock stepped back, or reads behind the clock of the node that
wrote the version. A lease then still expires within its length, and a rate window holds its queue at most
one window; due times and everything else keep the clock that stamped them. The builders and the test clock
are in builders.py.
"""

from __future__ import annotations

from datetime import timedelta

import orjson

from engine import parse_document, transitions
from engine.model import RateLimit
from engine.ops import claim_op, push_op, rate_limit_op
from tests.engine.transitions.builders import T0, at, claim_one, complete, heartbeat, new_state, push
from tests.helpers import KEY

HOUR = 3600.0


def test_after_the_clock_steps_back_an_hour_a_lease_expires_within_its_length_not_an_hour_late() -> None:
    state = new_state()
    push(state, "q", [1, 2])
    transitions.apply_batch(state, [], at(HOUR))  # the leader's clock reads T0 + 1 h
    stranded = claim_one(state, now=at(HOUR), lease_seconds=30)  # its worker dies at once
    transitions.apply_batch(state, [], at(HOUR))

    transitions.apply_batch(state, [], at(0))  # an NTP step: back to T0

    assert state.jobs[stranded.id].lease is not None
    assert state.jobs[stranded.id].lease.expires_at == at(30)  # its full length from the new now, no more
    transitions.apply_batch(state, [], at(29.9))
    assert state.jobs[stranded.id].status == "running"
    transitions.apply_batch(state, [], at(30))
    assert state.jobs[stranded.id].status == "pending"  # handed out again 30 s after the step, not 1 h


def test_a_lease_with_less_than_its_length_left_keeps_its_deadline_and_a_live_worker_keeps_renewing() -> None:
    state = new_state()
    push(state, "q", [1, 2])
    transitions.apply_batch(state, [], at(10))
    early = claim_one(state, now=at(10), lease_seconds=60)  # due to expire at 70
    transitions.apply_batch(state, [], at(40))
    late = claim_one(state, now=at(40), lease_seconds=60)  # due at 100
    transitions.apply_batch(state, [], at(40))

    transitions.apply_batch(state, [], at(20))  # back 20 s

    assert state.jobs[early.id].lease is not None and state.jobs[early.id].lease.expires_at == at(70)  # 50 s left
    assert state.jobs[late.id].lease is not None and state.jobs[late.id].lease.expires_at == at(80)  # 60, not 80
    assert heartbeat(state, late.id, late.lease, now=at(25)) == at(85)  # its worker renews from the new clock
    transitions.apply_batch(state, [], at(30))  # the clock moves on: nothing moves again
    assert state.jobs[early.id].lease is not None and state.jobs[early.id].lease.expires_at == at(70)
    assert state.jobs[late.id].lease is not None and state.jobs[late.id].lease.expires_at == at(85)


def test_a_clock_that_only_moves_forward_changes_nothing() -> None:
    state = new_state()
    push(state, "q", [1])
    transitions.apply_batch(state, [], at(0))
    job = claim_one(state, now=at(0), lease_seconds=30)
    before = state.jobs[job.id]
    state.dirty = False

    transitions.apply_batch(state, [], at(0))  # the same instant is not earlier
    transitions.apply_batch(state, [], at(10))

    assert state.jobs[job.id] is before
    assert not state.dirty  # an idle node must not write for it (I11)


def test_after_the_clock_steps_back_a_rate_window_holds_its_queue_at_most_one_window() -> None:
    state = new_state()
    transitions.apply(state, push_op("q", list(range(5)), policy=state.policy), at(0))
    transitions.apply(state, rate_limit_op("q", 2, 30), at(0))

    def started(when: float) -> int:
        op = claim_op("w", ["q"], policy=state.policy, max_jobs=10, lease_seconds=HOUR)
        [claimed] = transitions.apply_batch(state, [op], at(when))
        return len(claimed)

    assert started(HOUR) == 2  # the window opens at T0 + 1 h on the clock before the step
    assert started(0) == 0  # stepped back to T0: the window now starts at T0, with its two starts kept
    assert state.queues["q"].rate_limit == RateLimit(jobs=2, seconds=30, window_start=at(0), window_started=2)
    assert started(29.9) == 0
    assert started(30) == 2  # 30 s after the step, not 1 h 30 s


def test_a_rate_window_moved_alone_is_written() -> None:
    state = new_state()
    transitions.apply(state, push_op("q", [1, 2], policy=state.policy), at(0))
    transitions.apply(state, rate_limit_op("q", 2, 30), at(0))
    op = claim_op("w", ["q"], policy=state.policy, max_jobs=2, lease_seconds=60)
    [claimed] = transitions.apply_batch(state, [op], at(HOUR))
    for job in claimed:
        complete(state, job.id, job.lease, now=at(HOUR))
    state.dirty = False  # written: no lease left to move

    transitions.apply_batch(state, [], at(0))

    assert state.queues["q"].rate_limit == RateLimit(jobs=2, seconds=30, window_start=at(0), window_started=2)
    assert state.dirty  # the next heartbeat writes it, or a new leader would read the window an hour ahead


def test_a_delayed_job_stays_due_when_its_stamp_says() -> None:
    state = new_state()
    transitions.apply_batch(state, [], at(HOUR))
    [delayed] = push(state, "q", [1], now=at(HOUR), delay_seconds=60)

    transitions.apply_batch(state, [], at(0))

    assert state.jobs[delayed].not_before == at(HOUR + 60)  # due times keep the clock that stamped them


def test_a_reader_whose_clock_reads_behind_the_versions_writer_applies_the_same_bounds() -> None:
    """A version written on a clock an hour ahead (another node, or this one before a step), read by a
    client whose clock reads T0, as engine.DirectClient reads each version: ``written_at`` seeds the mark."""
    writer = new_state()
    push(writer, "q", [1])
    stranded = claim_one(writer, now=at(HOUR), lease_seconds=30)
    data = b"".join(writer.encode(seq=1, writer="ahead", now=at(HOUR)))

    reader = parse_document(KEY, data, policy=writer.policy)
    assert reader.clock_mark == at(HOUR)
    transitions.apply_batch(reader, [], at(0))

    assert reader.jobs[stranded.id].lease is not None
    assert reader.jobs[stranded.id].lease.expires_at == at(30)


def test_a_written_at_that_is_not_a_time_leaves_the_mark_unknown_and_the_document_readable() -> None:
    state = new_state()
    push(state, "q", [1])
    raw = orjson.loads(b"".join(state.encode(seq=1, writer="w", now=T0)))
    for bad in ("yesterday", 17, "2025-03-01T09:30:00"):  # not a time, not a string, no time zone
        raw["written_at"] = bad
        assert parse_document(KEY, orjson.dumps(raw), policy=state.policy).clock_mark is None
    del raw["written_at"]
    reader = parse_document(KEY, orjson.dumps(raw), policy=state.policy)
    assert reader.clock_mark is None
    assert list(reader.jobs) == list(state.jobs)
    transitions.apply_batch(reader, [], T0 - timedelta(days=1))  # nothing to compare with: nothing moves
    assert reader.clock_mark == T0 - timedelta(days=1)
