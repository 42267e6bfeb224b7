"""Recurring jobs (engine.schedules): ticks, the transition's rules, the
document's marks, and the broker firing each tick once across a failover."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from engine import (
    Broker,
    DocumentError,
    GroupCommitter,
    MemoryStore,
    Schedule,
    ValidationError,
    forget_schedule_op,
    pause_schedule_op,
    schedule,
    tick_of,
)
from engine.document import QueueState
from engine.ops import Complete, claim_op
from engine.parsing import parse_document
from engine.policy import Policy
from engine.schedules import fire_op
from engine.transitions import apply_batch, complete
from tests.helpers import KEY, wait_for

POLICY = Policy()
T0 = datetime(2026, 12, 4, 2, 10, 0, tzinfo=UTC)


def every(seconds: int, name: str = "ping", **kwargs: Any) -> Schedule:
    return schedule(name, queue="pings", payload={"kind": name}, policy=POLICY, every_seconds=seconds, **kwargs)


def step(state: QueueState, schedules: list[Schedule], handled: dict[str, datetime], now: datetime,
         since: datetime) -> list[Any]:
    """One leader heartbeat: fire what is due and, as a landed commit does, remember it."""
    op, ticks = fire_op(schedules, handled, now=now, since=since)
    if op is None:
        return []
    [outcomes] = apply_batch(state, [op], now)
    handled.update(ticks)
    return outcomes  # type: ignore[no-any-return]


# -- building and ticks ------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"every_seconds": 0}, "every_seconds must be a whole number"),
    ({"every_seconds": 1.5}, "every_seconds must be a whole number"),
    ({"every_seconds": True}, "every_seconds must be a whole number"),
    ({}, "exactly one of cron and every_seconds"),
    ({"cron": "* * * * *", "every_seconds": 5}, "exactly one of cron and every_seconds"),
    ({"cron": "61 * * * *"}, "bad cron expression '61 \\* \\* \\* \\*'"),
    ({"cron": "0 0 30 2 *"}, "bad cron expression"),
    ({"cron": "0 3 * * *", "timezone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
    ({"cron": "0 3 * * *", "timezone": ""}, "unknown time zone"),
    ({"every_seconds": 5, "timezone": "Europe/Paris"}, "timezone applies to cron schedules only"),
    ({"every_seconds": 5, "catch_up_seconds": -1}, "catch_up_seconds must be a number >= 0"),
    ({"every_seconds": 5, "max_attempts": 0}, "max_attempts must be an integer from 1 to 1000"),
])
def test_a_bad_schedule_is_refused_naming_the_problem(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        schedule("nightly", queue="reports", payload={}, policy=POLICY, **kwargs)


@pytest.mark.parametrize("name", ["", "-x", "a b", "a/b", "a:b", "x" * 101, 7])
def test_a_schedule_name_must_fit_in_a_job_id(name: Any) -> None:
    with pytest.raises(ValidationError, match="a schedule's name must be"):
        schedule(name, queue="q", payload={}, policy=POLICY, every_seconds=5)


def test_a_payload_too_large_or_not_json_is_refused_with_the_schedules_name() -> None:
    with pytest.raises(ValidationError, match=r"schedule 'big': .*payload"):
        schedule("big", queue="q", payload="x" * 300_000, policy=POLICY, every_seconds=5)
    with pytest.raises(ValidationError, match=r"schedule 'odd': .*not JSON"):
        schedule("odd", queue="q", payload={1, 2}, policy=POLICY, every_seconds=5)


def test_every_n_seconds_ticks_at_multiples_of_n_since_the_epoch_on_every_node() -> None:
    item = every(30)
    assert item.latest_due(T0 + timedelta(seconds=29.9)) == T0
    assert item.latest_due(T0 + timedelta(seconds=30)) == T0 + timedelta(seconds=30)
    assert item.next_due(T0) == T0 + timedelta(seconds=30)
    assert item.job_id(T0) == "schedule:ping:20261204T021000Z"
    assert tick_of(item.job_id(T0)) == ("ping", T0)
    others = ("job-1", "schedule:ping:2026", "schedule::20261204T021000Z", "schedule:a b:20261204T021000Z")
    assert [tick_of(i) for i in others] == [None] * 4
    assert item.describe() == "Every 30 s"


def test_cron_ticks_in_the_schedules_time_zone() -> None:
    item = schedule("nightly", queue="reports", payload={}, policy=POLICY, cron="0 3 * * *", timezone="Europe/Paris")
    # 03:00 in Paris is 02:00 UTC in December.
    assert item.latest_due(T0) == datetime(2026, 12, 4, 2, 0, tzinfo=UTC)
    assert item.next_due(T0) == datetime(2026, 12, 5, 2, 0, tzinfo=UTC)
    # A tick exactly at now is due.
    assert item.latest_due(datetime(2026, 12, 5, 2, 0, tzinfo=UTC)) == datetime(2026, 12, 5, 2, 0, tzinfo=UTC)
    assert item.describe() == "At 03:00 every day (Europe/Paris)"


def test_a_cron_tick_in_the_hour_that_repeats_when_clocks_go_back_fires_once() -> None:
    item = schedule("late", queue="q", payload={}, policy=POLICY, cron="30 2 * * *", timezone="Europe/Paris")
    # 2026-10-25: Paris goes from 03:00 CEST back to 02:00 CET; 02:30 happens twice.
    day_start = datetime(2026, 10, 24, 22, 0, tzinfo=UTC)
    ticks = set()
    now = day_start
    while now < day_start + timedelta(hours=6):
        ticks.add(item.latest_due(now))
        now += timedelta(minutes=5)
    assert sorted(t for t in ticks if t is not None and t >= day_start) == [datetime(2026, 10, 25, 0, 30, tzinfo=UTC)]


def test_the_latest_tick_is_one_the_forward_ticks_reach_across_a_half_hour_daylight_saving_change() -> None:
    """cronsim's reverse iteration skips 00:30-00:59 on 2029-10-07 in
    Australia/Lord_Howe (found by the fuzz); the forward one does not."""
    item = schedule("lh", queue="q", payload=1, policy=POLICY, cron="* 0 1-7 10 *", timezone="Australia/Lord_Howe")
    now = datetime(2030, 1, 1, tzinfo=UTC)
    last = item.latest_due(now)
    assert last == datetime(2029, 10, 6, 14, 29, tzinfo=UTC)  # 00:59 at +10:30
    after = item.next_due(last)
    assert after is not None and after > now


# -- the transition ------------------------------------------------------------------


def test_a_new_schedule_registers_the_tick_before_the_leader_began_and_fires_the_next() -> None:
    state = QueueState(policy=POLICY)
    item = every(60)
    since = T0 + timedelta(seconds=20)
    handled: dict[str, datetime] = {}
    assert step(state, [item], handled, since, since) == ["registered"]
    assert state.jobs == {}
    assert state.schedules["ping"].tick == T0 and state.schedules["ping"].outcome == "registered"
    assert step(state, [item], handled, since + timedelta(seconds=10), since) == []  # nothing new is due
    assert step(state, [item], handled, T0 + timedelta(seconds=61), since) == ["fired"]
    [job] = state.jobs.values()
    assert job.id == "schedule:ping:20261204T021100Z" and job.queue == "pings"
    assert orjson.loads(job.payload) == {"kind": "ping"}
    assert state.schedules["ping"].job == job.id


def test_a_tick_at_or_after_the_leaders_start_fires_even_without_a_mark() -> None:
    state = QueueState(policy=POLICY)
    assert step(state, [every(60)], {}, T0, T0) == ["fired"]
    assert list(state.jobs) == ["schedule:ping:20261204T021000Z"]


def test_a_tick_the_mark_already_covers_changes_nothing() -> None:
    """A fenced leader, or one whose commit lost a race, re-applies an old tick."""
    state = QueueState(policy=POLICY)
    item = every(60)
    step(state, [item], {}, T0, T0)
    state.dirty = False
    op, _ = fire_op([item], {}, now=T0 + timedelta(seconds=5), since=T0)
    assert apply_batch(state, [op], T0 + timedelta(seconds=5)) == [[None]]
    assert not state.dirty
    assert len(state.jobs) == 1 and state.queues["pings"].pushed == 1


def test_after_a_gap_only_the_latest_tick_fires_and_a_tick_too_late_is_missed() -> None:
    state = QueueState(policy=POLICY)
    item = every(60, catch_up_seconds=120)
    handled: dict[str, datetime] = {}
    step(state, [item], handled, T0, T0)
    # Ten minutes without a leader: one job, for the latest tick.
    assert step(state, [item], handled, T0 + timedelta(minutes=10, seconds=5), T0) == ["fired"]
    assert sorted(state.jobs) == ["schedule:ping:20261204T021000Z", "schedule:ping:20261204T022000Z"]
    # A commit applied more than catch_up_seconds after its tick pushes nothing.
    op, _ = fire_op([item], handled, now=T0 + timedelta(minutes=11), since=T0)
    late = T0 + timedelta(minutes=11) + timedelta(seconds=121)
    assert apply_batch(state, [op], late) == [["missed"]]
    assert len(state.jobs) == 2
    assert state.schedules["ping"].outcome == "missed" and state.schedules["ping"].job is None


def test_a_tick_whose_job_finished_recently_is_not_pushed_twice_if_the_mark_was_lost() -> None:
    """A node that does not know schedules rewrites the document without them."""
    state = QueueState(policy=POLICY)
    item = every(60)
    step(state, [item], {}, T0, T0)
    [claimed] = apply_batch(state, [claim_op("w", ["pings"], policy=POLICY)], T0)[0]
    complete(state, Complete(job_id=claimed.id, lease=claimed.lease), T0)
    state.schedules.clear()
    assert step(state, [item], {}, T0 + timedelta(seconds=1), T0) == ["fired"]
    assert state.jobs == {} and state.queues["pings"].pushed == 1


def test_one_schedules_fire_does_not_stop_anothers() -> None:
    state = QueueState(policy=POLICY)
    a, b = every(60, "a"), every(30, "b")
    handled: dict[str, datetime] = {}
    assert step(state, [a, b], handled, T0, T0) == ["fired", "fired"]
    assert step(state, [a, b], handled, T0 + timedelta(seconds=30), T0) == ["fired"]
    assert state.queues["pings"].pushed == 3


# -- pausing and forgetting ----------------------------------------------------------------


def test_a_paused_schedules_ticks_are_skipped_and_resuming_fires_the_next_tick_not_the_skipped_ones() -> None:
    state = QueueState(policy=POLICY)
    item = every(60)
    handled: dict[str, datetime] = {}
    assert step(state, [item], handled, T0, T0) == ["fired"]
    pause_at = T0 + timedelta(seconds=10)
    assert apply_batch(state, [pause_schedule_op("ping")], pause_at) == [False]
    assert state.schedule_pauses == {"ping": pause_at}
    for minute in (1, 2, 3):
        assert step(state, [item], handled, T0 + timedelta(minutes=minute), T0) == ["skipped"]
    assert state.schedules["ping"].tick == T0 + timedelta(minutes=3)
    assert state.schedules["ping"].outcome == "skipped" and state.schedules["ping"].job is None
    assert len(state.jobs) == 1 and state.queues["pings"].pushed == 1
    # A second pause keeps the first one's start; a resume says it was paused.
    assert apply_batch(state, [pause_schedule_op("ping")], pause_at + timedelta(minutes=1)) == [True]
    assert state.schedule_pauses == {"ping": pause_at}
    assert apply_batch(state, [pause_schedule_op("ping", paused=False)], T0 + timedelta(minutes=3, seconds=30)) \
        == [True]
    assert state.schedule_pauses == {}
    # Still within catch_up_seconds of the skipped ticks, none of them fires: the next one does.
    assert step(state, [item], handled, T0 + timedelta(minutes=3, seconds=40), T0) == []
    assert step(state, [item], handled, T0 + timedelta(minutes=4), T0) == ["fired"]
    assert sorted(state.jobs) == ["schedule:ping:20261204T021000Z", "schedule:ping:20261204T021400Z"]


def test_a_pause_holds_for_any_leader_and_a_schedule_without_a_mark_can_be_paused() -> None:
    """The pause is in the document: a new leader (a fresh memo, its own start) skips too."""
    state = QueueState(policy=POLICY)
    apply_batch(state, [pause_schedule_op("ping")], T0)
    assert step(state, [every(60)], {}, T0, T0) == ["skipped"]
    assert step(state, [every(60)], {}, T0 + timedelta(minutes=1), T0 + timedelta(minutes=1)) == ["skipped"]
    assert state.jobs == {}


def test_resuming_a_schedule_that_is_not_paused_changes_nothing() -> None:
    state = QueueState(policy=POLICY)
    state.dirty = False
    assert apply_batch(state, [pause_schedule_op("ping", paused=False)], T0) == [False]
    assert not state.dirty


def test_forgetting_a_schedule_drops_its_mark_and_pause_and_a_node_that_defines_it_registers_afresh() -> None:
    state = QueueState(policy=POLICY)
    item = every(60)
    step(state, [item], {}, T0, T0)
    apply_batch(state, [pause_schedule_op("ping")], T0)
    state.dirty = False
    assert apply_batch(state, [forget_schedule_op("ping")], T0) == [True]
    assert state.dirty and state.schedules == {} and state.schedule_pauses == {}
    state.dirty = False
    assert apply_batch(state, [forget_schedule_op("ping")], T0) == [False]
    assert not state.dirty
    since = T0 + timedelta(minutes=5, seconds=30)
    assert step(state, [item], {}, since, since) == ["registered"]


@pytest.mark.parametrize(("build", "message"), [
    (lambda: pause_schedule_op("no spaces"), "a schedule's name must be"),
    (lambda: pause_schedule_op("ping", paused="false"), "paused must be true or false"),
    (lambda: forget_schedule_op(""), "a schedule's name must be"),
])
def test_a_bad_pause_or_forget_is_refused(build: Callable[[], Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        build()


# -- the document ----------------------------------------------------------------------


def test_marks_round_trip_through_the_document_in_every_format() -> None:
    for segment_jobs in (0, 1000):
        policy = Policy(segment_jobs=segment_jobs)
        state = QueueState(policy=policy)
        handled: dict[str, datetime] = {}
        apply_batch(state, [], T0)
        step(state, [every(60, "a"), every(30, "b")], handled, T0, T0 + timedelta(seconds=1))
        data = b"".join(state.encode(seq=1, writer="w", now=T0))
        back = parse_document(KEY, data, policy=policy)
        assert back.schedules == state.schedules
        assert orjson.loads(data)["schedules"]["b"] == {"tick": "2026-12-04T02:10:00Z", "outcome": "registered",
                                                        "job": None, "at": "2026-12-04T02:10:00Z"}


def test_a_document_without_schedules_has_no_schedules_field() -> None:
    state = QueueState(policy=POLICY)
    state.dirty = True
    raw = orjson.loads(b"".join(state.encode(seq=1, writer="w", now=T0)))
    assert "schedules" not in raw and "schedule_pauses" not in raw


def test_pauses_and_skipped_marks_round_trip_through_the_document() -> None:
    state = QueueState(policy=POLICY)
    apply_batch(state, [pause_schedule_op("ping")], T0)
    step(state, [every(60)], {}, T0, T0)
    data = b"".join(state.encode(seq=1, writer="w", now=T0))
    assert orjson.loads(data)["schedule_pauses"] == {"ping": "2026-12-04T02:10:00Z"}
    back = parse_document(KEY, data, policy=POLICY)
    assert back.schedule_pauses == {"ping": T0}
    assert back.schedules == state.schedules and back.schedules["ping"].outcome == "skipped"


@pytest.mark.parametrize(("pauses", "problem"), [
    ("x", "schedule_pauses: expected an object"),
    ({"a": "soon"}, "schedule_pauses.a: expected an ISO 8601 time"),
    ({"a": True}, "schedule_pauses.a: expected an ISO 8601 time"),
])
def test_a_malformed_pause_makes_the_document_unreadable(pauses: Any, problem: str) -> None:
    state = QueueState(policy=POLICY)
    state.dirty = True
    raw = orjson.loads(b"".join(state.encode(seq=1, writer="w", now=T0)))
    raw["schedule_pauses"] = pauses
    with pytest.raises(DocumentError, match=problem):
        parse_document(KEY, orjson.dumps(raw), policy=POLICY)


@pytest.mark.parametrize(("mark", "problem"), [
    ("x", "schedules.a: expected an object"),
    ({"tick": "2026-12-04T02:10:00Z", "outcome": "ran", "job": None, "at": "2026-12-04T02:10:00Z"},
     "schedules.a.outcome: expected one of registered, fired, missed, skipped"),
    ({"tick": "2026-12-04T02:10:00Z", "outcome": "fired", "job": None, "at": "2026-12-04T02:10:00Z"},
     "a fired tick names its job"),
    ({"tick": "2026-12-04T02:10:00Z", "outcome": "missed", "job": "j", "at": "2026-12-04T02:10:00Z"},
     "a fired tick names its job"),
    ({"tick": "yesterday", "outcome": "missed", "job": None, "at": "2026-12-04T02:10:00Z"},
     "schedules.a.tick: expected an ISO 8601 time"),
    ({"outcome": "missed", "job": None, "at": "2026-12-04T02:10:00Z"}, "missing field 'tick'"),
])
def test_a_malformed_mark_makes_the_document_unreadable(mark: Any, problem: str) -> None:
    state = QueueState(policy=POLICY)
    state.dirty = True
    raw = orjson.loads(b"".join(state.encode(seq=1, writer="w", now=T0)))
    raw["schedules"] = {"a": mark}
    with pytest.raises(DocumentError, match=problem):
        parse_document(KEY, orjson.dumps(raw), policy=POLICY)


# -- the broker ---------------------------------------------------------------------------


class Clock:
    """A wall clock tests move by hand (the broker's heartbeats still run in real time)."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += timedelta(seconds=seconds)


def scheduled_ids(store: MemoryStore) -> list[str]:
    blob = store.get(KEY)
    assert blob is not None
    return sorted(j["id"] for j in orjson.loads(blob.data)["jobs"] if j["id"].startswith("schedule:"))


def test_the_leader_fires_each_tick_once_and_a_new_leader_fires_the_tick_the_old_one_missed(
    make_broker: Callable[..., Broker],
) -> None:
    store = MemoryStore()
    clock = Clock(T0 + timedelta(seconds=1))
    item = every(60)
    a = make_broker(store, "http://a", clock=clock, schedules=[item])
    wait_for(lambda: a.role == "leader")
    wait_for(lambda: "ping" in (a.committer.state.schedules if a.committer and a.committer.state else {}))
    assert scheduled_ids(store) == []  # T0 came before a led: registered only
    clock.advance(60)
    wait_for(lambda: scheduled_ids(store) == ["schedule:ping:20261204T021100Z"])
    b = make_broker(store, "http://b", clock=clock, schedules=[item])
    wait_for(lambda: b.leader.id == a.id)
    seq = a.seq
    time.sleep(0.2)  # several heartbeats: the tick is not fired again
    assert a.seq > seq and scheduled_ids(store) == ["schedule:ping:20261204T021100Z"]
    a.stop()  # like kill -9: the document stops changing
    clock.advance(60)  # the 02:12 tick comes while nobody leads
    wait_for(lambda: b.role == "leader", timeout=10)
    wait_for(lambda: len(scheduled_ids(store)) == 2)
    time.sleep(0.2)
    assert scheduled_ids(store) == ["schedule:ping:20261204T021100Z", "schedule:ping:20261204T021200Z"]


def test_two_writers_that_both_fire_a_tick_push_one_job() -> None:
    """Two committers on one document (a leader not yet fenced and its
    successor) fire the same ticks at once: conditional writes let one land,
    and the other re-applies on the winner's version, where the mark covers
    the tick (I3)."""
    store = MemoryStore()
    item = every(60)
    writers = [GroupCommitter(store, policy=POLICY, clock=lambda: T0 + timedelta(minutes=9)).start() for _ in "ab"]
    try:
        outcomes: list[Any] = []
        for minute in range(1, 9):
            op, _ = fire_op([item], {}, now=T0 + timedelta(minutes=minute), since=T0)
            threads = [threading.Thread(target=lambda w=w, op=op: outcomes.append(w.execute(op))) for w in writers]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        assert sorted(map(str, outcomes)) == sorted(["['fired']"] * 8 + ["[None]"] * 8)
        assert len(scheduled_ids(store)) == 8
        assert sum(w.stats.lost_races for w in writers) >= 1
    finally:
        for writer in writers:
            writer.stop()
