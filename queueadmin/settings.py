"""Django settings for queueadmin.

This is the one place that reads configuration from the environment. Every
variable is parsed strictly: a malformed value stops start-up with an
``ImproperlyConfigured`` error naming the variable, instead of silently falling
back to a default. The engine never reads ``os.environ``; the ``QUEUE_*``
settings below are translated into engine arguments in one place,
``queueadmin/config.py``, and their defaults are the engine's named constants
(and config.py's, for queueadmin's own limits).

=========================== ====================================================
Variable                    Meaning (default)
=========================== ====================================================
DJANGO_SECRET_KEY           Required unless DJANGO_DEBUG is true (dev-only key)
DJANGO_DEBUG                true/false (true, for local development)
DJANGO_STATIC_ROOT          folder collectstatic fills (unset: files served from the app)
ALLOWED_HOSTS               comma-separated host names (127.0.0.1,localhost)
CSRF_TRUSTED_ORIGINS        comma-separated origins (https://queue.example.com)
                            that forms and the live socket accept besides the
                            request's own, e.g. behind a TLS-terminating proxy
                            (none)
DATABASE_URL                dj-database-url URL (sqlite at var/db.sqlite3)
QUEUE_STORE_URL             file:///abs/dir, s3://bucket/prefix?..., gs://bucket/prefix,
                            az://container/prefix?account=..., memory://
                            (a folder at var/queue)
AZURE_STORAGE_CONNECTION_STRING
                            credentials for an az:// store (unset: DefaultAzureCredential)
QUEUE_ADVERTISE_URL         http(s) URL other processes use to reach this broker
                            (unset)
QUEUE_API_TOKEN             bearer token for the broker HTTP API (unset)
QUEUE_LEASE_SECONDS         job lease length, seconds (30)
QUEUE_HEARTBEAT_SECONDS     leader heartbeat interval, seconds (2)
QUEUE_TAKEOVER_SECONDS      standby takeover delay, seconds (10)
QUEUE_STORE_HEDGE_SECONDS   a write of queue.json taking three times the last
                            ones' median, and this, is sent again, the
                            same conditional PUT; 0 turns it off, seconds
                            (0.25 on s3://, gs:// and az://; off on a folder;
                            at most 3600)
QUEUE_MAX_PAYLOAD_BYTES     largest encoded job payload, bytes (262144)
QUEUE_MAX_REQUEST_BYTES     largest broker API request body, bytes
                            (the larger of 4 MiB and 2 x QUEUE_MAX_PAYLOAD_BYTES)
QUEUE_HTTP_IDLE_SECONDS     longest pause while a client sends a request body
                            before it gets 408, seconds (30); an idle
                            connection is closed after twice this
QUEUE_BROKER_AUTOSTART      start the embedded broker when the ASGI app is
                            imported, i.e. in daphne / runserver (true)
QUEUE_TASK_RESULT_TTL_SECONDS
                            how long a finished Django task's result is kept
                            under results/ in the store, seconds (604800)
QUEUE_FINISHED_RETENTION_SECONDS
                            how long a job that left queue.json (completed,
                            purged, dropped from the dead letters) stays
                            findable on its page, seconds (604800)
QUEUE_METRICS_TOKEN         a bearer token that reads /metrics only, besides
                            the API tokens (unset)
QUEUE_PAYLOAD_SECRET_KEYS   a regular expression of payload keys (as lower-case
                            words joined by _) whose values the dashboard hides
                            from users without view_payload_secrets (unset: the
                            default in queueadmin.dashboard.redaction)
QUEUE_METRICS_SAMPLE_SECONDS
                            how often the leader records the metrics history
                            for the charts, seconds (10)
QUEUE_ENVIRONMENT           a name the dashboard shows in a badge on every
                            page and in its tabs' titles, e.g. production
                            (unset: none)
QUEUE_ENVIRONMENT_COLOR     the badge's colour, #rgb or #rrggbb (red for a
                            name starting "prod", amber for "stag", green for
                            "dev", "test" or "local", else blue)
QUEUE_SEGMENT_JOBS          format 2: jobs per sealed segment object; 0 keeps
                            format 1 (1000)
QUEUE_HEAD_JOBS             format 2: pending jobs a queue keeps in queue.json
                            in front of its segments (1000)
QUEUE_REFILL_BELOW          format 2: read the next segment back when fewer
                            claimable jobs are left in front (500)
QUEUE_MERGE_JOBS            format 2: small segments are merged into ones of
                            up to this many jobs, each with an id index
                            (16384)
QUEUE_DELAYED_HORIZON_SECONDS
                            format 3: delayed jobs due more than this far
                            ahead move to delayed segment objects; 0 keeps
                            them in queue.json (60)
QUEUE_SCHEDULES             recurring jobs, as a JSON object of name to
                            schedule (README, "Recurring jobs"); usually set
                            in a settings module instead (none)
QUEUE_GC_THRESHOLDS         the serving process's garbage collector
                            thresholds, three whole numbers as
                            gc.set_threshold takes them; 700,10,10 are
                            CPython's own (50000,10,10)
=========================== ====================================================
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from engine import (
    DEFAULT_GC_THRESHOLDS,
    DEFAULT_HEAD_JOBS,
    DEFAULT_HEARTBEAT_SECONDS,
    DEFAULT_LEASE_SECONDS,
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_MERGE_JOBS,
    DEFAULT_REFILL_BELOW,
    DEFAULT_TAKEOVER_SECONDS,
    MAX_HEDGE_SECONDS,
    check_gc_thresholds,
)
from queueadmin.config import (
    DEFAULT_FINISHED_RETENTION_SECONDS,
    DEFAULT_HTTP_IDLE_SECONDS,
    DEFAULT_QUEUE_DELAYED_HORIZON_SECONDS,
    DEFAULT_QUEUE_SEGMENT_JOBS,
    DEFAULT_RESULT_TTL_SECONDS,
    DEFAULT_SAMPLE_SECONDS,
    default_max_request_bytes,
)

BASE_DIR = Path(__file__).resolve().parent.parent

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_INTEGER = re.compile(r"[+-]?[0-9]+")


def env_bool(name: str, default: bool) -> bool:
    """Read a boolean variable. Accepts 1/0, true/false, yes/no, on/off (any case).

    An unset or empty variable gives ``default``; anything else raises
    ImproperlyConfigured, because a typo in a flag like DJANGO_DEBUG must not
    silently pick a mode.
    """
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false (1/0, yes/no, on/off), got {raw!r}")


def env_int(name: str, default: int, *, minimum: int = 1) -> int:
    """Read a whole number ≥ ``minimum``. Unset or empty gives ``default``.

    Raises ImproperlyConfigured for anything that is not a plain base-10
    integer (no "1e3", no "12.0", no "0x10") or is below ``minimum``.
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    # int() would also accept "1_000" and non-ASCII digits; be strict.
    if not _INTEGER.fullmatch(raw):
        raise ImproperlyConfigured(f"{name} must be a whole number, got {raw!r}")
    value = int(raw)
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def env_seconds(name: str, default: float, *, zero: bool = False) -> float:
    """Read a positive, finite number of seconds (e.g. "30" or "0.5"; with
    ``zero``, "0" too, for a setting that 0 turns off).

    Unset or empty gives ``default``. Raises ImproperlyConfigured for
    non-numbers, zero (unless allowed), negatives, NaN and infinity.
    Fractions are allowed so tests and local failover drills can use
    sub-second intervals.
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return float(default)
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number of seconds, got {raw!r}") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        kind = "a number of seconds, 0 or more" if zero else "a positive number of seconds"
        raise ImproperlyConfigured(f"{name} must be {kind}, got {raw!r}")
    return value


def env_list(name: str, default: str) -> list[str]:
    """Read a comma-separated list; blanks around items and empty items are dropped."""
    raw = os.environ.get(name)
    if raw is None:
        raw = default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_origins(name: str) -> list[str]:
    """Read a comma-separated list of origins, each ``scheme://host[:port]``
    with scheme http or https and nothing after (``*.`` may start the host).
    Raises ImproperlyConfigured for anything else."""
    origins = env_list(name, "")
    for origin in origins:
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path or parts.query or \
                parts.fragment:
            raise ImproperlyConfigured(f"{name} must list origins like https://queue.example.com, got {origin!r}")
    return origins


def env_str(name: str) -> str | None:
    """Read an optional string; unset or blank gives None."""
    raw = os.environ.get(name, "").strip()
    return raw or None


def env_gc_thresholds(name: str, default: tuple[int, int, int]) -> tuple[int, int, int]:
    """Read the garbage collector's three thresholds, e.g. "50000,10,10"
    (engine.check_gc_thresholds). Unset or empty gives ``default``; anything
    else raises ImproperlyConfigured."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    items = [item.strip() for item in raw.split(",")]
    if len(items) != 3 or not all(_INTEGER.fullmatch(item) for item in items):
        raise ImproperlyConfigured(f"{name} must be three whole numbers separated by commas, "
                                   f"such as 50000,10,10, got {raw!r}")
    try:
        return check_gc_thresholds(tuple(int(item) for item in items))
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from None


