"""Reading queue.json into a :class:`~engine.document.QueueState`, strictly.

Anything unexpected — bytes that are not JSON, JSON that is not a queueadmin
document, an unknown format version, a field of the wrong type — raises
:class:`~engine.errors.DocumentError` naming the object and the problem. The
writers never overwrite a document they could not read (I6).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn

import orjson

from engine.document import FORMAT_DELAYED, FORMAT_SEGMENTS, READABLE_FORMATS, QueueState
from engine.errors import DocumentError
from engine.finished import FinishedIds
from engine.model import Attempt, BrokerInfo, DeadLetter, Job, Lease, QueueCounters, exact
from engine.policy import Policy
from engine.rates import MAX_RATE_JOBS, MAX_RATE_SECONDS, MIN_RATE_SECONDS, RateLimit
from engine.schedules import ScheduleMark
from engine.segments import DelayedRef, SegmentRef


class _Reader:
    def __init__(self, key: str) -> None:
        self.key = key

    def fail(self, where: str, problem: str) -> NoReturn:
        raise DocumentError(self.key, f"{where}: {problem}" if where else problem)

    def obj(self, value: Any, where: str) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            self.fail(where, f"expected an object, got {type(value).__name__}")
        return value

    def field(self, obj: Mapping[str, Any], name: str, where: str) -> Any:
        if name not in obj:
            self.fail(where, f"missing field {name!r}")
        return obj[name]

    def array(self, obj: Mapping[str, Any], name: str, where: str) -> list[Any]:
        """A required list."""
        value = self.field(obj, name, where)
        if not isinstance(value, list):
            self.fail(f"{where}.{name}" if where else name, "expected a list")
        return value

    def integer(self, obj: Mapping[str, Any], name: str, where: str, *, low: int = 0) -> int:
        value = self.field(obj, name, where)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            self.fail(f"{where}.{name}", f"expected an integer >= {low}, got {value!r}")
        return value

    def text(self, obj: Mapping[str, Any], name: str, where: str, *, optional: bool = False) -> Any:
        value = obj.get(name) if optional else self.field(obj, name, where)
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value:
            self.fail(f"{where}.{name}", f"expected a non-empty string, got {value!r}")
        return value

    def moment(self, obj: Mapping[str, Any], name: str, where: str, *, optional: bool = False) -> Any:
        value = obj.get(name) if optional else self.field(obj, name, where)
        if value is None and optional:
            return None
        if not isinstance(value, str):
            self.fail(f"{where}.{name}", f"expected an ISO 8601 time, got {value!r}")
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            self.fail(f"{where}.{name}", f"expected an ISO 8601 time, got {value!r}")
        if parsed.tzinfo is None:
            self.fail(f"{where}.{name}", "time has no timezone")
        return parsed

    def flag(self, obj: Mapping[str, Any], name: str, where: str) -> bool:
        """An optional boolean, ``False`` when absent."""
        value = obj.get(name, False)
        if not isinstance(value, bool):
            self.fail(f"{where}.{name}", f"expected true or false, got {value!r}")
        return value

    def history(self, obj: Mapping[str, Any], where: str) -> tuple[Attempt, ...]:
        """A job's finished attempts; absent means none."""
        items = obj.get("history", [])
        if not isinstance(items, list):
            self.fail(f"{where}.history", "expected a list")
        attempts = []
        for i, item in enumerate(items):
            aw = f"{where}.history[{i}]"
            a = self.obj(item, aw)
            end = self.field(a, "end", aw)
            if end not in ("failed", "expired", "requeued"):
                self.fail(f"{aw}.end", f"expected 'failed', 'expired' or 'requeued', got {end!r}")
            error = a.get("error")
            if error is not None and not isinstance(error, str):
                self.fail(f"{aw}.error", "expected a string or null")
            attempts.append(Attempt(
                worker=self.text(a, "worker", aw),
                claimed_at=self.moment(a, "claimed_at", aw),
                heartbeat_at=self.moment(a, "heartbeat_at", aw),
                ended_at=self.moment(a, "ended_at", aw),
                end=end,
                error=error,
            ))
        return tuple(attempts)

    def number(self, obj: Mapping[str, Any], name: str, where: str) -> float:
        value = self.field(obj, name, where)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            self.fail(f"{where}.{name}", f"expected a positive number, got {value!r}")
        return float(value)


