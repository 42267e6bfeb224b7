"""A stateful Hypothesis machine over formats 2 and 3 (run by
``tests/fuzz/test_fuzz_segments.py``; it lives here because it drives the
lane keeper's internals, which only the engine's own tests may import): the pure transitions plus
sealing and refilling, driven the way the leader's lane keeper drives them.

Hypothesis runs random sequences of push (some delayed, some retried with an
id it used before), claim (one or both queues), heartbeat, complete, fail
(retry with backoff, or give up), requeue, purge (by id, whole queue and
status), lease expiry and clock moves, and, between them, the lane keeper's
work on a :class:`~engine.stores.memory.MemoryStore`: a seal or a refill
(of a pending segment, or of a delayed one: format 3, delayed jobs due beyond
a horizon of a second)
planned by :class:`~engine.lanes.LaneKeeper` from the current state and run
at once (it must be accepted), or planned now and run some steps later
(stale: accepted only if still right, else refused changing nothing and its
object deleted). The transitions run through ``apply_batch`` as the
committer runs them; keys a version stopped referencing are deleted after
each step, as the committer reports them once a write landed.

A small reference model knows, for each job, its status, attempts, FIFO
place (``pos``) and whether it sits in a segment or a delayed segment. After
every step:

* every job is where the model says: in the document (status, attempts,
  pos) or in a segment object the document references (read back and
  verified), never in both, never twice, never missing (no loss, no
  duplicate across seal and refill);
* a claim hands out exactly the model's next jobs: per queue in FIFO order
  (I7), never past a segment's front, oldest first across queues;
* the segments of a queue follow each other in ``pos`` order, and the
  document's references describe them (front, last_pos, consumed);
* the counters equal the model's, and per queue ``pushed = pending
  (document and segments) + running + dead letters + completed + purged +
  dead_dropped``;
* ``encode`` then ``parse_document`` gives a state that encodes to the same
  bytes;
* the store holds exactly the referenced segments (a refused seal's object
  is deleted, a dropped reference's object is deleted);
* a refused operation, a stale seal or refill included, changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

import orjson
from hypothesis import event, note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import engine.delayplans as delayplans_module
import engine.laneplans as laneplans_module
from engine import (
    DocumentError,
    JobNotFound,
    JobSealed,
    MemoryStore,
    Policy,
    QueueError,
    QueueState,
    StoreUnavailable,
    ValidationError,
    parse_document,
)
from engine.delaysteps import read_delayed
from engine.duenow import make_due_by_ids
from engine.excision import purge_by_ids
from engine.idindex import decode_index, index_key, index_prefix, segment_of_index
from engine.indexrepair import REPAIR_TRIES
from engine.lanes import LaneKeeper
from engine.lanetasks import (
    DelayedMergeTask,
    DelayedRefillTask,
    DelayedSealTask,
    MergeTask,
    RefillTask,
    SealTask,
    Shares,
)
from engine.lanetasks import last_key as _last_of
from engine.ops import (
    PurgeOutcome,
    claim_op,
    complete_op,
    fail_op,
    get_job_op,
    heartbeat_op,
    make_due_op,
    pause_op,
    purge_op,
    push_op,
    requeue_op,
)
from engine.segments import decode_segment, segment_prefix
from engine.transitions import apply_batch

START = datetime(2026, 1, 1, tzinfo=UTC)
QUEUES = ("a", "b")
KEY = "queue.json"
WRITER = "fuzz-writer"
# Small thresholds: seals and refills all the time.
POLICY = Policy(max_attempts=3, dead_letter_limit=4, backoff_base_seconds=1, backoff_cap_seconds=4,
                segment_jobs=3, head_jobs=2, refill_below=2, merge_jobs=40, delayed_horizon_seconds=1)
EPOCH = 7
# How long a step takes on the keeper's clock (see seconds): a claim a step
# is 25 claims a second, so refills that follow claims get a boost.
STEP_SECONDS = 0.04


@dataclass(slots=True)
class MJob:
    """The model's view of one job."""

    id: str
    queue: str
    status: str  # pending, running, dead
    attempts: int
    pos: int
    not_before: datetime | None = None
    token: str | None = None
    expires_at: datetime | None = None
    seconds: float = 0.0  # the lease's length
    in_segment: bool = False
    in_delayed: bool = False  # in a delayed segment (format 3)


def _counters() -> dict[str, Any]:
    return {"pushed": 0, "completed": 0, "failed": 0, "dead": 0, "purged": 0, "dead_dropped": 0, "paused": False}


