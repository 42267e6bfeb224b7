"""Pure transition tests (engine.transitions). A randomized model check: thousands of random operations
compared step by step with a small reference model. The builders and the test clock are in
builders.py.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import orjson
import pytest

from engine import transitions
from engine.document import QueueState
from engine.errors import (
    JobNotFound,
    LeaseLost,
    QueueError,
    ValidationError,
)
from engine.model import FailOutcome
from engine.ops import (
    Claim,
    Complete,
    Expire,
    Fail,
    Heartbeat,
    Operation,
    Purge,
    Push,
    Requeue,
    claim_op,
    complete_op,
    fail_op,
    heartbeat_op,
    purge_op,
    push_op,
    requeue_op,
)
from engine.parsing import empty_state, parse_document
from engine.policy import Policy
from tests.engine.transitions.builders import (
    T0,
)

# -- randomized model check ----------------------------------------------------------------------------


COUNTER_FIELDS = ("pushed", "completed", "failed", "dead", "purged", "dead_dropped")
QUEUES = ("a", "b", "c")


@dataclass
class MJob:
    id: str
    queue: str
    payload: Any
    max_attempts: int
    status: str = "pending"
    attempts: int = 0
    token: str | None = None
    worker: str | None = None
    expires_at: datetime | None = None
    seconds: float | None = None
    not_before: datetime | None = None
    last_error: str | None = None
    expiry_worker: str | None = None  # set when last_error came from an expired lease


@dataclass
class MDead:
    id: str
    queue: str
    payload: Any
    attempts: int
    max_attempts: int
    error: str | None
    expiry_worker: str | None


@dataclass
class Model:
    """The reference model: a plain ordered dict of jobs, the dead letters and counters."""

    policy: Policy
    jobs: dict[str, MJob] = field(default_factory=dict)
    dead: dict[str, MDead] = field(default_factory=dict)
    removed: set[str] = field(default_factory=set)
    pushed: set[str] = field(default_factory=set)
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    old_tokens: list[tuple[str, str]] = field(default_factory=list)

    def count(self, queue: str, name: str, n: int = 1) -> None:
        self.counters.setdefault(queue, dict.fromkeys(COUNTER_FIELDS, 0))[name] += n

    def to_back(self, job: MJob) -> None:
        self.jobs.pop(job.id, None)
        self.jobs[job.id] = job

    def to_dead(self, job: MJob, error: str | None, expiry_worker: str | None) -> None:
        del self.jobs[job.id]
        self.dead[job.id] = MDead(job.id, job.queue, job.payload, job.attempts, job.max_attempts, error, expiry_worker)
        self.count(job.queue, "dead")
        while len(self.dead) > self.policy.dead_letter_limit:
            oldest = self.dead.pop(next(iter(self.dead)))
            self.count(oldest.queue, "dead_dropped")
            self.removed.add(oldest.id)

    def revoke(self, job: MJob) -> None:
        if job.token is not None:
            self.old_tokens.append((job.id, job.token))
        job.token = job.worker = job.expires_at = job.seconds = None

    def expire(self, now: datetime) -> list[str]:
        running = [j for j in self.jobs.values() if j.status == "running" and j.expires_at is not None]
        due = sorted((j for j in running if j.expires_at <= now), key=lambda j: (j.expires_at, j.id))
        for job in due:
            worker = job.worker
            self.count(job.queue, "failed")
            self.revoke(job)
            if job.attempts >= job.max_attempts:
                self.to_dead(job, None, worker)
            else:
                job.status, job.not_before = "pending", None
                job.last_error, job.expiry_worker = None, worker
                self.to_back(job)
        return [j.id for j in due]

    def leased(self, job_id: str, token: str) -> MJob | type[QueueError]:
        job = self.jobs.get(job_id)
        if job is None:
            return LeaseLost if job_id in self.dead else JobNotFound
        if job.token is None or job.token != token:
            return LeaseLost
        return job

    def eligible(self, queues: Sequence[str], now: datetime) -> list[MJob]:
        return [
            j
            for j in self.jobs.values()
            if j.status == "pending" and j.queue in queues and (j.not_before is None or j.not_before <= now)
        ]

    def check(self, op: Operation, result: Any, now: datetime) -> bool:
        """Apply ``op`` to the model, assert the engine's ``result`` matches; return True if it changed state."""
        if isinstance(op, Push):
            assert result == [j.id for j in op.jobs]
            added = False
            for new in op.jobs:
                if new.id in self.jobs or new.id in self.dead:
                    continue
                nb = now + timedelta(seconds=new.delay_seconds) if new.delay_seconds > 0 else None
                self.jobs[new.id] = MJob(new.id, op.queue, orjson.loads(new.payload), new.max_attempts, not_before=nb)
                self.pushed.add(new.id)
                self.removed.discard(new.id)
                self.count(op.queue, "pushed")
                added = True
            if op.queue not in self.counters:
                self.count(op.queue, "pushed", 0)
            return added
        if isinstance(op, Claim):
            expected = self.eligible(op.queues, now)[: op.max_jobs]
            assert [c.id for c in result] == [j.id for j in expected], "claim order differs from FIFO order"
            for c, job in zip(result, expected, strict=True):
                job.status, job.attempts, job.not_before = "running", job.attempts + 1, None
                job.token, job.worker, job.seconds = c.lease, op.worker, op.lease_seconds
                job.expires_at = now + timedelta(seconds=op.lease_seconds)
                assert (c.queue, c.payload, c.attempt, c.lease_expires_at) == (
                    job.queue,
                    job.payload,
                    job.attempts,
                    job.expires_at,
                )
            return bool(result)
        if isinstance(op, Heartbeat | Complete | Fail):
            job = self.leased(op.job_id, op.lease)
            if not isinstance(job, MJob):
                assert isinstance(result, job), (op, result)
                return False
            if isinstance(op, Heartbeat):
                job.seconds = op.lease_seconds if op.lease_seconds is not None else job.seconds
                assert job.seconds is not None
                job.expires_at = now + timedelta(seconds=job.seconds)
                assert result == job.expires_at
            elif isinstance(op, Complete):
                assert result is None
                self.revoke(job)
                del self.jobs[job.id]
                self.removed.add(job.id)
                self.count(job.queue, "completed")
            else:
                self.count(job.queue, "failed")
                self.revoke(job)
                if job.attempts >= job.max_attempts:
                    assert result == FailOutcome(status="dead")
                    self.to_dead(job, op.error, None)
                else:
                    delay = self.policy.backoff(job.attempts) if op.retry_in_seconds is None else op.retry_in_seconds
                    nb = now + timedelta(seconds=delay) if delay > 0 else None
                    assert result == FailOutcome(status="pending", not_before=nb)
                    job.status, job.not_before, job.last_error, job.expiry_worker = "pending", nb, op.error, None
                    self.to_back(job)
            return True
        if isinstance(op, Requeue):
            for job_id in op.job_ids:
                if job_id not in self.jobs and job_id not in self.dead:
                    assert isinstance(result, JobNotFound), (op, result)
                    return False
                if job_id in self.jobs and self.jobs[job_id].status == "pending":
                    assert isinstance(result, ValidationError), (op, result)
                    return False
            assert result == list(op.job_ids)
            for job_id in op.job_ids:
                if job_id in self.jobs:
                    job = self.jobs[job_id]
                    self.revoke(job)
                    job.status, job.not_before = "pending", None
                    self.to_back(job)
                else:
                    d = self.dead.pop(job_id)
                    self.jobs[job_id] = MJob(
                        d.id, d.queue, d.payload, d.max_attempts, last_error=d.error, expiry_worker=d.expiry_worker
                    )
            return True
        if isinstance(op, Purge):
            if op.job_ids:
                for job_id in op.job_ids:
                    if job_id not in self.jobs and job_id not in self.dead:
                        assert isinstance(result, JobNotFound), (op, result)
                        return False
                ids = list(op.job_ids)
            elif op.status == "dead":
                ids = [d.id for d in self.dead.values() if d.queue == op.queue]
            else:
                ids = [j.id for j in self.jobs.values() if j.queue == op.queue and j.status == op.status]
            assert result == ids
            for job_id in ids:
                if job_id in self.jobs:
                    job = self.jobs.pop(job_id)
                    self.revoke(job)
                    queue = job.queue
                else:
                    queue = self.dead.pop(job_id).queue
                self.removed.add(job_id)
                self.count(queue, "purged")
            return bool(ids)
        if isinstance(op, Expire):
            expected_ids = self.expire(now)
            assert result == expected_ids
            return bool(expected_ids)
        raise AssertionError(op)


