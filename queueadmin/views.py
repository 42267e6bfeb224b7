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
from dataclasses import dataclass, replace
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from engine import DOCUMENT_KEY, FORMAT, Policy, QueueCounters, parse_document
from engine.errors import DocumentError, EngineError
from engine.stores import ObjectStore, open_store

logger = logging.getLogger(__name__)

# The statuses a job in the document can have (dead letters are counted apart).
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

    Pure. Parses with the engine's own strict parser, so this page refuses
    exactly what the writers refuse: DocumentError names the key and problem.
    """
    state = parse_document(fetched.key, data, policy=Policy())
    by_queue: dict[str, Counter[str]] = {}
    for job in state.jobs.values():
        by_queue.setdefault(job.queue, Counter())[job.status] += 1
    dead_by_queue = Counter(d.queue for d in state.dead.values())
    rows = tuple(
        QueueRow(
            name=name,
            status_counts=tuple(by_queue.get(name, Counter())[s] for s in BASE_STATUSES),
            dead_letters=dead_by_queue[name],
            **{c: getattr(state.queues.get(name) or QueueCounters(), c) for c in COUNTERS},
        )
        for name in sorted(set(by_queue) | set(dead_by_queue) | set(state.queues))
    )
    named = state.broker
    return replace(
        fetched,
        format=FORMAT,
        seq=state.seq,
        writer=state.writer,
        jobs=len(state.jobs),
        dead_letters=len(state.dead),
        status_totals=tuple(sum(c[s] for c in by_queue.values()) for s in BASE_STATUSES),
        queues=rows,
        broker=BrokerInfo(id=named.id, url=named.url, epoch=named.epoch) if named.id is not None else None,
    )


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
