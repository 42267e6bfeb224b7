"""One committed version of ``queue.json``, decoded for the dashboard.

A :class:`Snapshot` is read-only: it holds the document's header (seq,
writer, broker, per-queue counters and flags), its jobs and dead letters as
the plain dicts the JSON decodes to, and summaries derived from them. Pages
and the live consumer render from the same snapshot, so a page and its live
update never disagree.

The engine does the decoding (:mod:`engine.decoding`): on the leader,
incrementally from the committer's encoded parts (a
:class:`~engine.DocumentDecoder` per source, see
:class:`~queueadmin.dashboard.source.SnapshotSource`); anywhere else (a
standby node, no broker) from the whole document read from the store
(:func:`decode_document`).

Nothing here writes anything.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from engine import (
    DOCUMENT_KEY,
    FORMAT,
    FORMAT_SEGMENTS,
    DecodedDocument,
    DelayedRef,
    DocumentError,
    RateLimit,
    SegmentRef,
    decode_document_json,
)
from queueadmin.dashboard.redaction import redact_error, secret_keys
from queueadmin.dashboard.segments import delays_of, lanes_of

Doc = dict[str, Any]

# How long after its last activity a worker counts as "seen recently".
WORKER_SEEN_SECONDS = 15 * 60.0


def sortable(value: str) -> str:
    """A document time as ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` in UTC, so that
    strings sort as the instants do. The engine writes this form (without
    the fraction when it is zero); anything else is parsed and rewritten."""
    if value[-1:] == "Z":
        if len(value) == 27:
            return value
        if len(value) == 20:
            return value[:-1] + ".000000Z"
    return datetime.fromisoformat(value).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _limit(value: Any) -> int | None:
    """A queue's ``max_running`` as written; None when absent or malformed
    (the engine refuses such a document, I6; the dashboard still shows it)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def _rate(value: Any) -> RateLimit | None:
    """A queue's ``rate_limit`` as written, read leniently like
    :func:`_limit`: None when absent or malformed, and no window when the
    window's fields are malformed (the engine refuses such a document, I6)."""
    if not isinstance(value, dict):
        return None
    jobs, seconds = value.get("jobs"), value.get("seconds")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds < float("inf"):
        return None
    started = value.get("window_started")
    try:
        start = moment(value.get("window_start")) if isinstance(value.get("window_start"), str) else None
    except ValueError:
        start = None
    if start is None or start.tzinfo is None or isinstance(started, bool) or not isinstance(started, int):
        return RateLimit(jobs=jobs, seconds=float(seconds))
    return RateLimit(jobs=jobs, seconds=float(seconds), window_start=start, window_started=started)


def moment(value: str | None) -> datetime | None:
    """A document time (RFC 3339, UTC) as an aware datetime; None stays None."""
    return datetime.fromisoformat(value) if value else None


@dataclass(slots=True, kw_only=True)
class QueueSummary:
    """One queue's line on the overview."""

    name: str
    #: Pending jobs: in the document and, in format 2, in segment objects.
    pending: int = 0
    #: Of ``pending``, how many sit in segment objects (format 2), delayed
    #: segments included (format 3).
    in_segments: int = 0
    #: Of ``in_segments``, how many sit in delayed segments (format 3).
    delayed_away: int = 0
    #: Of ``delayed_away``, how many are due (counted in ``ready``): those of
    #: delayed segments whose last job is due. A batch due at once waits there
    #: until claims make room in the document; a segment only partly due
    #: counts as not due (its jobs' times are not read), so this is a floor.
    due_away: int = 0
    #: How many segment objects hold them.
    segments: int = 0
    #: Those objects' size in the store, in bytes (an object stays whole
    #: until every job in it is claimed).
    segment_bytes: int = 0
    #: When the oldest of them was written (None: no segments).
    oldest_sealed_at: datetime | None = None
    #: Pending and due (no not_before in the future): in the document, in
    #: segments, and ``due_away``.
    ready: int = 0
    running: int = 0
    dead: int = 0
    pushed: int = 0
    completed: int = 0
    failed: int = 0
    purged: int = 0
    paused: bool = False
    #: Its concurrency limit (``max_running``), or None.
    max_running: int | None = None
    #: Its rate limit (``rate_limit``), or None.
    rate: RateLimit | None = None
    oldest_pending_at: datetime | None = None
    #: When the next of its jobs not due yet comes due, as far as the
    #: document shows: the earliest future ``not_before`` of its jobs in the
    #: document, and the ``first_due`` of its delayed segments not due yet.
    #: A delayed segment already partly due may hold one due sooner (its
    #: jobs' times are not read). None when nothing waits to come due.
    next_due_at: datetime | None = None

    @property
    def ready_here(self) -> int:
        """Of ``ready``, how many are in the document (what every commit writes)."""
        return self.ready - self.due_away - (self.in_segments - self.delayed_away)

    @property
    def delayed_here(self) -> int:
        """Pending jobs in the document that are not due yet."""
        return self.pending - self.in_segments - self.ready_here


@dataclass(slots=True, kw_only=True)
class WorkerSummary:
    """A worker seen in the document: the jobs it holds and when it last acted."""

    name: str
    jobs: list[Doc] = field(default_factory=list)
    last_seen: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadGroup:
    """Dead letters of one queue that died of the same error signature."""

    queue: str
    signature: str
    ids: tuple[str, ...]
    first_died_at: datetime
    last_died_at: datetime
    sample_error: str

    @property
    def key(self) -> str:
        """A stable identifier of the group, for URLs and forms."""
        return group_key(self.queue, self.signature)

    @property
    def count(self) -> int:
        return len(self.ids)


@dataclass(frozen=True, slots=True)
class RetryGroup:
    """Jobs of one queue still in the document, pending or running again,
    whose last attempt failed with the same error signature: what is failing
    now, before it reaches the dead letters."""

    queue: str
    signature: str
    ids: tuple[str, ...]
    #: How many of them are running again now (the rest wait, most for their backoff).
    running: int
    #: When the latest of their failed attempts ended (None: no attempt recorded).
    last_failed_at: datetime | None
    sample_error: str

    @property
    def count(self) -> int:
        return len(self.ids)


class Snapshot:
    """A decoded, read-only version of the queue document.

    Raises DocumentError for a format-2 header whose segment references are
    malformed (the pages then show the document as unreadable).

    ``etag`` and ``size`` describe the stored object; ``taken_at`` is when the
    dashboard read it. Derived summaries are computed once, on first use.
    """

    def __init__(self, header: Doc, jobs: Sequence[Doc], dead: Sequence[Doc], *, etag: str | None, size: int,
                 taken_at: datetime) -> None:
        self.header = header
        self.jobs = jobs
        self.dead = dead
        self.etag = etag
        self.size = size
        self.taken_at = taken_at
        self.seq: int = header.get("seq", 0)
        self.writer: str | None = header.get("writer")
        self.written_at = moment(header.get("written_at"))
        self.broker: Doc = header.get("broker") or {"id": None, "url": None, "epoch": 0}
        #: Format 2: the ``pos`` the next job placed in the queue will get
        #: (every job placed before this version has a smaller one); None in format 1.
        segmented = isinstance(header.get("format"), int) and header["format"] >= FORMAT_SEGMENTS
        self.next_pos: int | None = header.get("next_pos") if segmented else None
        self._queues: dict[str, QueueSummary] | None = None
        self._by_id: dict[str, Doc] | None = None
        self._dead_by_id: dict[str, Doc] | None = None
        self._workers: dict[str, WorkerSummary] | None = None
        self._dead_groups: list[DeadGroup] | None = None
        self._retry_groups: list[RetryGroup] | None = None
        self._status_counts: Counter[str] | None = None
        self._ordered: Sequence[Doc] | None = None
        self._sealed: frozenset[str] | None = None
        #: Format 2: per queue, its segment references, oldest first (see
        #: :mod:`.segments`); empty in format 1.
        self.lanes: dict[str, list[SegmentRef]] = lanes_of(header) if segmented else {}
        #: Format 3: per queue, its delayed segment references, in due order
        #: (jobs due later, or due together past a share of the front, outside
        #: the FIFO order); empty before format 3.
        self.delays: dict[str, list[DelayedRef]] = delays_of(header) if segmented else {}
        #: The queues this snapshot was narrowed to (:meth:`visible`); None: every queue.
        self.sees: Callable[[str], bool] | None = None

    def at(self, taken_at: datetime) -> Snapshot:
        """The same version, as read again at ``taken_at``: the document is
        unchanged, but ages, late commits and ready counts move with the
        clock. Shares the decoded data and the lookups that do not depend on
        the time; summaries that do are computed again, on first use."""
        again = Snapshot(self.header, self.jobs, self.dead, etag=self.etag, size=self.size, taken_at=taken_at)
        again._by_id, again._dead_by_id = self._by_id, self._dead_by_id
        again._dead_groups, again._status_counts = self._dead_groups, self._status_counts
        again._retry_groups = self._retry_groups
        again._ordered, again._sealed = self._ordered, self._sealed
        return again

    def visible(self, sees: Callable[[str], bool]) -> Snapshot:
        """This version as a user who sees only the queues ``sees`` accepts
        (:func:`.scopes.visibility`) is shown it: the other queues' counters,
        segment references, jobs and dead letters are left out, so every
        summary, list and lookup drawn from it acts as if they did not exist.
        The broker's own fields (leader, seq, size) stay. O(jobs)."""
        header = dict(self.header, queues={q: c for q, c in (self.header.get("queues") or {}).items() if sees(q)})
        lanes = self.header.get("lanes")
        if isinstance(lanes, dict):
            header["lanes"] = {q: lane for q, lane in lanes.items() if sees(q)}
        narrowed = Snapshot(header, [j for j in self.jobs if sees(j["queue"])],
                            [d for d in self.dead if sees(d["queue"])], etag=self.etag, size=self.size,
                            taken_at=self.taken_at)
        narrowed.sees = sees
        return narrowed

    @classmethod
    def decoded(cls, document: DecodedDocument, *, etag: str | None, taken_at: datetime) -> Snapshot:
        """The snapshot of a version the engine decoded, stored with ``etag``."""
        return cls(document.header, document.jobs, document.dead, etag=etag, size=document.size, taken_at=taken_at)

    @classmethod
    def empty(cls, *, taken_at: datetime) -> Snapshot:
        """The queue before its document exists."""
        return cls({"format": FORMAT, "seq": 0, "queues": {}}, [], [], etag=None, size=0, taken_at=taken_at)

    # -- lookups ---------------------------------------------------------------------

    def job(self, job_id: str) -> tuple[Doc, str] | None:
        """The job or dead letter ``job_id`` and its status (pending, running or dead)."""
        if self._by_id is None:
            self._by_id = {j["id"]: j for j in self.jobs}
            self._dead_by_id = {d["id"]: d for d in self.dead}
        assert self._dead_by_id is not None
        found = self._by_id.get(job_id)
        if found is not None:
            return found, found["status"]
        dead = self._dead_by_id.get(job_id)
        return (dead, "dead") if dead is not None else None

    @property
    def ordered_jobs(self) -> Sequence[Doc]:
        """The document's jobs in FIFO order: by ``pos`` in format 2 (where
        jobs refilled from a segment are appended to the list with their
        old, smaller ``pos``), the list order in format 1. Computed once."""
        if self._ordered is None:
            if self.next_pos is not None:  # format 2 or 3
                self._ordered = sorted(self.jobs, key=lambda j: j.get("pos", 0))
            else:
                self._ordered = self.jobs
        return self._ordered

    def sealed_recently(self, job_id: str) -> bool:
        """Whether ``job_id`` is in the document's ``sealed`` window (format 2):
        it was moved into a segment object recently."""
        if self._sealed is None:
            self._sealed = frozenset(
                job for group in (self.header.get("sealed") or ()) for job in str(group[1]).split())
        return job_id in self._sealed

    def in_segments(self, queue: str | None = None) -> int:
        """How many pending jobs of ``queue`` (default every queue) sit in
        segment objects, delayed ones included, from the references alone
        (no I/O)."""
        lanes = self.lanes if queue is None else {queue: self.lanes.get(queue, [])}
        delays = self.delays if queue is None else {queue: self.delays.get(queue, [])}
        return (sum(ref.remaining for refs in lanes.values() for ref in refs)
                + sum(ref.total for refs in delays.values() for ref in refs))

    def segment_refs(self) -> dict[str, list[SegmentRef]]:
        """Per queue, every segment a lookup by id may find a pending job in:
        its segments, then its delayed ones (as ``DelayedRef.as_segment``
        describes them). No I/O."""
        refs = {queue: list(lane) for queue, lane in self.lanes.items()}
        for queue, delays in self.delays.items():
            refs.setdefault(queue, []).extend(ref.as_segment() for ref in delays)
        return refs

    def select(self, *, queue: str | None = None, status: str | None = None) -> list[Doc]:
        """Jobs (or, for status ``dead``, dead letters) of ``queue`` with
        ``status`` that are in the document, in FIFO order (see
        :attr:`ordered_jobs`; dead letters in the order they died). Jobs in
        segment objects are not among them (see :mod:`.segments`)."""
        items: Iterable[Doc] = self.dead if status == "dead" else self.ordered_jobs
        return [
            j for j in items
            if (queue is None or j["queue"] == queue) and (status in (None, "dead") or j["status"] == status)
        ]

    # -- summaries -------------------------------------------------------------------

    @property
    def queues(self) -> dict[str, QueueSummary]:
        """Every queue named in the document, by name, sorted."""
        if self._queues is None:
            self._queues = self._summarise()
        return self._queues

    def _summarise(self) -> dict[str, QueueSummary]:
        rows: dict[str, QueueSummary] = {}
        for name, counters in sorted((self.header.get("queues") or {}).items()):
            rows[name] = QueueSummary(
                name=name,
                pushed=counters.get("pushed", 0),
                completed=counters.get("completed", 0),
                failed=counters.get("failed", 0),
                purged=counters.get("purged", 0),
                paused=bool(counters.get("paused", False)),
                max_running=_limit(counters.get("max_running")),
                rate=_rate(counters.get("rate_limit")),
            )
        # Compare times as canonical strings: parsing 100k timestamps per
        # version would cost more than everything else here together.
        now = sortable(self.taken_at.isoformat())
        oldest: dict[str, str] = {}
        next_due: dict[str, str] = {}
        for job in self.jobs:
            queue = job["queue"]
            row = rows.get(queue) or rows.setdefault(queue, QueueSummary(name=queue))
            if job["status"] == "running":
                row.running += 1
                continue
            row.pending += 1
            not_before = job.get("not_before")
            due_at = None if not_before is None else sortable(not_before)
            if due_at is None or due_at <= now:
                row.ready += 1
            elif queue not in next_due or due_at < next_due[queue]:
                next_due[queue] = due_at
            enqueued = sortable(job["enqueued_at"])
            if queue not in oldest or enqueued < oldest[queue]:
                oldest[queue] = enqueued
        for queue, refs in self.lanes.items():
            row = rows.get(queue) or rows.setdefault(queue, QueueSummary(name=queue))
            held = sum(ref.remaining for ref in refs)
            # Segments hold only jobs that were ready when sealed (delayed
            # ones stay in the document), so all of them are ready.
            row.pending += held
            row.ready += held
            row.in_segments = held
            row.segments = len(refs)
            row.segment_bytes = sum(ref.size for ref in refs)
            row.oldest_sealed_at = min(ref.sealed_at for ref in refs)
            # A reference knows the enqueue time of its first unconsumed job:
            # the first segment's is the oldest the backlog holds in FIFO
            # order (a requeued job deeper inside may be older; it is not read).
            first = sortable(refs[0].oldest_enqueued_at.isoformat())
            if queue not in oldest or first < oldest[queue]:
                oldest[queue] = first
        for queue, delays in self.delays.items():
            row = rows.get(queue) or rows.setdefault(queue, QueueSummary(name=queue))
            held = sum(ref.total for ref in delays)
            # Most are not due yet (they come back before they are); those
            # due together past a share of the front wait for claims to make
            # room (docs/format.md, "Refill (delayed)"): due, so ready.
            due = sum(ref.total for ref in delays if ref.last_due <= self.taken_at)
            row.pending += held
            row.ready += due
            row.in_segments += held
            row.delayed_away = held
            row.due_away = due
            row.segments += len(delays)
            row.segment_bytes += sum(ref.size for ref in delays)
            sealed = min(ref.sealed_at for ref in delays)
            if row.oldest_sealed_at is None or sealed < row.oldest_sealed_at:
                row.oldest_sealed_at = sealed
            # In due order: the first not due yet is the soonest of them.
            coming = next((sortable(ref.first_due.isoformat()) for ref in delays
                           if ref.first_due > self.taken_at), None)
            if coming is not None and (queue not in next_due or coming < next_due[queue]):
                next_due[queue] = coming
        for queue, first in oldest.items():
            rows[queue].oldest_pending_at = moment(first)
        for queue, first in next_due.items():
            rows[queue].next_due_at = moment(first)
        for letter in self.dead:
            row = rows.get(letter["queue"]) or rows.setdefault(letter["queue"], QueueSummary(name=letter["queue"]))
            row.dead += 1
        return dict(sorted(rows.items()))

    def leases(self) -> list[Doc]:
        """Running jobs (each with its ``lease``), in document order."""
        return [j for j in self.jobs if j["status"] == "running"]

    def workers(self, *, extra: dict[str, datetime] | None = None) -> list[WorkerSummary]:
        """Workers seen within :data:`WORKER_SEEN_SECONDS`: those holding leases,
        those whose attempts ended recently (from job histories), and ``extra``
        (worker name to the time it last asked for work, known to the leader).
        Ordered by name. The document's part is computed once per snapshot."""
        if self._workers is None:
            self._workers = self._document_workers()
        workers = {name: WorkerSummary(name=name, jobs=w.jobs, last_seen=w.last_seen)
                   for name, w in self._workers.items()}
        horizon = self.taken_at.timestamp() - WORKER_SEEN_SECONDS
        for name, when in (extra or {}).items():
            if when.timestamp() >= horizon:
                entry = workers.setdefault(name, WorkerSummary(name=name))
                if entry.last_seen is None or when > entry.last_seen:
                    entry.last_seen = when
        return sorted(workers.values(), key=lambda w: w.name)

    def _document_workers(self) -> dict[str, WorkerSummary]:
        workers: dict[str, WorkerSummary] = {}

        def seen(name: str, when: datetime | None) -> WorkerSummary:
            entry = workers.setdefault(name, WorkerSummary(name=name))
            if when is not None and (entry.last_seen is None or when > entry.last_seen):
                entry.last_seen = when
            return entry

        horizon = self.taken_at.timestamp() - WORKER_SEEN_SECONDS
        for job in self.jobs:
            lease = job.get("lease")
            if lease is not None:
                seen(lease["worker"], moment(lease["heartbeat_at"])).jobs.append(job)
        for item in (*self.jobs, *self.dead):
            for attempt in item.get("history") or ():
                ended = moment(attempt["ended_at"])
                if ended is not None and ended.timestamp() >= horizon:
                    seen(attempt["worker"], ended)
        return workers

    def queue_activity(self) -> dict[str, datetime]:
        """Per queue, the latest sign of a worker working on it in the
        document: a heartbeat of a lease on one of its jobs, or an attempt of
        one of its jobs that ended within :data:`WORKER_SEEN_SECONDS`."""
        latest: dict[str, datetime] = {}

        def seen(queue: str, when: datetime | None) -> None:
            if when is not None and (queue not in latest or when > latest[queue]):
                latest[queue] = when

        horizon = self.taken_at.timestamp() - WORKER_SEEN_SECONDS
        for job in self.jobs:
            lease = job.get("lease")
            if lease is not None:
                seen(job["queue"], moment(lease["heartbeat_at"]))
        for item in (*self.jobs, *self.dead):
            for attempt in item.get("history") or ():
                ended = moment(attempt["ended_at"])
                if ended is not None and ended.timestamp() >= horizon:
                    seen(item["queue"], ended)
        return latest

    def dead_groups(self) -> list[DeadGroup]:
        """Dead letters grouped by queue and error signature, largest group first (computed once)."""
        if self._dead_groups is None:
            self._dead_groups = self._group_dead()
        return self._dead_groups

    def _group_dead(self) -> list[DeadGroup]:
        grouped: dict[tuple[str, str], list[Doc]] = {}
        for letter in self.dead:
            grouped.setdefault((letter["queue"], error_signature(letter.get("error") or "")), []).append(letter)
        groups = []
        for (queue, signature), letters in grouped.items():
            died = [moment(d["died_at"]) for d in letters]
            groups.append(DeadGroup(
                queue=queue,
                signature=signature,
                ids=tuple(d["id"] for d in letters),
                first_died_at=min(d for d in died if d is not None),
                last_died_at=max(d for d in died if d is not None),
                sample_error=letters[-1].get("error") or "",
            ))
        return sorted(groups, key=lambda g: (-g.count, g.queue, g.signature))

    def retry_groups(self) -> list[RetryGroup]:
        """Jobs in the document that failed and will be tried again (pending or
        running, with a last error from an attempt since the job last started
        over: :func:`failed_since_started`), grouped by queue and error signature,
        largest group first (computed once). Jobs waiting in segment objects
        are not read: retries whose backoff reaches past the delayed horizon
        are counted in the queue's totals, not here."""
        if self._retry_groups is None:
            grouped: dict[tuple[str, str], list[Doc]] = {}
            for job in self.jobs:
                error = job.get("last_error")
                if error and failed_since_started(job):
                    grouped.setdefault((job["queue"], error_signature(error)), []).append(job)
            groups = []
            for (queue, signature), jobs in grouped.items():
                ended = [moment(job["history"][-1].get("ended_at")) for job in jobs if job.get("history")]
                groups.append(RetryGroup(
                    queue=queue, signature=signature, ids=tuple(job["id"] for job in jobs),
                    running=sum(1 for job in jobs if job["status"] == "running"),
                    last_failed_at=max((e for e in ended if e is not None), default=None),
                    sample_error=jobs[-1]["last_error"],
                ))
            self._retry_groups = sorted(groups, key=lambda g: (-g.count, g.queue, g.signature))
        return self._retry_groups

    def dead_group(self, key: str) -> DeadGroup | None:
        return next((g for g in self.dead_groups() if g.key == key), None)

    def status_counts(self) -> Counter[str]:
        """How many jobs are pending, running and dead (computed once)."""
        if self._status_counts is None:
            counts: Counter[str] = Counter(j["status"] for j in self.jobs)
            counts["dead"] = len(self.dead)
            if self.lanes or self.delays:
                counts["pending"] += self.in_segments()
            self._status_counts = counts
        return Counter(self._status_counts)


def failed_since_started(job: Doc) -> bool:
    """Whether a pending or running job in the document failed an attempt
    since it last started over. A dead letter sent back (redriven) starts
    over with no attempts but keeps its last error, so its error is from
    before: pending with no attempts, or running its first attempt since, it
    has not failed again (yet). Any other job with a last error failed one
    of its counted attempts."""
    attempts = job.get("attempts") or 0
    if job.get("status") == "pending":
        return attempts > 0
    return job.get("status") == "running" and attempts > 1


# -- error signatures ------------------------------------------------------------------

_HEX = re.compile(r"\b(?:0x)?[0-9a-f]{8,}\b", re.IGNORECASE)
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_SPACES = re.compile(r"\s+")


def error_signature(error: str) -> str:
    """What makes two errors "the same": the last non-blank line (the
    exception line of a traceback), with ids, quoted values and numbers
    replaced by placeholders, at most 160 characters. Secret values are
    hidden first (:func:`.redaction.redact_error`), for everyone: a
    signature is shown and linked to on every page."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    return _line_signature(lines[-1][:_SIGNED_CHARS], secret_keys()) if lines else "(no error text)"


# Enough of the last line for its 160 characters once secrets are hidden.
_SIGNED_CHARS = 400


# Jobs outlive many snapshots, and each snapshot groups them again: a
# signature is worked out once per distinct line (its secrets hidden first,
# which costs tens of microseconds).
@functools.lru_cache(maxsize=8192)
def _line_signature(last: str, secrets: re.Pattern[str]) -> str:
    last = redact_error(last, secrets)
    last = _QUOTED.sub("'…'", last)
    last = _HEX.sub("<id>", last)
    last = _NUMBER.sub("N", last)
    return _SPACES.sub(" ", last)[:160]


def group_key(queue: str, signature: str) -> str:
    """A short stable key for a dead-letter group (hex digest of queue and signature)."""
    return hashlib.blake2s(f"{queue}\0{signature}".encode(), digest_size=8).hexdigest()


# -- decoding ---------------------------------------------------------------------------


def decode_document(data: bytes, *, etag: str | None, taken_at: datetime, key: str = DOCUMENT_KEY) -> Snapshot:
    """Decode a whole stored document. Raises DocumentError, with the engine's
    own precise message, for anything the engine would refuse."""
    return Snapshot.decoded(decode_document_json(data, key=key), etag=etag, taken_at=taken_at)


__all__ = [
    "DeadGroup",
    "DocumentError",
    "QueueSummary",
    "Snapshot",
    "WorkerSummary",
    "decode_document",
    "error_signature",
    "moment",
]
