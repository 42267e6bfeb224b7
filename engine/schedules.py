"""Recurring jobs: schedules the leader fires, at most once per tick, across failovers.

A :class:`Schedule` pushes one job to a queue at every *tick*: every time a
five-field cron expression matches (in a time zone, with daylight saving
handled as Debian's cron does; parsed by cronsim), or every N seconds (ticks
at whole multiples of N seconds since the Unix epoch, so every node agrees on
them). The job's id names the schedule and the tick
(``schedule:<name>:20261204T030000Z``), so it is also an idempotency key.

How a tick fires exactly once. The document keeps one :class:`ScheduleMark`
per schedule: the latest tick handled. The leader's control loop asks each
schedule for its latest tick at or before now (:meth:`Schedule.latest_due`)
and submits a :class:`~engine.optypes.FireSchedules` for those it has not
handled yet; the transition (:func:`engine.schedulemoves.fire_schedules`)
pushes a tick's job and moves the mark in the same commit, and does nothing
for a tick at or before the mark. A conditional write lands for one leader
only (I3), and a leader that loses the race re-applies on the version that
won, where the mark already covers the tick. So a failover neither doubles
a tick nor, within ``catch_up_seconds``, skips one: the new leader fires the
latest tick the old one did not.

Rules for the ticks nobody fired on time (the cluster was down, or no node
knew the schedule):

* **coalesced**: after a gap, only the latest tick fires, once;
* **too late**: a tick more than ``catch_up_seconds`` old when its commit is
  applied is marked *missed* and pushes nothing;
* **new schedule**: a schedule with no mark fires ticks from the moment this
  leader began leading; an earlier one is only *registered* as the mark.

And for the ticks of a schedule an operator paused (:func:`pause_schedule_op`;
the document keeps the pause, so every node and every later leader obeys it):
each is marked *skipped* and pushes nothing, so resuming fires the next tick
and never catches up on the paused ones.

Pure: no I/O, no clock (``now`` comes in).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any, Literal, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from engine.errors import ValidationError
from engine.ops import check_queue
from engine.optypes import FireSchedules, ForgetSchedule, NewJob, ScheduleFire, SetSchedulePaused
from engine.payloads import encode_payload
from engine.policy import Policy

__all__ = [
    "DEFAULT_CATCH_UP_SECONDS",
    "MAX_EVERY_SECONDS",
    "Schedule",
    "ScheduleMark",
    "ScheduleOutcome",
    "check_schedule_name",
    "fire_op",
    "forget_schedule_op",
    "pause_schedule_op",
    "schedule",
    "tick_of",
]

#: How late a tick may still fire (one hour): a nightly report still runs
#: after a short outage, a week-old tick does not.
DEFAULT_CATCH_UP_SECONDS = 3600.0
#: The longest ``every`` (31 days); longer periods are what cron is for.
MAX_EVERY_SECONDS = 31 * 86400
# Schedule names become part of job ids: the queue-name alphabet, shorter.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_NAME_RULE = "1-100 of letters, digits, '_', '.' or '-', starting with a letter or digit"
# cronsim steps in whole seconds at most; a microsecond past ``now`` makes a
# tick exactly at ``now`` count as due (its reverse iteration is exclusive).
_JUST_AFTER = timedelta(microseconds=1)
# The most forward steps latest_due takes past cronsim's reverse answer (see there).
_WALK_STEPS = 100_000

ScheduleOutcome = Literal["registered", "fired", "missed", "skipped"]
# A tick's job id: schedule:<name>:<tick, UTC, to the second>.
_JOB_PREFIX = "schedule:"
_STAMP = "%Y%m%dT%H%M%SZ"


class ScheduleMark(NamedTuple):
    """The latest tick of a schedule that the document has handled: ``fired``
    (``job`` is the id pushed), ``missed`` (too late, nothing pushed),
    ``registered`` (the schedule was new; nothing pushed) or ``skipped`` (the
    schedule was paused; nothing pushed). ``at``: when the commit that
    handled it was applied."""

    tick: datetime
    outcome: ScheduleOutcome
    job: str | None
    at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """One recurring job. Build with :func:`schedule`, which validates.

    Exactly one of ``cron`` and ``every_seconds`` is set. ``payload`` is the
    job's encoded JSON; ``timezone`` an IANA name, for ``cron`` only."""

    name: str
    queue: str
    payload: bytes
    cron: str | None
    every_seconds: int | None
    timezone: str
    max_attempts: int
    catch_up_seconds: float

    def latest_due(self, now: datetime) -> datetime | None:
        """The latest tick at or before ``now``, in UTC; None if the cron
        expression has none (it never matches)."""
        if self.every_seconds is not None:
            seconds = math.floor(now.timestamp() / self.every_seconds) * self.every_seconds
            return datetime.fromtimestamp(seconds, UTC)
        assert self.cron is not None
        try:
            tick = next(CronSim(self.cron, (now + _JUST_AFTER).astimezone(ZoneInfo(self.timezone)), reverse=True))
        except StopIteration:
            return None
        # The forward iteration defines the ticks (next_due); the reverse one
        # can fall short of them: around Australia/Lord_Howe's half-hour
        # daylight-saving change, "* 0 1-7 10 *" went back from January to
        # 00:29 on the first Sunday of October, past its ticks up to 00:59
        # (found by tests/fuzz/test_fuzz_schedules.py). So walk forward from
        # its answer to the last tick at or before now (one step, usually);
        # bounded, so that a far-off answer can only make a tick late.
        for later in islice(CronSim(self.cron, tick), _WALK_STEPS):
            if later > now:
                break
            tick = later
        return tick.astimezone(UTC)

    def next_due(self, after: datetime) -> datetime | None:
        """The first tick strictly after ``after``, in UTC (None: never)."""
        if self.every_seconds is not None:
            seconds = (math.floor(after.timestamp() / self.every_seconds) + 1) * self.every_seconds
            return datetime.fromtimestamp(seconds, UTC)
        assert self.cron is not None
        try:
            return next(CronSim(self.cron, after.astimezone(ZoneInfo(self.timezone)))).astimezone(UTC)
        except StopIteration:
            return None

    def describe(self) -> str:
        """In words: "Every fifth minute of every hour (Europe/Paris)", "Every 30 s"."""
        if self.every_seconds is not None:
            return f"Every {self.every_seconds} s"
        assert self.cron is not None
        try:
            words = CronSim(self.cron, datetime.now(UTC)).explain()
        except Exception:  # explain() is cronsim's extra: a page must not fail on it
            words = self.cron
        return f"{words} ({self.timezone})"

    def job_id(self, tick: datetime) -> str:
        """The id of the job the tick pushes: the same on every node."""
        return f"{_JOB_PREFIX}{self.name}:{tick.astimezone(UTC).strftime(_STAMP)}"

    def fire(self, tick: datetime) -> ScheduleFire:
        """What a :class:`~engine.optypes.FireSchedules` carries for ``tick``."""
        return ScheduleFire(self.name, tick, self.queue,
                            NewJob(self.job_id(tick), self.payload, self.max_attempts, 0.0),
                            self.catch_up_seconds)