@dataclass(frozen=True, slots=True)
class DocumentHeader:
    """What a standby needs from a version: its seq, writer and named leader."""

    seq: int
    writer: str | None
    broker: BrokerInfo


def _load(r: _Reader, data: bytes) -> dict[str, Any]:
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        r.fail("", f"not valid JSON ({exc})")
    if not isinstance(raw, dict) or "format" not in raw:
        r.fail("", "not a queueadmin document (no top-level 'format' field)")
    if type(raw["format"]) is not int or raw["format"] not in READABLE_FORMATS:  # (True == 1 in Python)
        readable = ", ".join(str(f) for f in READABLE_FORMATS)
        r.fail("", f"unsupported format version {raw['format']!r}; this engine reads formats {readable}")
    return raw


def _header(r: _Reader, raw: Mapping[str, Any]) -> tuple[DocumentHeader, list[tuple[str, int]]]:
    seq = r.integer(raw, "seq", "")
    writer = r.text(raw, "writer", "", optional=True)
    recent = []
    for i, item in enumerate(raw.get("recent_commits") or []):
        where = f"recent_commits[{i}]"
        entry = r.obj(item, where)
        recent.append((r.text(entry, "writer", where), r.integer(entry, "seq", where)))
    broker = r.obj(raw.get("broker") or {}, "broker")
    info = BrokerInfo(
        id=r.text(broker, "id", "broker", optional=True),
        url=r.text(broker, "url", "broker", optional=True),
        epoch=r.integer(broker, "epoch", "broker") if "epoch" in broker else 0,
    )
    return DocumentHeader(seq=seq, writer=writer, broker=info), recent


def parse_header(key: str, data: bytes) -> DocumentHeader:
    """The header of ``data`` (the bytes of object ``key``): seq, writer and
    broker, checked as strictly as :func:`parse_document` checks them, with
    the top-level shape of the rest; the jobs, the dead letters and the dedup
    window are not built. For a standby's watch, which runs after every
    leader heartbeat: its cost must not grow with the queue (I11). Whatever
    writes parses the whole document first (I6). Raises DocumentError."""
    r = _Reader(key)
    raw = _load(r, data)
    header, _ = _header(r, raw)
    r.obj(r.field(raw, "queues", ""), "queues")
    for name in ("dead", "jobs"):
        r.array(raw, name, "")
    return header


def _rate_limit(r: _Reader, value: Any, where: str) -> RateLimit:
    """A queue's ``rate_limit``: ``jobs`` and ``seconds`` within their
    bounds, and the window's ``window_start`` and ``window_started`` both or
    neither."""
    raw = r.obj(value, where)
    jobs = r.integer(raw, "jobs", where, low=1)
    seconds = r.number(raw, "seconds", where)
    if jobs > MAX_RATE_JOBS or not MIN_RATE_SECONDS <= seconds <= MAX_RATE_SECONDS:
        r.fail(where, f"expected at most {MAX_RATE_JOBS} jobs per {MIN_RATE_SECONDS:g} to {MAX_RATE_SECONDS:g} "
                      f"seconds, got {jobs} per {seconds:g}")
    if ("window_start" in raw) != ("window_started" in raw):
        r.fail(where, "expected window_start and window_started together, or neither")
    if "window_start" not in raw:
        return RateLimit(jobs=jobs, seconds=seconds)
    return RateLimit(jobs=jobs, seconds=seconds, window_start=r.moment(raw, "window_start", where),
                     window_started=r.integer(raw, "window_started", where))


