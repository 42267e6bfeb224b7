"""The one place where Django settings become engine arguments.

``queueadmin/settings.py`` reads the environment into ``QUEUE_*`` settings;
this module turns those settings into what the engine and the rest of
queueadmin use: the :class:`engine.Policy`, the store, a
:class:`engine.BrokerClient`, the broker's timings and the HTTP limits.
Nothing else in queueadmin reads a ``QUEUE_*`` setting.

Every function reads ``django.conf.settings`` when it is called, so a test
that overrides a setting (``override_settings``, pytest-django's ``settings``
fixture) sees its value at once; nothing is cached. A setting that is absent
falls back to the engine's named default (or, for queueadmin's own limits,
to the defaults below, which ``settings.py`` uses too).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from django.conf import settings
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
    BrokerClient,
    ObjectStore,
    Policy,
    Schedule,
    StoreConfigError,
    check_gc_thresholds,
    open_store,
)

#: ``QUEUE_SEGMENT_JOBS`` when unset: the app runs format 2 (docs/format.md),
#: so a backlog of millions does not make every commit rewrite it. The
#: engine's own default (``engine.DEFAULT_SEGMENT_JOBS``, 0) keeps format 1
#: for code that embeds the engine without the app.
DEFAULT_QUEUE_SEGMENT_JOBS = 1000
#: ``QUEUE_DELAYED_HORIZON_SECONDS`` when unset: delayed jobs due more than a
#: minute ahead may leave the document for delayed segments (format 3), so a
#: backlog of scheduled jobs or retry backoffs does not grow every commit.
#: The engine's own default (0) keeps them in the document.
DEFAULT_QUEUE_DELAYED_HORIZON_SECONDS = 60.0

#: The smallest default limit on a broker API request body (see :func:`default_max_request_bytes`).
MIN_DEFAULT_REQUEST_BYTES = 4 * 1024 * 1024
#: Default for ``QUEUE_HTTP_IDLE_SECONDS``: how long a request body may stall before 408.
DEFAULT_HTTP_IDLE_SECONDS = 30.0
#: Default for ``QUEUE_TASK_RESULT_TTL_SECONDS`` and the tasks backend's ``RESULT_TTL_SECONDS``: a week.
DEFAULT_RESULT_TTL_SECONDS = 7 * 24 * 3600.0
#: Default for ``QUEUE_FINISHED_RETENTION_SECONDS``: a week.
DEFAULT_FINISHED_RETENTION_SECONDS = 7 * 24 * 3600.0
#: Default for ``QUEUE_METRICS_SAMPLE_SECONDS``: how often the leader records the metrics history.
DEFAULT_SAMPLE_SECONDS = 10.0
# Hedged writes on a remote store (store_hedge_seconds): at the earliest this long
# after a write started, once it has also taken three times the last writes' median.
# S3, GCS and Azure answer most small PUTs well within it.
DEFAULT_REMOTE_HEDGE_SECONDS = 0.25


def default_max_request_bytes(max_payload_bytes: int) -> int:
    """The default limit on a broker API request body for a given payload limit.

    A batch push carries many payloads, so the body limit is well above one
    payload's; the floor keeps ordinary batches working with small payload
    limits. Pure; ``settings.py`` uses it for ``QUEUE_MAX_REQUEST_BYTES``.
    """
    return max(MIN_DEFAULT_REQUEST_BYTES, 2 * max_payload_bytes)


# -- the store and the node ---------------------------------------------------------------


def store_url() -> str:
    """The queue's store URL: ``QUEUE_STORE_URL``.

    Raises ImproperlyConfigured when the setting is absent (it has no engine
    default: ``settings.py`` always sets it).
    """
    url: str | None = getattr(settings, "QUEUE_STORE_URL", None)
    if url is None:
        raise ImproperlyConfigured("QUEUE_STORE_URL is not set")
    return url


def store_hedge_seconds(store: ObjectStore) -> float:
    """``QUEUE_STORE_HEDGE_SECONDS``: the least time a write of the document
    waits before it is sent again (0: never). When unset,
    :data:`DEFAULT_REMOTE_HEDGE_SECONDS` for ``store`` if it is across a
    network (``ObjectStore.remote``: S3, GCS and Azure, behind the fault and
    latency wrappers too), where one request can stall while the next is
    quick; 0 for a folder or memory, where a second write meets the same disk."""
    value = getattr(settings, "QUEUE_STORE_HEDGE_SECONDS", None)
    if value is not None:
        return float(value)
    return DEFAULT_REMOTE_HEDGE_SECONDS if store.remote else 0.0


def open_queue_store() -> ObjectStore:
    """A newly opened store at :func:`store_url`.

    Does no I/O except creating a local folder. Raises StoreConfigError for
    a malformed URL (and ImproperlyConfigured, as :func:`store_url`).
    """
    return open_store_at(store_url())


def open_store_at(url: str) -> ObjectStore:
    """A newly opened store at ``url``, with the credentials the settings hold
    for it (``AZURE_STORAGE_CONNECTION_STRING`` for ``az://``).

    Does no I/O except creating a local folder. Raises StoreConfigError for
    a malformed URL.
    """
    connection_string: str | None = getattr(settings, "QUEUE_AZURE_CONNECTION_STRING", None)
    return open_store(url, azure_connection_string=connection_string)


def advertise_url() -> str | None:
    """``QUEUE_ADVERTISE_URL``: the http(s) URL other processes use to reach
    this node's broker; None (also when absent) for a node that advertises nothing."""
    url: str | None = getattr(settings, "QUEUE_ADVERTISE_URL", None)
    return url


def api_token() -> str | None:
    """``QUEUE_API_TOKEN``, the broker API token this node accepts and its
    clients send; None (also when absent) when unset."""
    token: str | None = getattr(settings, "QUEUE_API_TOKEN", None)
    return token


def environment_name() -> str | None:
    """``QUEUE_ENVIRONMENT``: the deployment's name the dashboard shows in its
    badge (queueadmin.dashboard.context); None when unset."""
    name: str | None = getattr(settings, "QUEUE_ENVIRONMENT", None)
    return name or None


def environment_color() -> str | None:
    """``QUEUE_ENVIRONMENT_COLOR``: the badge's colour; None: chosen by the name."""
    color: str | None = getattr(settings, "QUEUE_ENVIRONMENT_COLOR", None)
    return color or None


def payload_secret_keys() -> str | None:
    """``QUEUE_PAYLOAD_SECRET_KEYS``: the regular expression of payload keys
    whose values the dashboard hides (queueadmin.dashboard.redaction); None:
    its default."""
    pattern: str | None = getattr(settings, "QUEUE_PAYLOAD_SECRET_KEYS", None)
    if pattern:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ImproperlyConfigured(f"QUEUE_PAYLOAD_SECRET_KEYS is not a regular expression: {exc}") from exc
    return pattern or None


def metrics_token() -> str | None:
    """``QUEUE_METRICS_TOKEN``: a bearer token that reads ``/metrics`` (and
    nothing else), besides the API tokens; None (also when absent) when unset."""
    token: str | None = getattr(settings, "QUEUE_METRICS_TOKEN", None)
    return token


def metrics_sample_seconds() -> float:
    """``QUEUE_METRICS_SAMPLE_SECONDS``: how often the leader records a point
    of the metrics history (:data:`DEFAULT_SAMPLE_SECONDS` when absent)."""
    return float(getattr(settings, "QUEUE_METRICS_SAMPLE_SECONDS", DEFAULT_SAMPLE_SECONDS))


def gc_thresholds() -> tuple[int, int, int]:
    """``QUEUE_GC_THRESHOLDS``: the garbage collector's thresholds the serving
    process sets once it has started (the engine's ``DEFAULT_GC_THRESHOLDS``
    when absent; see engine.tune_collector). Raises ImproperlyConfigured for
    anything but three whole numbers that ``gc.set_threshold`` takes."""
    value = getattr(settings, "QUEUE_GC_THRESHOLDS", DEFAULT_GC_THRESHOLDS)
    # A settings module's own value; one from the environment is checked already.
    if not isinstance(value, tuple | list):
        raise ImproperlyConfigured(f"QUEUE_GC_THRESHOLDS: the collector's thresholds are three whole numbers, "
                                   f"got {value!r}")
    try:
        return check_gc_thresholds(tuple(value))
    except ValueError as exc:
        raise ImproperlyConfigured(f"QUEUE_GC_THRESHOLDS: {exc}") from None


def broker_autostart() -> bool:
    """``QUEUE_BROKER_AUTOSTART``: whether the serving process starts the
    embedded broker when it imports the ASGI app (True when absent)."""
    return bool(getattr(settings, "QUEUE_BROKER_AUTOSTART", True))


# -- the engine's policy and timings ------------------------------------------------------


def lease_seconds() -> float:
    """``QUEUE_LEASE_SECONDS``: a claim's default lease length, in seconds
    (the engine's ``DEFAULT_LEASE_SECONDS`` when absent)."""
    return float(getattr(settings, "QUEUE_LEASE_SECONDS", DEFAULT_LEASE_SECONDS))


def heartbeat_seconds() -> float:
    """``QUEUE_HEARTBEAT_SECONDS``: the most time between two of the leader's
    commits, in seconds (the engine's ``DEFAULT_HEARTBEAT_SECONDS`` when absent)."""
    return float(getattr(settings, "QUEUE_HEARTBEAT_SECONDS", DEFAULT_HEARTBEAT_SECONDS))


def takeover_seconds() -> float:
    """``QUEUE_TAKEOVER_SECONDS``: how long a standby waits on an unchanged
    document before it takes over, in seconds (the engine's
    ``DEFAULT_TAKEOVER_SECONDS`` when absent)."""
    return float(getattr(settings, "QUEUE_TAKEOVER_SECONDS", DEFAULT_TAKEOVER_SECONDS))


def max_payload_bytes() -> int:
    """``QUEUE_MAX_PAYLOAD_BYTES``: the largest encoded job payload (the
    engine's ``DEFAULT_MAX_PAYLOAD_BYTES`` when absent)."""
    return int(getattr(settings, "QUEUE_MAX_PAYLOAD_BYTES", DEFAULT_MAX_PAYLOAD_BYTES))


def policy() -> Policy:
    """The engine policy the settings describe: :func:`lease_seconds`,
    :func:`max_payload_bytes`, format 2's ``QUEUE_SEGMENT_JOBS``,
    ``QUEUE_HEAD_JOBS``, ``QUEUE_REFILL_BELOW`` and ``QUEUE_MERGE_JOBS``
    (never below the segment size) and format 3's
    ``QUEUE_DELAYED_HORIZON_SECONDS``; the engine's defaults for the rest.

    Brokers enforce it; clients (commands, workers, forms, the tasks backend)
    validate with it locally, so both agree. Raises ValueError for values the
    engine refuses.
    """
    segment_jobs = int(getattr(settings, "QUEUE_SEGMENT_JOBS", DEFAULT_QUEUE_SEGMENT_JOBS))
    return Policy(
        lease_seconds=lease_seconds(),
        max_payload_bytes=max_payload_bytes(),
        segment_jobs=segment_jobs,
        head_jobs=int(getattr(settings, "QUEUE_HEAD_JOBS", DEFAULT_HEAD_JOBS)),
        refill_below=int(getattr(settings, "QUEUE_REFILL_BELOW", DEFAULT_REFILL_BELOW)),
        merge_jobs=max(segment_jobs, int(getattr(settings, "QUEUE_MERGE_JOBS", DEFAULT_MERGE_JOBS))),
        delayed_horizon_seconds=float(getattr(settings, "QUEUE_DELAYED_HORIZON_SECONDS",
                                              DEFAULT_QUEUE_DELAYED_HORIZON_SECONDS)),
    )


def schedules() -> list[Schedule]:
    """``QUEUE_SCHEDULES``: the recurring jobs the leader fires, built by
    :func:`queueadmin.recurring.build` with :func:`policy` (none when absent).
    Raises ImproperlyConfigured naming a bad entry."""
    from queueadmin.recurring import build  # imports the tasks' modules, so only once apps are ready

    return build(getattr(settings, "QUEUE_SCHEDULES", None), policy=policy())


def finished_retention_seconds() -> float:
    """``QUEUE_FINISHED_RETENTION_SECONDS``: how long a job that left the
    document stays findable by id (:data:`DEFAULT_FINISHED_RETENTION_SECONDS`
    when absent)."""
    return float(getattr(settings, "QUEUE_FINISHED_RETENTION_SECONDS", DEFAULT_FINISHED_RETENTION_SECONDS))


# -- the HTTP edge -------------------------------------------------------------------------


def max_request_bytes() -> int:
    """``QUEUE_MAX_REQUEST_BYTES``: the largest broker API request body
    (when absent, :func:`default_max_request_bytes` of :func:`max_payload_bytes`)."""
    limit = getattr(settings, "QUEUE_MAX_REQUEST_BYTES", None)
    return int(limit) if limit is not None else default_max_request_bytes(max_payload_bytes())


def http_idle_seconds() -> float:
    """``QUEUE_HTTP_IDLE_SECONDS``: how long a request body may stop arriving
    before the request gets 408; an idle connection is closed after twice
    this (:data:`DEFAULT_HTTP_IDLE_SECONDS` when absent)."""
    return float(getattr(settings, "QUEUE_HTTP_IDLE_SECONDS", DEFAULT_HTTP_IDLE_SECONDS))


# -- clients ---------------------------------------------------------------------------------


def broker_client(brokers: Sequence[str] | None = None, *, token: str,
                  store: ObjectStore | None = None) -> BrokerClient:
    """A new :class:`engine.BrokerClient` that validates with :func:`policy`.

    It reaches ``brokers`` (node URLs) or, with none, the leader named by the
    document in ``store``; that store is only read, and is
    :func:`open_queue_store` when not given. With ``brokers``, the store (if
    it opens) is also where the client looks once none of them answers: a
    worker given one node finds the new leader when that node dies (or give
    it every node). ``token`` is the API token to send: callers resolve it
    (their option, else :func:`api_token`) and say themselves what to do
    when there is none. Does no network I/O. Raises ValueError for unusable
    URLs or token, StoreConfigError for a bad store URL (only without
    ``brokers``).
    """
    if store is None and not brokers:
        store = open_queue_store()
    elif store is None:
        try:
            store = open_queue_store()
        except (StoreConfigError, ImproperlyConfigured):
            store = None  # the nodes given are all it has
    return BrokerClient(brokers or (), token=token, store=store, policy=policy())
