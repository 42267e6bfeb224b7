"""A backlog run's probes of the dashboard and of lookups by id, timed on
the leader once the run's load phases are over: the overview
(:func:`_overview_ms`), a queue's pending jobs page deep inside its
segments (:func:`_jobs_page`), ``Broker.get_job`` of a job in a
segment, cold and warm (:func:`_job_by_id`), and the dashboard's job page
of a job in a segment (:func:`_job_page`).

Run by :func:`bench.backlog_run.run`, which imports them from here. The
dashboard's code (Django) is imported only inside the probes, after the
run has sampled its RSS. Split from :mod:`bench.backlog_run`.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from bench.backlog_settle import _settle
from bench.scratchdb import django_on_scratch_database
from engine import Broker, EngineError, SegmentRef, newest_first

if TYPE_CHECKING:
    from bench.backlog_run import CountingStore


def _django() -> None:
    """Set Django up for the dashboard's code, unless it already is (a test),
    on a scratch database, migrated: the overview reads the workers seen from
    it, as a node's does (without it, each probe timed a refused query and
    logged that the table is missing)."""
    from django.apps import apps

    if not apps.ready:
        django_on_scratch_database("bench-backlog-db-")


def _latest_snapshot(broker: Broker) -> Callable[[], Any]:
    """A function decoding the leader's latest version into the dashboard's
    snapshot, anew at each call (what a page load of a new version costs)."""
    from datetime import UTC, datetime

    from queueadmin.dashboard.snapshot import decode_document

    committer = broker.committer
    assert committer is not None
    etag, parts = committer.committed
    data = b"".join(parts)
    return lambda: decode_document(data, etag=etag, taken_at=datetime.now(UTC))


def _overview_ms(broker: Broker, repeat: int = 5) -> float | dict[str, str]:
    """The dashboard's overview of the leader's latest version: decode the
    document into a snapshot and build the overview's context (median ms).
    What an operator's first page load of a new version costs, without
    rendering; the dashboard reads only the document (no segment)."""
    try:
        _django()
        from queueadmin.dashboard import pages

        snapshot = _latest_snapshot(broker)
        samples = []
        for _ in range(repeat):
            started = time.perf_counter()
            pages.overview(snapshot())
            samples.append((time.perf_counter() - started) * 1000)
        return statistics.median(samples)
    except Exception as exc:  # the dashboard is optional here: report, do not fail the run
        return {"error": f"{type(exc).__name__}: {exc}"}


def _jobs_page(broker: Broker, queue: str, repeat: int = 5) -> dict[str, Any]:
    """The dashboard's jobs list of ``queue``'s pending jobs, which in format 2
    pages through the segments in FIFO order: the page holding the middle
    job of the backlog, then the last page. Each load decodes the leader's
    latest document (like :func:`_overview_ms`) and builds the page's
    context with :func:`queueadmin.dashboard.joblist.jobs`, what the jobs view
    calls, through the dashboard's own segment cache
    (:data:`queueadmin.dashboard.segments.cache`), which reads from the
    leader's store with its latency and bandwidth, as on a leader's node.

    ``cold_ms`` is the first load with the cache emptied (after one load of
    page 1, so Python's first-call costs are not counted), ``cached_ms`` the
    median of ``repeat`` loads after it; ``segments_read`` what the cold
    load read. The last page is loaded after the middle one, without
    emptying the cache. Returns ``{"error": ...}`` if a load failed or a
    segment could not be read."""
    try:
        _django()
        from unittest import mock

        from queueadmin import runtime
        from queueadmin.dashboard import joblist, redaction, segments

        snapshot = _latest_snapshot(broker)

        def load(number: int) -> tuple[float, dict[str, Any]]:
            params = {"queue": queue, "status": "pending", "page": str(number)}
            started = time.perf_counter()
            # As an operator who sees payloads whole (a viewer's redaction is timed by bench.dashboard).
            context = joblist.jobs(snapshot(), params, redact=redaction.redactor(hidden=False))
            ms = (time.perf_counter() - started) * 1000
            if context["segment_error"]:
                raise RuntimeError(context["segment_error"])
            return ms, context

        def measure(number: int, *, empty: bool) -> dict[str, Any]:
            if empty:
                segments.cache.clear()
            reads = segments.cache.reads
            cold, context = load(number)
            read = segments.cache.reads - reads
            cached = statistics.median(load(number)[0] for _ in range(repeat))
            return {"cold_ms": cold, "cached_ms": cached, "segments_read": read, "rows": len(context["rows"])}

        # The dashboard reads segments through this node's broker's store.
        with mock.patch.object(runtime, "get_broker", lambda: broker):
            _, first = load(1)
            middle = first["total"] // 2 // joblist.PAGE_SIZE + 1
            deep = measure(middle, empty=True)
            last = measure(first["pages"], empty=False)
        return {"page": middle, "pages": first["pages"], "total": first["total"],
                "in_segments": first["in_segments"], **deep,
                "last": {"page": first["pages"], **last}}
    except Exception as exc:  # the dashboard is optional here: report, do not fail the run
        return {"error": f"{type(exc).__name__}: {exc}"}


def _id_in(store: CountingStore, ref: SegmentRef, at: int) -> str | None:
    """The id of the job at ``at`` in segment ``ref``, read past the counted
    store (which id to look for is not part of what is measured); None if
    the segment is gone."""
    blob = store.inner.get(ref.key)
    return None if blob is None else str(orjson.loads(blob.data)["jobs"][at]["id"])


def _reads(store: CountingStore) -> int:
    """The store's reads so far, whole and ranged."""
    return store.counts.get("get", 0) + store.counts.get("get_range", 0)


def _job_by_id(broker: Broker, store: CountingStore, queue: str, repeat: int = 5) -> dict[str, Any]:
    """``Broker.get_job`` (``GET /api/v1/jobs/<id>``) of a job in the middle
    of ``queue``'s backlog, in a segment with an id index (merged, or sealed
    large), long out of the ``sealed`` window: ``cold_ms`` as on a leader
    that just took over (the keeper holds no segment and no id index: it
    reads the segments' indexes newest first, in doubling batches, up to the
    job's segment's, then the job's entry in its segment's index
    and the job's bytes, or with a version 1 index the whole segment), ``warm_ms`` the median of
    ``repeat`` lookups after it (nothing read), ``unknown_ms`` the median of
    lookups of an id no segment holds (after the cold one: the indexes are
    held); then ``warm_up_s``, how long a new leader's reading of every
    segment's index takes (``LaneKeeper.warm``, all queues), and
    ``after_warm_up_ms``, a cold lookup of another job after it;
    ``cold_recent_ms``/``cold_recent_reads``, a cold lookup of a job in the
    most recently sealed segment of any queue (a client polling a job it
    pushed lately). Measured
    once the keeper has settled (no seal, refill or merge running).
    ``bytes_read``/``reads`` are what the cold lookup read, through the
    leader's store with its latency and bandwidth. Returns
    ``{"error": ...}`` if there is no merged segment or a lookup failed."""
    keeper = broker._keeper
    committer = broker.committer
    if keeper is None or committer is None:
        return {"error": "no keeper"}
    _settle(broker, broker.policy)  # no seal, refill or merge reads while the lookup is timed
    state = committer.state
    if state is None:
        return {"error": "no state"}
    refs = [ref for ref in state.lanes.get(queue, []) if ref.total >= keeper.small_below]
    if not refs:
        return {"error": "no segment large enough to have an id index"}
    ref, other = refs[len(refs) // 2], refs[len(refs) // 3]
    # The most recently sealed segment of any queue (every seal has an id
    # index), where a job pushed lately sits: the first a lookup reads
    # (newest_first). Once the newest merged segment of ``queue``, which
    # in ten queues other queues' later seals and merges precede, so the
    # probe read nearly every index (2.4-3.5 s, run S).
    newest = newest_first(state.lanes)[0][1]
    job_id, other_id = _id_in(store, ref, ref.total // 2), _id_in(store, other, other.total // 3)
    recent_id = _id_in(store, newest, newest.total // 2)
    if job_id is None or other_id is None or recent_id is None:
        return {"error": f"segment {ref.key}, {other.key} or {newest.key} is gone"}
    keeper.lookup.forget()
    reads, read_bytes = _reads(store), store.bytes_read
    try:
        started = time.perf_counter()
        view = broker.get_job(job_id)
        cold = (time.perf_counter() - started) * 1000
        reads, read_bytes = _reads(store) - reads, store.bytes_read - read_bytes
        if view.get("segment") != ref.key:
            return {"error": f"found in {view.get('segment')}, not {ref.key}"}
        warm = []
        for _ in range(repeat):
            started = time.perf_counter()
            broker.get_job(job_id)
            warm.append((time.perf_counter() - started) * 1000)
        unknown = []
        for n in range(repeat):
            started = time.perf_counter()
            with contextlib.suppress(EngineError):
                broker.get_job(f"no-such-job-{n}")
            unknown.append((time.perf_counter() - started) * 1000)
        # Cold again, a job of the most recently sealed segment (a client
        # polling a job it pushed lately): the indexes up to it only.
        keeper.lookup.forget()
        recent_reads = _reads(store)
        started = time.perf_counter()
        if broker.get_job(recent_id).get("segment") != newest.key:
            return {"error": f"{recent_id} not found in {newest.key}"}
        recent = (time.perf_counter() - started) * 1000
        recent_reads = _reads(store) - recent_reads
        # A leader that took over reads every segment's index before any
        # lookup asks (LaneKeeper.warm, queued as its tenure starts): how
        # long that takes, and a first lookup after it (another job).
        keeper.lookup.forget()
        started = time.perf_counter()
        warmed = keeper.warm([ref for refs in state.lanes.values() for ref in refs])
        warm_up = time.perf_counter() - started
        started = time.perf_counter()
        if broker.get_job(other_id).get("segment") != other.key:
            return {"error": f"{other_id} not found in {other.key}"}
        after = (time.perf_counter() - started) * 1000
    except EngineError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"cold_ms": cold, "warm_ms": statistics.median(warm), "unknown_ms": statistics.median(unknown),
            "cold_recent_ms": recent, "cold_recent_reads": recent_reads,
            "reads": reads, "bytes_read": read_bytes, "indexed_segments": len(refs),
            "references": len(state.lanes.get(queue, [])),
            "warm_up_s": warm_up, "warmed": warmed, "after_warm_up_ms": after}


def _job_page(broker: Broker, store: CountingStore, queue: str) -> dict[str, Any]:
    """The dashboard's lookup for a job page (``joblist.find_job``, what the
    job view calls; the rest of the page is the document's) of jobs in the
    middle of ``queue``'s backlog, with the process's id indexes held (as
    after :func:`_job_by_id`'s warm-up, or a dashboard page's) and the
    dashboard's caches empty: ``range_ms``, a first job (its entry and its
    bytes by range); ``whole_ms``, a second job of the same segment, which
    reads the segment whole, what every first job page did before ranged
    reads; ``again_ms``, the first job's page again. Each with the store's
    reads and bytes. Returns ``{"error": ...}`` if a lookup failed or found
    the job elsewhere."""
    try:
        _django()
        from unittest import mock

        from queueadmin import runtime
        from queueadmin.dashboard import joblist, segments

        committer = broker.committer
        keeper = broker._keeper
        state = committer.state if committer is not None else None
        if state is None or keeper is None:
            return {"error": "no state"}
        refs = [ref for ref in state.lanes.get(queue, []) if ref.total >= keeper.small_below]
        if not refs:
            return {"error": "no segment large enough to have an id index"}
        ref = refs[2 * len(refs) // 3]
        first, second = _id_in(store, ref, ref.total // 2), _id_in(store, ref, ref.total // 2 + 1)
        if first is None or second is None:
            return {"error": f"segment {ref.key} is gone"}
        keeper.warm([ref])  # held already after _job_by_id; a no-op then
        snapshot = _latest_snapshot(broker)()
        segments.cache.clear()
        segments.ranged.clear()

        def timed(job_id: str) -> dict[str, Any]:
            reads, read_bytes = _reads(store), store.bytes_read
            started = time.perf_counter()
            _, error, key = joblist.find_job(snapshot, job_id)
            ms = (time.perf_counter() - started) * 1000
            if error is not None or key != ref.key:
                raise RuntimeError(error or f"{job_id} found in {key}, not {ref.key}")
            return {"ms": ms, "reads": _reads(store) - reads, "bytes_read": store.bytes_read - read_bytes}

        # The dashboard reads segments through this node's broker's store.
        with mock.patch.object(runtime, "get_broker", lambda: broker):
            ranged, whole, again = timed(first), timed(second), timed(first)
        return {"segment_bytes": ref.size, "segment_jobs": ref.total,
                "range": ranged, "whole": whole, "again": again,
                "range_ms": ranged["ms"], "whole_ms": whole["ms"], "again_ms": again["ms"]}
    except Exception as exc:  # the dashboard is optional here: report, do not fail the run
        return {"error": f"{type(exc).__name__}: {exc}"}
