"""A stateful Hypothesis machine over recurring jobs (engine.schedules).

Leaders come and go at random moments; each heartbeat may land, be lost
(its commit never happens), or land late; a fenced leader may re-apply a
stale fire after newer ones landed; a node that does not know schedules
may rewrite the document without the marks (and pauses); an operator
pauses and resumes schedules. After every step it checks:

* **at most once**: no tick's job is ever pushed twice, the queue's
  ``pushed`` counter equals the jobs the marks say fired, and every pushed
  job is a tick of its schedule;
* **ticks only move forward**: a mark's tick never goes back;
* **on time**: after a heartbeat lands, each schedule's mark is the latest
  tick due at that moment (fired, or missed when it came too late, or
  registered when it came before the leader began), so a failover never
  skips a tick that was due when the new leader's first commit landed;
* **paused means skipped**: a tick handled while its schedule is paused is
  marked skipped and pushes nothing, and only then is a tick skipped;
* the marks and pauses survive ``encode`` and ``parse_document`` unchanged.

Two more tests throw inputs at the parts a leader's heartbeat and a node's
start-up run: cron expressions in time zones with daylight saving (the tick
at or before now and the next one agree: no tick between them, each a tick
of the other), and whatever ``QUEUE_SCHEDULES`` holds (a list of schedules,
or ImproperlyConfigured, never another exception).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from engine import (
    Policy,
    QueueState,
    ValidationError,
    fire_op,
    parse_document,
    pause_schedule_op,
    schedule,
    tick_of,
)
from engine.ops import FireSchedules
from engine.transitions import apply_batch
from queueadmin.recurring import build
from tests.fuzz.profiles import scaled
from tests.fuzz.strategies import hostile_text, json_values

START = datetime(2026, 3, 28, 23, 0, tzinfo=UTC)  # the night Paris moves its clocks forward
POLICY = Policy()
SCHEDULES = (
    schedule("often", queue="q", payload=1, policy=POLICY, every_seconds=7, catch_up_seconds=20),
    schedule("hourly", queue="q", payload=2, policy=POLICY, cron="30 * * * *", timezone="Europe/Paris",
             catch_up_seconds=600),
    schedule("night", queue="r", payload=3, policy=POLICY, cron="30 2 * * *", timezone="Europe/Paris"),
)


class ScheduleMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = QueueState(policy=POLICY)
        self.now = START
        self.since = START
        self.handled: dict[str, datetime] = {}  # the current leader's memo
        self.stale: list[FireSchedules] = []  # fires a fenced leader may still re-apply
        self.seen_ids: set[str] = set()
        self.last_ticks: dict[str, datetime] = {}
        self.paused: set[str] = set()  # what the operator paused, as the document should say

    def _apply(self, op: FireSchedules, at: datetime) -> list[object]:
        before = set(self.state.jobs)
        [outcomes] = apply_batch(self.state, [op], at)
        new = set(self.state.jobs) - before
        assert not new & self.seen_ids, f"a tick was pushed twice: {sorted(new & self.seen_ids)}"
        self.seen_ids |= new
        for fire, outcome in zip(op.fires, outcomes, strict=True):
            if outcome is not None:
                assert (outcome == "skipped") == (fire.name in self.paused), (fire.name, outcome, self.paused)
            if fire.name in self.paused:
                assert fire.job.id not in new, f"paused schedule {fire.name} pushed {fire.job.id}"
        return outcomes  # type: ignore[no-any-return]

    @rule(name=st.sampled_from([item.name for item in SCHEDULES]), paused=st.booleans())
    def operator_pauses_or_resumes(self, name: str, paused: bool) -> None:
        [was] = apply_batch(self.state, [pause_schedule_op(name, paused=paused)], self.now)
        assert was == (name in self.paused)
        (self.paused.add if paused else self.paused.discard)(name)
        assert set(self.state.schedule_pauses) == self.paused

    @rule(seconds=st.floats(min_value=0.1, max_value=900))
    def time_passes(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    @rule(lands=st.booleans())
    def heartbeat(self, lands: bool) -> None:
        op, ticks = fire_op(list(SCHEDULES), self.handled, now=self.now, since=self.since)
        if op is None:
            return
        self.stale.append(op)
        if not lands:
            return  # the write failed: nothing handled, the next heartbeat tries again
        self._apply(op, self.now)
        self.handled.update(ticks)
        for item in SCHEDULES:
            due = item.latest_due(self.now)
            mark = self.state.schedules[item.name]
            assert mark.tick == due, (item.name, mark, due)
            # Judged when the mark was set, which may be an earlier commit
            # (a fenced leader's, say) than this heartbeat's.
            late = (mark.at - mark.tick).total_seconds() > item.catch_up_seconds
            if mark.outcome == "fired":
                assert mark.job == item.job_id(due) and not late
            elif mark.outcome == "missed":
                # Whether it was paused then is _apply's to check: this mark may be older than the pause.
                assert late

    @rule()
    def failover(self) -> None:
        self.handled = {}
        self.since = self.now

    @precondition(lambda self: self.stale)
    @rule(data=st.data())
    def fenced_leader_reapplies_an_old_fire(self, data: st.DataObject) -> None:
        self._apply(data.draw(st.sampled_from(self.stale)), self.now)

    @rule()
    def an_old_node_leads_for_a_while(self) -> None:
        """It rewrites the document without the marks and pauses; leading
        again, a node that knows schedules starts from nothing."""
        self.state.schedules.clear()
        self.state.schedule_pauses.clear()
        self.paused.clear()
        self.last_ticks.clear()
        self.failover()

    @invariant()
    def at_most_once_and_forward(self) -> None:
        by_name = {item.name: item for item in SCHEDULES}
        for job in self.state.jobs.values():  # each a tick of its schedule
            found = tick_of(job.id)
            assert found is not None and by_name[found[0]].latest_due(found[1]) == found[1], job.id
        assert sum(c.pushed for c in self.state.queues.values()) == len(self.seen_ids)
        for name, mark in self.state.schedules.items():
            if name in self.last_ticks:
                assert mark.tick >= self.last_ticks[name]
            self.last_ticks[name] = mark.tick

    @invariant()
    def marks_round_trip(self) -> None:
        if not self.state.schedules and not self.state.schedule_pauses:
            return
        self.state.dirty = True
        data = b"".join(self.state.encode(seq=self.state.seq + 1, writer="w", now=self.now))
        self.state.encoded(seq=self.state.seq + 1, writer="w")
        back = parse_document("queue.json", data, policy=POLICY)
        assert back.schedules == self.state.schedules and back.schedule_pauses == self.state.schedule_pauses


ScheduleMachine.TestCase.settings = settings(settings.default, max_examples=scaled(300))
test_schedules = ScheduleMachine.TestCase


# Fields that cronsim takes, and zones with odd daylight saving (half hours, a
# 30-minute shift, the southern hemisphere, a zone that left DST).
_CRON = st.tuples(
    st.sampled_from(["*", "0", "30", "*/15", "59", "0,30", "15-45/10"]),
    st.sampled_from(["*", "0", "1", "2", "3", "*/3", "1-3", "23"]),
    st.sampled_from(["*", "1", "15", "29", "31", "L", "LW", "1-7"]),
    st.sampled_from(["*", "2", "3", "10", "11", "3,10"]),
    st.sampled_from(["*", "0", "1", "5", "MON-FRI", "5#2", "0L"]),
).map(" ".join)
_ZONES = ["Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham", "America/Santiago",
          "Asia/Tehran", "America/St_Johns", "UTC"]


@settings(settings.default, max_examples=scaled(500))
@given(cron=st.one_of(_CRON, st.text(max_size=30)), zone=st.one_of(st.sampled_from(_ZONES), st.text(max_size=12)),
       now=st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC)))
def test_cron_ticks_agree_forward_and_backward(cron: str, zone: str, now: datetime) -> None:
    try:
        item = schedule("x", queue="q", payload=1, policy=POLICY, cron=cron, timezone=zone)
    except ValidationError:
        return
    item.describe()
    last, upcoming = item.latest_due(now), item.next_due(now)
    if last is not None:
        after = item.next_due(last)
        assert last <= now and after is not None and after > now, (cron, zone, now, last, after)
    if upcoming is not None:
        assert upcoming > now and item.latest_due(upcoming) == upcoming, (cron, zone, now, upcoming)


_KEYS = st.sampled_from(["cron", "every_seconds", "timezone", "catch_up_seconds", "max_attempts", "queue", "payload",
                         "task", "args", "kwargs", "other"])
_VALUES = st.one_of(json_values, st.sampled_from(
    ["0 3 * * *", "61 * * * *", "Europe/Paris", "q", "tests.e2e.sample_tasks.add", "os.path", "no.such.task", 5, 0,
     -1, 1e308, float("inf"), float("nan")]))


# Entries shaped like the README's (a plain job, or a task), with any value in
# any optional key, so that most reach the engine's checks; and any dict.
_TIMING = dict.fromkeys(("cron", "every_seconds", "timezone", "catch_up_seconds", "max_attempts"), _VALUES)
_ENTRIES = st.one_of(
    st.dictionaries(_KEYS, _VALUES, max_size=6),
    st.fixed_dictionaries({"queue": _VALUES, "payload": _VALUES}, optional=_TIMING),
    st.fixed_dictionaries({"task": _VALUES}, optional={**_TIMING, "args": _VALUES, "kwargs": _VALUES}),
)


@pytest.mark.django_db
@settings(settings.default, max_examples=scaled(500))
@given(raw=st.one_of(json_values, st.dictionaries(st.one_of(hostile_text, st.just("ok-name")), _ENTRIES,
                                                  max_size=3)))
def test_any_setting_builds_schedules_or_is_refused_by_name(raw: Any) -> None:
    try:
        built = build(raw, policy=POLICY)
    except ImproperlyConfigured as exc:
        assert str(exc).startswith("QUEUE_SCHEDULES"), exc
        return
    assert isinstance(raw, dict) or raw is None
    assert [item.name for item in built] == list(raw or {})
