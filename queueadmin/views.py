"""Read-only pages: an overview of the queue document, and a health check.

Nothing here writes to the store. The overview reads ``queue.json`` on every
request and summarises it; a store that cannot be reached or a document that
cannot be parsed is shown as an error on the page, never as a server error,
because that is exactly when an operator opens this page.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from engine.errors import DocumentError, EngineError
from engine.stores import ObjectStore, open_store

logger = logging.getLogger(__name__)

DOCUMENT_KEY = "queue.json"
# Document format versions this page can summarise; keep in step with the
# engine (docs/format.md). Anything else is reported, never guessed at.
KNOWN_FORMATS = frozenset({1})
# Statuses always shown as columns, in this order; any other status found in
# the document gets a column after them.
BASE_STATUSES = ("pending", "running")
COUNTERS = ("pushed", "completed", "failed", "dead")


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueRow:
    """One queue's line in the overview."""

    name: str
    #: Job counts aligned with :attr:`DocumentSnapshot.statuses`.
    status_counts: tuple[int, ...]
    #: Entries in the dead-letter list for this queue.
    dead_letters: int
    #: The document's lifetime counters for this queue (0 when absent).
    pushed: int
    completed: int
    failed: int
    dead: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerInfo:
    """The ``broker`` section: which broker the document names as leader."""

    id: str | None
    url: str | None
    epoch: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class DocumentSnapshot:
    """What the overview shows about one read of the queue document.

    ``exists`` is False when the object is absent; ``error`` is set (and the
    summary fields are empty) when the store or the document could not be read.
    ``etag`` and ``size`` are set whenever the object was fetched, even if its
    contents are unreadable.
    """

    store: str
    key: str
    exists: bool = False
    etag: str | None = None
    size: int | None = None
    format: int | None = None
    seq: int | None = None
    writer: str | None = None
    jobs: int = 0
    dead_letters: int = 0
    statuses: tuple[str, ...] = BASE_STATUSES
    status_totals: tuple[int, ...] = (0, 0)
    queues: tuple[QueueRow, ...] = ()
    broker: BrokerInfo | None = None
    error_title: str | None = None
    error: str | None = None


