"""A stateful Hypothesis machine over the pure transitions (engine.transitions).

Hypothesis runs random sequences of push, claim, heartbeat, complete, fail,
expire, requeue, stop, purge, pause/resume, concurrency and rate limits and forget on one :class:`QueueState`, with a
clock it moves itself (and sometimes steps back, as an NTP step does), beside a small reference model of what each
step must do. After every step it checks:

* the state equals the model: each job's status, attempts and lease, the
  FIFO order (I7) and the dead-letter order;
* I2, no silent loss: every pushed id is pending, running or dead, unless it
  was completed, purged, or dropped from a full dead-letter list (counted);
* I4, lease exclusivity: a running job has one lease, and an old or wrong
  token is refused with LeaseLost and changes nothing;
* the counters equal the model's, and the state's count of running jobs
  per queue is the model's;
* a claim never starts a job of a queue at its concurrency limit or beyond
  what its rate limit's window has left, and hands out the oldest eligible
  jobs the limits leave room for;
* ``QueueState.encode`` re-parses (``parse_document``) to an equal state,
  and encoding that again gives the same bytes;
* a refused operation changes nothing: the encoding is byte for byte the same;
* a push retried after its job completed does not run the job again (the
  README's idempotency promise; defect 10c).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from engine import JobNotFound, LeaseLost, Policy, QueueError, QueueState, RateLimit, ValidationError, parse_document
from engine.ops import (
    Expire,
    claim_op,
    complete_op,
    fail_op,
    forget_op,
    heartbeat_op,
    limit_op,
    make_due_op,
    pause_op,
    purge_op,
    push_op,
    rate_limit_op,
    requeue_op,
    stop_op,
)
from engine.transitions import apply, apply_batch, expire
from tests.fuzz.profiles import scaled

START = datetime(2026, 1, 1, tzinfo=UTC)
QUEUES = ("a", "b")
IDS = tuple(f"j{i}" for i in range(8))
POLICY = Policy(max_attempts=2, dead_letter_limit=3, backoff_base_seconds=1, backoff_cap_seconds=4)
WRITER = "fuzz-writer"
#: A push retried this soon after its job completed must not run it again.
#: (Any dedup window worth having is longer; older completions may be forgotten.)
RETRY_WINDOW = timedelta(seconds=60)


@dataclass(slots=True)
class MJob:
    """The model's view of one job."""

    id: str
    queue: str
    status: str  # pending, running, dead
    attempts: int
    max_attempts: int
    pos: int
    not_before: datetime | None = None
    token: str | None = None
    expires_at: datetime | None = None
    seconds: float = 0.0
    old_tokens: list[str] = field(default_factory=list)


def _counters() -> dict[str, Any]:
    return {"pushed": 0, "completed": 0, "failed": 0, "dead": 0, "purged": 0, "dead_dropped": 0, "paused": False,
            "max_running": None, "rate_limit": None}


def _rate_left(rate: dict[str, Any] | None, now: datetime) -> int | None:
    """The model's rate window: how many may start at ``now`` (None: no rate limit)."""
    if rate is None:
        return None
    if rate["start"] is not None and now < rate["start"] + timedelta(seconds=rate["seconds"]):
        return max(rate["jobs"] - rate["started"], 0)
    return int(rate["jobs"])


