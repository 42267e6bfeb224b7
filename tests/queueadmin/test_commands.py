"""The queue's management commands: queuestatus, enqueue and queueworker, and the demo handlers.

Runs against real documents in a folder store prepared with DirectClient.
queueworker's run itself is driven through a GroupCommitter standing in for
the BrokerClient; real broker processes are the end-to-end tests' job.
"""

from __future__ import annotations

import io
import os
import signal
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from engine import (
    DirectClient,
    FileStore,
    GroupCommitter,
    MemoryStore,
    Policy,
    Worker,
    pause_schedule_op,
    schedule,
    utc_now,
)
from engine.ops import FireSchedules, HandOver, TakeOver
from queueadmin import demo
from queueadmin.management.commands.queueworker import import_handler
from tests.helpers import KEY

if TYPE_CHECKING:
    from pytest_django.fixtures import Settings as SettingsWrapper



@pytest.fixture
def store(tmp_path: Path, settings: SettingsWrapper) -> FileStore:
    root = tmp_path / "store"
    settings.QUEUE_STORE_URL = root.as_uri()
    return FileStore(root)


def run(*args: str, **options: Any) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def _prepare(store: FileStore) -> dict[str, str]:
    """A leader, two queues, a running job, a pending one, a delayed one and a dead letter."""
    client = DirectClient(store, policy=Policy(max_attempts=3))
    client.execute(TakeOver(broker_id="node-1", url="http://127.0.0.1:8766", epoch=0))
    running, pending = client.push("emails", [{"to": "ada"}, {"to": "bob"}])
    [delayed] = client.push("emails", [{"to": "cy"}], delay_seconds=3600)
    [doomed] = client.push("reports", [{"r": 1}], max_attempts=1)
    [claimed] = client.claim("worker-1", ["emails"], lease_seconds=60)
    [bad] = client.claim("worker-2", ["reports"])
    client.fail(bad.id, bad.lease, error="boom")
    return {"running": running, "pending": pending, "delayed": delayed, "doomed": doomed, "lease": claimed.lease}


def test_queuestatus_shows_leader_counts_and_leases(store: FileStore) -> None:
    ids = _prepare(store)
    out, _ = run("queuestatus")
    lines = out.splitlines()
    size = len(store.get(KEY).data)  # type: ignore[union-attr]
    assert lines[0] == f"document  file://{store.root}/{KEY}  ({size} bytes, seq 7)"
    assert lines[1] == "leader    node-1  http://127.0.0.1:8766  epoch 1"
    header, emails, reports = lines[3].split(), lines[4].split(), lines[5].split()
    assert header == ["queue", "ready", "delayed", "running", "dead", "next", "due",
                      "pushed", "completed", "failed", "died", "purged", "dropped"]
    # The delayed job comes due in an hour; nothing waits in reports.
    assert emails[:5] + emails[7:] == ["emails", "1", "1", "1", "0", "3", "0", "0", "0", "0", "0"]
    assert emails[5] == "in" and emails[6] in ("59m59s", "59m58s", "1h00m")
    assert reports == ["reports", "0", "0", "0", "1", "-", "1", "0", "1", "1", "0", "0"]
    assert "next due: when the next job not due yet comes due" in out
    lease_at = lines.index("running leases: 1")
    assert lines[lease_at + 1].split() == ["job", "queue", "worker", "attempt", "claimed", "heartbeat", "left"]
    row = lines[lease_at + 2].split()
    assert row[:4] == [ids["running"], "emails", "worker-1", "1/3"]
    assert row[-1].endswith("s") and 50 < float(row[-1].rstrip("s")) <= 60  # time left on a 60 s lease
    assert ids["lease"] not in out  # lease tokens are secrets of their holders


