"""Django task jobs on the dashboard: the task's name, its arguments, and its
result or error, from the job's payload and its result object."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

import pytest
from django.test import Client

from engine import Broker, Worker
from queueadmin import runtime
from queueadmin.dashboard.source import source
from queueadmin.tasks.worker import TaskRunner
from tests.e2e.sample_tasks import add, echo, explode
from tests.helpers import FAST_WORKER, wait_for

if TYPE_CHECKING:
    from pytest_django.fixtures import SettingsWrapper

FAST_BURST = replace(FAST_WORKER, burst=True)


@pytest.fixture
def node(settings: SettingsWrapper) -> Iterator[Broker]:
    """This process's broker, leading on a fresh memory store, serving TASKS and the dashboard."""
    runtime.stop_broker()
    settings.QUEUE_STORE_URL = f"memory://dashboard-tasks-{uuid.uuid4().hex}"
    settings.QUEUE_ADVERTISE_URL = None
    settings.QUEUE_API_TOKEN = None
    settings.TASKS = {"default": {"BACKEND": "queueadmin.tasks.ObjectStoreBackend",
                                  "OPTIONS": {"MAX_ATTEMPTS": 1}}}
    broker = runtime.start_broker()
    wait_for(lambda: broker.role == "leader")
    source.reset()
    yield broker
    runtime.stop_broker()
    source.reset()


def run_tasks(node: Broker) -> None:
    assert node.committer is not None
    client = node.committer
    Worker(client, queues=["default"], handler=TaskRunner(client, worker_id="w-tasks"), pass_job=True,
           worker_id="w-tasks", options=FAST_BURST).run()


def test_a_task_job_shows_its_call_then_its_return_value(node: Broker, viewer: Client) -> None:
    result = add.enqueue(2, 3)

    listing = viewer.get("/jobs/").content.decode()
    assert "add(2, 3)" in listing
    page = viewer.get(f"/jobs/{result.id}/").content.decode()
    assert "tests.e2e.sample_tasks.add" in page and "No result yet" in page

    run_tasks(node)

    done = viewer.get(f"/jobs/{result.id}/")
    assert done.context["result"].status == "SUCCESSFUL"
    body = done.content.decode()
    assert 'data-testid="task-status">SUCCESSFUL' in body and 'data-testid="task-return">5' in body
    assert "ran on w-tasks" in body


def test_a_failed_task_shows_its_error_and_traceback(node: Broker, viewer: Client) -> None:
    result = explode.enqueue("kaboom <b>")
    run_tasks(node)

    response = viewer.get(f"/jobs/{result.id}/")

    body = response.content.decode()
    assert response.context["status"] == "dead"
    assert 'data-testid="task-status">FAILED' in body
    assert "Traceback" in body and "kaboom &lt;b&gt;" in body


def test_a_task_s_secret_arguments_and_return_value_are_hidden_from_a_viewer(node: Broker, viewer: Client,
                                                                              admin_client_: Client) -> None:
    result = echo.enqueue("ada@example.com", password="hunter2TOPSECRET")
    pending = viewer.get(f"/jobs/{result.id}/").content.decode()
    assert "echo(" in pending and "ada@example.com" in pending and "TOPSECRET" not in pending
    run_tasks(node)
    source.reset()
    done = viewer.get(f"/jobs/{result.id}/").content.decode()
    assert 'data-testid="task-return"' in done and "ada@example.com" in done and "TOPSECRET" not in done
    assert "hunter2TOPSECRET" in admin_client_.get(f"/jobs/{result.id}/").content.decode()