def _check_invariants(state: QueueState, model: Model) -> None:
    # Document order and content equal the model (FIFO order included).
    assert list(state.jobs) == list(model.jobs)
    assert list(state.dead) == list(model.dead)
    tokens = []
    for job_id, job in state.jobs.items():
        m = model.jobs[job_id]
        assert (job.queue, job.status, job.attempts, job.max_attempts, job.not_before) == (
            m.queue,
            m.status,
            m.attempts,
            m.max_attempts,
            m.not_before,
        ), job_id
        if m.expiry_worker is None:
            assert job.last_error == m.last_error
        else:
            assert job.last_error is not None
            assert repr(m.expiry_worker) in job.last_error
        if job.status == "running":
            assert job.lease is not None
            assert (job.lease.token, job.lease.worker, job.lease.expires_at) == (m.token, m.worker, m.expires_at)
            tokens.append(job.lease.token)
        else:
            assert job.status == "pending"
            assert job.lease is None
            assert m.token is None
    assert len(tokens) == len(set(tokens)), "two running jobs share a lease token"
    for job_id, dead in state.dead.items():
        md = model.dead[job_id]
        assert (dead.queue, dead.attempts, dead.max_attempts) == (md.queue, md.attempts, md.max_attempts)
        if md.expiry_worker is None:
            assert dead.error == md.error
        else:
            assert repr(md.expiry_worker) in dead.error
    # Every pushed id is in exactly one place.
    assert not (state.jobs.keys() & state.dead.keys())
    assert set(state.jobs) | set(state.dead) <= model.pushed
    for job_id in model.pushed:
        places = (job_id in state.jobs) + (job_id in state.dead) + (job_id in model.removed)
        assert places == 1, job_id
    # Counters equal the model's, and balance: every pushed job is still here or left by one counted way.
    for queue in set(state.queues) | set(model.counters):
        real = state.queues.get(queue)
        assert real is not None, queue
        got = {f: getattr(real, f) for f in COUNTER_FIELDS}
        assert got == model.counters.get(queue, dict.fromkeys(COUNTER_FIELDS, 0)), queue
        in_jobs = sum(1 for j in state.jobs.values() if j.queue == queue)
        in_dead = sum(1 for d in state.dead.values() if d.queue == queue)
        assert real.pushed == in_jobs + in_dead + real.completed + real.purged + real.dead_dropped, queue
        assert real.dead >= in_dead + real.dead_dropped