def env_json_object(name: str) -> dict[str, object] | None:
    """Read an optional JSON object; unset or blank gives None. Raises
    ImproperlyConfigured for anything else."""
    raw = env_str(name)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a JSON object: {exc}") from exc
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object, got {type(value).__name__}")
    return value


def env_http_url(name: str) -> str | None:
    """Read an optional absolute http(s) URL. Raises ImproperlyConfigured otherwise."""
    raw = env_str(name)
    if raw is None:
        return None
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ImproperlyConfigured(f"{name} must be an absolute http:// or https:// URL, got {raw!r}")
    return raw.rstrip("/")


# --- Django core -------------------------------------------------------------

DEBUG = env_bool("DJANGO_DEBUG", default=True)

_secret_key = env_str("DJANGO_SECRET_KEY")
if _secret_key is None:
    if not DEBUG:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY must be set when DJANGO_DEBUG is false; "
            'generate one with: python -c "import secrets; print(secrets.token_urlsafe(50))"'
        )
    # Only ever used with DEBUG on, on a developer's machine.
    _secret_key = "django-insecure-queueadmin-local-development-only"
SECRET_KEY = _secret_key

# Django's own messages ("Not Found: /x", "Unprocessable Entity: /actions/")
# go to the root logger only, as every other logger's do. Django's default
# also prints them on a console handler of its own when DEBUG is on, so under
# daphne, which gives the root logger a handler, each one appeared twice.
# The mail to ADMINS on a server error (DEBUG off) is kept as Django has it.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"require_debug_false": {"()": "django.utils.log.RequireDebugFalse"}},
    "handlers": {
        "mail_admins": {
            "level": "ERROR",
            "filters": ["require_debug_false"],
            "class": "django.utils.log.AdminEmailHandler",
        },
    },
    "loggers": {"django": {"handlers": ["mail_admins"], "level": "INFO", "propagate": True}},
}

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost")
# Origins other than the request's own that forms (Django's CSRF check) and
# the live socket (queueadmin.dashboard.origin) accept.
CSRF_TRUSTED_ORIGINS = env_origins("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    # daphne first: it replaces runserver with an ASGI server that also
    # serves websockets.
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # ServeStatic's app registers its configuration checks (`manage.py check`
    # runs them); without it the middleware warns at every start. Below
    # daphne, so `runserver` stays daphne's.
    "servestatic",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "queueadmin",
]

