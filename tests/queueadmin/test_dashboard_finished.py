"""Finished jobs stay findable (queueadmin.history): each way a job leaves the
document leaves a row, written by the leader off the commit path, and the
job page shows it; rows past the retention are pruned and no longer shown;
a recorder whose database fails never breaks a commit.

The rows are written by the recorder's own thread, so these tests use real
transactions (``transaction=True``) and wait for it with ``flush()``. Each
gets a recorder of its own (elsewhere, tests record nothing: see
``tests/conftest.py``).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
import pytest
from django.db import OperationalError, connection
from django.test import Client

from engine import Broker, Departure, Job, Policy, Worker, utc_now
from engine.ops import claim_op, fail_op
from queueadmin import config, runtime
from queueadmin.dashboard import pages
from queueadmin.dashboard.source import source
from queueadmin.history import recorder as recorder_module
from queueadmin.history import records
from queueadmin.history.recorder import FinishedRecorder, prune
from queueadmin.history.records import COLUMNS, FinishedJob, Row, find, insert_rows, row_of
from queueadmin.tasks.worker import TaskRunner
from tests.e2e.sample_tasks import add
from tests.helpers import FAST_WORKER, wait_for
from tests.queueadmin.api_client import Client as ApiClient
from tests.queueadmin.dashboard_fixtures import act, kill, push

if TYPE_CHECKING:
    from pytest_django.fixtures import Settings as SettingsWrapper

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]

TOKEN = "test-token-0123456789"


@pytest.fixture(autouse=True)
def finished_recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[FinishedRecorder]:
    """The recorder the brokers of this test report to (autouse: set up before them)."""
    recorder = FinishedRecorder(retention_seconds=config.DEFAULT_FINISHED_RETENTION_SECONDS)
    monkeypatch.setattr(recorder_module, "shared_recorder", lambda **kwargs: recorder)
    yield recorder
    recorder.stop()


def recorded() -> None:
    """Wait until the recorder has written every departure so far, and let
    the pages read the latest document (not a snapshot a few ms old)."""
    assert recorder_module.shared_recorder().flush(timeout=10), "the finished-job recorder did not catch up"
    source.reset()


def complete_one(broker: Broker, queue: str = "q", payload: object = "x", *, worker: str = "w-test") -> str:
    [job_id] = push(broker, queue, [payload])
    [claimed] = broker.execute(claim_op(worker, [queue], policy=broker.policy))
    broker.execute(
        fail_op(claimed.id, claimed.lease, error="first try failed", retry_in_seconds=0, policy=broker.policy)
    )
    [claimed] = broker.execute(claim_op(worker, [queue], policy=broker.policy))
    api = ApiClient(headers={"Authorization": f"Bearer {TOKEN}"})
    done = api.post(
        f"/api/v1/jobs/{job_id}/complete", orjson.dumps({"lease": claimed.lease}), content_type="application/json"
    )
    assert done.status_code == 200, done.content
    return job_id


@pytest.fixture
def api_token(settings: SettingsWrapper) -> None:
    settings.QUEUE_API_TOKEN = TOKEN


def test_a_job_completed_through_the_api_shows_its_record(broker: Broker, api_token: None, operator: Client) -> None:
    job_id = complete_one(broker, "emails", {"to": "ada@example.com"}, worker="w-7")
    recorded()

    row = FinishedJob.objects.get(pk=job_id)
    assert (row.how, row.queue, row.worker, row.attempts, row.was) == ("completed", "emails", "w-7", 2, "running")
    assert [a["end"] for a in row.history] == ["failed", "completed"]
    assert row.history[0]["error"] == "first try failed"
    response = operator.get(f"/jobs/{job_id}/")
    body = response.content.decode()
    assert response.status_code == 200
    assert 'data-testid="job-status">completed<' in body
    assert 'data-testid="finished-worker">w-7<' in body
    assert "first try failed" in body and "ada@example.com" in body
    assert "completed by w-7" in body
    assert response.context["duration"] >= 0 and response.context["last_run"] is not None
    assert "or the id is wrong. Completed jobs leave" not in body


def test_a_job_purged_by_an_operator_shows_who_and_why(broker: Broker, operator: Client) -> None:
    [job_id] = push(broker, "q", ["to purge"])
    done = act(operator, action="purge", ids=job_id, reason="duplicate of ticket 42")
    assert done.status_code == 302
    recorded()

    body = operator.get(f"/jobs/{job_id}/").content.decode()
    assert 'data-testid="job-status">purged<' in body
    assert "operator: “duplicate of ticket 42”" in body
    assert "(it was pending)" in body
    row = FinishedJob.objects.get(pk=job_id)
    assert (row.how, row.was, row.worker, row.history) == ("purged", "pending", "", [])


def test_a_purged_dead_letter_keeps_its_error_and_attempts(broker: Broker, operator: Client) -> None:
    job_id = kill(broker, error="Traceback: KeyError 'user'")
    act(operator, action="purge", ids=job_id, reason="cannot be fixed")
    recorded()

    row = FinishedJob.objects.get(pk=job_id)
    assert (row.how, row.was, row.worker, row.attempts) == ("purged", "dead", "w-test", 1)
    assert row.last_error == "Traceback: KeyError 'user'"
    response = operator.get(f"/jobs/{job_id}/")
    body = response.content.decode()
    assert "KeyError" in body and "cannot be fixed" in body
    # Its timeline still says when it moved to the dead letters: at the end of its failed attempt.
    kinds = [e.kind for e in response.context["events"]]
    assert kinds[-3:] == ["failed", "dead", "purged"], kinds
    assert response.context["died_at"] == datetime.fromisoformat(row.history[-1]["ended_at"])
    assert 'data-testid="finished-died"' in body and "of it in the dead letters" in body
    # The attempts table gives each error's last line; the whole text is on the timeline (it was in both).
    assert '<span class="muted" data-testid="attempt-error" title="The whole error is on the timeline">· Traceback: ' \
           "KeyError &#x27;user&#x27;</span>" in body
    assert body.count('<pre class="detail">Traceback: KeyError') == 1


def test_a_job_requeued_from_the_dead_letters_keeps_its_death_on_its_timeline(
        broker: Broker, api_token: None, operator: Client) -> None:
    """A dead letter requeued starts over at zero attempts: its page still says
    when it moved to the dead letters (after the attempt that failed last), in
    the queue, running again and once completed."""
    job_id = kill(broker, error="downstream was down")
    act(operator, action="requeue", ids=job_id, reason="downstream is back")
    source.reset()

    def timeline() -> list[str]:
        events = operator.get(f"/jobs/{job_id}/").context["events"]
        return [e.kind if e.kind != "action" else e.text.split(" by ")[0] for e in events]

    assert timeline() == ["enqueued", "claimed", "failed", "dead", "requeued"]
    [claimed] = broker.execute(claim_op("w-2", ["q"], policy=broker.policy))
    source.reset()
    assert timeline() == ["enqueued", "claimed", "failed", "dead", "requeued", "claimed"]
    api = ApiClient(headers={"Authorization": f"Bearer {TOKEN}"})
    done = api.post(f"/api/v1/jobs/{job_id}/complete", orjson.dumps({"lease": claimed.lease}),
                    content_type="application/json")
    assert done.status_code == 200, done.content
    recorded()
    assert timeline() == ["enqueued", "claimed", "failed", "dead", "requeued", "claimed", "completed"]
    # A job that failed and was retried, never dead, has no such entry.
    retried = complete_one(broker)
    recorded()
    assert "dead" not in [e.kind for e in operator.get(f"/jobs/{retried}/").context["events"]]


@pytest.fixture
def small_dead_letters(settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch) -> Iterator[Broker]:
    """A leading broker whose dead-letter list holds two (Policy.dead_letter_limit)."""
    settings.QUEUE_STORE_URL = f"memory://finished-{uuid.uuid4().hex}"
    settings.QUEUE_HEARTBEAT_SECONDS = 120.0
    settings.QUEUE_TAKEOVER_SECONDS = 600.0
    monkeypatch.setattr(config, "policy", lambda: Policy(dead_letter_limit=2))
    node = runtime.build_broker().start()
    try:
        wait_for(lambda: node.role == "leader")
        monkeypatch.setattr(runtime, "get_broker", lambda: node)
        source.reset()
        yield node
    finally:
        node.stop()
        source.reset()


def test_a_dead_letter_dropped_from_the_full_list_shows_its_record(
    small_dead_letters: Broker, operator: Client
) -> None:
    first = kill(small_dead_letters, error="oldest error")
    kill(small_dead_letters)
    assert not FinishedJob.objects.exists()
    kill(small_dead_letters)  # the third: the oldest is dropped
    recorded()

    row = FinishedJob.objects.get()
    assert (row.job_id, row.how, row.was, row.last_error) == (first, "dropped", "dead", "oldest error")
    body = operator.get(f"/jobs/{first}/").content.decode()
    assert 'data-testid="job-status">dropped from the dead letters<' in body
    assert "oldest error" in body


def test_an_unknown_id_says_so_and_names_the_retention(
    broker: Broker, operator: Client, settings: SettingsWrapper
) -> None:
    settings.QUEUE_FINISHED_RETENTION_SECONDS = 3 * 24 * 3600.0
    body = operator.get("/jobs/no-such-job/").content.decode()
    assert 'data-testid="job-status">not in the document<' in body
    assert 'data-testid="job-unknown"' in body and "in the last 3.0 d" in body
    assert 'data-testid="finished"' not in body


def test_rows_past_the_retention_are_not_shown_and_are_pruned(
    broker: Broker, api_token: None, operator: Client, settings: SettingsWrapper
) -> None:
    old, new = complete_one(broker), complete_one(broker)
    recorded()
    FinishedJob.objects.filter(pk=old).update(finished_at=utc_now() - timedelta(days=8))

    assert 'data-testid="job-unknown"' in operator.get(f"/jobs/{old}/").content.decode()
    assert 'data-testid="finished"' in operator.get(f"/jobs/{new}/").content.decode()
    assert prune(older_than=utc_now() - timedelta(seconds=config.finished_retention_seconds()), chunk=1) == 1
    assert list(FinishedJob.objects.values_list("job_id", flat=True)) == [new]


def test_the_recorder_prunes_on_its_own(db: None) -> None:
    FinishedJob.objects.create(
        job_id="old",
        queue="q",
        how="completed",
        finished_at=utc_now() - timedelta(hours=2),
        was="running",
        enqueued_at=utc_now() - timedelta(hours=3),
        attempts=1,
        max_attempts=3,
    )
    recorder = FinishedRecorder(retention_seconds=3600)
    try:
        recorder.offer([])  # starts its thread, which prunes first
        wait_for(lambda: recorder.stats.pruned == 1)
    finally:
        recorder.stop()
    assert not FinishedJob.objects.exists()


def test_a_failing_database_never_breaks_commits(
    finished_recorder: FinishedRecorder, broker: Broker, api_token: None
) -> None:
    recorder = finished_recorder
    calls: list[int] = []
    working = recorder.write

    def down(rows: list[Row]) -> None:
        calls.append(len(rows))
        raise RuntimeError("the database is down")

    recorder.write = down
    job_id = complete_one(broker)
    wait_for(lambda: bool(calls))
    for _ in range(20):  # more commits while it waits to retry: they do not make it retry sooner
        complete_one(broker)
    assert len(calls) == 1
    assert broker.committer is not None
    assert broker.committer.document()["jobs"] == []
    assert broker.committer.document()["queues"]["q"]["completed"] == 21
    recorder.write = working  # the database is back: the backlog is written
    recorded()
    assert find(job_id, retention_seconds=60, now=utc_now()) is not None
    assert recorder.stats.failures >= 1


def departure(job_id: str, how: str = "completed") -> Departure:
    job = Job(id=job_id, queue="q", payload=b'"x"', status="pending", attempts=0, max_attempts=3, enqueued_at=utc_now())
    return Departure(how, utc_now(), job)  # type: ignore[arg-type]


def test_a_full_backlog_drops_the_oldest_and_counts_them(db: None) -> None:
    gate, written = threading.Event(), list[str]()

    def slow(rows: list[Row]) -> None:
        assert gate.wait(10)
        written.extend(row[0] for row in rows)

    recorder = FinishedRecorder(retention_seconds=60, max_backlog=2, linger_seconds=0, write=slow)
    try:
        recorder.offer([departure("a")])
        wait_for(lambda: recorder.stats.offered == 1 and not recorder._backlog)  # "a" is being written
        recorder.offer([departure("b"), departure("c"), departure("d")])
        gate.set()
        assert recorder.flush(10)
    finally:
        recorder.stop()
    assert written == ["a", "c", "d"]
    assert (recorder.stats.dropped, recorder.stats.written) == (1, 3)


def test_a_job_id_that_finishes_again_keeps_its_latest_finish(db: None) -> None:
    insert_rows([row_of(departure("again", "purged"))])
    insert_rows([row_of(departure("again", "completed")), row_of(departure("other"))])
    assert FinishedJob.objects.get(pk="again").how == "completed"
    assert FinishedJob.objects.count() == 2


@pytest.fixture
def task_node(settings: SettingsWrapper) -> Iterator[Broker]:
    """This process's broker, leading on a fresh memory store, serving TASKS and the dashboard."""
    runtime.stop_broker()
    settings.QUEUE_STORE_URL = f"memory://finished-tasks-{uuid.uuid4().hex}"
    settings.QUEUE_ADVERTISE_URL = None
    settings.QUEUE_API_TOKEN = None
    settings.TASKS = {"default": {"BACKEND": "queueadmin.tasks.ObjectStoreBackend", "OPTIONS": {"MAX_ATTEMPTS": 1}}}
    broker = runtime.start_broker()
    wait_for(lambda: broker.role == "leader")
    source.reset()
    yield broker
    runtime.stop_broker()
    source.reset()