def redact_url(url: str) -> str:
    """Return ``url`` without user info or query string, which may hold secrets."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(unparseable store URL)"
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


# One store object per URL and process: an S3 store holds a boto3 client, which
# is costly to build and meant to be reused. Failures are not cached.
@functools.lru_cache(maxsize=8)
def _store_for(url: str) -> ObjectStore:
    return open_store(url)


def read_snapshot(store_url: str, key: str = DOCUMENT_KEY) -> DocumentSnapshot:
    """Read ``key`` from the store at ``store_url`` and summarise it.

    Does I/O (one GET), never writes, and never raises for store or document
    problems: they come back as ``error_title`` and ``error``.
    """
    try:
        store = _store_for(store_url)
    except (EngineError, OSError) as exc:
        return DocumentSnapshot(
            store=redact_url(store_url), key=key, error_title="The store cannot be opened", error=str(exc)
        )
    description = store.describe()
    try:
        blob = store.get(key)
    except (EngineError, OSError) as exc:
        logger.warning("cannot read %s from %s: %s", key, description, exc)
        return DocumentSnapshot(
            store=description, key=key, error_title=f"{key} cannot be read from the store", error=str(exc)
        )
    if blob is None:
        return DocumentSnapshot(store=description, key=key)
    fetched = DocumentSnapshot(store=description, key=key, exists=True, etag=blob.etag, size=len(blob.data))
    try:
        return summarize(fetched, blob.data)
    except DocumentError as exc:
        return replace(fetched, error_title=f"{key} is unreadable", error=exc.problem)


def summarize(fetched: DocumentSnapshot, data: bytes) -> DocumentSnapshot:
    """Return ``fetched`` filled in with a summary of the document bytes ``data``.

    Pure. Raises DocumentError naming ``fetched.key`` and the problem when
    ``data`` is not a queue document in a known format.
    """
    key = fetched.key
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DocumentError(key, f"not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise DocumentError(key, f"the top level is a JSON {_json_type(doc)}, not an object")
    if "format" not in doc:
        raise DocumentError(key, 'no "format" field: this is not a queue document')
    fmt = doc["format"]
    if not _is_int(fmt) or fmt not in KNOWN_FORMATS:
        known = ", ".join(str(f) for f in sorted(KNOWN_FORMATS))
        raise DocumentError(key, f"unknown format version {fmt!r}; this build reads format {known}")

    seq = _field(doc, key, "seq", int)
    writer = doc.get("writer")
    jobs = _field(doc, key, "jobs", list)
    dead = _field(doc, key, "dead", list)
    queues = _field(doc, key, "queues", dict)

    by_queue: dict[str, Counter[str]] = {}
    for index, job in enumerate(jobs):
        if not isinstance(job, dict):
            raise DocumentError(key, f"jobs[{index}] is a JSON {_json_type(job)}, not an object")
        queue, status = job.get("queue"), job.get("status")
        if not isinstance(queue, str) or not isinstance(status, str):
            raise DocumentError(key, f'jobs[{index}] needs string "queue" and "status" fields')
        by_queue.setdefault(queue, Counter())[status] += 1

    dead_by_queue: Counter[str] = Counter()
    for index, entry in enumerate(dead):
        if not isinstance(entry, dict):
            raise DocumentError(key, f"dead[{index}] is a JSON {_json_type(entry)}, not an object")
        queue = entry.get("queue")
        dead_by_queue[queue if isinstance(queue, str) else "(unknown queue)"] += 1

    counters: dict[str, dict[str, int]] = {}
    for name, stats in queues.items():
        if not isinstance(stats, dict):
            raise DocumentError(key, f"queues[{name!r}] is a JSON {_json_type(stats)}, not an object")
        counters[name] = {c: _counter(stats, key, name, c) for c in COUNTERS}

    extra = sorted({s for c in by_queue.values() for s in c} - set(BASE_STATUSES))
    statuses = (*BASE_STATUSES, *extra)
    rows = tuple(
        QueueRow(
            name=name,
            status_counts=tuple(by_queue.get(name, Counter())[s] for s in statuses),
            dead_letters=dead_by_queue[name],
            **counters.get(name, dict.fromkeys(COUNTERS, 0)),
        )
        for name in sorted(set(by_queue) | set(dead_by_queue) | set(counters))
    )
    return replace(
        fetched,
        format=fmt,
        seq=seq,
        writer=writer if isinstance(writer, str) else None,
        jobs=len(jobs),
        dead_letters=len(dead),
        statuses=statuses,
        status_totals=tuple(sum(c[s] for c in by_queue.values()) for s in statuses),
        queues=rows,
        broker=_broker(doc.get("broker"), key),
    )


def _broker(section: object, key: str) -> BrokerInfo | None:
    if section is None:
        return None
    if not isinstance(section, dict):
        raise DocumentError(key, f'"broker" is a JSON {_json_type(section)}, not an object or null')
    epoch = section.get("epoch")
    return BrokerInfo(
        id=_optional_text(section.get("id")),
        url=_optional_text(section.get("url")),
        epoch=epoch if _is_int(epoch) else None,
    )


def _field(doc: Mapping[str, Any], key: str, name: str, kind: type) -> Any:
    value = doc.get(name)
    ok = _is_int(value) and value >= 0 if kind is int else isinstance(value, kind)
    if not ok:
        wanted = {int: "a whole number ≥ 0", list: "a list", dict: "an object"}[kind]
        got = "missing" if name not in doc else f"a JSON {_json_type(value)}"
        raise DocumentError(key, f'"{name}" must be {wanted}, but it is {got}')
    return value


def _counter(stats: Mapping[str, Any], key: str, queue: str, name: str) -> int:
    value = stats.get(name, 0)
    if not _is_int(value) or value < 0:
        raise DocumentError(key, f'queues[{queue!r}]["{name}"] must be a whole number ≥ 0, got {value!r}')
    return int(value)


def _is_int(value: object) -> bool:
    # bool is an int subclass, but true is not a sequence number.
    return isinstance(value, int) and not isinstance(value, bool)


def _optional_text(value: object) -> str | None:
    return None if value is None else str(value)


def _json_type(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


@require_safe
@never_cache
def home(request: HttpRequest) -> HttpResponse:
    """The overview of the queue document at ``settings.QUEUE_STORE_URL``. Always 200."""
    snapshot = read_snapshot(settings.QUEUE_STORE_URL)
    return render(request, "queueadmin/home.html", {"snapshot": snapshot})


@require_safe
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: the process serves requests. Does no I/O; says nothing about the store."""
    return JsonResponse({"ok": True})