def test_queuestatus_json(store: FileStore) -> None:
    ids = _prepare(store)
    out, _ = run("queuestatus", "--json")
    status = orjson.loads(out)
    assert status["leader"] == {"id": "node-1", "url": "http://127.0.0.1:8766", "epoch": 1}
    assert status["seq"] == 7 and status["size"] == len(store.get(KEY).data)  # type: ignore[union-attr]
    assert status["queues"]["emails"]["ready"] == 1 and status["queues"]["reports"]["dead"] == 1
    assert status["queues"]["reports"]["counters"]["failed"] == 1
    assert 3590 < status["queues"]["emails"]["next_due_seconds"] <= 3600 and status["queues"]["emails"]["next_due"]
    assert status["queues"]["reports"]["next_due"] is None and status["queues"]["reports"]["next_due_seconds"] is None
    [lease] = status["leases"]
    assert (lease["id"], lease["worker"], lease["attempt"]) == (ids["running"], "worker-1", 1)
    assert 0 <= lease["age_seconds"] < 10 and 50 < lease["left_seconds"] <= 60


def test_queuestatus_lists_each_schedules_last_tick_and_pause(store: FileStore) -> None:
    client = DirectClient(store)
    nightly = schedule("nightly", queue="reports", payload={}, policy=Policy(), cron="0 3 * * *")
    ping = schedule("ping", queue="pings", payload=1, policy=Policy(), every_seconds=60)
    now = utc_now()
    night, minute = nightly.latest_due(now), ping.latest_due(now)
    assert night is not None and minute is not None
    client.execute(FireSchedules(fires=(nightly.fire(night), ping.fire(minute)), since=minute))
    client.execute(pause_schedule_op("ping"))
    client.execute(pause_schedule_op("later"))  # paused before any tick: no mark yet
    out, _ = run("queuestatus")
    lines = out.splitlines()
    at = lines.index("schedules: 3")
    assert lines[at + 1].split() == ["schedule", "last", "tick", "outcome", "job", "paused"]
    assert lines[at + 2].split()[:5] == ["later", "-", "-", "-", "since"]
    assert lines[at + 3].split()[0] == "nightly" and lines[at + 3].split()[-3:] == ["registered", "-", "-"]
    assert lines[at + 4].split()[0] == "ping" and lines[at + 4].split()[-5:-3] == ["fired", ping.job_id(minute)]
    assert lines[at + 4].split()[-3] == "since"
    status = orjson.loads(run("queuestatus", "--json")[0])
    assert status["schedules"]["ping"]["job"] == ping.job_id(minute) and status["schedules"]["ping"]["age_seconds"] < 60
    assert status["schedules"]["ping"]["paused_since"] is not None
    assert status["schedules"]["nightly"]["outcome"] == "registered"
    assert status["schedules"]["nightly"]["paused_since"] is None
    assert status["schedules"]["later"]["tick"] is None


def test_queuestatus_reports_an_expired_lease_and_no_leader(store: FileStore) -> None:
    clock = [utc_now() - timedelta(hours=2)]
    client = DirectClient(store, clock=lambda: clock[0])
    client.push("q", [1])
    client.claim("w", ["q"], lease_seconds=30)
    out, _ = run("queuestatus")
    assert "leader    none (epoch 0): no broker has taken over yet" in out
    assert "2h00m" in out and "expired 1h59m ago" in out


def test_queuestatus_says_when_the_last_leader_handed_over(store: FileStore) -> None:
    client = DirectClient(store)
    client.execute(TakeOver(broker_id="node-1", url="http://127.0.0.1:8766", epoch=0))
    client.execute(HandOver(broker_id="node-1", epoch=1))
    out, _ = run("queuestatus")
    assert "leader    none (epoch 1): the last leader handed over as it stopped" in out


def test_queuestatus_without_a_document(store: FileStore) -> None:
    out, _ = run("queuestatus")
    assert "none yet" in out
    assert orjson.loads(run("queuestatus", "--json")[0])["exists"] is False


def test_queuestatus_refuses_a_corrupt_document_and_writes_nothing(store: FileStore) -> None:
    store.put(KEY, b'{"format": 1, "seq": "x"')
    before = store.get(KEY)
    message = r"store: queue\.json: not valid JSON.*refusing to overwrite it"
    with pytest.raises(CommandError, match=message) as caught:
        run("queuestatus")
    assert caught.value.returncode != 0
    assert store.get(KEY) == before