def test_a_finished_task_shows_its_record_and_its_return_value(task_node: Broker, viewer: Client) -> None:
    result = add.enqueue(2, 3)
    assert task_node.committer is not None
    client = task_node.committer
    Worker(
        client,
        queues=["default"],
        handler=TaskRunner(client, worker_id="w-tasks"),
        pass_job=True,
        worker_id="w-tasks",
        options=replace(FAST_WORKER, burst=True),
    ).run()
    recorded()

    body = viewer.get(f"/jobs/{result.id}/").content.decode()
    assert 'data-testid="job-status">completed<' in body
    assert 'data-testid="finished-worker">w-tasks<' in body
    assert 'data-testid="task-status">SUCCESSFUL' in body and 'data-testid="task-return">5' in body


def test_a_row_the_database_refuses_is_dropped_alone(db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recorder_module, "RETRY_FIRST_SECONDS", 0.01)
    written: list[str] = []

    def picky(rows: list[Row]) -> None:
        if any(row[0] == "bad" for row in rows):
            raise ValueError("a value this database cannot store")
        written.extend(row[0] for row in rows)

    recorder = FinishedRecorder(retention_seconds=60, linger_seconds=0, write=picky)
    try:
        recorder.offer([departure("a"), departure("bad"), departure("c")])
        assert recorder.flush(10)
        recorder.offer([departure("d")])
        assert recorder.flush(10)
    finally:
        recorder.stop()
    assert written == ["a", "c", "d"]
    assert (recorder.stats.written, recorder.stats.dropped) == (3, 1)


