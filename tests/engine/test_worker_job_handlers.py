"""The Worker's two hooks for job-aware handlers (the Django Tasks worker uses
both): ``pass_job=True`` hands the handler the whole ClaimedJob, and a
handler raising PermanentFailure dead-letters the job on its first attempt."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from engine import ClaimedJob, GroupCommitter, MemoryStore, Policy
from engine.worker import PermanentFailure, Worker, WorkerOptions
from tests.helpers import FAST_WORKER


def fast(**changes: Any) -> WorkerOptions:
    """The fast test options, with ``changes``."""
    return replace(FAST_WORKER, **changes)


@pytest.fixture
def client() -> Iterator[GroupCommitter]:
    # The default backoff (1 s, then 2 s): a burst worker leaves a retry that waits for it.
    committer = GroupCommitter(MemoryStore(), policy=Policy(max_attempts=3)).start()
    yield committer
    committer.stop()


def test_pass_job_hands_the_handler_the_claimed_job(client: GroupCommitter) -> None:
    [job_id] = client.push("q", [{"n": 1}])
    seen: list[Any] = []
    Worker(client, queues=["q"], handler=seen.append, pass_job=True, options=fast(burst=True)).run()
    [job] = seen
    assert isinstance(job, ClaimedJob)
    assert (job.id, job.queue, job.payload, job.attempt) == (job_id, "q", {"n": 1}, 1)


def test_without_pass_job_the_handler_gets_the_payload(client: GroupCommitter) -> None:
    client.push("q", [{"n": 1}])
    seen: list[Any] = []
    Worker(client, queues=["q"], handler=seen.append, options=fast(burst=True)).run()
    assert seen == [{"n": 1}]


def test_permanent_failure_dead_letters_on_the_first_attempt(client: GroupCommitter) -> None:
    [job_id] = client.push("q", [{"n": 1}])
    calls: list[int] = []

    def handler(job: ClaimedJob) -> None:
        calls.append(job.attempt)
        raise PermanentFailure("not a task: nothing to run")

    stats = Worker(client, queues=["q"], handler=handler, pass_job=True, options=fast(burst=True)).run()
    # Two attempts were left; none is used.
    assert calls == [1]
    assert (stats.failed, stats.dead) == (1, 1)
    [dead] = client.document()["dead"]
    assert (dead["id"], dead["attempts"], dead["max_attempts"]) == (job_id, 1, 3)
    assert "PermanentFailure: not a task: nothing to run" in dead["error"]


def test_an_ordinary_failure_still_waits_for_its_backoff(client: GroupCommitter) -> None:
    [job_id] = client.push("q", [{"n": 1}])

    def handler(payload: Any) -> None:
        raise RuntimeError("try again later")

    stats = Worker(client, queues=["q"], handler=handler, options=fast(burst=True)).run()
    assert (stats.failed, stats.dead) == (1, 0)
    job = client.get_job(job_id)
    assert job["status"] == "pending" and job["not_before"] is not None