# The broker API under /api/ never goes through these: queueadmin/asgi.py
# serves it with its own application (queueadmin.api.app) before Django.
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Static files (CSS, htmx, the live script) straight from daphne, with
    # DEBUG on or off. ServeStatic (a WhiteNoise fork) is async-native: a
    # sync-only middleware here would make Django run every async view,
    # long-poll claims included, on one shared thread.
    "servestatic.middleware.ServeStaticMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # An htmx request that meets the sign-in page or a whole-page 403 moves
    # the whole page (HX-Redirect), never nests a page inside a panel.
    "queueadmin.htmx_redirect.HtmxPageRedirectMiddleware",
]

ROOT_URLCONF = "queueadmin.urls"
ASGI_APPLICATION = "queueadmin.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.debug",
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "queueadmin.dashboard.context.environment",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", "").strip() or f"sqlite:///{BASE_DIR / 'var' / 'db.sqlite3'}",
        conn_max_age=0,
    ),
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Operators sign in on the dashboard's own page; the admin shares the session.
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard:overview"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# ServeStatic serves static files from the app folders (finders), so
# collectstatic is optional; set DJANGO_STATIC_ROOT and run it to serve
# compressed copies from one folder instead.
STATIC_ROOT = env_str("DJANGO_STATIC_ROOT")
SERVESTATIC_USE_FINDERS = True

# The in-memory layer does not cross processes; that is fine because live
# updates are published from the engine embedded in the daphne process itself.
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# --- The queue engine ----------------------------------------------------------