def _as_rate_limit(rate: dict[str, Any] | None) -> RateLimit | None:
    if rate is None:
        return None
    return RateLimit(jobs=rate["jobs"], seconds=rate["seconds"], window_start=rate["start"],
                     window_started=rate["started"] if rate["start"] is not None else 0)


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = QueueState(policy=POLICY)
        self.now = START
        self.jobs: dict[str, MJob] = {}  # pending and running
        self.dead: dict[str, MJob] = {}  # in dead-letter order
        self.counters: dict[str, dict[str, Any]] = {}
        self.pushed: set[str] = set()
        self.completed: dict[str, datetime] = {}
        self.gone: set[str] = set()  # purged or dropped: they may come back with a new push
        self.next_pos = 0
        self.tokens: list[str] = []
        self.push_args: dict[str, tuple[str, int, int, int]] = {}

    # -- model helpers ------------------------------------------------------------------------

    def counter(self, queue: str) -> dict[str, Any]:
        return self.counters.setdefault(queue, _counters())

    def to_back(self, job: MJob) -> None:
        job.pos = self.next_pos
        self.next_pos += 1
        self.jobs.pop(job.id, None)
        self.jobs[job.id] = job

    def to_dead(self, job: MJob) -> None:
        self.jobs.pop(job.id, None)
        job.status, job.token, job.expires_at, job.not_before = "dead", None, None, None
        self.dead.pop(job.id, None)
        self.dead[job.id] = job
        self.counter(job.queue)["dead"] += 1
        while len(self.dead) > POLICY.dead_letter_limit:
            oldest = next(iter(self.dead))
            dropped = self.dead.pop(oldest)
            self.counter(dropped.queue)["dead_dropped"] += 1
            self.gone.add(oldest)

    def model_expire(self) -> None:
        due = sorted((j for j in self.jobs.values() if j.status == "running" and j.expires_at is not None
                      and j.expires_at <= self.now), key=lambda j: (j.expires_at, j.id))
        for job in due:
            self.counter(job.queue)["failed"] += 1
            self.end_lease(job)
            if job.attempts >= job.max_attempts:
                self.to_dead(job)
            else:
                job.status, job.not_before = "pending", None
                self.to_back(job)

    def end_lease(self, job: MJob) -> None:
        if job.token is not None:
            job.old_tokens.append(job.token)
        job.token, job.expires_at = None, None

    def encoding(self) -> bytes:
        return b"".join(self.state.encode(seq=self.state.seq + 1, writer=WRITER, now=self.now))

    def run(self, op: Any) -> Any:
        """Expire due leases (model and state), then apply ``op``. A refusal
        must leave the encoding byte for byte as it was."""
        self.model_expire()
        expire(self.state, None, self.now)
        before = self.encoding()
        try:
            return apply(self.state, op, self.now)
        except QueueError as exc:
            assert self.encoding() == before, f"{type(op).__name__} was refused ({exc}) but changed the state"
            raise

    # -- rules ------------------------------------------------------------------------------------

    @rule(queue=st.sampled_from(QUEUES), job_id=st.sampled_from(IDS), payload=st.integers(0, 9),
          delay=st.sampled_from([0, 0, 3]), attempts=st.sampled_from([1, 2, 3]))
    def push(self, queue: str, job_id: str, payload: int, delay: int, attempts: int) -> None:
        op = push_op(queue, [payload], policy=POLICY, max_attempts=attempts, delay_seconds=delay, ids=[job_id])
        result = self.run(op)
        assert result == [job_id]
        self.pushed.add(job_id)
        self.push_args.setdefault(job_id, (queue, payload, delay, attempts))
        if job_id in self.jobs or job_id in self.dead:
            return  # idempotent: changes nothing
        completed_at = self.completed.get(job_id)
        if completed_at is not None and self.now - completed_at <= RETRY_WINDOW:
            assert job_id not in self.state.jobs, (
                f"push of {job_id!r} retried {(self.now - completed_at).total_seconds():g} s after the job "
                "completed made it pending again: the job would run twice")
            return
        if (completed_at is not None or job_id in self.gone) and job_id not in self.state.jobs:
            return  # remembered beyond the window: also fine
        self.gone.discard(job_id)
        self.completed.pop(job_id, None)
        self.push_args[job_id] = (queue, payload, delay, attempts)
        self.counter(queue)["pushed"] += 1
        job = MJob(id=job_id, queue=queue, status="pending", attempts=0, max_attempts=attempts, pos=0,
                   not_before=self.now + timedelta(seconds=delay) if delay else None)
        self.to_back(job)

    @rule(queues=st.lists(st.sampled_from(QUEUES), min_size=1, max_size=2, unique=True),
          max_jobs=st.integers(1, 3), seconds=st.sampled_from([5, 30]), in_order=st.booleans())
    def claim(self, queues: list[str], max_jobs: int, seconds: int, in_order: bool) -> None:
        op = claim_op("w", queues, policy=POLICY, max_jobs=max_jobs, lease_seconds=seconds, in_order=in_order)
        result = self.run(op)
        paused = {q for q, c in self.counters.items() if c["paused"]}
        # In order, the queues are priorities: the first queue's jobs, then the second's.
        eligible = sorted((j for j in self.jobs.values() if j.status == "pending" and j.queue in queues
                           and j.queue not in paused and (j.not_before is None or j.not_before <= self.now)),
                          key=lambda j: (queues.index(j.queue) if in_order else 0, j.pos))
        # Room under each queue's concurrency limit, counted before this claim.
        room = {q: c["max_running"] - sum(1 for j in self.jobs.values() if j.queue == q and j.status == "running")
                for q, c in self.counters.items() if c["max_running"] is not None}
        # ... and under its rate limit's window.
        for q, c in self.counters.items():
            left = _rate_left(c["rate_limit"], self.now)
            if left is not None:
                room[q] = min(room.get(q, left), left)
        expected = []
        for job in eligible:
            if len(expected) == max_jobs:
                break
            if job.queue in room:
                if room[job.queue] <= 0:
                    continue
                room[job.queue] -= 1
            expected.append(job.id)
        assert [c.id for c in result] == expected, (
            "claims must hand out pending jobs in FIFO order (I7), queue by queue when in order, within each "
            "queue's concurrency and rate limits")
        for q in {self.jobs[c.id].queue for c in result}:
            rate = self.counters[q]["rate_limit"]
            if rate is not None:
                starts = sum(1 for c in result if self.jobs[c.id].queue == q)
                if _rate_left(rate, self.now) == rate["jobs"]:  # no window open: this claim opens one
                    rate["start"], rate["started"] = self.now, 0
                rate["started"] += starts
        for claimed in result:
            job = self.jobs[claimed.id]
            assert claimed.lease not in self.tokens, "a lease token was handed out twice"
            self.tokens.append(claimed.lease)
            job.status, job.attempts, job.not_before = "running", job.attempts + 1, None
            job.token, job.expires_at, job.seconds = claimed.lease, self.now + timedelta(seconds=seconds), seconds
            assert claimed.attempt == job.attempts

    def _target(self, data: st.DataObject) -> tuple[str, str, MJob | None]:
        """A job id and a token: mostly a running job's own lease; sometimes a stale or wrong one."""
        running = sorted(j for j, m in self.jobs.items() if m.status == "running")
        job_id = data.draw(st.sampled_from(running) if running and data.draw(st.integers(0, 3)) else
                           st.sampled_from([*IDS, "nope"]), label="job")
        job = self.jobs.get(job_id) or self.dead.get(job_id)
        choices = ["current"] * 3 + ["wrong"] + (["stale"] if job is not None and job.old_tokens else [])
        kind = data.draw(st.sampled_from(choices), label="token")
        if kind == "current" and job is not None and job.token is not None:
            token = job.token
        elif kind == "stale" and job is not None:
            token = data.draw(st.sampled_from(job.old_tokens), label="stale token")
        else:
            token = "0" * 24
        return job_id, token, job

    def _expect_refusal(self, job_id: str, token: str, exc: QueueError) -> None:
        job = self.jobs.get(job_id)
        if job is None and job_id not in self.dead:
            assert isinstance(exc, JobNotFound), f"{job_id}: expected JobNotFound, got {exc!r}"
        else:
            assert isinstance(exc, LeaseLost), f"{job_id}: expected LeaseLost, got {exc!r}"
            assert job is None or job.token != token, f"{job_id}: its current lease was refused: {exc}"

    def _accepts(self, job_id: str, token: str) -> bool:
        job = self.jobs.get(job_id)
        return job is not None and job.status == "running" and job.token == token

    @rule(data=st.data(), seconds=st.sampled_from([None, 1, 60]))
    def heartbeat(self, data: st.DataObject, seconds: int | None) -> None:
        job_id, token, _ = self._target(data)
        try:
            expires_at = self.run(heartbeat_op(job_id, token, lease_seconds=seconds))
        except QueueError as exc:
            self._expect_refusal(job_id, token, exc)
            return
        assert self._accepts(job_id, token), f"heartbeat of {job_id} with a lease that is not its own (I4)"
        job = self.jobs[job_id]
        job.seconds = seconds if seconds is not None else job.seconds
        job.expires_at = self.now + timedelta(seconds=job.seconds)
        assert expires_at == job.expires_at

    @rule(data=st.data(), retry=st.booleans())
    def complete(self, data: st.DataObject, retry: bool) -> None:
        """Complete a job; with ``retry``, its producer then retries the push
        whose answer it never got (defect 10c)."""
        job_id, token, _ = self._target(data)
        try:
            self.run(complete_op(job_id, token))
        except QueueError as exc:
            self._expect_refusal(job_id, token, exc)
            return
        assert self._accepts(job_id, token), f"complete of {job_id} with a lease that is not its own (I4)"
        job = self.jobs.pop(job_id)
        self.counter(job.queue)["completed"] += 1
        self.completed[job_id] = self.now
        if retry:
            queue, payload, delay, attempts = self.push_args[job_id]
            self.push(queue, job_id, payload, delay, attempts)

    @rule(data=st.data(), retry=st.sampled_from([None, 0, 3]), give_up=st.booleans())
    def fail(self, data: st.DataObject, retry: int | None, give_up: bool) -> None:
        job_id, token, _ = self._target(data)
        try:
            outcome = self.run(fail_op(job_id, token, error="boom", retry_in_seconds=retry, policy=POLICY,
                                       give_up=give_up))
        except QueueError as exc:
            self._expect_refusal(job_id, token, exc)
            return
        assert self._accepts(job_id, token), f"fail of {job_id} with a lease that is not its own (I4)"
        job = self.jobs[job_id]
        self.counter(job.queue)["failed"] += 1
        self.end_lease(job)
        if give_up or job.attempts >= job.max_attempts:
            self.to_dead(job)
            assert outcome.status == "dead"
            return
        delay = retry if retry is not None else POLICY.backoff(job.attempts)
        job.status, job.not_before = "pending", self.now + timedelta(seconds=delay) if delay > 0 else None
        self.to_back(job)
        assert outcome.status == "pending" and outcome.not_before == job.not_before

    @rule()
    def expire_now(self) -> None:
        self.run(Expire())

    @rule(ids=st.lists(st.sampled_from([*IDS, "nope"]), min_size=1, max_size=3),
          per_second=st.sampled_from([None, None, 0.5, 2.0]))
    def requeue(self, ids: list[str], per_second: float | None) -> None:
        try:
            self.run(requeue_op(ids, per_second=per_second))
        except QueueError:
            assert any(i not in self.jobs and i not in self.dead for i in ids) or any(
                i in self.jobs and self.jobs[i].status == "pending" for i in ids)
            return
        for i, job_id in enumerate(dict.fromkeys(ids)):
            if job_id in self.jobs:
                job = self.jobs[job_id]
                assert job.status == "running", f"requeue accepted pending job {job_id}"
                self.end_lease(job)
                job.status = "pending"
            else:
                job = self.dead.pop(job_id)
                job.status, job.attempts = "pending", 0
            # Paced: due one after another, the first at once.
            job.not_before = self.now + timedelta(seconds=i / per_second) if per_second and i else None
            self.to_back(job)

    @precondition(lambda self: len(self.jobs) + len(self.dead) >= 2)
    @rule(data=st.data(), per_second=st.sampled_from([0.5, 2.0]))
    def requeue_paced(self, data: st.DataObject, per_second: float) -> None:
        """A dashboard redrive with a velocity: a conditional requeue of jobs
        as a dry run saw them (running or dead; a job that is pending now was
        "running" then), paced. Only the jobs still in their status move, and
        only they count in the pace: due one after another, the first at once."""
        ids = data.draw(st.lists(st.sampled_from(sorted([*self.jobs, *self.dead])), min_size=2, max_size=3,
                                 unique=True))
        expect = ["dead" if job_id in self.dead else "running" for job_id in ids]
        moved = self.run(requeue_op(ids, expect=expect, per_second=per_second))
        # Each in the status the dry run saw, after the leases due expired (run() expires them first): a job
        # seen running whose lease ran out into the dead letters is skipped, not redriven.
        assert moved == [i for i, want in zip(ids, expect, strict=True)
                         if (i in self.dead if want == "dead" else i in self.jobs and self.jobs[i].status == "running")]
        for i, job_id in enumerate(moved):
            if job_id in self.jobs:
                job = self.jobs[job_id]
                self.end_lease(job)
            else:
                job = self.dead.pop(job_id)
                job.attempts = 0
            job.status = "pending"
            job.not_before = self.now + timedelta(seconds=i / per_second) if i else None
            self.to_back(job)

    @rule(ids=st.lists(st.sampled_from([*IDS, "nope"]), min_size=1, max_size=3), conditional=st.booleans())
    def make_due(self, ids: list[str], conditional: bool) -> None:
        """An operator's run now: delayed pending jobs due at once, each in
        its place; due ones left as they are. All or nothing, or (a dry
        run's) conditional: only the jobs still pending."""
        unique = list(dict.fromkeys(ids))
        try:
            made = self.run(make_due_op(unique, expect=["pending"] * len(unique) if conditional else None))
        except QueueError:
            assert not conditional
            assert any(i not in self.jobs or self.jobs[i].status != "pending" for i in unique)
            return
        assert conditional or all(i in self.jobs and self.jobs[i].status == "pending" for i in unique)
        delayed = [i for i in unique if i in self.jobs and self.jobs[i].status == "pending"
                   and (due := self.jobs[i].not_before) is not None and due > self.now]
        assert made == delayed, (made, delayed)
        for job_id in made:
            self.jobs[job_id].not_before = None  # its place (pos) stays

    @rule(ids=st.lists(st.sampled_from([*IDS, "nope"]), min_size=1, max_size=3), conditional=st.booleans())
    def stop(self, ids: list[str], conditional: bool) -> None:
        """An operator stops running jobs: to the dead letters, whatever
        attempts they had left, their leases ended. All or nothing, or (a
        dry run's) conditional: only the jobs still running."""
        if conditional:
            unique = list(dict.fromkeys(ids))
            stopped = self.run(stop_op(unique, expect=["running"] * len(unique)))
            assert stopped == [i for i in unique if i in self.jobs and self.jobs[i].status == "running"]
        else:
            try:
                stopped = self.run(stop_op(ids))
            except QueueError:
                assert any(i not in self.jobs or self.jobs[i].status != "running" for i in ids)
                return
        for job_id in stopped:
            job = self.jobs[job_id]
            assert job.status == "running", f"stop accepted {job.status} job {job_id}"
            self.counter(job.queue)["failed"] += 1
            self.end_lease(job)
            self.to_dead(job)

    @rule(ids=st.lists(st.sampled_from([*IDS, "nope"]), min_size=1, max_size=3))
    def purge_ids(self, ids: list[str]) -> None:
        try:
            removed = self.run(purge_op(ids))
        except QueueError:
            assert any(i not in self.jobs and i not in self.dead for i in ids)
            return
        assert removed == list(dict.fromkeys(ids))
        for job_id in removed:
            self._purged(job_id)

    @rule(queue=st.sampled_from(QUEUES), status=st.sampled_from(["pending", "running", "dead"]))
    def purge_status(self, queue: str, status: str) -> None:
        removed = self.run(purge_op(queue=queue, status=status))
        pool = self.dead if status == "dead" else self.jobs
        expected = {j.id for j in pool.values() if j.queue == queue and j.status == status}
        assert set(removed) == expected, "purge by status removed other jobs than those in that status"
        for job_id in removed:
            self._purged(job_id)

    def _purged(self, job_id: str) -> None:
        job = self.jobs.pop(job_id, None) or self.dead.pop(job_id)
        self.counter(job.queue)["purged"] += 1
        self.gone.add(job_id)

    @rule(queue=st.sampled_from(QUEUES), paused=st.booleans())
    def pause(self, queue: str, paused: bool) -> None:
        self.run(pause_op(queue, paused=paused))
        self.counter(queue)["paused"] = paused

    @rule(queue=st.sampled_from(QUEUES), max_running=st.sampled_from([None, 1, 2]))
    def limit(self, queue: str, max_running: int | None) -> None:
        before = self.run(limit_op(queue, max_running))
        assert before == self.counter(queue)["max_running"]
        self.counter(queue)["max_running"] = max_running

    @rule(queue=st.sampled_from(QUEUES), jobs=st.sampled_from([None, 1, 2, 3]), seconds=st.sampled_from([1, 5, 30]))
    def rate(self, queue: str, jobs: int | None, seconds: int) -> None:
        before = self.run(rate_limit_op(queue, jobs, None if jobs is None else seconds))
        was = self.counter(queue)["rate_limit"]
        assert before == (None if was is None else {"jobs": was["jobs"], "seconds": was["seconds"]})
        if jobs is None:
            self.counter(queue)["rate_limit"] = None
        elif was is None:
            self.counter(queue)["rate_limit"] = {"jobs": jobs, "seconds": float(seconds), "start": None, "started": 0}
        else:  # the open window's starts still count
            was["jobs"], was["seconds"] = jobs, float(seconds)

    @rule(queue=st.sampled_from(QUEUES))
    def forget(self, queue: str) -> None:
        """Forgetting a queue: only an empty one, checked as the operation applies."""
        holds = any(j.queue == queue for j in (*self.jobs.values(), *self.dead.values()))
        try:
            forgotten = self.run(forget_op(queue))
        except ValidationError:
            assert holds, "forgetting an empty queue was refused"
            return
        assert not holds, "a queue holding jobs was forgotten"
        assert forgotten == (queue in self.counters)
        self.counters.pop(queue, None)

    @rule(seconds=st.one_of(st.integers(0, 40), st.sampled_from([1, 3, 5, 30])))
    def advance(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    @rule(seconds=st.sampled_from([1, 5, 30, 3600]))
    def clock_steps_back(self, seconds: int) -> None:
        """The leader's clock steps back (an NTP step): its next batch keeps every lease within its
        length of the new now and starts a rate window that starts later at it, keeping its count
        (``transitions.clock_behind``); due times keep the clock that stamped them."""
        self.model_expire()
        apply_batch(self.state, [], self.now)  # the last batch before the step stamps the mark
        self.now -= timedelta(seconds=seconds)
        apply_batch(self.state, [], self.now)
        for job in self.jobs.values():
            if job.expires_at is not None:
                job.expires_at = min(job.expires_at, self.now + timedelta(seconds=job.seconds))
        for counters in self.counters.values():
            rate = counters["rate_limit"]
            if rate is not None and rate["start"] is not None and rate["start"] > self.now:
                rate["start"] = self.now

    @precondition(lambda self: bool(self.completed))
    @rule(data=st.data())
    def retry_push_after_complete(self, data: st.DataObject) -> None:
        """A push whose answer was lost, retried after its job completed (defect 10c)."""
        job_id = data.draw(st.sampled_from(sorted(self.completed)))
        note(f"retrying the push of completed job {job_id}")
        queue, payload, delay, attempts = self.push_args[job_id]
        self.push(queue, job_id, payload, delay, attempts)

    @rule()
    def commit(self) -> None:
        """What the committer does after a batch: encode, then record the commit."""
        seq = self.state.seq + 1
        self.state.encode(seq=seq, writer=WRITER, now=self.now)
        self.state.encoded(seq=seq, writer=WRITER)

    # -- invariants -----------------------------------------------------------------------------

    @invariant()
    def matches_the_model(self) -> None:
        state = self.state
        assert list(state.jobs) == [j.id for j in sorted(self.jobs.values(), key=lambda j: j.pos)], \
            "the jobs' order is not the FIFO order (I7)"
        for job_id, m in self.jobs.items():
            job = state.jobs[job_id]
            assert (job.status, job.attempts, job.max_attempts, job.queue) == (m.status, m.attempts,
                                                                                m.max_attempts, m.queue), job_id
            assert job.not_before == m.not_before, job_id
            assert (job.lease.token if job.lease else None) == m.token, f"{job_id}: lease (I4)"
            assert (job.lease.expires_at if job.lease else None) == m.expires_at, job_id
        assert list(state.dead) == list(self.dead), "the dead letters differ from the model"
        counters = {name: {f: getattr(c, f) for f in _counters()} for name, c in state.queues.items()}
        expected = {name: {**c, "rate_limit": _as_rate_limit(c["rate_limit"])} for name, c in self.counters.items()}
        assert counters == expected, "the counters differ from the model"
        running = {q: sum(1 for j in self.jobs.values() if j.queue == q and j.status == "running") for q in QUEUES}
        assert {q: state.running_here.get(q, 0) for q in QUEUES} == running, "running_here differs from the jobs"

    @invariant()
    def nothing_is_lost(self) -> None:
        """I2: every pushed job is still there, or was completed, purged or dropped (counted)."""
        present = set(self.state.jobs) | set(self.state.dead)
        missing = self.pushed - present - set(self.completed) - self.gone
        assert not missing, f"acknowledged jobs silently lost: {sorted(missing)}"

    @invariant()
    def one_lease_per_job(self) -> None:
        """I4: running jobs, and only they, hold a lease; no two share a token."""
        tokens = [j.lease.token for j in self.state.jobs.values() if j.lease is not None]
        assert len(tokens) == len(set(tokens))
        for job in self.state.jobs.values():
            assert (job.status == "running") == (job.lease is not None)

    @invariant()
    def encoding_round_trips(self) -> None:
        seq = self.state.seq + 1
        data = b"".join(self.state.encode(seq=seq, writer=WRITER, now=self.now))
        parsed = parse_document("queue.json", data, policy=POLICY)
        assert list(parsed.jobs.items()) == list(self.state.jobs.items()), "jobs changed in a round trip"
        assert list(parsed.dead.items()) == list(self.state.dead.items()), "dead letters changed in a round trip"
        assert parsed.queues == self.state.queues and parsed.broker == self.state.broker
        assert parsed.seq == seq and parsed.writer == WRITER
        parsed.recent.pop()  # as it was before this commit, so encoding it adds the same entry again
        again = b"".join(parsed.encode(seq=seq, writer=WRITER, now=self.now))
        assert again == data, "encoding the parsed document again gives other bytes"


TestQueueMachine = QueueMachine.TestCase
# Pure and fast (a few ms a sequence): it can afford more sequences than the
# tests that go through HTTP, and finding a defect takes a few specific steps.
TestQueueMachine.settings = settings(settings.default, max_examples=scaled(200), stateful_step_count=30)
