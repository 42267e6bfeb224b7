"""``QUEUE_SCHEDULES``: read into engine schedules (queueadmin.recurring), a bad
entry refused at start-up naming it, a Django task scheduled as enqueue would
push it, and the broker built with them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
import pytest
from django.core.exceptions import ImproperlyConfigured

from queueadmin import config, runtime
from queueadmin.tasks import describe

if TYPE_CHECKING:
    from pytest_django.fixtures import SettingsWrapper


def test_no_setting_means_no_schedules(settings: SettingsWrapper) -> None:
    settings.QUEUE_SCHEDULES = None
    assert config.schedules() == []


def test_plain_and_task_schedules_are_built_in_order(settings: SettingsWrapper) -> None:
    settings.QUEUE_SCHEDULES = {
        "ping": {"every_seconds": 30, "queue": "pings", "payload": {"kind": "ping"}, "max_attempts": 2},
        "nightly": {"cron": "0 3 * * *", "timezone": "Europe/Paris", "task": "tests.e2e.sample_tasks.add",
                    "args": [1, 2], "catch_up_seconds": 60},
    }
    ping, nightly = config.schedules()
    assert (ping.name, ping.queue, ping.every_seconds, ping.max_attempts) == ("ping", "pings", 30, 2)
    assert orjson.loads(ping.payload) == {"kind": "ping"}
    assert (nightly.cron, nightly.timezone, nightly.catch_up_seconds, nightly.queue) == (
        "0 3 * * *", "Europe/Paris", 60.0, "default")
    # The payload enqueue would push, so queueworker runs it like any task job.
    view = describe(orjson.loads(nightly.payload))
    assert view is not None and (view.task, view.args, view.kwargs) == ("tests.e2e.sample_tasks.add", [1, 2], {})


def test_the_broker_is_built_with_the_schedules(settings: SettingsWrapper) -> None:
    settings.QUEUE_STORE_URL = "memory://schedules-setting"
    settings.QUEUE_SCHEDULES = {"ping": {"every_seconds": 5, "queue": "q", "payload": None}}
    assert [s.name for s in runtime.build_broker().schedules] == ["ping"]


@pytest.mark.parametrize(("value", "message"), [
    ([], "QUEUE_SCHEDULES must be a dict of name to schedule, got list"),
    ({"a": "0 3 * * *"}, r"QUEUE_SCHEDULES\['a'\] must be a dict, got str"),
    ({"a": {"cron": "0 3 * * *", "queue": "q", "payload": 1, "tz": "UTC"}},
     r"QUEUE_SCHEDULES\['a'\]: unknown key\(s\) 'tz'"),
    ({"a": {"cron": "0 3 * * *", "queue": "q"}}, r"QUEUE_SCHEDULES\['a'\] needs 'task', or 'queue' and 'payload'"),
    ({"a": {"cron": "0 25 * * *", "queue": "q", "payload": 1}},
     r"QUEUE_SCHEDULES\['a'\]: schedule 'a': bad cron expression '0 25 \* \* \*'"),
    ({"a": {"every_seconds": 0, "queue": "q", "payload": 1}}, r"QUEUE_SCHEDULES\['a'\]: .*every_seconds"),
    ({"a b": {"every_seconds": 5, "queue": "q", "payload": 1}}, r"QUEUE_SCHEDULES\['a b'\]: a schedule's name"),
    ({"a": {"every_seconds": 5, "queue": "no such/queue", "payload": 1}}, r"QUEUE_SCHEDULES\['a'\]: .*queue"),
    ({"a": {"every_seconds": 5, "task": "tests.e2e.sample_tasks.nope"}},
     r"QUEUE_SCHEDULES\['a'\]: cannot import the task 'tests.e2e.sample_tasks.nope'"),
    ({"a": {"every_seconds": 5, "task": "tests.e2e.sample_tasks._record"}},
     r"QUEUE_SCHEDULES\['a'\]: 'task' must name a Django task"),
    ({"a": {"every_seconds": 5, "task": "tests.e2e.sample_tasks.add", "args": {"a": 1}}},
     r"QUEUE_SCHEDULES\['a'\]: 'args' must be a list and 'kwargs' a dict"),
    ({"a": {"every_seconds": 5, "task": "tests.e2e.sample_tasks.add", "queue": "q"}},
     r"QUEUE_SCHEDULES\['a'\]: unknown key\(s\) 'queue'"),
])
def test_a_bad_entry_stops_start_up_naming_it(settings: SettingsWrapper, value: Any, message: str) -> None:
    settings.QUEUE_STORE_URL = "memory://schedules-setting-bad"
    settings.QUEUE_SCHEDULES = value
    with pytest.raises(ImproperlyConfigured, match=message):
        runtime.build_broker()


def test_the_environment_variable_is_a_json_object(monkeypatch: pytest.MonkeyPatch) -> None:
    from queueadmin.settings import env_json_object

    monkeypatch.setenv("QUEUE_SCHEDULES", '{"ping": {"every_seconds": 5, "queue": "q", "payload": 1}}')
    assert env_json_object("QUEUE_SCHEDULES") == {"ping": {"every_seconds": 5, "queue": "q", "payload": 1}}
    monkeypatch.setenv("QUEUE_SCHEDULES", "  ")
    assert env_json_object("QUEUE_SCHEDULES") is None
    monkeypatch.setenv("QUEUE_SCHEDULES", "{ping")
    with pytest.raises(ImproperlyConfigured, match="QUEUE_SCHEDULES must be a JSON object"):
        env_json_object("QUEUE_SCHEDULES")
    monkeypatch.setenv("QUEUE_SCHEDULES", "[1]")
    with pytest.raises(ImproperlyConfigured, match="QUEUE_SCHEDULES must be a JSON object, got list"):
        env_json_object("QUEUE_SCHEDULES")


def test_manage_py_check_reports_a_bad_entry(settings: SettingsWrapper, db: None) -> None:
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    settings.QUEUE_SCHEDULES = {"a": {"cron": "every day", "queue": "q", "payload": 1}}
    with pytest.raises(SystemCheckError, match=r"queueadmin.E001.*QUEUE_SCHEDULES\['a'\]: schedule 'a': bad cron"):
        call_command("check")
    settings.QUEUE_SCHEDULES = {"a": {"cron": "0 3 * * *", "queue": "q", "payload": 1}}
    call_command("check")