QUEUE_STORE_URL = env_str("QUEUE_STORE_URL") or (BASE_DIR / "var" / "queue").as_uri()
# Azure's usual variable; the engine never reads the environment, config passes it on.
QUEUE_AZURE_CONNECTION_STRING = env_str("AZURE_STORAGE_CONNECTION_STRING")
QUEUE_ADVERTISE_URL = env_http_url("QUEUE_ADVERTISE_URL")
QUEUE_API_TOKEN = env_str("QUEUE_API_TOKEN")
QUEUE_LEASE_SECONDS = env_seconds("QUEUE_LEASE_SECONDS", DEFAULT_LEASE_SECONDS)
QUEUE_HEARTBEAT_SECONDS = env_seconds("QUEUE_HEARTBEAT_SECONDS", DEFAULT_HEARTBEAT_SECONDS)
QUEUE_TAKEOVER_SECONDS = env_seconds("QUEUE_TAKEOVER_SECONDS", DEFAULT_TAKEOVER_SECONDS)
# Hedged writes of queue.json; None (unset) lets queueadmin.config choose by the store's scheme.
QUEUE_STORE_HEDGE_SECONDS = (env_seconds("QUEUE_STORE_HEDGE_SECONDS", 0, zero=True)
                             if os.environ.get("QUEUE_STORE_HEDGE_SECONDS", "").strip() else None)
QUEUE_MAX_PAYLOAD_BYTES = env_int("QUEUE_MAX_PAYLOAD_BYTES", DEFAULT_MAX_PAYLOAD_BYTES)
# A batch push carries many payloads, so the body limit is well above one
# payload's (queueadmin.config.default_max_request_bytes).
QUEUE_MAX_REQUEST_BYTES = env_int(
    "QUEUE_MAX_REQUEST_BYTES", default_max_request_bytes(QUEUE_MAX_PAYLOAD_BYTES), minimum=QUEUE_MAX_PAYLOAD_BYTES
)
# daphne answers a body that stops arriving for this long with 408, and closes
# a connection idle for twice this (queueadmin.edge).
QUEUE_HTTP_IDLE_SECONDS = env_seconds("QUEUE_HTTP_IDLE_SECONDS", DEFAULT_HTTP_IDLE_SECONDS)
# Only the serving process imports queueadmin.asgi, which starts the broker
# when this is on; set it false to serve the pages without joining the queue.
QUEUE_BROKER_AUTOSTART = env_bool("QUEUE_BROKER_AUTOSTART", default=True)
# A job that left queue.json keeps a row in the database this long, for its
# page (queueadmin.history); the leader writes the rows off the commit path.
QUEUE_FINISHED_RETENTION_SECONDS = env_seconds("QUEUE_FINISHED_RETENTION_SECONDS", DEFAULT_FINISHED_RETENTION_SECONDS)
# The serving process sets the garbage collector's thresholds to these once
# it has started (queueadmin/asgi.py, engine.tune_collector).
QUEUE_GC_THRESHOLDS = env_gc_thresholds("QUEUE_GC_THRESHOLDS", DEFAULT_GC_THRESHOLDS)
# The dashboard hides payload values under keys this matches (queueadmin.dashboard.redaction).
QUEUE_PAYLOAD_SECRET_KEYS = env_str("QUEUE_PAYLOAD_SECRET_KEYS")
if QUEUE_PAYLOAD_SECRET_KEYS is not None:
    try:
        re.compile(QUEUE_PAYLOAD_SECRET_KEYS)
    except re.error as exc:
        raise ImproperlyConfigured(f"QUEUE_PAYLOAD_SECRET_KEYS is not a regular expression: {exc}") from exc
# /metrics (docs/metrics.md) accepts the API tokens and this one, which reads nothing else.
QUEUE_METRICS_TOKEN = env_str("QUEUE_METRICS_TOKEN")
# The leader records a point of the metrics history this often (queueadmin.metrics.sampler).
QUEUE_METRICS_SAMPLE_SECONDS = env_seconds("QUEUE_METRICS_SAMPLE_SECONDS", DEFAULT_SAMPLE_SECONDS)
# Which deployment an operator is looking at (queueadmin.dashboard.context):
# a production dashboard must not pass for a staging one.
QUEUE_ENVIRONMENT = env_str("QUEUE_ENVIRONMENT")
if QUEUE_ENVIRONMENT is not None and (len(QUEUE_ENVIRONMENT) > 40 or not QUEUE_ENVIRONMENT.isprintable()):
    raise ImproperlyConfigured(f"QUEUE_ENVIRONMENT must be at most 40 printable characters, got {QUEUE_ENVIRONMENT!r}")