def _written_at(raw: Mapping[str, Any]) -> datetime | None:
    """The version's ``written_at`` (its writer's clock), or None if it is
    absent or not an ISO 8601 time with a zone. Informational, so never a
    reason to refuse a document: it only seeds ``QueueState.clock_mark``."""
    value = raw.get("written_at")
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def parse_document(key: str, data: bytes, *, policy: Policy, etag: str | None = None) -> QueueState:
    """Parse ``data`` (the bytes of object ``key``) into a state. Raises DocumentError."""
    r = _Reader(key)
    raw = _load(r, data)

    state = QueueState(policy=policy)
    header, recent = _header(r, raw)
    state.recent.extend(recent)
    state.seq = header.seq
    state.writer = header.writer
    state.clock_mark = _written_at(raw)
    state.etag = etag
    state.broker = header.broker
    for name, value in r.obj(r.field(raw, "queues", ""), "queues").items():
        where = f"queues.{name}"
        counters = r.obj(value, where)
        state.queues[name] = QueueCounters(
            **{f: r.integer(counters, f, where) for f in ("pushed", "completed", "failed", "dead")},
            purged=r.integer(counters, "purged", where) if "purged" in counters else 0,
            dead_dropped=r.integer(counters, "dead_dropped", where) if "dead_dropped" in counters else 0,
            paused=r.flag(counters, "paused", where),
            max_running=r.integer(counters, "max_running", where, low=1) if "max_running" in counters else None,
            rate_limit=_rate_limit(r, counters["rate_limit"], f"{where}.rate_limit") if "rate_limit" in counters
            else None,
        )

    _finished(r, raw.get("finished", []), state.finished, "finished")
    _schedules(r, r.obj(raw.get("schedules", {}), "schedules"), state)
    pauses = r.obj(raw.get("schedule_pauses", {}), "schedule_pauses")
    state.schedule_pauses = {name: r.moment(pauses, name, "schedule_pauses") for name in pauses}
    segmented = raw["format"] >= FORMAT_SEGMENTS
    if segmented:
        state.format = raw["format"]
        _finished(r, raw.get("sealed", []), state.sealed, "sealed")
        _lanes(r, r.obj(raw.get("lanes", {}), "lanes"), state)

    for i, item in enumerate(r.array(raw, "dead", "")):
        letter = _dead(r, r.obj(item, f"dead[{i}]"), f"dead[{i}]")
        if letter.id in state.dead:
            r.fail(f"dead[{i}]", f"duplicate dead-letter id {letter.id!r}")
        state.add_dead(letter)

    seen_pos: set[int] = set()
    for i, item in enumerate(r.array(raw, "jobs", "")):
        where = f"jobs[{i}]"
        obj = r.obj(item, where)
        job = _job(r, obj, where)
        if job.id in state.jobs:
            r.fail(where, f"duplicate job id {job.id!r}")
        if job.id in state.dead:
            r.fail(where, f"duplicate id {job.id!r}: it is also in the dead letters")
        if segmented:
            pos = r.integer(obj, "pos", where)
            if pos in seen_pos:
                r.fail(where, f"duplicate pos {pos}")
            seen_pos.add(pos)
            state.restore_job(job, pos)
        else:
            state.add_job(job)
    if segmented:
        next_pos = r.integer(raw, "next_pos", "")
        highest = max(seen_pos | {ref.last_pos for refs in state.lanes.values() for ref in refs}
                      | {ref.max_pos for refs in state.delays.values() for ref in refs}, default=-1)
        if next_pos <= highest:
            r.fail("next_pos", f"{next_pos} is not above every pos in use ({highest})")
        state.next_pos = next_pos
    state.dirty = False
    return state


