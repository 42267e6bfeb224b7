"""The queue document (formats 1, 2 and 3): in-memory state and incremental encoding.

``QueueState`` is the parsed document plus indexes that make claims and lease
expiry cheap. It is mutated only by :mod:`engine.transitions`, and only inside
a commit: a writer whose write does not land throws its state away and
re-reads, so the in-memory state never drifts from what is in the store.

Encoding is incremental: each job's JSON is cached when the job changes, and a
commit joins the cached pieces, so its cost does not grow with the number of
unchanged jobs beyond a memory copy. See ``docs/format.md`` for the format.

Format 2 adds, per job, a ``pos``: its place in the FIFO order, which no
longer follows the list order once jobs come back from segment objects; per
queue, references to the segments that hold the pending jobs between its
front (in the document, ``pos`` below the first segment's ``front``) and its
tail (in the document, after the last segment); and ``sealed``, the window of
ids moved into segments recently, so that a retried push finds them.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

import orjson

from engine.eligibility import Eligibility
from engine.encoding import DUMPS_OPTS, counters_dict, encode_dead, encode_job, schedule_dict
from engine.finished import FinishedIds
from engine.model import BrokerInfo, DeadLetter, Departure, DepartureHow, Job, QueueCounters
from engine.policy import Policy
from engine.schedules import ScheduleMark
from engine.segments import DelayedRef, SegmentRef
from engine.sequence import EncodedSequence

#: The format a node writes unless segments are on (``Policy.segment_jobs``).
FORMAT = 1
#: The format with segments; a node that reads it keeps writing it.
FORMAT_SEGMENTS = 2
#: Format 2 with delayed segments (``lanes.<queue>.delayed``): written from
#: the first commit that references one, and kept from then on. A node that
#: knows only format 2 refuses it rather than drop the jobs it cannot see.
FORMAT_DELAYED = 3
#: Every format this engine reads.
READABLE_FORMATS = (FORMAT, FORMAT_SEGMENTS, FORMAT_DELAYED)
# How many recent (writer, seq) pairs a document remembers, to settle an
# ambiguous write even when other writers committed after it.
RECENT_COMMITS = 32


#: How many revoked lease tokens a leader remembers for lease watches (far more
#: than the leases of the jobs running at once on any cluster this serves).
REVOKED_LEASES_KEPT = 10_000


class QueueState(Eligibility):
    """One version of the queue document, with claim and expiry indexes.

    Every job has a ``pos``: its FIFO place (format 1: the document's list
    order). A job that goes back to pending (retry, expiry, requeue) moves to
    the back of the order, with a new ``pos``. In format 2 a queue may have
    segment references (``lanes``): its pending jobs whose ``pos`` is at or
    above the first segment's ``front`` wait behind the segments' jobs.
    ``etag`` is the store ETag of the version this state was read from or
    last written as (``None``: the document does not exist yet).
    """

    def __init__(self, *, policy: Policy) -> None:
        self.policy = policy
        self.seq = 0
        self.writer: str | None = None
        self.etag: str | None = None
        self.broker = BrokerInfo()
        self.queues: dict[str, QueueCounters] = {}
        self.recent: deque[tuple[str, int]] = deque(maxlen=RECENT_COMMITS)
        self.jobs: dict[str, Job] = {}
        self.dead: dict[str, DeadLetter] = {}
        self.format = FORMAT
        # FIFO place of each job in ``jobs``, and the next one to hand out.
        self.pos: dict[str, int] = {}
        self.next_pos = 0
        # Format 2: per queue, references to its segments, oldest first.
        self.lanes: dict[str, list[SegmentRef]] = {}
        # Format 3: per queue, references to its delayed segments, by
        # (first_due, key). Outside the FIFO order: claims never wait on them.
        self.delays: dict[str, list[DelayedRef]] = {}
        # Ids sealed into segments recently: pushes retried with them are
        # answered without a second job (bounded like ``finished``).
        self.sealed = FinishedIds()
        # Per schedule, the latest tick handled (engine.schedules); in any format.
        self.schedules: dict[str, ScheduleMark] = {}
        # Per paused schedule, when its pause began (engine.schedules).
        self.schedule_pauses: dict[str, datetime] = {}
        # Keys of segments the state stopped referencing since the last
        # encoding: deleted once the version without them has landed.
        self.dropped_segments: list[str] = []
        # Pending jobs per queue in the document (not in segments).
        self.pending_here: dict[str, int] = {}
        # Running jobs per queue (all in the document): for concurrency limits.
        self.running_here: dict[str, int] = {}
        # Ids of jobs that left the document recently: the dedup window.
        self.finished = FinishedIds()
        # Jobs that left since the last encoding, when someone listens for
        # them (a committer with on_departures sets a list); None: not kept.
        self.departures: list[Departure] | None = None
        # Lease tokens revoked lately, oldest first: leases that ended without
        # their holder (requeued, purged, run out), for lease watches
        # (engine.leasewatch), each with the lowest seq of a write that can
        # carry it (see revoke). Not in the document: a new leader starts empty.
        self.revoked_leases: dict[str, int] = {}
        # The seq of this state's latest write known to have landed (0: none
        # yet); set by the committer. A revocation has landed when its seq is
        # at most this (revocation_landed).
        self.landed_seq = 0
        # The time this state was last stamped with: the ``now`` of the last
        # batch applied to it, or the ``written_at`` of the version it was read
        # from (None: unknown). A batch whose ``now`` reads earlier (the clock
        # stepped back, or reads behind the last writer's) first brings leases
        # and rate windows within their lengths of it (transitions.clock_behind).
        # Not in the document as such: ``written_at`` is written at each commit.
        self.clock_mark: datetime | None = None
        self.dirty = False
        # Encoded jobs and dead letters, in document order.
        self._encoded_jobs = EncodedSequence()
        self._encoded_dead = EncodedSequence()
        # Per queue: heap of (pos, id) of pending jobs with no pending delay,
        # and heap of (not_before, pos, id) of delayed ones. Entries go stale
        # when a job changes; they are checked and dropped when popped.
        self._ready: dict[str, list[tuple[int, str]]] = {}
        self._delayed: dict[str, list[tuple[datetime, int, str]]] = {}
        # Per queue, (pos, id) of delayed jobs moved from the delayed index to
        # the ready one when they came due (they keep their not_before until
        # claimed), and the length past which the list is compacted: read by
        # delayed_due, which the keeper's delayed refill asks.
        self._promoted: dict[str, list[tuple[int, str]]] = {}
        self._promoted_cap: dict[str, int] = {}
        self._leases: list[tuple[datetime, str, str]] = []  # (expires_at, job id, token)

    # -- reading -------------------------------------------------------------

    def counters(self, queue: str) -> QueueCounters:
        """The counters of ``queue``, created on first use (marks the state dirty)."""
        counters = self.queues.get(queue)
        if counters is None:
            counters = self.queues[queue] = QueueCounters()
            self.dirty = True
        return counters

    @property
    def segmented(self) -> bool:
        """Whether jobs carry their ``pos`` and queues may have segments (format 2 or 3)."""
        return self.format >= FORMAT_SEGMENTS

    def pending(self, queue: str) -> int:
        """The queue's pending jobs: in the document, in its segments and in its delayed segments."""
        return (self.pending_here.get(queue, 0) + sum(ref.remaining for ref in self.lanes.get(queue, ()))
                + self.delayed_away(queue))

    def delayed_away(self, queue: str) -> int:
        """The queue's delayed jobs in delayed segments (format 3), not in the document."""
        return sum(ref.total for ref in self.delays.get(queue, ()))

    def add_delayed_ref(self, queue: str, ref: DelayedRef) -> None:
        """Reference the delayed segment ``ref`` of ``queue``, in due order.
        The document is format 3 from here on (see FORMAT_DELAYED)."""
        refs = self.delays.setdefault(queue, [])
        refs.append(ref)
        refs.sort(key=lambda r: (r.first_due, r.key))
        self.format = FORMAT_DELAYED
        self.dirty = True

    def drop_delayed(self, queue: str, keys: Iterable[str] | None = None) -> list[DelayedRef]:
        """Stop referencing the delayed segments of ``queue`` named by
        ``keys`` (default: all); their objects are deleted once this version
        has landed, as any dropped segment's."""
        refs = self.delays.get(queue, [])
        wanted = None if keys is None else set(keys)
        dropped = [ref for ref in refs if wanted is None or ref.key in wanted]
        kept = [ref for ref in refs if wanted is not None and ref.key not in wanted]
        if kept:
            self.delays[queue] = kept
        else:
            self.delays.pop(queue, None)
        self.dropped_segments.extend(ref.key for ref in dropped)
        self.dirty = True
        return dropped

    def ready_in_order(self, queue: str, *, after: int = -1) -> list[tuple[int, str]]:
        """``(pos, id)`` of the queue's pending jobs in the document that have
        no delay, in FIFO order (front and tail alike), those with a ``pos``
        above ``after`` only. O(n log n) in the queue's pending jobs here,
        which format 2 keeps small; with ``after``, only the entries beyond
        it are checked and sorted (a seal plans from a queue's tail twice a
        write, and need not look at the front before it)."""
        return sorted({entry for entry in self._ready.get(queue, ())
                       if entry[0] > after and self._is_current(entry[1], entry[0])})

    def encoded_job(self, job_id: str) -> bytes:
        """The job's JSON as this state writes it (cached; format 2: with ``pos``)."""
        return self._encoded_jobs.get(job_id)

    def has_commit(self, writer: str, seq: int) -> bool:
        """True if this version is, or follows, commit ``seq`` by ``writer``."""
        return (writer, seq) in self.recent

    # -- changing (called by transitions) --------------------------------------

    def add_job(self, job: Job) -> None:
        """Append ``job`` at the back of the FIFO order (or move it there)."""
        old = self.jobs.pop(job.id, None)
        if old is not None:
            self._count(old, -1)
        pos = self.next_pos
        self.next_pos = pos + 1
        self._place(job, pos)

    def restore_job(self, job: Job, pos: int) -> None:
        """Put ``job`` (not in the document) back at FIFO place ``pos``: a
        job read from a stored document or from a segment."""
        if pos >= self.next_pos:
            self.next_pos = pos + 1
        self._place(job, pos)

    def _place(self, job: Job, pos: int) -> None:
        self.jobs[job.id] = job
        self.pos[job.id] = pos
        self._encoded_jobs.append(job.id, encode_job(job, pos if self.segmented else None))
        self._count(job, 1)
        self._index(job, pos)
        self.dirty = True

    def _count(self, job: Job, delta: int) -> None:
        """Count ``job`` in (``delta`` 1) or out (-1) of its queue's pending
        or running jobs in the document."""
        counts = self.pending_here if job.status == "pending" else self.running_here
        counts[job.queue] = counts.get(job.queue, 0) + delta

    def replace_job(self, job: Job) -> None:
        """Replace a job in place, keeping its position."""
        old = self.jobs[job.id]
        if old.status != job.status:
            self._count(old, -1)
            self._count(job, 1)
        self.jobs[job.id] = job
        pos = self.pos[job.id]
        self._encoded_jobs.update(job.id, encode_job(job, pos if self.segmented else None))
        self._index(job, pos)
        self.dirty = True

    def remove_job(self, job_id: str) -> Job:
        job = self.jobs.pop(job_id)
        del self.pos[job_id]
        self._count(job, -1)
        self._encoded_jobs.remove(job_id)
        self.dirty = True
        return job

    def upgrade(self) -> None:
        """Switch to format 2 (segments): every job's encoding gains its
        ``pos``. Done once, by the first commit of a node with segments on;
        there is no way back while segments are referenced."""
        if self.segmented:
            return
        self.format = FORMAT_SEGMENTS
        for job_id, job in self.jobs.items():
            self._encoded_jobs.update(job_id, encode_job(job, self.pos[job_id]))
        # Not dirty: the upgrade rides the next commit that changes something
        # (a heartbeat at the latest), so a refused operation still writes nothing.

    def tidy_ready(self, queue: str) -> None:
        """Drop the queue's stale claim-index entries. After a seal: the
        sealed jobs' entries would otherwise stay until they reach the top,
        and a backlog of millions sealed over time would keep millions of
        them. O(n) in the queue's pending jobs here, which format 2 keeps small."""
        heap = self._ready.get(queue)
        if heap:
            live = list({entry for entry in heap if self._is_current(entry[1], entry[0])})
            heapq.heapify(live)
            self._ready[queue] = live

    def tidy_delayed(self, queue: str) -> None:
        """Drop the queue's stale delayed-index entries: after a delayed seal,
        whose jobs' entries would otherwise stay until they come due, and
        wake a waiter (``next_due``) for jobs that are no longer here. O(n)
        in the queue's delayed jobs in the document."""
        heap = self._delayed.get(queue)
        if heap:
            live = []
            for entry in set(heap):
                job = self._is_current(entry[2], entry[1])
                if job is not None and job.not_before == entry[0]:
                    live.append(entry)
            heapq.heapify(live)
            self._delayed[queue] = live

    def delayed_entries(self) -> dict[str, int]:
        """Per queue with delayed jobs indexed, how many entries its delayed
        index holds: an upper bound on its delayed jobs in the document
        (entries go stale when a job changes). O(queues)."""
        return {queue: len(heap) for queue, heap in self._delayed.items() if heap}

    def delayed_in_order(self, queue: str) -> list[tuple[datetime, int, str]]:
        """``(not_before, pos, id)`` of the queue's pending jobs in the
        document that have a delay (due or not), earliest first. O(n log n)
        in the queue's delayed jobs here."""
        jobs = self.jobs
        return sorted({entry for entry in self._delayed.get(queue, ())
                       if self._is_current(entry[2], entry[1]) is not None and jobs[entry[2]].not_before == entry[0]})

    def drop_refs(self, queue: str, count: int | None = None) -> list[SegmentRef]:
        """Stop referencing the first ``count`` (default: all) segments of
        ``queue``; their keys are deleted once this version has landed."""
        refs = self.lanes.get(queue, [])
        dropped = refs[:count] if count is not None else list(refs)
        del refs[:len(dropped)]
        if not refs:
            self.lanes.pop(queue, None)
        self.dropped_segments.extend(ref.key for ref in dropped)
        self.dirty = True
        return dropped

    def add_dead(self, dead: DeadLetter) -> None:
        self.dead.pop(dead.id, None)
        self.dead[dead.id] = dead
        self._encoded_dead.append(dead.id, encode_dead(dead))
        while len(self.dead) > self.policy.dead_letter_limit:
            oldest = next(iter(self.dead))
            dropped = self.remove_dead(oldest)
            self.counters(dropped.queue).dead_dropped += 1
            self.add_finished(oldest, dead.died_at)
            self.departed("dropped", dropped, dead.died_at)
        self.dirty = True

    def remove_dead(self, job_id: str) -> DeadLetter:
        dead = self.dead.pop(job_id)
        self._encoded_dead.remove(job_id)
        self.dirty = True
        return dead

    def departed(self, how: DepartureHow, item: Job | DeadLetter, at: datetime) -> None:
        """Note that ``item`` left the document (see :class:`~engine.model.Departure`),
        if departures are kept. Costs one append: it runs inside transitions."""
        if self.departures is not None:
            self.departures.append(Departure(how, at, item))

    def take_departures(self) -> list[Departure]:
        """The departures noted since the last call, and start a new list
        (empty when departures are not kept)."""
        taken = self.departures
        if not taken:
            return []
        self.departures = []
        return taken

    def take_dropped_segments(self) -> list[str]:
        """Keys of segments no longer referenced since the last call (to be
        deleted once the version that dropped them has landed)."""
        taken, self.dropped_segments = self.dropped_segments, []
        return taken

    def revoke(self, job: Job) -> None:
        """Note that ``job``'s lease, if it has one, ended without its holder
        (a requeue, a purge, an expiry): once the write carrying this lands,
        a lease watch naming it is answered (engine.leasewatch). Keeps the
        last :data:`REVOKED_LEASES_KEPT`."""
        if job.lease is not None:
            revoked = self.revoked_leases
            # self.seq is the seq of this state's latest encoded write (or of
            # the version it was read from): every write encoded from it so
            # far has a seq at most that, and every later one, which carries
            # this change, a higher one.
            revoked[job.lease.token] = self.seq + 1
            if len(revoked) > REVOKED_LEASES_KEPT:
                del revoked[next(iter(revoked))]

    def revocation_landed(self, token: str) -> bool:
        """Whether lease ``token`` was revoked (:meth:`revoke`) by a write of
        this state that has landed; False while that write is in flight, or
        still to be encoded (the committer pipelines writes)."""
        carried_by = self.revoked_leases.get(token)
        return carried_by is not None and carried_by <= self.landed_seq

    def add_finished(self, job_id: str, at: datetime) -> None:
        """Remember that ``job_id`` left the document at ``at`` (the dedup
        window), keeping the window within its count at once; its age is
        pruned at the start of each batch."""
        finished = self.finished
        finished.add(job_id, at)
        if len(finished) > self.policy.dedup_window_ids:
            finished.trim(self.policy.dedup_window_ids)

    def _index(self, job: Job, pos: int) -> None:
        if job.status == "pending":
            if job.not_before is None:
                heapq.heappush(self._ready.setdefault(job.queue, []), (pos, job.id))
            else:
                heapq.heappush(self._delayed.setdefault(job.queue, []), (job.not_before, pos, job.id))
        elif job.lease is not None:
            heapq.heappush(self._leases, (job.lease.expires_at, job.id, job.lease.token))

    def pop_expired(self, now: datetime) -> Iterator[Job]:
        """Yield running jobs whose lease expired at or before ``now``."""
        seen: set[str] = set()  # a heartbeat can index the same deadline twice
        while self._leases and self._leases[0][0] <= now:
            expires_at, job_id, token = heapq.heappop(self._leases)
            job = self.jobs.get(job_id)
            lease = job.lease if job is not None else None
            if lease is not None and lease.token == token and lease.expires_at == expires_at and job_id not in seen:
                seen.add(job_id)
                yield job  # type: ignore[misc]

    def next_deadline(self) -> datetime | None:
        """The earliest lease deadline still indexed (may be stale), or None."""
        return self._leases[0][0] if self._leases else None

    # -- encoding ------------------------------------------------------------

    def encode(self, *, seq: int, writer: str, now: datetime) -> list[bytes]:
        """The document for commit ``seq`` by ``writer``, as parts to be written
        one after another (see ``ObjectStore.put_parts``). Only chunks that
        changed since the last encoding are rebuilt; the rest are shared.
        Does not change the state; call :meth:`encoded` next."""
        recent = [*self.recent, (writer, seq)][-RECENT_COMMITS:]
        header: dict[str, Any] = {
            "format": self.format,
            "seq": seq,
            "writer": writer,
            "written_at": now,
            "recent_commits": [{"writer": w, "seq": s} for w, s in recent],
            "broker": {"id": self.broker.id, "url": self.broker.url, "epoch": self.broker.epoch},
            "queues": {name: counters_dict(c) for name, c in sorted(self.queues.items())},
        }
        if self.segmented:
            header["next_pos"] = self.next_pos
            header["lanes"] = {name: self._lane_dict(name) for name in sorted({*self.lanes, *self.delays})}
        if self.schedules:
            header["schedules"] = {name: schedule_dict(mark) for name, mark in sorted(self.schedules.items())}
        if self.schedule_pauses:
            header["schedule_pauses"] = dict(sorted(self.schedule_pauses.items()))
        # The dedup window goes into the first part, with the header: readers
        # that decode the parts one by one (the dashboard) expect the first
        # part to be the header and the next one to open the dead letters.
        # Its groups are encoded once and cached; only the join is per commit.
        head = [orjson.dumps(header, option=DUMPS_OPTS)[:-1], b',"finished":[', *self.finished.parts(), b"]"]
        if self.segmented:
            head.extend((b',"sealed":[', *self.sealed.parts(), b"]"))
        parts = [b"".join(head), b',"dead":[']
        parts.extend(self._encoded_dead.parts())
        parts.append(b'],"jobs":[')
        parts.extend(self._encoded_jobs.parts())
        parts.append(b"]}")
        return parts

    def _lane_dict(self, queue: str) -> dict[str, Any]:
        """``lanes.<queue>``: its segments, and its delayed segments if it has any (format 3)."""
        lane: dict[str, Any] = {"segments": [ref.as_dict() for ref in self.lanes.get(queue, ())]}
        delays = self.delays.get(queue)
        if delays:
            lane["delayed"] = [ref.as_dict() for ref in delays]
        return lane

    def encoded(self, *, seq: int, writer: str) -> None:
        """Record that this state was encoded as commit ``seq`` by ``writer``.

        From here on the state describes that version: later changes build on
        it. Its ETag is unknown until the write lands (:attr:`etag`). If the
        write does not land, the caller must discard the whole state.
        """
        self.seq = seq
        self.writer = writer
        self.etag = None
        self.recent.append((writer, seq))
        self.dirty = False
