"""queueadmin.config: each function follows a settings override at once, and
falls back to the engine's named default when its setting is absent."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from engine import (
    DEFAULT_GC_THRESHOLDS,
    DEFAULT_HEARTBEAT_SECONDS,
    DEFAULT_LEASE_SECONDS,
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_TAKEOVER_SECONDS,
    FileStore,
    MemoryStore,
    Policy,
    StoreConfigError,
    open_store,
)
from queueadmin import config
from queueadmin.settings import env_seconds

if TYPE_CHECKING:
    from pytest_django.fixtures import SettingsWrapper

ROOT = Path(__file__).resolve().parents[2]


# Each function, the one setting it reads, a value to override it with (and
# what the function then returns), and what it returns without the setting.
CASES: list[tuple[Callable[[], Any], str, Any, Any, Any]] = [
    (config.advertise_url, "QUEUE_ADVERTISE_URL", "http://node-z.test:8000", "http://node-z.test:8000", None),
    (config.api_token, "QUEUE_API_TOKEN", "sekrit", "sekrit", None),
    (config.broker_autostart, "QUEUE_BROKER_AUTOSTART", False, False, True),
    (config.lease_seconds, "QUEUE_LEASE_SECONDS", 7, 7.0, DEFAULT_LEASE_SECONDS),
    (config.heartbeat_seconds, "QUEUE_HEARTBEAT_SECONDS", 0.25, 0.25, DEFAULT_HEARTBEAT_SECONDS),
    (config.takeover_seconds, "QUEUE_TAKEOVER_SECONDS", 42, 42.0, DEFAULT_TAKEOVER_SECONDS),
    (config.max_payload_bytes, "QUEUE_MAX_PAYLOAD_BYTES", 1000, 1000, DEFAULT_MAX_PAYLOAD_BYTES),
    (config.max_request_bytes, "QUEUE_MAX_REQUEST_BYTES", 5000, 5000,
     config.default_max_request_bytes(DEFAULT_MAX_PAYLOAD_BYTES)),
    (config.http_idle_seconds, "QUEUE_HTTP_IDLE_SECONDS", 1.5, 1.5, config.DEFAULT_HTTP_IDLE_SECONDS),
    (config.metrics_token, "QUEUE_METRICS_TOKEN", "scrape", "scrape", None),
    (config.metrics_sample_seconds, "QUEUE_METRICS_SAMPLE_SECONDS", 2, 2.0, config.DEFAULT_SAMPLE_SECONDS),
    (config.gc_thresholds, "QUEUE_GC_THRESHOLDS", [700, 10, 10], (700, 10, 10), DEFAULT_GC_THRESHOLDS),
]
IDS = [case[0].__name__ for case in CASES]


@pytest.mark.parametrize(("read", "name", "value", "expected", "default"), CASES, ids=IDS)
def test_follows_a_settings_override(
    settings: SettingsWrapper, read: Callable[[], Any], name: str, value: Any, expected: Any, default: Any
) -> None:
    setattr(settings, name, value)
    assert read() == expected
    assert type(read()) is type(expected)


@pytest.mark.parametrize(("read", "name", "value", "expected", "default"), CASES, ids=IDS)
def test_uses_the_default_when_the_setting_is_absent(
    settings: SettingsWrapper, read: Callable[[], Any], name: str, value: Any, expected: Any, default: Any
) -> None:
    delattr(settings, name)
    assert read() == default


@pytest.mark.parametrize("value", [(50_000, 10), (50_000.0, 10, 10), "50000,10,10", 50_000, (700, 0, 10)])
def test_collector_thresholds_from_a_settings_module_are_checked(settings: SettingsWrapper, value: Any) -> None:
    settings.QUEUE_GC_THRESHOLDS = value
    with pytest.raises(ImproperlyConfigured, match="QUEUE_GC_THRESHOLDS: the collector's thresholds"):
        config.gc_thresholds()


def test_store_url_follows_the_setting_and_has_no_default(settings: SettingsWrapper) -> None:
    settings.QUEUE_STORE_URL = "memory://config-test"
    assert config.store_url() == "memory://config-test"
    del settings.QUEUE_STORE_URL
    with pytest.raises(ImproperlyConfigured, match="QUEUE_STORE_URL"):
        config.store_url()


def test_open_queue_store_opens_the_store_the_setting_names(settings: SettingsWrapper, tmp_path: Path) -> None:
    name = f"memory://config-{uuid.uuid4().hex}"
    settings.QUEUE_STORE_URL = name
    assert config.open_queue_store() is open_store(name)  # a named memory store is shared in a process
    settings.QUEUE_STORE_URL = tmp_path.as_uri()
    store = config.open_queue_store()
    assert isinstance(store, FileStore) and store.describe() == f"file://{tmp_path}"


def test_policy_follows_the_lease_and_payload_settings(settings: SettingsWrapper) -> None:
    settings.QUEUE_LEASE_SECONDS = 12.0
    settings.QUEUE_MAX_PAYLOAD_BYTES = 2048
    settings.QUEUE_SEGMENT_JOBS = 500
    assert config.policy() == Policy(lease_seconds=12.0, max_payload_bytes=2048, segment_jobs=500,
                                     delayed_horizon_seconds=60)
    del settings.QUEUE_LEASE_SECONDS
    del settings.QUEUE_MAX_PAYLOAD_BYTES
    del settings.QUEUE_SEGMENT_JOBS
    # The app runs formats 2 and 3 unless told otherwise; the engine alone keeps format 1.
    assert config.policy() == Policy(segment_jobs=config.DEFAULT_QUEUE_SEGMENT_JOBS,
                                     delayed_horizon_seconds=config.DEFAULT_QUEUE_DELAYED_HORIZON_SECONDS) != Policy()


def test_the_request_limit_without_its_setting_follows_the_payload_limit(settings: SettingsWrapper) -> None:
    del settings.QUEUE_MAX_REQUEST_BYTES
    settings.QUEUE_MAX_PAYLOAD_BYTES = 3 * 1024 * 1024
    assert config.max_request_bytes() == 6 * 1024 * 1024
    settings.QUEUE_MAX_PAYLOAD_BYTES = 1024
    assert config.max_request_bytes() == config.MIN_DEFAULT_REQUEST_BYTES


def test_broker_client_for_given_brokers(settings: SettingsWrapper) -> None:
    settings.QUEUE_LEASE_SECONDS = 9.0
    settings.QUEUE_MAX_PAYLOAD_BYTES = 4096
    name = f"memory://config-{uuid.uuid4().hex}"
    settings.QUEUE_STORE_URL = name
    with config.broker_client(["http://node-a.test:8000/"], token="t") as client:
        assert client.urls == ("http://node-a.test:8000",)
        # Where it looks once no node given answers (a worker given one node, which died).
        assert client.store is open_store(name)
        assert client.policy == Policy(lease_seconds=9.0, max_payload_bytes=4096,
                                       segment_jobs=config.policy().segment_jobs, delayed_horizon_seconds=60)
    # A store it cannot open (no credentials, a bad URL) leaves it the nodes given, without an error.
    settings.QUEUE_STORE_URL = "nosuchscheme://bucket/queue"
    with config.broker_client(["http://node-a.test:8000/"], token="t") as client:
        assert client.store is None
    with pytest.raises(StoreConfigError):
        config.broker_client(None, token="t")


def test_broker_client_without_brokers_reads_the_leader_from_the_settings_store(settings: SettingsWrapper) -> None:
    name = f"memory://config-{uuid.uuid4().hex}"
    settings.QUEUE_STORE_URL = name
    with config.broker_client(None, token="t") as client:
        assert client.urls == ()
        assert client.store is open_store(name)
        assert client.policy == config.policy()
    given = MemoryStore()
    with config.broker_client((), token="t", store=given) as client:
        assert client.store is given


def test_broker_client_refuses_an_empty_token() -> None:
    with pytest.raises(ValueError, match="token"):
        config.broker_client(["http://node-a.test:8000"], token="")


def test_settings_defaults_are_the_named_constants() -> None:
    """settings.py, imported with no QUEUE_* variables, defaults to the engine's
    constants (and config.py's for queueadmin's own limits)."""
    show = ("import queueadmin.settings as s; print(s.QUEUE_LEASE_SECONDS, s.QUEUE_HEARTBEAT_SECONDS, "
            "s.QUEUE_TAKEOVER_SECONDS, s.QUEUE_MAX_PAYLOAD_BYTES, s.QUEUE_MAX_REQUEST_BYTES, "
            "s.QUEUE_HTTP_IDLE_SECONDS, s.QUEUE_TASK_RESULT_TTL_SECONDS)")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "QUEUE_"))}
    result = subprocess.run([sys.executable, "-c", show], cwd=ROOT, env=clean, capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(v) for v in (
        DEFAULT_LEASE_SECONDS, DEFAULT_HEARTBEAT_SECONDS, DEFAULT_TAKEOVER_SECONDS, DEFAULT_MAX_PAYLOAD_BYTES,
        config.default_max_request_bytes(DEFAULT_MAX_PAYLOAD_BYTES), config.DEFAULT_HTTP_IDLE_SECONDS,
        config.DEFAULT_RESULT_TTL_SECONDS,
    )]


def test_only_config_reads_queue_settings() -> None:
    """Every other module asks queueadmin.config (settings.py defines the settings)."""
    readers = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "queueadmin").rglob("*.py"))
        if path.name not in ("settings.py", "config.py") or path.parent != ROOT / "queueadmin"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"settings\s*\.\s*QUEUE_|settings\s*,\s*[\"']QUEUE_", line)
    ]
    assert readers == []


def test_an_azure_store_gets_the_connection_string_from_the_settings(settings: Any) -> None:
    secret = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=aHVudGVyMg==;BlobEndpoint=https://acct.example"
    settings.QUEUE_STORE_URL = "az://queue-container/prod"
    settings.QUEUE_AZURE_CONNECTION_STRING = secret

    store = config.open_queue_store()

    assert type(store).__name__ == "AzureBlobStore"
    assert store.describe() == "az://queue-container/prod at https://acct.example"
    store.close()
    settings.QUEUE_AZURE_CONNECTION_STRING = None
    with pytest.raises(StoreConfigError, match="AZURE_STORAGE_CONNECTION_STRING"):
        config.open_queue_store()


def test_policy_follows_the_merge_setting_never_below_the_segment_size(settings: SettingsWrapper) -> None:
    settings.QUEUE_SEGMENT_JOBS = 50
    settings.QUEUE_MERGE_JOBS = 400
    assert config.policy().merge_jobs == 400
    settings.QUEUE_MERGE_JOBS = 10  # the engine refuses merge_jobs < segment_jobs: the segment size wins
    assert config.policy().merge_jobs == 50


def test_policy_follows_the_delayed_horizon_and_0_turns_delayed_segments_off(settings: SettingsWrapper) -> None:
    assert config.policy().delayed_horizon_seconds == config.DEFAULT_QUEUE_DELAYED_HORIZON_SECONDS == 60
    settings.QUEUE_DELAYED_HORIZON_SECONDS = 0.5
    assert config.policy().delayed_horizon_seconds == 0.5
    settings.QUEUE_DELAYED_HORIZON_SECONDS = 0
    assert config.policy().delayed_horizon_seconds == 0
    settings.QUEUE_DELAYED_HORIZON_SECONDS = -1
    with pytest.raises(ValueError, match="delayed_horizon_seconds"):
        config.policy()


@pytest.mark.parametrize(("raw", "value"), [("0", 0.0), ("90", 90.0), ("0.25", 0.25)])
def test_the_delayed_horizon_variable_takes_0_and_seconds(
    monkeypatch: pytest.MonkeyPatch, raw: str, value: float,
) -> None:
    monkeypatch.setenv("QUEUE_DELAYED_HORIZON_SECONDS", raw)
    assert env_seconds("QUEUE_DELAYED_HORIZON_SECONDS", 60, zero=True) == value


@pytest.mark.parametrize("raw", ["-1", "nan", "inf", "soon"])
def test_the_delayed_horizon_variable_refuses_what_is_no_number_of_seconds(
    monkeypatch: pytest.MonkeyPatch, raw: str,
) -> None:
    monkeypatch.setenv("QUEUE_DELAYED_HORIZON_SECONDS", raw)
    with pytest.raises(ImproperlyConfigured, match="QUEUE_DELAYED_HORIZON_SECONDS"):
        env_seconds("QUEUE_DELAYED_HORIZON_SECONDS", 60, zero=True)
    monkeypatch.setenv("QUEUE_DELAYED_HORIZON_SECONDS", "0")
    with pytest.raises(ImproperlyConfigured, match="positive"):
        env_seconds("QUEUE_DELAYED_HORIZON_SECONDS", 60)  # where 0 is not allowed, it is refused


@pytest.mark.parametrize(("url", "hedge"), [
    ("s3://bucket/prefix?endpoint_url=http://127.0.0.1:9", config.DEFAULT_REMOTE_HEDGE_SECONDS),
    ("gs://bucket/prefix", config.DEFAULT_REMOTE_HEDGE_SECONDS),
    ("az://container/prefix?account=acct", config.DEFAULT_REMOTE_HEDGE_SECONDS),
    ("faults+s3://bucket?fault_control=/tmp/x", config.DEFAULT_REMOTE_HEDGE_SECONDS),
    ("latency+gs://bucket", config.DEFAULT_REMOTE_HEDGE_SECONDS),
    ("file://{tmp}/queue", 0.0),
    ("faults+file://{tmp}/queue?fault_control=/tmp/x", 0.0),
    ("memory://shared", 0.0),
    ("latency+memory://shared", 0.0),
])
def test_writes_are_hedged_by_default_on_a_store_across_a_network_only(
    settings: SettingsWrapper, tmp_path: Path, url: str, hedge: float,
) -> None:
    store = config.open_store_at(url.format(tmp=tmp_path))  # no I/O but a local folder
    settings.QUEUE_STORE_HEDGE_SECONDS = None  # unset
    assert config.store_hedge_seconds(store) == hedge
    settings.QUEUE_STORE_HEDGE_SECONDS = 0.0  # off, wherever the store is
    assert config.store_hedge_seconds(store) == 0.0
    settings.QUEUE_STORE_HEDGE_SECONDS = 1.5
    assert config.store_hedge_seconds(store) == 1.5


def test_the_broker_gets_the_hedge_setting(settings: SettingsWrapper) -> None:
    from queueadmin.runtime import build_broker

    settings.QUEUE_STORE_URL = "memory://hedged"
    settings.QUEUE_STORE_HEDGE_SECONDS = 0.75
    assert build_broker().hedge_seconds == 0.75
    settings.QUEUE_STORE_HEDGE_SECONDS = None
    assert build_broker().hedge_seconds == 0.0