class _Driver:
    def __init__(self, seed: int, *, delays: bool) -> None:
        self.rng = random.Random(seed)
        self.delays = delays
        self.policy = Policy(
            max_attempts=3,
            lease_seconds=10,
            dead_letter_limit=6,
            backoff_base_seconds=0.5 if delays else 0,
            backoff_cap_seconds=4 if delays else 0,
            max_error_chars=50,
        )
        self.state = empty_state(policy=self.policy)
        self.model = Model(self.policy)
        self.next_id = 0
        self.now = T0

    def job_ref(self) -> tuple[str, str]:
        """A (job id, lease token) pair: usually a live lease, sometimes stale, unknown or wrong."""
        rng, model = self.rng, self.model
        running = [j for j in model.jobs.values() if j.status == "running"]
        roll = rng.random()
        if running and roll < 0.6:
            job = rng.choice(running)
            assert job.token is not None
            return job.id, job.token
        if model.old_tokens and roll < 0.8:
            return rng.choice(model.old_tokens)
        if model.jobs and roll < 0.9:
            return rng.choice(list(model.jobs)), "wrong-token"
        if model.dead and roll < 0.95:
            return rng.choice(list(model.dead)), "wrong-token"
        return f"ghost{rng.randrange(5)}", "wrong-token"

    def some_ids(self) -> list[str]:
        rng, model = self.rng, self.model
        pool = list(model.jobs) + list(model.dead) + [f"ghost{i}" for i in range(2)]
        running = [j.id for j in model.jobs.values() if j.status == "running"]
        pool += (running + list(model.dead)) * 3  # favour ids that can be requeued
        return rng.sample(pool, min(len(pool), rng.randint(1, 3)))

    def make_op(self) -> Operation:
        rng, policy = self.rng, self.policy
        kind = rng.choices(
            ["push", "repush", "claim", "heartbeat", "complete", "fail", "requeue", "purge_ids", "purge_status"],
            weights=[18, 2, 22, 10, 14, 14, 6, 3, 1],
        )[0]
        if kind == "push" or (kind == "repush" and not self.model.jobs):
            n = rng.randint(1, 3)
            ids = [f"j{self.next_id + i}" for i in range(n)]
            self.next_id += n
            delay = rng.choice([0, 0, 0, 2.5, 12]) if self.delays else 0
            return push_op(
                rng.choice(QUEUES),
                [{"n": i} for i in ids],
                policy=policy,
                ids=ids,
                delay_seconds=delay,
                max_attempts=rng.choice([None, 1, 2, 4]),
            )
        if kind == "repush":
            job = self.model.jobs[rng.choice(list(self.model.jobs))]
            return push_op(job.queue, ["again"], policy=policy, ids=[job.id])
        if kind == "claim":
            return claim_op(
                rng.choice(["w1", "w2", "w3"]),
                rng.sample(QUEUES, rng.randint(1, 3)),
                policy=policy,
                max_jobs=rng.randint(1, 4),
                lease_seconds=rng.choice([None, 3.0, 25.0]),
            )
        if kind in ("heartbeat", "complete", "fail"):
            job_id, token = self.job_ref()
            if kind == "heartbeat":
                seconds = rng.choice([None, None, round(rng.uniform(1, 40), 6)])
                return heartbeat_op(job_id, token, lease_seconds=seconds)
            if kind == "complete":
                return complete_op(job_id, token)
            retry = rng.choice([None, 0, 1.5]) if self.delays else rng.choice([None, 0])
            return fail_op(job_id, token, error=f"err{rng.randrange(1000)}", retry_in_seconds=retry, policy=policy)
        if kind == "requeue":
            return requeue_op(self.some_ids())
        if kind == "purge_ids":
            return purge_op(self.some_ids())
        return purge_op(queue=rng.choice(QUEUES), status=rng.choice(["pending", "running", "dead"]))

    def step(self, n: int) -> None:
        rng = self.rng
        self.now += timedelta(seconds=round(rng.uniform(0.05, 6), 6))
        self.state.dirty = False
        if rng.random() < 0.05:
            # An explicit Expire, outside apply_batch.
            result = transitions.apply(self.state, Expire(), self.now)
            changed = self.model.check(Expire(), result, self.now)
        else:
            ops = [self.make_op() for _ in range(rng.choice([1, 1, 2, 3]))]
            results = transitions.apply_batch(self.state, ops, self.now)
            changed = bool(self.model.expire(self.now))
            for op, result in zip(ops, results, strict=True):
                changed |= self.model.check(op, result, self.now)
        assert self.state.dirty == changed, f"step {n}: dirty={self.state.dirty}, changed={changed}"
        _check_invariants(self.state, self.model)
        if n % 250 == 249:
            self.round_trip(n)

    def round_trip(self, n: int) -> None:
        """Encode, parse, compare, and carry on with the parsed state."""
        state = self.state
        data = b"".join(state.encode(seq=n, writer="prop", now=self.now))
        state.encoded(seq=n, writer="prop")
        parsed = parse_document("queue.json", data, policy=self.policy)
        assert parsed.jobs == state.jobs
        assert parsed.dead == state.dead
        assert parsed.queues == state.queues
        assert b"".join(parsed.encode(seq=n + 1, writer="prop", now=self.now)) == b"".join(
            state.encode(seq=n + 1, writer="prop", now=self.now)
        )
        self.state = parsed


def _run_model_check(seed: int, *, delays: bool, steps: int) -> _Driver:
    driver = _Driver(seed, delays=delays)
    for n in range(steps):
        driver.step(n)
    return driver


@pytest.mark.parametrize("seed", [1, 20250301])
def test_random_operations_keep_every_invariant(seed: int) -> None:
    driver = _run_model_check(seed, delays=False, steps=2000)
    c = driver.model.counters
    # The run exercised every path, not just a few.
    assert sum(q["completed"] for q in c.values()) > 50
    assert sum(q["dead"] for q in c.values()) > 10
    assert sum(q["dead_dropped"] for q in c.values()) > 0
    assert sum(q["purged"] for q in c.values()) > 0
    assert sum(q["failed"] for q in c.values()) > sum(q["dead"] for q in c.values())


def test_random_operations_with_delays_and_backoff_keep_every_invariant() -> None:
    _run_model_check(7, delays=True, steps=2000)
