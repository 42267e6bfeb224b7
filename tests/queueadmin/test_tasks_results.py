"""Task payloads (``describe``) and result objects (``results/<id>.json``):
merging attempts with conditional writes, expiry, clean-up. No broker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engine import FaultyStore, MemoryStore
from queueadmin.tasks import describe, read_result
from queueadmin.tasks.payload import MARKER, TaskView, task_payload
from queueadmin.tasks.results import (
    StoredError,
    delete_expired,
    load_result,
    parse_result,
    record_attempt,
    result_key,
)
from queueadmin.tasks.worker import ResultCleaner
from tests.e2e import sample_tasks as st

T0 = datetime.now(UTC).replace(microsecond=0)
DAY = 24 * 3600.0  # read_result expires by the real clock: a day outlives the test run
VIEW = TaskView(task="tests.e2e.sample_tasks.add", args=[1, 2], kwargs={}, takes_context=False, backend="default",
                queue_name="default", run_after=None)
BOOM = StoredError(exception_class_path="builtins.ValueError", traceback="Traceback ...\nValueError: boom\n")


def record(store: Any, job_id: str = "j1", *, at: datetime = T0, ttl: float = DAY, **kw: Any) -> Any:
    kw.setdefault("outcome", "SUCCESSFUL")
    return record_attempt(store, job_id=job_id, task=VIEW, worker_ids=kw.pop("worker_ids", ["w1"]),
                          enqueued_at=T0, started_at=at, last_attempted_at=at, finished_at=at, ttl_seconds=ttl,
                          **kw)


# -- payloads ---------------------------------------------------------------------------------


def test_task_payload_round_trips_through_describe() -> None:
    payload = task_payload(st.add.using(run_after=T0), (1,), {"b": (2, 3)}, backend="default")
    assert payload[MARKER] == 1 and payload["task"] == "tests.e2e.sample_tasks.add"
    view = describe(payload)
    assert view is not None
    assert (view.name, view.args, view.kwargs, view.run_after) == ("add", [1], {"b": [2, 3]}, T0)
    assert view.payload() == payload


@pytest.mark.parametrize(
    "payload",
    [
        None, 3, "text", [1], {"to": "ada@example.com"},
        {MARKER: 2, "task": "a.b", "args": [], "kwargs": {}},
        {**VIEW.payload(), "args": {}},
        {**VIEW.payload(), "kwargs": []},
        {**VIEW.payload(), "task": "nodots"},
        {**VIEW.payload(), "takes_context": "yes"},
        {**VIEW.payload(), "run_after": "tomorrow"},
        {k: v for k, v in VIEW.payload().items() if k != "backend"},
    ],
)
def test_describe_returns_none_for_anything_but_a_task_job(payload: Any) -> None:
    assert describe(payload) is None


# -- result objects -----------------------------------------------------------------------------


def test_result_keys_live_under_results_and_map_colons() -> None:
    assert result_key("abc") == "results/abc.json"
    assert result_key("host:1:x") == "results/host=1=x.json"
    assert result_key("../x") is None and result_key(".hidden") is None


def test_a_recorded_success_reads_back() -> None:
    store = MemoryStore()
    record(store, outcome="SUCCESSFUL", return_value={"n": [1]})
    stored = read_result("j1", store=store)
    assert stored is not None
    assert (stored.status, stored.return_value, stored.task, stored.worker_ids) == (
        "SUCCESSFUL", {"n": [1]}, VIEW, ("w1",))
    assert stored.expires_at == T0 + timedelta(seconds=DAY)
    assert read_result("unknown", store=store) is None


def test_failed_attempts_add_up_and_a_late_failure_never_undoes_a_success() -> None:
    store = MemoryStore()
    record(store, outcome="FAILED", error=BOOM)
    record(store, outcome="SUCCESSFUL", return_value=3, at=T0 + timedelta(seconds=1), worker_ids=["w1", "w2"])
    # A worker whose lease was lost finishes late, and fails.
    late = record(store, outcome="FAILED", error=BOOM, at=T0 + timedelta(seconds=2))
    assert late.status == "SUCCESSFUL" and late.return_value == 3
    stored = read_result("j1", store=store)
    assert stored is not None and stored.status == "SUCCESSFUL" and stored.return_value == 3
    assert stored.errors == (BOOM, BOOM)
    assert stored.started_at == T0  # the first attempt's start is kept


def test_a_lost_race_merges_again_instead_of_overwriting() -> None:
    memory = MemoryStore()
    faulty = FaultyStore(memory)
    record(faulty, outcome="FAILED", error=BOOM)
    faulty.inject("conflict")
    record(faulty, outcome="FAILED", error=BOOM)
    stored = read_result("j1", store=memory)
    assert stored is not None and len(stored.errors) == 2


def test_expired_results_are_not_read_and_are_deleted() -> None:
    store = MemoryStore()
    record(store, "old", ttl=10)
    record(store, "new", ttl=1000)
    store.put("results/garbage.json", b"not json")
    later = T0 + timedelta(seconds=11)
    assert load_result(store, "old", now=later) is None
    assert load_result(store, "new", now=later) is not None
    assert delete_expired(store, now=later) == 1
    # Malformed objects are logged and left alone, never destroyed.
    assert store.list("results/") == ["results/garbage.json", "results/new.json"]
    assert load_result(store, "garbage", now=later) is None


def test_the_cleaner_deletes_expired_results_on_start() -> None:
    store = MemoryStore()
    record(store, "old", ttl=10)
    cleaner = ResultCleaner([store], interval=3600, clock=lambda: T0 + timedelta(seconds=11))
    assert cleaner.run_once() == 1
    assert store.list("results/") == []
    cleaner.stop()


def test_parse_result_refuses_malformed_objects() -> None:
    with pytest.raises(ValueError, match="malformed"):
        parse_result(b'{"id": "x"}')


def test_a_malformed_result_is_kept_aside_byte_for_byte_before_it_is_replaced() -> None:
    store = MemoryStore()
    store.put("results/j1.json", b"{not a result")

    written = record(store, "j1")

    assert written.status == "SUCCESSFUL"
    [aside] = store.list("results-unreadable/")
    assert aside.startswith("results-unreadable/j1.json.")
    assert store.get(aside).data == b"{not a result"  # type: ignore[union-attr]
    assert read_result("j1", store=store) is not None