def parse_segment_jobs(key: str, items: list[Any], *, first: int = 0) -> list[tuple[Job, int]]:
    """The jobs of a segment (decoded JSON objects, see
    :func:`engine.segments.read_segment`) as ``(job, pos)`` pairs, checked
    as strictly as the document's. ``items`` may be a slice of them from
    index ``first`` (for the messages). Raises DocumentError naming ``key``."""
    r = _Reader(key)
    result = []
    for i, item in enumerate(items, start=first):
        where = f"jobs[{i}]"
        obj = r.obj(item, where)
        job = _job(r, obj, where)
        if job.status != "pending":
            r.fail(where, "a segment holds only pending jobs")
        result.append((job, r.integer(obj, "pos", where)))
    return result


def _lanes(r: _Reader, lanes: Mapping[str, Any], state: QueueState) -> None:
    """Format 2's ``lanes``: per queue, its segment references, in order (and format 3's delayed ones)."""
    for queue, lane in lanes.items():
        where = f"lanes.{queue}"
        refs: list[SegmentRef] = []
        for i, item in enumerate(r.array(r.obj(lane, where), "segments", where)):
            rw = f"{where}.segments[{i}]"
            obj = r.obj(item, rw)
            ref = SegmentRef(
                key=r.text(obj, "key", rw),
                total=r.integer(obj, "total", rw, low=1),
                consumed=r.integer(obj, "consumed", rw),
                front=r.integer(obj, "front", rw),
                last_pos=r.integer(obj, "last_pos", rw),
                size=r.integer(obj, "size", rw, low=1),
                sha256=r.text(obj, "sha256", rw),
                oldest_enqueued_at=r.moment(obj, "oldest_enqueued_at", rw),
                epoch=r.integer(obj, "epoch", rw),
                sealed_at=r.moment(obj, "sealed_at", rw),
            )
            if ref.consumed >= ref.total or ref.front > ref.last_pos:
                r.fail(rw, "a referenced segment must have jobs left, with front <= last_pos")
            if refs and ref.front <= refs[-1].last_pos:
                r.fail(rw, "segments must follow each other in pos order")
            refs.append(ref)
        if refs:
            state.lanes[queue] = refs
        delayed = _delayed_refs(r, r.obj(lane, where), where, allowed=state.format >= FORMAT_DELAYED)
        if delayed:
            state.delays[queue] = delayed


def _delayed_refs(r: _Reader, lane: Mapping[str, Any], where: str, *, allowed: bool) -> list[DelayedRef]:
    """Format 3's ``lanes.<queue>.delayed``: references to delayed segments,
    in (``first_due``, ``key``) order. Refused in a format-2 document: no
    writer of format 2 writes them, and a reader that took them as format 2
    would hand the document to nodes that cannot see them."""
    if "delayed" not in lane:
        return []
    if not allowed:
        r.fail(f"{where}.delayed", "delayed segments need format 3")
    refs: list[DelayedRef] = []
    for i, item in enumerate(r.array(lane, "delayed", where)):
        rw = f"{where}.delayed[{i}]"
        obj = r.obj(item, rw)
        ref = DelayedRef(
            key=r.text(obj, "key", rw),
            total=r.integer(obj, "total", rw, low=1),
            size=r.integer(obj, "size", rw, low=1),
            sha256=r.text(obj, "sha256", rw),
            epoch=r.integer(obj, "epoch", rw),
            sealed_at=r.moment(obj, "sealed_at", rw),
            first_due=r.moment(obj, "first_due", rw),
            last_due=r.moment(obj, "last_due", rw),
            min_pos=r.integer(obj, "min_pos", rw),
            max_pos=r.integer(obj, "max_pos", rw),
        )
        if ref.first_due > ref.last_due or ref.min_pos > ref.max_pos:
            r.fail(rw, "a delayed segment needs first_due <= last_due and min_pos <= max_pos")
        if refs and (ref.first_due, ref.key) < (refs[-1].first_due, refs[-1].key):
            r.fail(rw, "delayed segments must be in due order")
        if any(other.key == ref.key for other in refs):
            r.fail(rw, f"the delayed segment {ref.key} is referenced twice")
        refs.append(ref)
    return refs


_OUTCOMES = ("registered", "fired", "missed", "skipped")