def tick_of(job_id: str) -> tuple[str, datetime] | None:
    """The schedule name and the tick a tick's job id names (the inverse of
    :meth:`Schedule.job_id`); None for any other id."""
    if not job_id.startswith(_JOB_PREFIX):
        return None
    name, _, stamp = job_id[len(_JOB_PREFIX):].rpartition(":")
    try:
        return (name, datetime.strptime(stamp, _STAMP).replace(tzinfo=UTC)) if _NAME.fullmatch(name) else None
    except ValueError:
        return None


def schedule(
    name: str,
    *,
    queue: str,
    payload: Any,
    policy: Policy,
    cron: str | None = None,
    every_seconds: int | None = None,
    timezone: str = "UTC",
    max_attempts: int | None = None,
    catch_up_seconds: float = DEFAULT_CATCH_UP_SECONDS,
) -> Schedule:
    """Build a schedule, or raise ValidationError naming what is wrong (a
    bad name, cron expression, time zone, period or payload; both or neither
    of ``cron`` and ``every_seconds``)."""
    check_schedule_name(name)
    check_queue(queue)
    if (cron is None) == (every_seconds is None):
        raise ValidationError(f"schedule {name!r}: give exactly one of cron and every_seconds")
    if cron is not None:
        if not isinstance(cron, str):
            raise ValidationError(f"schedule {name!r}: cron must be a string, got {cron!r}")
        try:
            zone = ZoneInfo(timezone) if isinstance(timezone, str) and timezone else None
        except (ZoneInfoNotFoundError, ValueError):
            zone = None
        if zone is None:
            raise ValidationError(f"schedule {name!r}: unknown time zone {timezone!r}")
        try:
            CronSim(cron, datetime.now(zone))
        except CronSimError as exc:
            raise ValidationError(f"schedule {name!r}: bad cron expression {cron!r}: {exc}") from exc
    elif timezone != "UTC":
        # Ticks every N seconds count from the Unix epoch, in no zone: a zone here is a mistake.
        raise ValidationError(f"schedule {name!r}: timezone applies to cron schedules only, got {timezone!r}")
    elif isinstance(every_seconds, bool) or not isinstance(every_seconds, int) or not (
        1 <= every_seconds <= MAX_EVERY_SECONDS
    ):
        raise ValidationError(
            f"schedule {name!r}: every_seconds must be a whole number of seconds from 1 to "
            f"{MAX_EVERY_SECONDS}, got {every_seconds!r}"
        )
    attempts = policy.max_attempts if max_attempts is None else max_attempts
    if isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= 1000:
        raise ValidationError(f"schedule {name!r}: max_attempts must be an integer from 1 to 1000, got {attempts!r}")
    if (isinstance(catch_up_seconds, bool) or not isinstance(catch_up_seconds, int | float)
            or not math.isfinite(catch_up_seconds) or catch_up_seconds < 0):
        raise ValidationError(f"schedule {name!r}: catch_up_seconds must be a number >= 0, got {catch_up_seconds!r}")
    try:
        encoded = encode_payload(payload, limit=policy.max_payload_bytes)
    except ValidationError as exc:
        raise ValidationError(f"schedule {name!r}: {exc}") from exc
    return Schedule(name=name, queue=queue, payload=encoded, cron=cron, every_seconds=every_seconds,
                    timezone=timezone, max_attempts=attempts,
                    catch_up_seconds=float(catch_up_seconds))