def test_enqueue_refuses_bad_json_and_bad_input_without_a_broker(settings: SettingsWrapper) -> None:
    settings.QUEUE_API_TOKEN = "t"
    with pytest.raises(CommandError, match="not valid JSON"):
        run("enqueue", "q", "{nope")
    with pytest.raises(CommandError, match="not valid JSON"):
        run("enqueue", "q", "NaN")
    # Validated locally: the unreachable broker is never asked.
    with pytest.raises(CommandError, match="invalid queue name"):
        run("enqueue", "bad queue", "{}", "--broker", "http://127.0.0.1:9")
    with pytest.raises(CommandError, match="max_attempts"):
        run("enqueue", "q", "{}", "--max-attempts", "0", "--broker", "http://127.0.0.1:9")
    with pytest.raises(CommandError, match="job id"):
        run("enqueue", "q", "{}", "--id", "no spaces", "--broker", "http://127.0.0.1:9")


def test_enqueue_needs_a_token(settings: SettingsWrapper) -> None:
    settings.QUEUE_API_TOKEN = None
    with pytest.raises(CommandError, match="--token or set QUEUE_API_TOKEN"):
        run("enqueue", "q", "{}")


@pytest.mark.parametrize(
    ("handler", "message"),
    [
        ("queueadmin.demo.work", "must look like package.module:function"),
        ("queueadmin.nope:work", "cannot import handler module 'queueadmin.nope'"),
        ("queueadmin.demo:nope", "has no attribute 'nope'"),
        ("queueadmin.demo:MAX_SECONDS", "is not callable"),
    ],
)
def test_queueworker_refuses_a_bad_handler(settings: SettingsWrapper, handler: str, message: str) -> None:
    settings.QUEUE_API_TOKEN = "t"
    with pytest.raises(CommandError, match=message):
        run("queueworker", "--queue", "q", "--handler", handler, "--burst")


def test_queueworker_needs_a_token_and_a_queue(settings: SettingsWrapper) -> None:
    settings.QUEUE_API_TOKEN = None
    with pytest.raises(CommandError, match="--token or set QUEUE_API_TOKEN"):
        run("queueworker", "--queue", "q", "--handler", "queueadmin.demo:noop")
    with pytest.raises(CommandError, match="--queue"):
        run("queueworker", "--handler", "queueadmin.demo:noop", "--token", "t")
    with pytest.raises(CommandError, match="invalid queue name"):
        run("queueworker", "--queue", "bad queue", "--handler", "queueadmin.demo:noop", "--token", "t",
            "--broker", "http://127.0.0.1:9")
    with pytest.raises(CommandError, match="max_jobs must be a positive integer"):
        run("queueworker", "--queue", "q", "--handler", "queueadmin.demo:noop", "--token", "t", "--max-jobs", "0")
    with pytest.raises(CommandError, match="cannot be combined with --burst"):
        run("queueworker", "--queue", "q", "--handler", "queueadmin.demo:noop", "--token", "t", "--reload",
            "--burst")


def test_import_handler_follows_dotted_attributes() -> None:
    assert import_handler("queueadmin.demo:noop") is demo.noop
    assert import_handler("queueadmin.demo:DemoFailure.__init__") is demo.DemoFailure.__init__


@pytest.fixture
def committer(monkeypatch: pytest.MonkeyPatch) -> Iterator[GroupCommitter]:
    """A GroupCommitter the queueworker command uses instead of a BrokerClient."""
    committer = GroupCommitter(MemoryStore(), policy=Policy(max_attempts=1)).start()
    monkeypatch.setattr("queueadmin.management.commands.queueworker.broker_client", lambda **_: committer)
    yield committer
    committer.stop()


def test_queueworker_burst_logs_one_line_per_outcome(committer: GroupCommitter) -> None:
    committer.push("q", [{"seconds": 0, "fail_rate": 0}, {"seconds": 0, "fail": True}])
    _, err = run("queueworker", "--queue", "q", "--handler", "queueadmin.demo:work", "--burst", "--token", "t",
                 "--concurrency", "2")
    outcomes = [line for line in err.splitlines() if " job " in line]
    assert len(outcomes) == 2
    assert sum("completed" in line for line in outcomes) == 1
    assert sum("failed" in line and "dead" in line and "DemoFailure" in line for line in outcomes) == 1
    assert "claimed 2, completed 1, failed 1 (dead 1), lost 0" in err
    assert committer.document()["jobs"] == []