def _schedules(r: _Reader, raw: Mapping[str, Any], state: QueueState) -> None:
    """``schedules``: per schedule, its mark (:mod:`engine.schedules`)."""
    for name, value in raw.items():
        where = f"schedules.{name}"
        mark = r.obj(value, where)
        outcome = r.field(mark, "outcome", where)
        if outcome not in _OUTCOMES:
            r.fail(f"{where}.outcome", f"expected one of {', '.join(_OUTCOMES)}, got {outcome!r}")
        job = r.text(mark, "job", where, optional=True)
        if (job is None) != (outcome != "fired"):
            r.fail(f"{where}.job", "a fired tick names its job, and only a fired one")
        state.schedules[name] = ScheduleMark(r.moment(mark, "tick", where), outcome, job, r.moment(mark, "at", where))


def _finished(r: _Reader, groups: Any, window: FinishedIds, name: str) -> None:
    """A window of ids (``finished``, or format 2's ``sealed``):
    ``[["<time>", "<id> <id> ..."], ...]``; absent (a document written before
    the window existed) is read as empty."""
    if not isinstance(groups, list):
        r.fail(name, "expected a list")
    for i, group in enumerate(groups):
        where = f"{name}[{i}]"
        if not isinstance(group, list) or len(group) != 2 or not isinstance(group[1], str):
            r.fail(where, 'expected ["<time>", "<ids separated by spaces>"]')
        at = r.moment({"at": group[0]}, "at", where)
        for job_id in group[1].split():
            window.add(job_id, at)


def _job(r: _Reader, obj: Mapping[str, Any], where: str) -> Job:
    status = r.field(obj, "status", where)
    if status not in ("pending", "running"):
        r.fail(f"{where}.status", f"expected 'pending' or 'running', got {status!r}")
    lease_raw = obj.get("lease")
    lease = None
    if lease_raw is not None:
        lw = f"{where}.lease"
        lo = r.obj(lease_raw, lw)
        lease = Lease(
            worker=r.text(lo, "worker", lw),
            token=r.text(lo, "token", lw),
            claimed_at=r.moment(lo, "claimed_at", lw),
            heartbeat_at=r.moment(lo, "heartbeat_at", lw),
            expires_at=r.moment(lo, "expires_at", lw),
            seconds=r.number(lo, "seconds", lw),
        )
    if (status == "running") != (lease is not None):
        r.fail(where, "a running job needs a lease and a pending job must not have one")
    last_error = obj.get("last_error")
    if last_error is not None and not isinstance(last_error, str):
        r.fail(f"{where}.last_error", "expected a string")
    return Job(
        id=r.text(obj, "id", where),
        queue=r.text(obj, "queue", where),
        payload=exact(orjson.dumps(r.field(obj, "payload", where))),
        status=status,
        attempts=r.integer(obj, "attempts", where),
        max_attempts=r.integer(obj, "max_attempts", where, low=1),
        enqueued_at=r.moment(obj, "enqueued_at", where),
        not_before=r.moment(obj, "not_before", where, optional=True),
        lease=lease,
        last_error=last_error,
        history=r.history(obj, where),
    )


def _dead(r: _Reader, obj: Mapping[str, Any], where: str) -> DeadLetter:
    error = r.field(obj, "error", where)
    if not isinstance(error, str):
        r.fail(f"{where}.error", "expected a string")
    return DeadLetter(
        id=r.text(obj, "id", where),
        queue=r.text(obj, "queue", where),
        payload=exact(orjson.dumps(r.field(obj, "payload", where))),
        attempts=r.integer(obj, "attempts", where),
        max_attempts=r.integer(obj, "max_attempts", where, low=1),
        enqueued_at=r.moment(obj, "enqueued_at", where),
        died_at=r.moment(obj, "died_at", where),
        error=error,
        history=r.history(obj, where),
    )


def empty_state(*, policy: Policy) -> QueueState:
    """The state of a queue whose document does not exist yet."""
    return QueueState(policy=policy)
