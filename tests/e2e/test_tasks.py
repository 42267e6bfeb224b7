"""Django tasks end to end: a real daphne node, a real ``queueworker`` process
(no ``--handler``: it runs tasks), and tasks enqueued from this process with
``task.enqueue()``, which reaches the node over HTTP (no broker runs here).
The tasks are in ``tests/e2e/sample_tasks.py``."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
import pytest
from django.tasks import TaskResultStatus, task_backends
from django.tasks.exceptions import TaskResultDoesNotExist
from django.utils import timezone

from engine import open_store
from queueadmin import runtime
from tests.e2e import sample_tasks as st
from tests.e2e.harness import TOKEN, Cluster, Node
from tests.helpers import wait_for

if TYPE_CHECKING:
    from pytest_django.fixtures import SettingsWrapper

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture
def node(cluster_factory: Callable[..., Cluster], settings: SettingsWrapper,
         tmp_path: Path) -> Iterator[tuple[Cluster, Node]]:
    """One node and one task worker on a folder store; this process's TASKS
    point at them (HTTP to the node, results read from the same folder)."""
    cluster = cluster_factory()
    node = cluster.node()
    wait_for(lambda: node.role() == "leader", 15, "the node to lead")
    cluster.worker("--broker", node.url, "--wait-seconds", "1", E2E_RECORD=str(tmp_path / "ran.jsonl"))
    runtime.stop_broker()
    settings.QUEUE_STORE_URL = cluster.store_url
    settings.TASKS = {"default": {"BACKEND": "queueadmin.tasks.ObjectStoreBackend",
                                  "OPTIONS": {"BROKERS": [node.url], "TOKEN": TOKEN}}}
    yield cluster, node
    task_backends["default"].link.close()


def finished(result_id: str) -> Callable[[], bool]:
    return lambda: task_backends["default"].get_result(result_id).is_finished


def test_a_task_reaches_successful_with_its_return_value(node: tuple[Cluster, Node]) -> None:
    result = st.add.enqueue(20, 22)
    assert result.status == TaskResultStatus.READY
    wait_for(finished(result.id), 60, "the task to finish")
    done = st.add.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == 42
    assert done.attempts == 1 and len(done.worker_ids) == 1 and done.errors == []
    cluster, _ = node
    assert cluster.document()["jobs"] == []  # the result lives outside queue.json
    assert open_store(cluster.store_url).get(f"results/{result.id}.json") is not None


def test_a_failing_task_reaches_failed_with_its_traceback_after_max_attempts(node: tuple[Cluster, Node]) -> None:
    result = st.explode.enqueue("e2e")
    wait_for(finished(result.id), 60, "the task to fail for good")
    failed = st.explode.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.attempts == 3  # the engine's default max_attempts
    assert len(failed.errors) == 3
    for error in failed.errors:
        assert error.exception_class is ValueError
        assert error.traceback.startswith("Traceback (most recent call last)")
        assert "ValueError: exploded: e2e" in error.traceback
    cluster, _ = node
    [dead] = cluster.document()["dead"]
    assert dead["id"] == result.id


def test_a_deferred_task_does_not_run_before_run_after(node: tuple[Cluster, Node], tmp_path: Path) -> None:
    run_after = timezone.now() + timedelta(seconds=3)
    result = st.stamp.using(run_after=run_after).enqueue("deferred")
    if timezone.now() < run_after:
        assert st.stamp.get_result(result.id).status == TaskResultStatus.READY
    wait_for(finished(result.id), 60, "the deferred task to run")
    done = st.stamp.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.started_at is not None and done.started_at >= run_after  # claimed no earlier
    [ran] = [orjson.loads(line) for line in (tmp_path / "ran.jsonl").read_bytes().splitlines()]
    assert ran["label"] == "deferred" and ran["ran_at"] >= run_after.timestamp()
    assert done.return_value == ran["ran_at"]


def test_get_result_of_an_unknown_id_raises(node: tuple[Cluster, Node]) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        st.add.get_result(uuid.uuid4().hex)