def check_schedule_name(name: Any) -> str:
    """``name`` if it is a valid schedule name; else raise ValidationError."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValidationError(f"a schedule's name must be {_NAME_RULE}, got {name!r}")
    return name


def pause_schedule_op(name: str, *, paused: bool = True) -> SetSchedulePaused:
    """Pause (or, with ``paused=False``, resume) schedule ``name``: its
    outcome is whether it was paused before. Raises ValidationError for a
    bad name, or a ``paused`` that is not a bool."""
    if not isinstance(paused, bool):
        raise ValidationError(f"paused must be true or false, got {paused!r}")
    return SetSchedulePaused(name=check_schedule_name(name), paused=paused)


def forget_schedule_op(name: str) -> ForgetSchedule:
    """Drop schedule ``name``'s mark and pause: its outcome is whether the
    document had either. Raises ValidationError for a bad name."""
    return ForgetSchedule(name=check_schedule_name(name))


def fire_op(schedules: list[Schedule], handled: dict[str, datetime], *, now: datetime,
            since: datetime) -> tuple[FireSchedules | None, dict[str, datetime]]:
    """The leader's step: the :class:`FireSchedules` for every schedule whose
    latest tick at or before ``now`` is later than the one ``handled`` holds
    for it (what this leader saw land), with ``since`` (when it began
    leading); None if there is none. Also returns the ticks it carries, by
    schedule, to be merged into ``handled`` once the commit lands."""
    fires: list[ScheduleFire] = []
    ticks: dict[str, datetime] = {}
    for item in schedules:
        tick = item.latest_due(now)
        if tick is None:
            continue
        seen = handled.get(item.name)
        if seen is not None and tick <= seen:
            continue
        fires.append(item.fire(tick))
        ticks[item.name] = tick
    return (FireSchedules(fires=tuple(fires), since=since) if fires else None), ticks
