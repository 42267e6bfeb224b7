"""Settings read the environment strictly and refuse bad values at start-up.

Settings are module-level code, so each case imports them in a fresh
interpreter with a controlled environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRINT = (
    "import queueadmin.settings as s; "
    "print(s.DEBUG, s.QUEUE_LEASE_SECONDS, s.QUEUE_MAX_PAYLOAD_BYTES, s.ALLOWED_HOSTS, s.QUEUE_STORE_URL)"
)


def _import_settings(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "QUEUE_", "DATABASE_URL"))}
    clean.pop("ALLOWED_HOSTS", None)
    return subprocess.run(
        [sys.executable, "-c", PRINT],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_defaults_are_for_local_development() -> None:
    result = _import_settings()

    assert result.returncode == 0, result.stderr
    expected_store = (ROOT / "var" / "queue").as_uri()
    assert result.stdout.split() == ["True", "30.0", "262144", "['127.0.0.1',", "'localhost']", expected_store]


def test_values_from_the_environment() -> None:
    result = _import_settings(
        DJANGO_DEBUG="false",
        DJANGO_SECRET_KEY="x" * 50,
        QUEUE_LEASE_SECONDS="0.5",
        QUEUE_MAX_PAYLOAD_BYTES="1024",
        ALLOWED_HOSTS=" queue.example.com , ,10.0.0.1",
        QUEUE_STORE_URL="memory://shared",
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "0.5", "1024", "['queue.example.com',", "'10.0.0.1']", "memory://shared"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DJANGO_DEBUG": "false"}, "DJANGO_SECRET_KEY must be set"),
        ({"DJANGO_DEBUG": "maybe"}, "DJANGO_DEBUG must be true or false"),
        ({"QUEUE_LEASE_SECONDS": "thirty"}, "QUEUE_LEASE_SECONDS must be a number of seconds"),
        ({"QUEUE_LEASE_SECONDS": "0"}, "QUEUE_LEASE_SECONDS must be a positive number"),
        ({"QUEUE_HEARTBEAT_SECONDS": "nan"}, "QUEUE_HEARTBEAT_SECONDS must be a positive number"),
        ({"QUEUE_MAX_PAYLOAD_BYTES": "1e6"}, "QUEUE_MAX_PAYLOAD_BYTES must be a whole number"),
        ({"QUEUE_MAX_PAYLOAD_BYTES": "0"}, "QUEUE_MAX_PAYLOAD_BYTES must be at least 1"),
        ({"QUEUE_TAKEOVER_SECONDS": "2"}, "QUEUE_TAKEOVER_SECONDS (2) must be greater than"),
        ({"QUEUE_ADVERTISE_URL": "10.0.0.1:8000"}, "QUEUE_ADVERTISE_URL must be an absolute http"),
        ({"QUEUE_HTTP_IDLE_SECONDS": "0"}, "QUEUE_HTTP_IDLE_SECONDS must be a positive number"),
        ({"QUEUE_STORE_HEDGE_SECONDS": "-0.5"}, "QUEUE_STORE_HEDGE_SECONDS must be a number of seconds, 0 or more"),
        ({"QUEUE_STORE_HEDGE_SECONDS": "soon"}, "QUEUE_STORE_HEDGE_SECONDS must be a number of seconds"),
        ({"QUEUE_STORE_HEDGE_SECONDS": "1e10"}, "QUEUE_STORE_HEDGE_SECONDS (1e+10) must be at most 3600"),
        ({"CSRF_TRUSTED_ORIGINS": "queue.example.com"}, "CSRF_TRUSTED_ORIGINS must list origins"),
        ({"CSRF_TRUSTED_ORIGINS": "https://queue.example.com/dashboard"}, "CSRF_TRUSTED_ORIGINS must list origins"),
        ({"QUEUE_ENVIRONMENT": "p" * 41}, "QUEUE_ENVIRONMENT must be at most 40 printable characters"),
        ({"QUEUE_ENVIRONMENT_COLOR": "red"}, "QUEUE_ENVIRONMENT_COLOR must be a colour such as #c62828"),
        ({"QUEUE_ENVIRONMENT_COLOR": "#12345"}, "QUEUE_ENVIRONMENT_COLOR must be a colour such as #c62828"),
        ({"QUEUE_GC_THRESHOLDS": "50000"}, "QUEUE_GC_THRESHOLDS must be three whole numbers separated by commas"),
        ({"QUEUE_GC_THRESHOLDS": "5e4,10,10"}, "QUEUE_GC_THRESHOLDS must be three whole numbers separated by commas"),
        ({"QUEUE_GC_THRESHOLDS": "50000,0,10"}, "QUEUE_GC_THRESHOLDS: the collector's thresholds must be 0 or more"),
    ],
)
def test_bad_values_stop_start_up_with_a_clear_error(env: dict[str, str], message: str) -> None:
    result = _import_settings(**env)

    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert message in result.stderr


def test_trusted_origins_and_the_http_idle_limit_from_the_environment() -> None:
    show = "import queueadmin.settings as s; print(s.CSRF_TRUSTED_ORIGINS, s.QUEUE_HTTP_IDLE_SECONDS)"
    result = subprocess.run(
        [sys.executable, "-c", show],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "CSRF_TRUSTED_ORIGINS": "https://queue.example.com, https://*.example.org:8443",
             "QUEUE_HTTP_IDLE_SECONDS": "2.5"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['https://queue.example.com', 'https://*.example.org:8443'] 2.5"


@pytest.mark.parametrize(("value", "expected"), [(None, "(50000, 10, 10)"), (" 700, 10 ,10 ", "(700, 10, 10)")])
def test_the_served_application_sets_the_collector_once_started(
        tmp_path: Path, value: str | None, expected: str) -> None:
    """Importing the ASGI application (what daphne does) freezes what start-up
    left alive and sets QUEUE_GC_THRESHOLDS (engine.tune_collector)."""
    show = ("import gc; from queueadmin import asgi; "
            "print(gc.get_threshold(), gc.get_freeze_count() > 10_000)")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "QUEUE_", "DATABASE_URL"))}
    env = {**clean, "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}", "QUEUE_BROKER_AUTOSTART": "false"}
    if value is not None:
        env["QUEUE_GC_THRESHOLDS"] = value
    result = subprocess.run([sys.executable, "-c", show], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{expected} True"


def test_the_served_application_starts_without_a_warning(tmp_path: Path) -> None:
    # Loading the middleware is what daphne does at start; ServeStatic warned
    # there when its app (and so its configuration checks) was not installed.
    load = (
        "import os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'queueadmin.settings'); "
        "from django.core.asgi import get_asgi_application; get_asgi_application()"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "QUEUE_", "DATABASE_URL"))}
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", load],
        cwd=ROOT,
        env={**clean, "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0 and "Warning" not in result.stderr, result.stderr


def test_djangos_own_messages_are_logged_once_under_a_server_that_configures_logging(tmp_path: Path) -> None:
    """As under daphne, which gives the root logger a handler before Django
    starts: a warning of Django's (what a 404 or 422 logs, with DEBUG on)
    appears once, through the root handler, not also through a console
    handler of Django's own."""
    script = (
        "import logging, django; "
        "logging.basicConfig(level=logging.INFO, format='ROOT %(levelname)s %(message)s'); "
        "django.setup(); "
        "logging.getLogger('django.request').warning('Not Found: /nope')"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "QUEUE_", "DATABASE_URL"))}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**clean, "DJANGO_SETTINGS_MODULE": "queueadmin.settings", "DJANGO_DEBUG": "1",
             "QUEUE_STORE_URL": (tmp_path / "queue").as_uri(), "QUEUE_BROKER_AUTOSTART": "0"},
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "/nope" in line]
    assert lines == ["ROOT WARNING Not Found: /nope"]