class IndexFaults(MemoryStore):
    """A memory store whose next ``failing`` id index writes fail, as a
    store answering 503 would (``index_writes_fail``)."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = 0

    def put(self, key: str, data: bytes, **kwargs: Any) -> str:
        if self.failing and key.startswith(index_prefix(KEY)):
            self.failing -= 1
            raise StoreUnavailable("injected: an id index write failed")
        return super().put(key, data, **kwargs)


class SegmentMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = QueueState(policy=POLICY)
        self.store = IndexFaults()
        self.now = START
        self.keeper = LaneKeeper(self.store, key=KEY, policy=POLICY, execute=self.execute, submit=self.submit,
                                 epoch=EPOCH, clock=lambda: self.now, grace_seconds=0, collect_seconds=3600,
                                 retry_seconds=0, monotonic=self.seconds)
        self.jobs: dict[str, MJob] = {}  # pending and running, in and out of segments
        self.dead: dict[str, MJob] = {}  # in dead-letter order
        self.counters: dict[str, dict[str, Any]] = {}
        self.used: list[str] = []  # every id pushed, for retried pushes
        self.left: set[str] = set()  # ids that left: a push of one within the window adds nothing
        self.next_pos = 0
        self.n = 0
        self.stale: list[SealTask | RefillTask | MergeTask | DelayedSealTask | DelayedRefillTask
                         | DelayedMergeTask] = []
        self.dry_runs: dict[str, int] = {}  # queue -> the next pos a dry run of its pending jobs saw
        self.pipeline: SealTask | None = None  # a seal in flight (see pipelined_seal)
        self.outcomes: list[Any] = []  # what execute() answered, for the rule that called it
        self.tokens: list[str] = []
        self.auto = True  # the keeper works after each commit (see keeper_follows_commits)
        self.in_keeper = False
        self.steps = 0  # steps taken: each one passes STEP_SECONDS on the keeper's clock
        # The first commit upgrades to format 2, as a node with segments on does.
        apply_batch(self.state, [], self.now)
        self.state.encoded(seq=1, writer=WRITER)

    # -- the shell: the committer's part -----------------------------------------------------

    def encoding(self) -> bytes:
        return b"".join(self.state.encode(seq=self.state.seq + 1, writer=WRITER, now=self.now))

    def execute(self, op: Any, queued: Callable[[], None] | None = None) -> Any:
        """Run ``op`` as a commit would: expire, prune, apply. Raises its
        QueueError (the lane keeper's ``execute`` contract); a refusal must
        change nothing."""
        if queued is not None:
            queued()  # applied at once: nothing is ever queued behind it
        self.model_expire()
        before = self.encoding() if not self.due_leases() else None
        result = apply_batch(self.state, [op], self.now)[0]
        self.outcomes.append(result)
        if isinstance(result, QueueError):
            if before is not None:
                assert self.encoding() == before, f"a refused {type(op).__name__} changed the document"
            raise result
        return result

    def submit(self, op: Any, done: Callable[[Any], None]) -> None:
        """The committer's ``submit`` (how the keeper queues its Seals): the
        operation is applied as ``execute`` would, and its outcome handed to
        ``done``, as the writer thread does once the write landed."""
        try:
            result = self.execute(op)
        except QueueError as exc:
            result = exc
        done(result)

    def commit(self) -> None:
        """What the committer does after a write landed: the dropped keys
        are deleted (the keeper's grace is 0 here)."""
        self.state.encoded(seq=self.state.seq + 1, writer=WRITER)
        for key in self.state.take_dropped_segments():
            assert self.keeper.reaper.delete_segment(key)  # and its id index (engine.idindex)
        # The keeper learns of each landed version (its planned tasks are
        # dropped: this machine runs the keeper's steps itself).
        with mock.patch.object(delayplans_module, "MAX_MERGE_RUN", 2):  # as delay_tasks plans (its memo)
            self.keeper.committed(self.state)
        # What the keeper's threads then do: a segment whose swap was answered
        # with an error and that this version does not reference goes
        # (SegmentReaper.doubtful; grace 0).
        while self.keeper.reaper.delete_due():
            pass
        self.keeper._tasks.clear()
        self.keeper._busy.clear()
        self.keeper._delayed_busy.clear()
        self.keeper._merge_slot = None

    def due_leases(self) -> bool:
        return any(j.status == "running" and j.expires_at is not None and j.expires_at <= self.now
                   for j in self.jobs.values())

    # -- model helpers -------------------------------------------------------------------------

    def counter(self, queue: str) -> dict[str, Any]:
        return self.counters.setdefault(queue, _counters())

    def to_back(self, job: MJob) -> None:
        job.pos = self.next_pos
        self.next_pos += 1

    def to_dead(self, job: MJob) -> None:
        del self.jobs[job.id]
        job.status, job.token, job.expires_at, job.not_before = "dead", None, None, None
        self.dead[job.id] = job
        self.counter(job.queue)["dead"] += 1
        while len(self.dead) > POLICY.dead_letter_limit:
            oldest = next(iter(self.dead))
            dropped = self.dead.pop(oldest)
            self.counter(dropped.queue)["dead_dropped"] += 1
            self.left.add(oldest)

    def model_expire(self) -> None:
        due = sorted((j for j in self.jobs.values() if j.status == "running" and j.expires_at is not None
                      and j.expires_at <= self.now), key=lambda j: (j.expires_at, j.id, j.token))
        for job in due:
            self.counter(job.queue)["failed"] += 1
            job.token, job.expires_at = None, None
            if job.attempts >= POLICY.max_attempts:
                self.to_dead(job)
            else:
                job.status, job.not_before = "pending", None
                self.to_back(job)

    def frontier(self, queue: str) -> int | None:
        sealed = [j.pos for j in self.jobs.values() if j.queue == queue and j.in_segment]
        return min(sealed) if sealed else None

    def expected_claim(self, queues: list[str], max_jobs: int) -> list[str]:
        eligible: list[tuple[int, str]] = []
        for queue in queues:
            if self.counter(queue)["paused"]:
                continue
            front = self.frontier(queue)
            eligible += [(j.pos, j.id) for j in self.jobs.values()
                         if j.queue == queue and j.status == "pending" and not j.in_segment and not j.in_delayed
                         and (j.not_before is None or j.not_before <= self.now)
                         and (front is None or j.pos < front)]
        return [job_id for _, job_id in sorted(eligible)[:max_jobs]]

    def running(self) -> list[MJob]:
        return [j for j in self.jobs.values() if j.status == "running"]

    def draw_running(self, data: st.DataObject) -> tuple[MJob, str] | None:
        """After the leases due expired: one running job and its token, or None."""
        self.model_expire()
        running = self.running()
        if not running:
            return None
        job = data.draw(st.sampled_from(sorted(running, key=lambda j: j.id)))
        assert job.token is not None
        return job, job.token

    def seconds(self) -> float:
        """The keeper's monotonic clock: the model's time, plus STEP_SECONDS a
        step, so that a refill's pace (jobs claimed per second) is a
        function of the steps alone and a replay does what the run did."""
        return (self.now - START).total_seconds() + self.steps * STEP_SECONDS

    def after_step(self) -> None:
        self.steps += 1
        self.commit()
        if self.auto and not self.in_keeper:
            # The keeper plans from every landed version and does the work
            # at once (its thread is idle): refill first, as it does.
            self.in_keeper = True
            try:
                for _ in range(20):  # each step commits, and the keeper plans again from it
                    worked = False
                    for queue in QUEUES:
                        refill = self.keeper._refill_task(self.state, queue, self.seconds(), self.shares())
                        if refill is not None:
                            self.run_refill(refill, fresh=True)
                            worked = True
                        seal = self.seal_task(queue)
                        if seal is not None:
                            self.run_seal(seal, fresh=True)
                            worked = True
                        merge = self.merge_task(queue)
                        if merge is not None:
                            self.run_merge(merge, fresh=True)
                            worked = True
                    for task in self.delay_tasks():
                        self.run_delayed(task, fresh=True)
                        worked = True
                    if not worked:
                        break
            finally:
                self.in_keeper = False
            # Liveness: a keeper that follows the commits leaves no queue
            # with a short front while it has segments to refill from.
            shares = self.shares()
            for queue in self.state.lanes:
                assert self.state.front_ready(queue, self.now, shares.head) >= shares.refill, (
                    f"queue {queue} has segments but its front ran short and no refill was planned")
            # Nor a delayed segment due within its lead, unless the document
            # already holds a front share of the queue's jobs due by then
            # (counted here from the jobs, not from the index the keeper
            # asks): it came back in time, or waits for claims to make room.
            due_by = self.now + timedelta(seconds=self.keeper.delayed_lead_seconds)
            for queue, refs in self.state.delays.items():
                here = sum(1 for job in self.state.jobs.values() if job.queue == queue and job.status == "pending"
                           and job.not_before is not None and job.not_before <= due_by)
                assert refs[0].first_due > due_by or here >= shares.head, (
                    f"queue {queue}'s delayed segment was not refilled ({here} of its jobs due here)")
        if not self.in_keeper:  # once the keeper's own steps are done, as its threads do after a task
            self.repair_indexes()

    @rule(auto=st.booleans())
    def keeper_follows_commits(self, auto: bool) -> None:
        """Switch between a keeper that works after every commit and one
        that lags (its steps then come from the seal and refill rules)."""
        self.auto = auto

    # -- client operations ----------------------------------------------------------------------

    @rule(queue=st.sampled_from(QUEUES), count=st.integers(1, 9), delay=st.sampled_from([0, 0, 0, 0, 1, 3, 10]),
          again=st.booleans())
    def push(self, queue: str, count: int, delay: int, again: bool) -> None:
        ids = []
        for _ in range(count):
            if again and self.used:
                ids.append(self.used[self.n % len(self.used)])
            else:
                ids.append(f"j{self.n:04d}")
            self.n += 1
        ids = list(dict.fromkeys(ids))
        op = push_op(queue, [{"n": i} for i in ids], ids=ids, policy=POLICY, delay_seconds=delay)
        assert self.execute(op) == ids
        for job_id in ids:
            if job_id in self.jobs or job_id in self.dead or job_id in self.left:
                continue  # idempotent by id (in a segment too: the sealed window)
            job = MJob(id=job_id, queue=queue, status="pending", attempts=0, pos=0,
                       not_before=self.now + timedelta(seconds=delay) if delay else None)
            self.to_back(job)
            self.jobs[job_id] = job
            self.counter(queue)["pushed"] += 1
            self.used.append(job_id)
        self.after_step()

    @rule(queues=st.sampled_from([["a"], ["b"], ["a", "b"], ["b", "a"]]), max_jobs=st.integers(1, 5),
          lease=st.sampled_from([1.0, 5.0, 60.0]))
    def claim(self, queues: list[str], max_jobs: int, lease: float) -> None:
        self.model_expire()
        want = self.expected_claim(queues, max_jobs)
        got = self.execute(claim_op("w", queues, policy=POLICY, max_jobs=max_jobs, lease_seconds=lease))
        assert [c.id for c in got] == want, "claims out of FIFO order (I7), or past a segment's front"
        for claimed in got:
            job = self.jobs[claimed.id]
            job.status, job.attempts, job.not_before = "running", job.attempts + 1, None
            job.token, job.expires_at, job.seconds = claimed.lease, self.now + timedelta(seconds=lease), lease
            assert claimed.attempt == job.attempts
            self.tokens.append(claimed.lease)
        self.after_step()

    @precondition(lambda self: self.used)
    @rule(data=st.data())
    def get_job(self, data: st.DataObject) -> None:
        """A job looked up by id, as ``Broker.get_job`` does: ``GetJob``, and
        for a job it says was sealed recently (``JobSealed``), a search of
        the references it names (``SegmentLookup.find_pending``, reads unbounded
        here). The answer must be the model's: in the document, in a segment
        (at its pos), or gone."""
        job_id = data.draw(st.sampled_from([*self.used, "never-pushed"]))
        self.model_expire()
        outcome = apply_batch(self.state, [get_job_op(job_id)], self.now)[0]
        job = self.jobs.get(job_id)
        if isinstance(outcome, JobSealed):
            keeper = self.keeper
            if data.draw(st.booleans(), label="as a leader that took over (nothing cached)"):
                keeper.lookup.forget()
            held = {ref.key for _, ref in outcome.refs if keeper._held.held(ref.key) is not None}
            found = keeper.lookup.find_pending(job_id, outcome.refs, reads=len(outcome.refs))
            event(f"get_job: sealed, {'found' if found is not None else 'gone'}")
            if found is None:
                assert job is None or not (job.in_segment or job.in_delayed), f"{job_id} is in a segment, not found"
            else:
                assert job is not None and (job.in_segment or job.in_delayed) and found[1] == job.pos, (
                    job_id, found[1], job)
                assert found[0].id == job_id and found[0].status == "pending"
            # Only segments without an index, or whose index may hold the id, were read.
            for _, ref in outcome.refs:
                if ref.key not in held and keeper._held.held(ref.key) is not None:
                    index = keeper._indexes.get(ref)
                    event(f"get_job: read a segment {'without an index' if index is None else 'its index named'}")
                    assert index is None or index.may_hold(job_id), f"{ref.key} was read though its index rules it out"
        elif isinstance(outcome, JobNotFound):
            event("get_job: not found")
            # Not looked for in segments: no segments, or the id finished recently.
            assert job is None or not (job.in_segment or job.in_delayed) or job_id in self.state.finished, job
            assert job_id not in self.dead
        else:
            event("get_job: in the document")
            assert isinstance(outcome, dict) and outcome["id"] == job_id and (
                job is None or not (job.in_segment or job.in_delayed))
            assert outcome["status"] == (job.status if job is not None else "dead")
        self.after_step()

    @precondition(lambda self: self.running())
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        self.model_expire()
        job = data.draw(st.sampled_from(sorted(self.running(), key=lambda j: j.id)))
        assert job.token is not None
        self.execute(heartbeat_op(job.id, job.token))
        job.expires_at = self.now + timedelta(seconds=job.seconds)
        self.after_step()

    @precondition(lambda self: self.running())
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        drawn = self.draw_running(data)
        if drawn is None:
            return
        job, token = drawn
        self.execute(complete_op(job.id, token))
        del self.jobs[job.id]
        self.counter(job.queue)["completed"] += 1
        self.left.add(job.id)
        self.after_step()

    @precondition(lambda self: self.running())
    @rule(data=st.data(), retry_in=st.sampled_from([None, 0.0, 2.0]), give_up=st.booleans())
    def fail(self, data: st.DataObject, retry_in: float | None, give_up: bool) -> None:
        drawn = self.draw_running(data)
        if drawn is None:
            return
        job, token = drawn
        self.execute(fail_op(job.id, token, error="boom", retry_in_seconds=retry_in, policy=POLICY,
                             give_up=give_up))
        self.counter(job.queue)["failed"] += 1
        job.token, job.expires_at = None, None
        if give_up or job.attempts >= POLICY.max_attempts:
            self.to_dead(job)
        else:
            delay = retry_in if retry_in is not None else POLICY.backoff(job.attempts)
            job.status = "pending"
            job.not_before = self.now + timedelta(seconds=delay) if delay > 0 else None
            self.to_back(job)
        self.after_step()

    @precondition(lambda self: self.running() or self.dead)
    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:
        self.model_expire()
        candidates = sorted([j.id for j in self.running()] + list(self.dead))
        if not candidates:
            return
        ids = data.draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=3, unique=True))
        self.execute(requeue_op(ids))
        for job_id in ids:
            if job_id in self.jobs:
                job = self.jobs[job_id]
                job.token, job.expires_at = None, None
            else:
                job = self.dead.pop(job_id)
                job.attempts = 0
                self.jobs[job_id] = job
            job.status, job.not_before = "pending", None
            self.to_back(job)
        self.after_step()

    @precondition(lambda self: self.jobs or self.dead)
    @rule(data=st.data())
    def purge_ids(self, data: st.DataObject) -> None:
        self.model_expire()
        candidates = sorted([*self.jobs, *self.dead])
        if not candidates:
            return
        ids = data.draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=3, unique=True))
        # Jobs in segments too: the leader writes their segments again without
        # them and swaps the references in the purge's commit (engine.excision).
        removed = purge_by_ids(purge_op(ids), execute=self.execute, keeper=lambda: self.keeper)
        assert sorted(removed) == sorted(ids)
        for job_id in ids:
            job = self.jobs.pop(job_id, None) or self.dead.pop(job_id)
            self.counter(job.queue)["purged"] += 1
            self.left.add(job_id)
        self.after_step()

    @precondition(lambda self: any(j.status == "pending" for j in self.jobs.values()))
    @rule(data=st.data(), conditional=st.booleans())
    def make_due(self, data: st.DataObject, conditional: bool) -> None:
        """An operator's run now: delayed jobs, in the document or in a
        delayed segment (written out of it), due at once in their place;
        due ones (in a FIFO segment too) left as they are."""
        self.model_expire()
        candidates = sorted(j.id for j in self.jobs.values() if j.status == "pending")
        if not candidates:
            return
        ids = data.draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=3, unique=True))
        expect = ["pending"] * len(ids) if conditional else None
        made = make_due_by_ids(make_due_op(ids, expect=expect), execute=self.execute, keeper=lambda: self.keeper)
        delay = {i: self.jobs[i].not_before for i in ids}
        event(f"run now: {sum(1 for i in ids if self.jobs[i].in_delayed)} in delayed segments")
        want = [i for i in ids if (due := delay[i]) is not None and due > self.now]
        assert made == want, (made, want)
        for job_id in ids:
            job = self.jobs[job_id]
            if job_id in made or job.in_delayed:
                # Back in the document at its pos, due (one due already but
                # still in its delayed segment comes back too).
                job.not_before, job.in_delayed = None, False
        event(f"run now: {len(made)} made due, {sum(1 for i in ids if i not in made)} due already")
        self.after_step()

    @rule(queue=st.sampled_from(QUEUES), status=st.sampled_from(["pending", "pending", "running", "dead"]))
    def purge_queue(self, queue: str, status: str) -> None:
        self.model_expire()
        self.execute(purge_op(queue=queue, status=status))
        pool = self.dead if status == "dead" else self.jobs
        for job in [j for j in pool.values() if j.queue == queue and j.status == status]:
            del pool[job.id]
            self.counter(queue)["purged"] += 1
            self.left.add(job.id)
        self.after_step()

    @rule(queue=st.sampled_from(QUEUES))
    def dry_run(self, queue: str) -> None:
        """The dashboard's dry run of "every pending job of ``queue``": the
        bound a later purge_bounded uses (the version's next pos)."""
        self.dry_runs[queue] = self.state.next_pos

    @precondition(lambda self: self.dry_runs)
    @rule(data=st.data())
    def purge_bounded(self, data: st.DataObject) -> None:
        """The dry run's purge, whatever happened since (I9): it removes only
        pending jobs below the bound, keeps a segment straddling it whole,
        and names that segment in its outcome."""
        queue = data.draw(st.sampled_from(sorted(self.dry_runs)))
        bound = self.dry_runs.pop(queue)
        self.model_expire()
        refs = self.state.lanes.get(queue, [])
        straddling = next((r for r in refs if r.last_pos >= bound), None)
        if straddling is not None and straddling.front >= bound:
            straddling = None
        kept_from = straddling.front if straddling is not None else bound
        # Delayed segments go whole when all their jobs are below the bound, else stay whole.
        delays = self.state.delays.get(queue, [])
        kept_delayed = {job.id for ref in delays if ref.max_pos >= bound
                        for job, _ in read_delayed(self.store, queue, ref)}
        kept_whole = straddling.key if straddling is not None else next(
            (r.key for r in delays if r.min_pos < bound <= r.max_pos), None)
        gone = [j for j in self.jobs.values() if j.queue == queue and j.status == "pending" and j.pos < bound
                and not (j.in_segment and j.pos >= kept_from) and j.id not in kept_delayed]
        outcome = self.execute(purge_op(queue=queue, status="pending", before_pos=bound))
        assert isinstance(outcome, PurgeOutcome), outcome
        assert outcome.kept_whole == kept_whole, (outcome, straddling, delays)
        assert outcome.count == len(gone), (outcome, sorted(j.id for j in gone))
        assert set(outcome.ids) == {j.id for j in gone if not (j.in_segment or j.in_delayed)}
        event(f"purge_bounded: {'a segment kept whole' if straddling is not None else 'nothing straddles'}")
        for job in gone:
            del self.jobs[job.id]
            self.counter(queue)["purged"] += 1
            self.left.add(job.id)  # as purge_queue: a push of it again adds nothing
        self.after_step()

    @rule(queue=st.sampled_from(QUEUES), paused=st.booleans())
    def pause(self, queue: str, paused: bool) -> None:
        self.execute(pause_op(queue, paused=paused))
        self.counter(queue)["paused"] = paused
        self.after_step()

    @rule(n=st.integers(1, 3))
    def index_writes_fail(self, n: int) -> None:
        """The store refuses the next ``n`` id index writes: each segment
        they were for is owed its index (engine.indexrepair), and the
        keeper writes it again from the segment's bytes, so that the
        invariants still find every referenced segment indexed."""
        self.store.failing = n
        self.after_step()

    def repair_indexes(self) -> None:
        """What the keeper's threads do after each task: write the owed id
        indexes again (with ``retry_seconds`` 0, each retry is due at once)."""
        for _ in range(2 * REPAIR_TRIES):
            with self.keeper._cond:
                if not self.keeper.repairs.due_now():
                    break
            self.keeper._repair_due()
        assert self.keeper.repairs.given_up == 0, "an id index was given up with the store failing 3 writes at most"
        event(f"index repairs: {'some' if self.keeper.repairs.repaired else 'none'} so far")

    @rule(seconds=st.sampled_from([0.5, 1.0, 2.0, 5.0, 30.0]))
    def tick(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
        self.model_expire()
        apply_batch(self.state, [], self.now)  # the expiry a heartbeat commit does
        self.after_step()

    # -- the lane keeper --------------------------------------------------------------------

    def shares(self) -> Shares:
        return Shares.of(POLICY, len(self.state.lanes))

    def seal_task(self, queue: str) -> SealTask | None:
        return self.keeper._seal_task(self.state, queue, self.shares())

    def refill_task(self, queue: str, want: int) -> RefillTask | None:
        refs = self.state.lanes.get(queue)
        planned = self.keeper._refill_task(self.state, queue, self.seconds(), self.shares())
        if planned is None and refs:  # below the threshold or not: refill anyway, any amount
            planned = RefillTask(queue, refs[0], want=want)
        return planned

    def run_seal(self, task: SealTask, *, fresh: bool) -> None:
        self.model_expire()
        before = self.keeper.sealed, self.keeper.abandoned
        self.outcomes.clear()
        self.keeper._seal(task)
        # What the keeper's threads do next: a refused seal's object goes at once.
        while self.keeper.reaper.delete_due():
            pass
        event(f"seal ({'fresh' if fresh else 'stale'}): {'landed' if self.keeper.sealed > before[0] else 'refused'}")
        if self.keeper.sealed > before[0]:
            self.model_sealed(task)
        else:
            assert self.keeper.abandoned > before[1], f"the seal neither landed nor was refused: {self.outcomes}"
            assert not fresh, f"a seal planned from the current state was refused: {self.outcomes[-1]!r}"
        self.after_step()

    def model_sealed(self, task: SealTask) -> None:
        """The model's side of a Seal that landed: its jobs are in a segment."""
        for job_id, pos in task.jobs:
            job = self.jobs[job_id]
            assert job.status == "pending" and job.pos == pos and not job.in_segment
            job.in_segment = True

    @rule(queue=st.sampled_from(QUEUES), landed=st.booleans())
    def seal_answered_with_an_error(self, queue: str, landed: bool) -> None:
        """A Seal whose write's outcome the committer did not learn, and whose
        document then read back unreadable: answered with DocumentError,
        though it landed (``landed``) or not. The next landed version (this
        step's commit) settles its object: referenced, it stays; if not, it
        goes, so the store holds exactly the referenced segments again."""
        task = self.seal_task(queue)
        if task is None:
            return
        self.model_expire()
        applied: list[bool] = []

        def submit(op: Any, done: Callable[[Any], None]) -> None:
            if landed:
                try:
                    self.execute(op)
                    applied.append(True)
                except QueueError:
                    pass
            done(DocumentError(KEY, "not valid JSON"))

        self.keeper.submit = submit
        try:
            self.keeper._seal(task)
        finally:
            self.keeper.submit = self.submit
        event(f"seal answered with an error: {'landed' if applied else 'not landed'}")
        if applied:
            self.model_sealed(task)
        self.after_step()

    def run_refill(self, task: RefillTask, *, fresh: bool) -> None:
        self.model_expire()
        before = self.keeper.refilled
        self.outcomes.clear()
        self.keeper._refill(task)
        assert self.keeper.problems == {}, self.keeper.problems
        event(f"refill ({'fresh' if fresh else 'stale'}): {'landed' if self.keeper.refilled > before else 'refused'}")
        if self.keeper.refilled > before:
            ref = task.ref
            end = min(ref.total, ref.consumed + max(task.want, 1))
            data = self.store.get(ref.key)
            assert data is not None
            for item in decode_segment(ref, data.data)[ref.consumed:end]:
                job = self.jobs[item["id"]]
                assert job.in_segment and job.pos == item["pos"]
                job.in_segment = False
        else:
            assert not fresh, f"a refill planned from the current state was refused: {self.outcomes}"
            # Refused by the Refill's condition, or not tried at all: the
            # segment was dropped (and deleted) since the plan.
            assert (self.outcomes and isinstance(self.outcomes[-1], ValidationError)) or (
                not self.outcomes and self.store.get(task.ref.key) is None), self.outcomes
        self.after_step()

    def delay_tasks(self) -> list[DelayedSealTask | DelayedRefillTask | DelayedMergeTask]:
        """The delayed seals, refills and merges the keeper plans from the current
        state (format 3); merges with runs of two small delayed segments enough,
        as for pending merges (see merge_task)."""
        with mock.patch.object(delayplans_module, "MAX_MERGE_RUN", 2):
            tasks = self.keeper._delay_tasks(self.state, self.shares(), set())
        assert all(isinstance(t, DelayedSealTask | DelayedRefillTask | DelayedMergeTask) for t in tasks)
        return tasks  # type: ignore[return-value]

    def run_delayed(self, task: DelayedSealTask | DelayedRefillTask | DelayedMergeTask, *, fresh: bool) -> None:
        """Run a delayed seal or refill as a keeper thread does; a fresh one must land."""
        self.model_expire()
        keeper = self.keeper
        before = keeper.sealed_delayed, keeper.refilled_delayed, keeper.abandoned, keeper.merged_delayed
        self.outcomes.clear()
        if isinstance(task, DelayedSealTask):
            keeper._seal_delayed(task)
            while keeper.reaper.delete_due():
                pass
            landed = keeper.sealed_delayed > before[0]
            if landed:
                for job_id, pos in task.jobs:
                    job = self.jobs[job_id]
                    assert job.status == "pending" and job.pos == pos and job.not_before is not None
                    assert not job.in_segment and not job.in_delayed
                    job.in_delayed = True
            else:
                assert keeper.abandoned > before[2], f"the delayed seal neither landed nor was refused: {self.outcomes}"
        elif isinstance(task, DelayedMergeTask):
            keeper._merge_delayed(task)
            while keeper.reaper.delete_due():
                pass
            landed = keeper.merged_delayed > before[3]  # the same jobs, in one segment: the invariants check it
        else:
            # The first ``take`` jobs in due order come back; the others go to a new delayed segment.
            back = {job.id for job, _ in read_delayed(self.store, task.queue, task.ref)[:max(1, task.take)]} \
                if self.store.get(task.ref.key) is not None else set()
            keeper._refill_delayed(task)
            assert keeper.delayed_problems == {}, keeper.delayed_problems
            landed = keeper.refilled_delayed > before[1]
            if landed:
                for job_id in back:
                    job = self.jobs[job_id]
                    assert job.in_delayed
                    job.in_delayed = False
        kind = {DelayedSealTask: "seal", DelayedRefillTask: "refill", DelayedMergeTask: "merge"}[type(task)]
        event(f"delayed {kind} "
              f"({'fresh' if fresh else 'stale'}): {'landed' if landed else 'refused'}")
        assert landed or not fresh, f"a delayed task planned from the current state was refused: {self.outcomes}"
        self.after_step()

    @rule(again=st.booleans())
    def delayed_work(self, again: bool) -> None:
        """The keeper's delayed seals and refills, planned now and run now (and, with ``again``, once more later)."""
        for task in self.delay_tasks():
            if again:
                self.stale.append(task)
            self.run_delayed(task, fresh=True)

    @rule(queue=st.sampled_from(QUEUES), again=st.booleans())
    def seal(self, queue: str, again: bool) -> None:
        task = self.seal_task(queue)
        if task is not None:
            if again:  # the same task once more, later: a retry, or a second keeper
                self.stale.append(task)
            self.run_seal(task, fresh=True)

    @rule(queue=st.sampled_from(QUEUES), want=st.integers(1, 5), again=st.booleans())
    def refill(self, queue: str, want: int, again: bool) -> None:
        task = self.refill_task(queue, want)
        if task is not None:
            if again:
                self.stale.append(task)
            self.run_refill(task, fresh=True)

    def merge_task(self, queue: str) -> MergeTask | None:
        """The keeper's next merge of ``queue``, with runs of two small
        segments enough (``MAX_MERGE_RUN`` is 64 in the product; a run of 64
        never builds up in a few dozen steps, and merges went unexercised)."""
        with mock.patch.object(laneplans_module, "MAX_MERGE_RUN", 2):
            return self.keeper._merge_task(self.state, queue)

    def run_merge(self, task: MergeTask, *, fresh: bool) -> None:
        self.model_expire()
        before = self.keeper.merged, self.keeper.abandoned
        self.outcomes.clear()
        self.keeper._merge(task)
        landed = self.keeper.merged > before[0]
        event(f"merge ({'fresh' if fresh else 'stale'}): {'landed' if landed else 'refused'}")
        if not landed:
            assert not fresh, f"a merge planned from the current state was refused: {self.outcomes}"
        self.after_step()  # the merged segment holds the same jobs: the invariants check it

    @rule(queue=st.sampled_from(QUEUES))
    def merge(self, queue: str) -> None:
        task = self.merge_task(queue)
        if task is not None:
            self.stale.append(task)  # and once more later
            self.run_merge(task, fresh=True)

    def push_unsealed(self, queue: str, count: int) -> None:
        """``count`` pushes to ``queue`` that the keeper does not see (even
        while it follows commits): a tail that builds up under a burst."""
        if count == 0:
            return
        held, self.in_keeper = self.in_keeper, True
        try:
            self.push(queue, count, 0, False)
        finally:
            self.in_keeper = held

    @precondition(lambda self: self.pipeline is None)
    @rule(queue=st.sampled_from(QUEUES), count=st.integers(0, 9))
    def seal_in_flight(self, queue: str, count: int) -> None:
        """After ``count`` pushes, plan a seal whose commit will be in flight
        while other steps land (see pipelined_seal)."""
        self.push_unsealed(queue, count)
        self.pipeline = self.seal_task(queue)

    @precondition(lambda self: self.pipeline is not None)
    @rule(count=st.integers(0, 9), again=st.booleans())
    def pipelined_seal(self, count: int, again: bool) -> None:
        """The keeper plans the next seal of a queue from a version that does
        not show its seal in flight yet, behind it (``behind``). Here: after
        ``count`` more pushes, the seal planned by seal_in_flight lands (or
        is refused) now, and the next one, planned from the version just
        before, runs right after. It must land exactly when the first one
        did (nothing else changed)."""
        first, self.pipeline = self.pipeline, None
        assert first is not None
        self.push_unsealed(first.queue, count)
        before = parse_document(KEY, self.encoding(), policy=POLICY)  # the version without it
        sealed = self.keeper.sealed
        held, self.in_keeper = self.in_keeper, True  # the keeper plans nothing else meanwhile
        try:
            self.run_seal(first, fresh=False)
        finally:
            self.in_keeper = held
        landed = self.keeper.sealed > sealed
        refs = self.state.lanes.get(first.queue, [])
        assert first.key and (not landed or refs[-1].key == first.key[0])  # written, even if refused
        task = self.keeper._seal_task(before, first.queue, Shares.of(POLICY, len(before.lanes)), prev=first)
        if task is None:
            self.repair_indexes()  # the first seal ran as the keeper's own step: its threads go on to repairs
            return
        assert task.after_key() == first.key[0] and task.jobs[0][1] > first.jobs[-1][1], task
        assert task.can_follow(_last_of(self.state, first.queue)) == landed
        event(f"pipelined seal behind a {'landed' if landed else 'refused'} one")
        if again:
            self.stale.append(task)
        sealed = self.keeper.sealed
        held, self.in_keeper = self.in_keeper, True
        try:
            self.run_seal(task, fresh=landed)
        finally:
            self.in_keeper = held
        assert (self.keeper.sealed > sealed) == landed, "a seal behind a refused one landed"
        self.after_step()

    @rule(queue=st.sampled_from(QUEUES), want=st.integers(1, 5),
          kind=st.sampled_from(["seal", "refill", "merge", "delayed"]))
    def plan_for_later(self, queue: str, want: int, kind: str) -> None:
        task: SealTask | RefillTask | MergeTask | None
        if kind == "delayed":
            self.stale.extend(self.delay_tasks())
            return
        if kind == "seal":
            task = self.seal_task(queue)
        elif kind == "refill":
            task = self.refill_task(queue, want)
        else:
            task = self.merge_task(queue)
        if task is not None:
            self.stale.append(task)

    @precondition(lambda self: self.stale)
    @rule(data=st.data())
    def run_planned(self, data: st.DataObject) -> None:
        task = self.stale.pop(data.draw(st.integers(0, len(self.stale) - 1)))
        note(f"running a task planned earlier: {task!r}")
        if isinstance(task, SealTask):
            self.run_seal(task, fresh=False)
        elif isinstance(task, RefillTask):
            self.run_refill(task, fresh=False)
        elif isinstance(task, DelayedSealTask | DelayedRefillTask | DelayedMergeTask):
            self.run_delayed(task, fresh=False)
        else:
            self.run_merge(task, fresh=False)

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def jobs_are_where_the_model_says(self) -> None:
        state = self.state
        in_doc = {j.id for j in self.jobs.values() if not j.in_segment and not j.in_delayed}
        assert set(state.jobs) == in_doc, f"document jobs differ: {set(state.jobs) ^ in_doc}"
        for job_id in in_doc:
            job, mine = state.jobs[job_id], self.jobs[job_id]
            assert (job.status, job.attempts, job.queue, state.pos[job_id]) == (
                mine.status, mine.attempts, mine.queue, mine.pos), job_id
            assert job.not_before == mine.not_before, job_id
        assert list(state.dead) == list(self.dead)
        for queue in QUEUES:
            self.check_segments(queue)
            self.check_delayed(queue)

    def check_delayed(self, queue: str) -> None:
        """The queue's delayed segments hold exactly the model's delayed jobs
        out of the document, each at its pos with its not_before, in due
        order, within its reference's bounds (read back and verified)."""
        refs = self.state.delays.get(queue, [])
        assert [(r.first_due, r.key) for r in refs] == sorted((r.first_due, r.key) for r in refs)
        held: dict[str, tuple[int, datetime | None]] = {}
        for ref in refs:
            jobs = read_delayed(self.store, queue, ref)
            dues = [job.not_before for job, _ in jobs]
            assert dues == sorted(dues) and dues[0] == ref.first_due and dues[-1] == ref.last_due  # type: ignore[type-var]
            assert min(p for _, p in jobs) == ref.min_pos and max(p for _, p in jobs) == ref.max_pos
            for job, pos in jobs:
                assert job.id not in held, f"{job.id} is in two delayed segments"
                held[job.id] = (pos, job.not_before)
        mine = {j.id: (j.pos, j.not_before) for j in self.jobs.values() if j.queue == queue and j.in_delayed}
        assert held == mine, f"delayed segment jobs of {queue} differ from the model's"
        assert not set(held) & (set(self.state.jobs) | set(self.state.dead))

    def check_segments(self, queue: str) -> None:
        refs = self.state.lanes.get(queue, [])
        seen: list[tuple[int, str]] = []
        for ref in refs:
            blob = self.store.get(ref.key)
            assert blob is not None, f"referenced segment {ref.key} is gone"
            items = decode_segment(ref, blob.data)[ref.consumed:]
            assert items and items[0]["pos"] == ref.front and items[-1]["pos"] == ref.last_pos
            assert all(item["queue"] == queue and item["status"] == "pending" for item in items)
            seen += [(item["pos"], item["id"]) for item in items]
        assert seen == sorted(seen) and len({p for p, _ in seen}) == len(seen), "segments out of pos order"
        mine = sorted((j.pos, j.id) for j in self.jobs.values() if j.queue == queue and j.in_segment)
        assert seen == mine, f"segment jobs of {queue} differ from the model's"
        ids = [job_id for _, job_id in seen]
        assert len(set(ids)) == len(ids) and not set(ids) & (set(self.state.jobs) | set(self.state.dead))

    @invariant()
    def a_tail_of_the_claim_index_is_its_end(self) -> None:
        """``ready_in_order(after=pos)`` (what a seal plans from) is
        ``ready_in_order`` from the first entry beyond that pos, whatever the
        index holds (stale entries of claimed, sealed or moved jobs included)."""
        state = self.state
        for queue in QUEUES:
            ready = state.ready_in_order(queue)
            for pivot in {-1, *(pos for pos, _ in ready[::7]), *(pos - 1 for pos, _ in ready[3::11])}:
                assert state.ready_in_order(queue, after=pivot) == [entry for entry in ready if entry[0] > pivot], pivot

    @invariant()
    def counters_add_up(self) -> None:
        state = self.state
        for queue, mine in self.counters.items():
            c = state.queues.get(queue)
            if c is None:
                assert mine == _counters()
                continue
            got = {k: getattr(c, k) for k in mine}
            assert got == mine, f"counters of {queue}: {got} != model {mine}"
            pending = state.pending(queue)
            assert pending == sum(1 for j in self.jobs.values() if j.queue == queue and j.status == "pending")
            running = sum(1 for j in state.jobs.values() if j.queue == queue and j.status == "running")
            dead = sum(1 for d in state.dead.values() if d.queue == queue)
            assert c.pushed == pending + running + dead + c.completed + c.purged + c.dead_dropped

    @invariant()
    def the_store_holds_exactly_the_referenced_segments(self) -> None:
        referenced = {ref.key: ref for refs in self.state.lanes.values() for ref in refs}
        referenced.update((ref.key, ref.as_segment()) for refs in self.state.delays.values() for ref in refs)
        assert set(self.store.list(segment_prefix(KEY))) == set(referenced)
        # Every referenced segment has its id index (seals and merges write
        # one; one whose write the store refused, index_writes_fail, is
        # written again by the keeper's repairs), and an index is only beside
        # a referenced segment and names every job in it.
        indexed = {segment_of_index(KEY, key) for key in self.store.list(index_prefix(KEY))}
        assert set(referenced) <= indexed, f"segments without an index: {set(referenced) - indexed}"
        for key in self.store.list(index_prefix(KEY)):
            segment = segment_of_index(KEY, key)
            assert segment in referenced, f"index {key} outlived its segment"
            ref = referenced[segment]
            assert key == index_key(KEY, segment)
            blob, data = self.store.get(key), self.store.get(segment)
            assert blob is not None and data is not None
            index = decode_index(ref, blob.data)
            assert all(index.may_hold(item["id"])
                       for item in decode_segment(ref, data.data, kind=("pending", "delayed")))

    @invariant()
    def encoding_round_trips(self) -> None:
        data = self.encoding()
        parsed = parse_document(KEY, data, policy=POLICY)
        assert list(parsed.jobs.items()) == list(self.state.jobs.items())
        assert parsed.pos == self.state.pos and parsed.next_pos == self.state.next_pos
        assert parsed.delays == self.state.delays
        assert parsed.lanes == self.state.lanes and parsed.pending_here == {
            q: n for q, n in self.state.pending_here.items() if n}
        for queue in QUEUES:
            assert parsed.pending(queue) == self.state.pending(queue)
            assert parsed.frontier(queue) == self.state.frontier(queue)
        parsed.recent.pop()  # as it was before this commit, so encoding it adds the same entry again
        again = b"".join(parsed.encode(seq=self.state.seq + 1, writer=WRITER, now=self.now))
        assert again == data, "encoding the parsed document again gives other bytes"
        # Format 3 from the first delayed seal that landed on, and never back.
        assert orjson.loads(data)["format"] == self.state.format == (3 if self.keeper.sealed_delayed else 2)