QUEUE_ENVIRONMENT_COLOR = env_str("QUEUE_ENVIRONMENT_COLOR")
if QUEUE_ENVIRONMENT_COLOR is not None and not re.fullmatch(r"#(?:[0-9a-fA-F]{3}){1,2}", QUEUE_ENVIRONMENT_COLOR):
    raise ImproperlyConfigured(f"QUEUE_ENVIRONMENT_COLOR must be a colour such as #c62828 or #c22, "
                               f"got {QUEUE_ENVIRONMENT_COLOR!r}")

# Recurring jobs (queueadmin.recurring): checked when the broker is built.
QUEUE_SCHEDULES = env_json_object("QUEUE_SCHEDULES")

# Format 2 (docs/format.md): a backlog beyond each queue's first
# QUEUE_HEAD_JOBS pending jobs moves to segment objects of QUEUE_SEGMENT_JOBS
# jobs; 0 keeps format 1. A node that reads format 2 keeps writing it.
QUEUE_SEGMENT_JOBS = env_int("QUEUE_SEGMENT_JOBS", DEFAULT_QUEUE_SEGMENT_JOBS, minimum=0)
QUEUE_HEAD_JOBS = env_int("QUEUE_HEAD_JOBS", DEFAULT_HEAD_JOBS)
QUEUE_REFILL_BELOW = env_int("QUEUE_REFILL_BELOW", min(DEFAULT_REFILL_BELOW, QUEUE_HEAD_JOBS))
# Small segments (under a quarter of this) are merged into segments of up to
# this many jobs, each with an id index; the chaos harness lowers it to merge often.
QUEUE_MERGE_JOBS = env_int("QUEUE_MERGE_JOBS", max(DEFAULT_MERGE_JOBS, QUEUE_SEGMENT_JOBS))
# Format 3 (docs/format.md, "Delayed jobs beyond a window"): delayed jobs due
# more than this far ahead leave queue.json for delayed segments once a queue
# holds more than its share; 0 keeps them in the document (and format 2).
QUEUE_DELAYED_HORIZON_SECONDS = env_seconds(
    "QUEUE_DELAYED_HORIZON_SECONDS", DEFAULT_QUEUE_DELAYED_HORIZON_SECONDS, zero=True)

# A standby takes over once the document has been silent for the takeover
# delay; if that is not longer than the leader's heartbeat, a healthy leader
# would be deposed between two of its own heartbeats.
if QUEUE_TAKEOVER_SECONDS <= QUEUE_HEARTBEAT_SECONDS:
    raise ImproperlyConfigured(
        f"QUEUE_TAKEOVER_SECONDS ({QUEUE_TAKEOVER_SECONDS:g}) must be greater than "
        f"QUEUE_HEARTBEAT_SECONDS ({QUEUE_HEARTBEAT_SECONDS:g})"
    )

if QUEUE_STORE_HEDGE_SECONDS is not None and QUEUE_STORE_HEDGE_SECONDS > MAX_HEDGE_SECONDS:
    raise ImproperlyConfigured(
        f"QUEUE_STORE_HEDGE_SECONDS ({QUEUE_STORE_HEDGE_SECONDS:g}) must be at most {MAX_HEDGE_SECONDS:g}: "
        "a write that slow is not one a second attempt helps (0 turns hedging off)"
    )

# --- Django Tasks ----------------------------------------------------------------

# @task functions run on this queue: enqueue pushes a job to the queue named
# like the task's queue_name, `manage.py queueworker` (no --handler) runs it,
# and results are kept under results/ in the store (README, "Django tasks").
QUEUE_TASK_RESULT_TTL_SECONDS = env_seconds("QUEUE_TASK_RESULT_TTL_SECONDS", DEFAULT_RESULT_TTL_SECONDS)
TASKS = {
    "default": {
        "BACKEND": "queueadmin.tasks.ObjectStoreBackend",
        "QUEUES": ["default"],
        "OPTIONS": {"RESULT_TTL_SECONDS": QUEUE_TASK_RESULT_TTL_SECONDS},
    },
}