def test_queueworker_stops_gracefully_on_sigterm(committer: GroupCommitter, monkeypatch: pytest.MonkeyPatch) -> None:
    _, second = committer.push("q", ["a", "b"])
    # The signal is handled on the main thread, whenever it next gets the GIL;
    # the job holds its slot until then, as a job that runs on would, so the
    # claimer (another thread) cannot race the handler on a loaded machine.
    stopped = threading.Event()
    stop = Worker.stop

    def stop_and_tell(self: Worker, grace_seconds: float | None = None) -> None:
        stop(self, grace_seconds)
        stopped.set()

    def handler(payload: Any) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while this job runs
        assert stopped.wait(10), "SIGTERM was not handled"

    monkeypatch.setattr(Worker, "stop", stop_and_tell)
    monkeypatch.setattr(demo, "noop", handler)
    previous = signal.getsignal(signal.SIGTERM)
    _, err = run("queueworker", "--queue", "q", "--handler", "queueadmin.demo:noop", "--token", "t")
    assert "SIGTERM: no more claims" in err
    assert "claimed 1, completed 1" in err  # the running job finished; the next was not claimed
    assert [(j["id"], j["status"]) for j in committer.document()["jobs"]] == [(second, "pending")]
    assert signal.getsignal(signal.SIGTERM) == previous


def test_demo_handlers(monkeypatch: pytest.MonkeyPatch) -> None:
    assert demo.noop({"anything": 1}) is None
    assert demo.work({"seconds": 0, "fail_rate": 0}) is None
    monkeypatch.setattr(demo.random, "random", lambda: 0.5)  # above the default fail rate
    assert demo.work([1, 2]) is None  # not an object: the defaults apply
    with pytest.raises(demo.DemoFailure, match="on purpose"):
        demo.work({"seconds": 0, "fail": True})
    with pytest.raises(demo.DemoFailure, match="at random"):
        demo.work({"seconds": 0, "fail_rate": 1})
    with pytest.raises(ValueError, match="seconds must be a number"):
        demo.work({"seconds": "soon"})


def test_the_demo_handler_stops_when_its_job_is_cancelled() -> None:
    from dataclasses import replace

    from engine import GroupCommitter, MemoryStore, Policy, Worker
    from tests.helpers import FAST_WORKER, start, wait_for

    committer = GroupCommitter(MemoryStore(), policy=Policy()).start()
    try:
        [job_id] = committer.push("q", [{"seconds": 60, "fail_rate": 0}])  # would work a minute if it did not look
        options = replace(FAST_WORKER, lease_seconds=5, heartbeat_interval=0.02)
        worker = Worker(committer, queues=["q"], handler=demo.work, options=options)
        thread, _ = start(worker)
        wait_for(lambda: committer.get_job(job_id)["status"] == "running")
        committer.purge([job_id])  # from the dashboard, say
        wait_for(lambda: worker.stats.cancelled == 1, what="the demo handler to stop on its cancellation")
        worker.stop()
        thread.join(10)
        assert (worker.stats.lost, worker.stats.completed) == (1, 0)
    finally:
        committer.stop()


@pytest.mark.parametrize(("flags", "batched"), [((), True), (("--no-batch",), False)])
def test_queueworker_batches_unless_told_not_to(
    committer: GroupCommitter, monkeypatch: pytest.MonkeyPatch, flags: tuple[str, ...], batched: bool
) -> None:
    calls: list[str] = []
    many, single = committer.execute_many, committer.complete
    monkeypatch.setattr(committer, "execute_many", lambda ops: calls.append("many") or many(ops))
    monkeypatch.setattr(committer, "complete", lambda *a: calls.append("complete") or single(*a))
    committer.push("q", [1, 2])
    _, err = run("queueworker", "--queue", "q", "--handler", "queueadmin.demo:noop", "--burst", "--token", "t",
                 "--concurrency", "2", *flags)
    assert "claimed 2, completed 2" in err
    assert ("many" in calls, "complete" in calls) == (batched, not batched)
