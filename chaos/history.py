"""What a chaos run records: every client call and its answer, every document
version seen, every node health answer, and every fault the nemesis injected.

All times are ``time.monotonic()`` seconds of the harness process, so that
events from different threads can be ordered. The history is plain data: the
checker (:mod:`chaos.checker`) reads it and nothing else, and tests build
histories by hand.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson


@dataclass(slots=True, kw_only=True)
class Call:
    """One HTTP request a client sent, and its answer.

    ``status`` is the HTTP status, or None when no answer came: then ``error``
    says why (``"timeout"`` when the client gave up waiting, or the transport
    error, e.g. connection refused). ``end`` is None while the call is in flight.
    """

    id: int
    client: str
    op: str  # push, claim, heartbeat, complete, fail
    node: str
    args: dict[str, Any]
    start: float
    end: float | None = None
    status: int | None = None
    answer: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def code(self) -> str | None:
        """The API's error code (``lease_lost``, ``not_leader``, ...) of a refusal."""
        return self.answer.get("error") if isinstance(self.answer, dict) else None


@dataclass(slots=True, kw_only=True)
class Version:
    """One version of the document, as a watcher or a node reported it."""

    at: float
    source: str  # "store" (the watcher) or a node's URL (its health answer)
    seq: int
    epoch: int
    broker: str | None
    writer: str | None = None
    digest: str | None = None  # content hash without volatile parts; None from health answers
    role: str | None = None  # from health answers
    pid: int | None = None  # the node process that answered (health)
    segments: list[str] | None = None  # format 2: the segment keys the version references (store)
    schedules: dict[str, str] | None = None  # each schedule's marked tick, as written (store)
    schedule_marks: dict[str, list[str]] | None = None  # each mark's [outcome, at], as written (store)
    schedule_pauses: dict[str, str] | None = None  # each paused schedule's pause start, as written (store)
    limits: dict[str, int] | None = None  # each limited queue's max_running (store)
    running: dict[str, int] | None = None  # each limited queue's running jobs (store)
    # Each rate-limited queue's [jobs, seconds, window_start or None, window_started] (store)
    rates: dict[str, list[Any]] | None = None
    rate_starts: dict[str, list[list[str]]] | None = None  # ... and its running jobs' [id, claimed_at] (store)


@dataclass(slots=True, kw_only=True)
class Fault:
    """One fault the nemesis injected: what, on which node, when it started and ended."""

    kind: str
    node: str | None
    start: float
    end: float | None = None
    detail: str = ""
    recovered_at: float | None = None  # when a push next succeeded
    #: A ``clock`` fault: how far the node's wall clock read off (seconds, + ahead) while it lasted.
    clock_offset: float = 0.0
    #: A ``stop`` fault: the node's exit status (None: it did not exit in time
    #: and was killed), when it exited, and whether it led as it was stopped.
    exit_status: int | None = None
    exited_at: float | None = None
    led: bool = False


@dataclass(slots=True, kw_only=True)
class Idle:
    """One node's cost over the idle period after the nemesis stopped."""

    node: str
    phase: str  # "before" the nemesis started, or "after" it stopped
    seconds: float
    cpu_seconds: float
    store_requests: int
    heartbeat_seconds: float


@dataclass(slots=True)
class History:
    """Thread-safe recorder. Append-only while the run lasts."""

    calls: list[Call] = field(default_factory=list)
    versions: list[Version] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    idle: list[Idle] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)
    final_document: dict[str, Any] | None = None
    store_faults: dict[str, int] = field(default_factory=dict)  # injected by the fault stores, by kind
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def begin(self, client: str, op: str, node: str, args: dict[str, Any]) -> Call:
        with self._lock:
            call = Call(id=len(self.calls), client=client, op=op, node=node, args=args, start=time.monotonic())
            self.calls.append(call)
        return call

    def part_of(self, batch: Call, op: str, args: dict[str, Any], *, status: int | None, answer: Any,
                error: str | None) -> Call:
        """Record one item of the finished ``batch`` call (``POST /ack``) as a
        call of its own kind, sent and answered when the batch was, so that
        the checker reads a batched complete or fail as it reads a single one."""
        with self._lock:
            call = Call(id=len(self.calls), client=batch.client, op=op, node=batch.node, args=args,
                        start=batch.start, end=batch.end, status=status, answer=answer, error=error)
            self.calls.append(call)
        return call

    @staticmethod
    def finish(call: Call, *, status: int | None = None, answer: Any = None, error: str | None = None) -> None:
        call.status, call.answer, call.error = status, answer, error
        call.end = time.monotonic()

    def version(self, version: Version) -> None:
        with self._lock:
            self.versions.append(version)

    def fault(self, fault: Fault) -> Fault:
        with self._lock:
            self.faults.append(fault)
        return fault

    def event(self, text: str) -> None:
        with self._lock:
            self.events.append((time.monotonic(), text))

    def dump(self, path: Path) -> None:
        """Write the whole history as one JSON object (for reading after a failed run)."""
        with self._lock:
            data = {
                "calls": [asdict(c) for c in self.calls],
                "versions": [asdict(v) for v in self.versions],
                "faults": [asdict(f) for f in self.faults],
                "idle": [asdict(i) for i in self.idle],
                "events": self.events,
                "store_faults": self.store_faults,
                "final_document": self.final_document,
            }
        try:
            path.write_bytes(orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS, default=repr))
        except TypeError:  # nested deeper than orjson writes (a deep payload in the final document)
            path.write_text(json.dumps(data, default=repr))

    @classmethod
    def load(cls, path: Path) -> History:
        """Read a history written by :meth:`dump` (to check it again)."""
        raw = path.read_bytes()
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            data = json.loads(raw)
        return cls(
            calls=[Call(**c) for c in data["calls"]],
            versions=[Version(**v) for v in data["versions"]],
            faults=[Fault(**f) for f in data["faults"]],
            idle=[Idle(**i) for i in data["idle"]],
            events=[(float(at), str(text)) for at, text in data["events"]],
            final_document=data["final_document"],
            store_faults=data["store_faults"],
        )