def test_nul_characters_are_kept_out_of_the_row() -> None:
    job = Job(
        id="j",
        queue="q",
        payload=b'"x"',
        status="pending",
        attempts=1,
        max_attempts=3,
        enqueued_at=utc_now(),
        last_error="bad\x00byte",
    )
    row = dict(zip(COLUMNS, row_of(Departure("purged", utc_now(), job)), strict=True))
    assert row["last_error"] == "bad\ufffdbyte"


def test_the_job_page_says_so_when_the_records_cannot_be_read(
    broker: Broker, operator: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    def down(*args: object, **kwargs: object) -> None:
        raise OperationalError("the database is locked")

    monkeypatch.setattr(pages, "find", down)
    response = operator.get("/jobs/gone-or-unknown/")
    assert response.status_code == 200
    assert 'data-testid="finished-error"' in response.content.decode()
    assert "the database is locked" in response.content.decode()


AT_EXIT = """
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from engine import Departure, Job, utc_now
from queueadmin.history.recorder import shared_recorder
recorder = shared_recorder()
recorder.linger_seconds = 600  # it would wait for more departures far longer than this process lives
job = Job(id="written-at-exit", queue="q", payload=b"1", status="pending", attempts=0, max_attempts=3,
          enqueued_at=utc_now())
recorder.offer([Departure("purged", utc_now(), job)])
"""


@pytest.mark.slow  # a Python process that migrates a database
def test_a_process_that_exits_normally_writes_its_backlog_first(tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite3"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUE_", "DJANGO_", "DATABASE_URL"))}
    env.update(DATABASE_URL=f"sqlite:///{database}", DJANGO_SETTINGS_MODULE="queueadmin.settings", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", AT_EXIT], env=env, cwd=ROOT, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    with sqlite3.connect(database) as connection:
        rows = connection.execute("SELECT job_id, how FROM queueadmin_finishedjob").fetchall()
    assert rows == [("written-at-exit", "purged")]


def test_times_are_formatted_as_django_formats_them_cached_or_not(db: None) -> None:
    """The recorder's formatting of times (cached for UTC times) gives what
    isoformat and Django's own SQLite adapter give, for equal times in other
    zones too, which equal a cached key but format differently."""
    t = datetime(2026, 12, 6, 5, 0, 0, 123456, tzinfo=UTC)
    for value in (t, t.astimezone(timezone(timedelta(hours=2))), t, t.replace(microsecond=0), t):
        assert records._moment(value) == value.isoformat()
        if connection.vendor == "sqlite":
            assert records._sqlite_moment(value) == connection.ops.adapt_datetimefield_value(value)
