"""The push path's shortcuts give exactly what the general path gives.

Each shortcut exists only for speed (see docs/benchmark.md); these tests fail
if one of them changes an outcome, an id's shape or a byte of the document.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest

from engine import GroupCommitter, LatencyStore, MemoryStore, Policy, ValidationError, encoding, model, transitions
from engine.model import Attempt, Job, Lease
from engine.ops import NewJob, claim_op, push_op
from engine.parsing import empty_state

POLICY = Policy(max_attempts=3)


def test_job_ids_are_32_hex_characters_and_unique_across_threads() -> None:
    found: list[list[str]] = [[] for _ in range(8)]

    def draw(into: list[str]) -> None:
        into.extend(model.new_job_id() for _ in range(5_000))

    threads = [threading.Thread(target=draw, args=(into,)) for into in found]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = [i for into in found for i in into]
    assert len(set(ids)) == len(ids) == 40_000
    assert all(len(i) == 32 and i == i.lower() and int(i, 16) >= 0 for i in ids)


# -- encoding a job without lease, history or error --------------------------------------------------

T0 = datetime(2025, 3, 1, 9, 30, 0, 123456, tzinfo=UTC)
PLAIN_JOBS = [
    Job(id="a", queue="q", payload=b'{"n":1}', status="pending", attempts=0, max_attempts=3, enqueued_at=T0),
    Job(id="b" * 200, queue="q.x:y-z_1", payload=b"null", status="pending", attempts=0, max_attempts=1000,
        enqueued_at=T0.replace(microsecond=0)),
    Job(id="c", queue="q", payload=b"[1,2]", status="pending", attempts=2, max_attempts=3, enqueued_at=T0,
        not_before=T0 + timedelta(seconds=1.5)),
    Job(id="d", queue="q", payload=b'"s"', status="running", attempts=1, max_attempts=3, enqueued_at=T0),
    # Not produced by the engine, but encodable: each must still give the general bytes.
    Job(id='quo"te\\ é \u2028', queue="ünï", payload=b"{}", status="pending", attempts=0, max_attempts=3,
        enqueued_at=T0),
    Job(id="e", queue="q", payload=b"1", status="pending", attempts=True, max_attempts=3,  # type: ignore[arg-type]
        enqueued_at=T0),
    Job(id="f", queue="q", payload=b"1", status="pending", attempts=1, max_attempts=3,
        enqueued_at=T0.astimezone(timezone(timedelta(hours=1)))),
    Job(id="g", queue="q", payload=b"1", status="pending", attempts=0, max_attempts=3, enqueued_at=T0,
        not_before=(T0 + timedelta(seconds=5)).astimezone(timezone(timedelta(hours=-5)))),
]


@pytest.mark.parametrize("job", PLAIN_JOBS, ids=lambda j: j.id[:8])
def test_plain_job_encoding_is_byte_for_byte_the_general_one(job: Job) -> None:
    general = encoding._encode_job_fields(job)
    assert encoding.encode_job(job) == general
    assert encoding.encode_job(job) == general  # again, from the cache
    assert orjson.loads(general)["id"] == job.id


def test_values_equal_as_cache_keys_but_encoded_differently_are_not_confused() -> None:
    one = PLAIN_JOBS[0]._replace(attempts=1)
    utc = PLAIN_JOBS[0]
    for first, second in (
        (one, one._replace(attempts=True)),
        (utc, utc._replace(enqueued_at=T0.astimezone(timezone(timedelta(hours=1))))),
        (utc._replace(not_before=T0), utc._replace(not_before=T0.astimezone(timezone(timedelta(hours=2))))),
    ):
        assert first == second and first[4:8] == second[4:8]  # equal fields...
        assert encoding.encode_job(first) == encoding._encode_job_fields(first)
        assert encoding.encode_job(second) == encoding._encode_job_fields(second)  # ...other bytes


def test_plain_job_encoding_takes_the_shortcut_and_stays_right_past_the_cache_size() -> None:
    encoding._PLAIN_MIDDLES.clear()
    jobs = [
        PLAIN_JOBS[0]._replace(id=f"j{i}", queue=f"q{i % 100}", enqueued_at=T0 + timedelta(microseconds=i))
        for i in range(3 * encoding._CACHED_MAX)
    ]
    for job in jobs + jobs:
        assert encoding.encode_job(job) == encoding._encode_job_fields(job)
    assert 0 < len(encoding._PLAIN_MIDDLES) <= encoding._CACHED_MAX  # the shortcut was used


def test_other_jobs_use_the_general_encoding() -> None:
    lease = Lease(worker="w", token="t", claimed_at=T0, heartbeat_at=T0, expires_at=T0, seconds=30.0)
    attempt = Attempt(worker="w", claimed_at=T0, heartbeat_at=T0, ended_at=T0, end="failed", error="x")
    leased = PLAIN_JOBS[0]._replace(lease=lease, status="running", attempts=1)
    for job in (
        leased._replace(history=(attempt,)),
        leased._replace(last_error="boom"),
        leased._replace(not_before=T0),
        PLAIN_JOBS[0]._replace(history=(attempt,)),
        PLAIN_JOBS[0]._replace(last_error="boom"),
    ):
        for pos in (None, 3):
            encoding._PLAIN_MIDDLES.clear()
            encoding._LEASED_FIELDS.clear()
            assert encoding.encode_job(job, pos) == encoding._encode_job_fields(job, pos)
            assert not encoding._PLAIN_MIDDLES and not encoding._LEASED_FIELDS


# -- encoding a job on its first lease (claimed, heartbeated) ----------------------------------------

LEASE = Lease(worker="host:12:ab", token="f" * 24, claimed_at=T0, heartbeat_at=T0 + timedelta(seconds=2),
              expires_at=T0 + timedelta(seconds=32), seconds=30.0)
LEASED_JOBS = [
    PLAIN_JOBS[0]._replace(status="running", attempts=1, lease=LEASE),
    PLAIN_JOBS[1]._replace(status="running", attempts=3, lease=LEASE._replace(seconds=0.001)),
    # Not produced by the engine, but encodable: each must still give the general bytes.
    PLAIN_JOBS[4]._replace(status="running", lease=LEASE._replace(worker='w"\\ é \u2028', token='t"\n')),
    PLAIN_JOBS[0]._replace(status="running", lease=LEASE._replace(seconds=30)),  # an int
    PLAIN_JOBS[0]._replace(status="running", lease=LEASE._replace(seconds=-0.0)),
    PLAIN_JOBS[0]._replace(status="running",
                           lease=LEASE._replace(expires_at=T0.astimezone(timezone(timedelta(hours=3))))),
    PLAIN_JOBS[6]._replace(status="running", lease=LEASE),  # enqueued_at not in UTC
    PLAIN_JOBS[0]._replace(status="running", attempts=True, lease=LEASE),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("pos", [None, 0, 41310])
@pytest.mark.parametrize("job", LEASED_JOBS, ids=lambda j: f"{j.id[:8]}-{j.lease.seconds!r}")
def test_a_leased_job_encodes_byte_for_byte_as_the_general_one(job: Job, pos: int | None) -> None:
    general = encoding._encode_job_fields(job, pos)
    assert encoding.encode_job(job, pos) == general
    assert encoding.encode_job(job, pos) == general  # again, from the caches
    decoded = orjson.loads(general)
    assert decoded["lease"]["token"] == job.lease.token and ("pos" in decoded) == (pos is not None)


def test_a_leased_job_takes_the_shortcut_and_lease_values_equal_as_keys_are_not_confused() -> None:
    encoding._LEASED_FIELDS.clear()
    encoding._LEASE_TIMES.clear()
    first = LEASED_JOBS[0]
    assert encoding.encode_job(first, 1) == encoding._encode_job_fields(first, 1)
    assert encoding._LEASED_FIELDS and encoding._LEASE_TIMES  # the shortcut was taken
    for other in (
        first._replace(lease=first.lease._replace(seconds=30)),
        first._replace(lease=first.lease._replace(claimed_at=T0.astimezone(timezone(timedelta(hours=1))))),
        first._replace(attempts=True),
    ):
        assert other == first  # equal as cache keys, encoded differently
        assert encoding.encode_job(other, 1) == encoding._encode_job_fields(other, 1)
    zero = first._replace(lease=first.lease._replace(seconds=0.0))
    negative_zero = first._replace(lease=first.lease._replace(seconds=-0.0))
    for job in (zero, negative_zero):
        assert encoding.encode_job(job, 1) == encoding._encode_job_fields(job, 1)
    # Many claims (workers, instants) and queues: past both caches' size, still right.
    jobs = [
        first._replace(id=f"j{i}", queue=f"q{i % 100}",
                       lease=first.lease._replace(worker=f"w{i % 7}", token=f"{i:024x}",
                                                  claimed_at=T0 + timedelta(microseconds=i)))
        for i in range(3 * encoding._CACHED_MAX)
    ]
    for job in jobs + jobs:
        assert encoding.encode_job(job, 5) == encoding._encode_job_fields(job, 5)
        assert encoding.encode_job(job) == encoding._encode_job_fields(job)
    assert 0 < len(encoding._LEASE_TIMES) <= encoding._CACHED_MAX


def test_a_claim_builds_the_running_job_a_replace_would() -> None:
    state = empty_state(policy=POLICY)
    pushes = [push_op("q", [{"n": i}], policy=POLICY) for i in range(2)]
    pushes.append(push_op("q", [{"n": 2}], policy=POLICY, delay_seconds=1))  # due by the claim
    transitions.apply_batch(state, pushes, T0)
    before = dict(state.jobs)
    later = T0 + timedelta(seconds=2)
    [claimed] = transitions.apply_batch(state, [claim_op("w", ["q"], policy=POLICY, max_jobs=3)], later)
    assert len(claimed) == 3 and any(job.not_before is not None for job in before.values())
    for item in claimed:
        running = state.jobs[item.id]
        lease = Lease(worker="w", token=item.lease, claimed_at=later, heartbeat_at=later,
                      expires_at=item.lease_expires_at, seconds=POLICY.lease_seconds)
        expected = before[item.id]._replace(status="running", attempts=1, not_before=None, lease=lease)
        assert running == expected
        assert type(running) is Job and type(running.lease) is Lease
        assert state._encoded_jobs._chunks[0][item.id] == encoding._encode_job_fields(expected)


def test_a_whole_document_of_pushed_jobs_encodes_as_before() -> None:
    state = empty_state(policy=POLICY)
    ops = [push_op("q", [{"n": i}], policy=POLICY) for i in range(50)]
    ops.append(push_op("q", [{"n": 1}, {"n": 2}], policy=POLICY, delay_seconds=2.5, max_attempts=7))
    ops.append(push_op("other", [None, [1, "x"]], policy=POLICY, ids=["id-1", "id-2"]))
    transitions.apply_batch(state, ops, T0)
    for job in state.jobs.values():
        assert state._encoded_jobs._chunks[0][job.id] == encoding._encode_job_fields(job)


# -- building a push and applying it -----------------------------------------------------------------


def test_a_one_payload_push_builds_what_a_many_payload_push_builds() -> None:
    one = push_op("q", [{"n": 1}], policy=POLICY)
    many = push_op("q", [{"n": 1}, {"n": 1}], policy=POLICY)
    assert type(one.jobs) is tuple and len(one.jobs) == 1
    [job] = one.jobs
    assert type(job) is NewJob and job._fields == ("id", "payload", "max_attempts", "delay_seconds")
    assert job[1:] == many.jobs[0][1:] == (b'{"n":1}', POLICY.max_attempts, 0.0)
    assert type(job.delay_seconds) is float and len(job.id) == 32


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, (3, 0.0)),
        ({"max_attempts": 1000, "delay_seconds": 0.0}, (1000, 0.0)),
        ({"max_attempts": 5, "delay_seconds": 2}, (5, 2.0)),
    ],
)
def test_push_defaults_and_numbers(kwargs: dict[str, Any], expected: tuple[int, float]) -> None:
    [job] = push_op("q", [1], policy=POLICY, **kwargs).jobs
    assert (job.max_attempts, job.delay_seconds) == expected
    assert type(job.max_attempts) is int and type(job.delay_seconds) is float


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 0}, {"max_attempts": 1001}, {"max_attempts": True}, {"max_attempts": 2.0},
     {"delay_seconds": -1}, {"delay_seconds": False}, {"delay_seconds": float("nan")}],
)
def test_push_still_refuses_bad_numbers(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        push_op("q", [1], policy=POLICY, **kwargs)


def test_a_policy_default_out_of_range_is_refused_at_push() -> None:
    with pytest.raises(ValidationError):
        push_op("q", [1], policy=Policy(max_attempts=1001))


def test_pushed_jobs_are_the_jobs_the_keyword_constructor_builds() -> None:
    state = empty_state(policy=POLICY)
    op = push_op("q", [{"n": 1}, {"n": 2}], policy=POLICY, delay_seconds=3, max_attempts=4)
    transitions.apply_batch(state, [op], T0)
    for new in op.jobs:
        built = Job(id=new.id, queue="q", payload=new.payload, status="pending", attempts=0, max_attempts=4,
                    enqueued_at=T0, not_before=T0 + timedelta(seconds=3))
        assert state.jobs[new.id] == built and type(state.jobs[new.id]) is Job


# -- the committer's async push ----------------------------------------------------------------------


def test_apush_commits_like_aexecute_and_refuses_bad_input_before_submitting() -> None:
    store = MemoryStore()

    async def main(committer: GroupCommitter) -> tuple[list[str], list[str]]:
        one = await committer.apush("q", [{"n": 1}])
        two = await committer.aexecute(push_op("q", [{"n": 2}], policy=committer.policy))
        with pytest.raises(ValidationError):
            await committer.apush("bad queue", [1])
        return one, two

    with GroupCommitter(store) as committer:
        one, two = asyncio.run(main(committer))
        writes = store.stats.writes
    assert [j["id"] for j in committer.document()["jobs"]] == one + two
    assert writes == 2 + 1  # two pushes, and the document's creation marker (I10)


def test_many_submitters_from_threads_and_loops_are_all_answered() -> None:
    # Only the first arrival into an empty queue wakes the writer; everyone
    # must still be answered, whatever the interleaving.
    store = LatencyStore(MemoryStore(), latency=0.002)
    with GroupCommitter(store) as committer:

        async def loop_pushes() -> list[str]:
            results = await asyncio.gather(*(committer.apush("q", [i]) for i in range(300)))
            return [i for ids in results for i in ids]

        from_threads: list[str] = []

        def thread_pushes() -> None:
            for i in range(50):
                from_threads.extend(committer.push("q", [i]))

        threads = [threading.Thread(target=thread_pushes) for _ in range(4)]
        for thread in threads:
            thread.start()
        from_loop = asyncio.run(loop_pushes())
        for thread in threads:
            thread.join()
        stored = {j["id"] for j in committer.document()["jobs"]}
    assert len(from_loop) == 300 and len(from_threads) == 200
    assert stored == set(from_loop) | set(from_threads)


def test_queue_names_checked_once_are_remembered_and_bad_ones_never() -> None:
    from engine import ops as operations

    operations._CHECKED_QUEUES.clear()
    assert operations.check_queue("good.q") == "good.q"
    assert "good.q" in operations._CHECKED_QUEUES
    assert operations.check_queue("good.q") == "good.q"
    for bad in ("", "bad queue", "-x", "x" * 101, None, 7, ["q"], "q\n"):
        with pytest.raises(ValidationError):
            operations.check_queue(bad)
        with pytest.raises(ValidationError):
            operations.check_queue(bad)  # still refused the second time
    assert set(operations._CHECKED_QUEUES) == {"good.q"}
    for i in range(3 * operations._CHECKED_QUEUES_MAX):
        operations.check_queue(f"q{i}")
    assert len(operations._CHECKED_QUEUES) <= operations._CHECKED_QUEUES_MAX
