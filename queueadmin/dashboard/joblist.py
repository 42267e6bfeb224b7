"""The dashboard's jobs list: its filters, sorts and search (into format 2's
segments too), one page of rows, and finding one job by id.

Pure functions of a :class:`Snapshot` and the page's query parameters, like
every builder in :mod:`queueadmin.dashboard.pages`; the dashboard's actions
(:mod:`queueadmin.dashboard.actions`) plan "all N matching" from the same
:func:`matching`, so a dry run and the list cannot disagree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple
from urllib.parse import urlencode

import orjson
from django.utils.translation import ngettext

from engine import EngineError
from queueadmin.dashboard import redaction, segments
from queueadmin.dashboard.redaction import Redactor
from queueadmin.dashboard.snapshot import Doc, Snapshot, error_signature, moment, sortable
from queueadmin.models import AuditEntry
from queueadmin.tasks import TaskView, describe

PAGE_SIZE = 50
# A payload substring search reads at most this many jobs (and dead letters),
# so a search over a huge document stays quick; the page says when it stopped.
SEARCH_LIMIT = 20_000
#: The status filter's choices. "delayed" is not a status of its own: the
#: pending jobs not due yet (a delayed push, a retry in its backoff), in due order.
STATUSES = ("pending", "delayed", "running", "dead")


def payload_text(item: Doc, redact: Redactor) -> str:
    """The payload as compact JSON text, as ``redact`` shows it to the
    viewer (for previews and search: a search never finds what the viewer
    cannot see)."""
    return orjson.dumps(redact(item.get("payload"))).decode()


def task_call(view: TaskView) -> str:
    """A task job's call as text: ``send_email("ada@example.com", retries=2)``."""
    args = [orjson.dumps(a).decode() for a in view.args]
    args += [f"{k}={orjson.dumps(v).decode()}" for k, v in view.kwargs.items()]
    return f"{view.name}({', '.join(args)})"


#: The jobs list's filters, in the order its query string carries them.
FILTERS = ("queue", "status", "q", "id", "worker", "error")
#: The jobs list's sort orders (query ``sort``): a leading "-" reverses one.
#: "age" is youngest first, "-age" oldest first; "attempts" fewest first.
SORTS = ("age", "-age", "attempts", "-attempts")


def job_filters(params: Mapping[str, str]) -> dict[str, str]:
    """The jobs list's filters from query parameters (each "" when not set,
    an unknown status dropped): what the list shows and what an action on
    "all N matching this filter" plans against, read the same way."""
    filters = {name: (params.get(name) or "").strip() for name in FILTERS}
    if filters["status"] not in STATUSES:
        filters["status"] = ""
    return filters


def job_worker(item: Doc) -> str | None:
    """The worker holding the job's lease, or else the one that ran its last attempt."""
    lease = item.get("lease")
    if lease:
        return str(lease["worker"])
    history = item.get("history")
    return str(history[-1]["worker"]) if history else None


def job_error(item: Doc) -> str | None:
    """The job's error: a dead letter's, or the last failed attempt's."""
    return item.get("error") if item.get("status") == "dead" else item.get("last_error")


class Matches(NamedTuple):
    """What :func:`matching` found: the jobs, a notice for the operator, and
    where a payload search that stopped inside the segments would go on
    (``search_from``, the number of segment jobs searched so far; None when
    it searched them all, or none)."""

    jobs: list[Doc]
    notice: str | None
    search_from: int | None = None


def matching(snapshot: Snapshot, filters: Mapping[str, str], *, redact: Redactor,
             segments_too: bool = True, search_from: int = 0) -> Matches:
    """The jobs ``filters`` (see :func:`job_filters`) select, in document
    order, each with its ``status``, and a notice for the operator (a search
    that stopped at :data:`SEARCH_LIMIT`, an exact id not found). In format
    2 an exact id and a payload search look in segment objects too (see
    :func:`find_job`, :func:`_search_segments`); ``segments_too=False``
    keeps them to the document, with no I/O. A payload search looks in the
    payloads as ``redact`` shows them to the viewer (see :mod:`.redaction`).
    ``search_from`` > 0 goes on with such a search past that many jobs in
    segments, up to :data:`SEARCH_LIMIT` more, and then lists only the
    segments' hits (the document's were listed by the search's first page)."""
    queue, status = filters.get("queue") or None, filters.get("status") or None
    exact, needle = filters.get("id") or "", filters.get("q") or ""
    notice = None
    if exact:  # found as a job page finds it, segments included; then held to the other filters
        found, segment_error, key = find_job(snapshot, exact) if segments_too else (snapshot.job(exact), None, None)
        if segment_error is not None:
            notice = f"Looking for job {exact!r} in the segment objects failed: {segment_error}"
        elif not found:
            # An id copied as a list shows it, cut short: the jobs of the document whose ids start so.
            starting = [j for j in _candidates(snapshot, None, None) if j["id"].startswith(exact)]
            if starting:
                kept = _narrowed(starting, {**filters, "id": ""}, redact, now=snapshot.taken_at)
                which = "" if len(kept) == len(starting) else f", {len(kept):,} of them kept by the other filters"
                return Matches(kept, f"No job has the id {exact!r}: listing the {len(starting):,} in the document "
                                     f"whose ids start with it{which}.")
            where = "the document or the segment objects a lookup reads" if snapshot.lanes else "the document"
            notice = (f"No job with id {exact!r} is in {where} (completed and purged jobs leave it), and no id in "
                      "the document starts with it.")
        if not found:
            return Matches([], notice)
        hit = dict(found[0], status=found[1], **({"segment": key} if key else {}))
        # "All N matching" acts on what the list shows: a job of another queue
        # or status must not be listed (nor purged) under this filter.
        kept = _narrowed([hit], filters, redact, now=snapshot.taken_at)
        if not kept:
            notice = (f"Job {exact!r} is {hit['status']} in queue {hit['queue']!r}: it does not match the other "
                      "filters.")
        return Matches(kept, notice)
    candidates = _narrowed(_candidates(snapshot, queue, status), {**filters, "queue": "", "status": "", "q": ""},
                           redact, now=snapshot.taken_at)
    further = None
    if needle:
        into_segments = segments_too and _searches_segments(snapshot, filters)
        going_on = search_from > 0 and into_segments
        if going_on:
            candidates, budget = [], SEARCH_LIMIT
        else:
            if len(candidates) > SEARCH_LIMIT:
                notice = (f"Searched the first {SEARCH_LIMIT:,} of {len(candidates):,} jobs; narrow by queue "
                          "or status to search the rest.")
            budget = SEARCH_LIMIT - len(candidates)
            candidates = [j for j in candidates[:SEARCH_LIMIT] if needle in payload_text(j, redact)]
        if into_segments:
            sealed, segment_notice, further = _search_segments(snapshot, queue, needle, max(budget, 0), redact,
                                                               skip=search_from if going_on else 0)
            # In FIFO order across the document and the segments (dead letters, with no pos, last).
            candidates = sorted([*candidates, *sealed], key=lambda j: j.get("pos", math.inf))
            notice = " ".join(n for n in (notice, segment_notice) if n) or None
    return Matches(candidates, notice, further)


def _candidates(snapshot: Snapshot, queue: str | None, status: str | None) -> list[Doc]:
    """The document's jobs of ``queue`` with ``status`` (None: any), each
    with its ``status``: pending and running in document order, then dead letters."""
    if status is None:
        return [*snapshot.select(queue=queue), *(dict(d, status="dead") for d in snapshot.select(
            queue=queue, status="dead"))]
    if status == "dead":
        return [dict(d, status="dead") for d in snapshot.select(queue=queue, status="dead")]
    if status == "delayed":
        delayed = [j for j in snapshot.select(queue=queue, status="pending") if waits(j, snapshot.taken_at)]
        return sorted(delayed, key=lambda j: sortable(j["not_before"]))  # the soonest due first
    return snapshot.select(queue=queue, status=status)


def _narrowed(candidates: list[Doc], filters: Mapping[str, str], redact: Redactor, *, now: datetime) -> list[Doc]:
    """The ``candidates`` (each with its ``status``) that every filter of
    ``filters`` but the id keeps: queue, status ("delayed": pending and not
    due at ``now``), worker, error and payload substring (as ``redact``
    shows it), each only when set.

    The worker and error filters match exactly when some candidate matches
    exactly (a link from the Workers or Dead letters page names one worker,
    one signature), else as a part, any case: what an operator types ("w-ord",
    "KeyError") rather than a whole name or signature."""
    queue, status = filters.get("queue") or "", filters.get("status") or ""
    worker, signature, needle = filters.get("worker") or "", filters.get("error") or "", filters.get("q") or ""
    kept = [j for j in candidates if (not queue or j["queue"] == queue) and (
        not status or j["status"] == status or (status == "delayed" and waits(j, now)))]
    if worker:
        named = [(j, job_worker(j)) for j in kept]
        exact = any(name == worker for _, name in named)
        kept = [j for j, name in named if _named(name, worker, exact=exact)]
    if signature:
        signed = [(j, error, error_signature(error)) for j in kept if (error := job_error(j)) is not None]
        exact = any(sig == signature for _, _, sig in signed)
        wanted = signature.casefold()
        # A part is looked for in the error as the viewer is shown it: secret values hidden from them must
        # not be found by guessing (as a payload search, :func:`payload_text`). Signatures hide them for all.
        kept = [j for j, error, sig in signed if sig == signature or (not exact and (
            wanted in sig.casefold() or wanted in redaction.error_as_shown(error, redact).casefold()))]
    if needle:
        kept = [j for j in kept if needle in payload_text(j, redact)]
    return kept


def _named(name: str | None, wanted: str, *, exact: bool) -> bool:
    """Whether worker ``name`` is the one ``wanted`` (``exact``), or has it as a part, any case."""
    if name is None:
        return False
    return name == wanted if exact else wanted.casefold() in name.casefold()


def _searches_segments(snapshot: Snapshot, filters: Mapping[str, str]) -> bool:
    """Whether a payload search with ``filters`` goes on into segment
    objects: they hold pending jobs only, which no worker holds."""
    return bool(snapshot.lanes and filters.get("q") and (filters.get("status") or "pending") == "pending"
                and not filters.get("worker") and not filters.get("error"))


def _search_segments(snapshot: Snapshot, queue: str | None, needle: str, budget: int,
                     redact: Redactor, *, skip: int = 0) -> tuple[list[Doc], str, int | None]:
    """The pending jobs in ``queue``'s segments (every queue's, for None),
    in FIFO order per queue, whose payload holds ``needle``, reading at most
    ``budget`` of them (what :data:`SEARCH_LIMIT` leaves after the
    document's jobs) after the first ``skip``, through
    :data:`.segments.cache`; a notice saying how far it got; and where a
    search would go on (None: it reached the end). An unreadable segment
    stops it and is named. Skipped segments are not read."""
    refs = [(lane, ref) for lane, lane_refs in snapshot.lanes.items() if queue in (None, lane) for ref in lane_refs]
    total = sum(ref.total - ref.consumed for _, ref in refs)
    found: list[Doc] = []
    read = 0
    passed = 0  # jobs in segments before this window, skipped unread
    for _, ref in refs:
        if read >= budget:
            break
        held = ref.total - ref.consumed
        if passed + held <= skip:
            passed += held
            continue
        start = ref.consumed + (skip - passed if passed < skip else 0)
        passed = max(passed, skip)
        try:
            jobs = segments.cache.jobs(ref)[start:][: budget - read]
        except EngineError as exc:  # SegmentUnreadable (I6) or store trouble: say which, keep what was found
            return found, (f"Searched {_window(skip, read)} of the {total:,} pending jobs in segment objects; "
                           f"then {segments.describe(exc)}"), None
        read += len(jobs)
        found += [dict(j, status="pending", segment=ref.key) for j in jobs if needle in payload_text(j, redact)]
    if skip + read < total:
        further = ("narrow by queue to search further into one, or search the next jobs" if queue is None else
                   "search the next jobs to go on")
        return found, (f"Searched {_window(skip, read)} of the {total:,} pending jobs in segment objects, the "
                       f"oldest first (at most {SEARCH_LIMIT:,} jobs a page of results); {further}."), skip + read
    if skip:
        return found, (f"Searched {_window(skip, read)} of the {total:,} pending jobs in segment objects: "
                       "the last of them."), None
    return found, f"Searched the {total:,} pending jobs in segment objects too.", None


def _window(skip: int, read: int) -> str:
    """Which of the segments' jobs a search read: "19,250", or "20,001 to 40,000"."""
    return f"{read:,}" if not skip else f"{skip + 1:,} to {skip + read:,}"


def sort_jobs(items: list[Doc], sort: str) -> list[Doc]:
    """``items`` in the order ``sort`` (one of :data:`SORTS`) names; document order otherwise."""
    if sort.lstrip("-") == "age":
        # Youngest first is the latest enqueue first; times compare as canonical strings.
        return sorted(items, key=lambda j: sortable(j["enqueued_at"]), reverse=sort == "age")
    if sort.lstrip("-") == "attempts":
        return sorted(items, key=lambda j: int(j.get("attempts") or 0), reverse=sort == "-attempts")
    return items


def segmented_queue(snapshot: Snapshot, filters: Mapping[str, str]) -> str | None:
    """The queue whose pending jobs ``filters`` select exactly (queue and
    status pending, nothing else) when that queue has segments (format 2):
    the one filter whose list pages into segment objects. None otherwise."""
    queue = filters.get("queue") or ""
    only = filters.get("status") == "pending" and not any(
        filters.get(name) for name in FILTERS if name not in ("queue", "status"))
    return queue if only and (queue in snapshot.lanes or queue in snapshot.delays) else None


def pending_blocks(snapshot: Snapshot, queue: str) -> list[segments.Block]:
    """``queue``'s pending jobs in FIFO order, as blocks (see
    :func:`.segments.fifo_blocks`): counts only, no I/O."""
    return segments.fifo_blocks(snapshot.select(queue=queue, status="pending"), snapshot.lanes.get(queue, []),
                                snapshot.delays.get(queue, []))


def _unlisted(snapshot: Snapshot, filters: Mapping[str, str]) -> str | None:
    """Why jobs in segments are not in this list, when some could match."""
    queue, status = filters.get("queue") or None, filters.get("status") or ""
    if status == "delayed" and not filters.get("id"):
        away = sum(ref.total for name, refs in snapshot.delays.items() if queue in (None, name) for ref in refs)
        if not away:
            return None
        return (ngettext("%(n)s delayed job waits in delayed segment objects and is not listed here",
                         "%(n)s delayed jobs wait in delayed segment objects and are not listed here", away)
                % {"n": f"{away:,}"} + ": filter by one queue and status pending, with no other filter, to page "
                "through them (they come last, in due order).")
    if status not in ("", "pending") or filters.get("id") or _searches_segments(snapshot, filters):
        return None
    held = snapshot.in_segments(queue)
    if not held:
        return None
    return (ngettext("%(n)s pending job sits in segment objects and is not listed (or searched) here",
                     "%(n)s pending jobs sit in segment objects and are not listed (or searched) here",
                     held) % {"n": f"{held:,}"}
            + ": filter by one queue and status pending, with no other filter, to page through them.")


def jobs(snapshot: Snapshot, params: Mapping[str, str], *, redact: Redactor) -> dict[str, Any]:
    """The jobs list. Filtered to one queue's pending jobs (and nothing
    else) in format 2, it lists them all in FIFO order, reading only the
    segment objects the page shows (through :data:`.segments.cache`); a
    segment that cannot be read leaves the page's rows empty and says
    which object (``segment_error``). Any other filter lists the document's
    jobs only, and says how many pending jobs in segments it leaves out.
    Payloads show, and are searched, as ``redact`` shows them."""
    filters = job_filters(params)
    sort = params.get("sort") or ""
    if sort not in SORTS:
        sort = ""
    segment_error = None
    search_from, search_next = 0, None
    lane = segmented_queue(snapshot, filters)
    if lane is not None:
        # The list pages into the segments in FIFO order; sorting it would mean
        # reading every segment, and a list of the document's jobs alone would
        # show far fewer jobs than its "all N matching" purges.
        blocks = pending_blocks(snapshot, lane)
        total, matches = sum(b.count for b in blocks), list[Doc]()
        notice = (f"Queue {lane}'s backlog sits in segment objects: its pending jobs are listed in queue order "
                  "(the order workers claim them), not sorted.") if sort else None
        sort = ""
    else:
        try:
            search_from = max(int(params.get("from") or 0), 0)
        except ValueError:
            search_from = 0
        if not _searches_segments(snapshot, filters):
            search_from = 0  # only a payload search into segments goes on from somewhere
        matches, notice, search_next = matching(snapshot, filters, redact=redact, search_from=search_from)
        matches = sort_jobs(matches, sort)
        total = len(matches)
        unlisted = _unlisted(snapshot, filters)
        notice = " ".join(n for n in (notice, unlisted) if n) or None
    pages = max(1, math.ceil(total / PAGE_SIZE))
    try:
        page = min(max(int(params.get("page") or 1), 1), pages)
    except ValueError:
        page = 1
    start = (page - 1) * PAGE_SIZE
    if lane is not None:
        try:
            shown = segments.page(blocks, start, PAGE_SIZE)
        except EngineError as exc:  # SegmentUnreadable (I6) or store trouble: say so, show no rows
            shown, segment_error = [], segments.describe(exc)
    else:
        shown = matches[start:start + PAGE_SIZE]
    filter_query = urlencode({k: v for k, v in filters.items() if v})
    return {
        "snapshot": snapshot,
        "queues": list(snapshot.queues),
        "statuses": STATUSES,
        # Suggestions for the worker and error filters (workers seen lately, dead-letter signatures).
        "worker_names": [w.name for w in snapshot.workers()],
        "signatures": sorted({g.signature for g in snapshot.dead_groups()}),
        "filters": filters,
        "filter_query": filter_query,
        "filtered": any(filters.values()),
        "sort": sort,
        # Each header's link: the other direction when sorted by it, else the more useful one first.
        "sort_links": {key: "?" + urlencode({**{k: v for k, v in filters.items() if v},
                                             "sort": key if sort == f"-{key}" else f"-{key}"})
                       for key in ("age", "attempts")},
        "rows": [_row(snapshot, j, redact) for j in shown],
        "total": total,
        "page": page,
        "pages": pages,
        "first_index": start + 1,
        "last_index": start + len(shown),
        "notice": notice,
        "segment_error": segment_error,
        "in_segments": snapshot.in_segments(lane) if lane is not None else 0,
        # Sorting pages into segments is not offered (see above): the headers are plain.
        "sortable": lane is None,
        # Where this page's payload search began in the segments (0: the start), for the pager's links.
        "search_from": search_from,
        # A payload search that stopped inside the segments: the link that goes on.
        "search_next": ("?" + urlencode({**{k: v for k, v in filters.items() if v}, "from": search_next})
                        if search_next is not None else None),
        **bulk_counts(matches if lane is None else snapshot.select(queue=lane, status="pending"),
                      lane_total=total if lane is not None else None, now=snapshot.taken_at),
    }


#: The actions "all N matching this filter" offers, by the name of their spec.
BULK_ACTIONS = ("requeue", "run_now", "stop", "purge")


def waits(job: Doc, now: datetime) -> bool:
    """Whether ``job`` is a pending job not due yet at ``now``: a delayed
    push, or a retry in its backoff (what "Run now" acts on)."""
    due = moment(job.get("not_before"))
    return job.get("status") == "pending" and due is not None and due > now


def bulk_counts(matches: list[Doc], *, lane_total: int | None, now: datetime) -> dict[str, Any]:
    """How many jobs each "all N matching" action would act on, as its dry
    run (``actions._plan_filter``) plans it, so that a button never names a
    number its dry run does not act on: ``bulk`` maps each of
    :data:`BULK_ACTIONS` to its count, and ``bulk_in_segments`` counts the
    matches in segment objects every one of them leaves out (a payload
    search's hits there: selected on the list instead). ``lane_total``: the
    list is one queue's pending jobs in format 2 (:func:`segmented_queue`),
    which a purge takes whole, segments included, and nothing else takes
    but a run now, which takes its delayed jobs in the document
    (``matches`` are then those). ``now``: the snapshot's time, for what
    is due."""
    specs = {name: AuditEntry.Action(name).spec for name in BULK_ACTIONS}
    if lane_total is not None:  # every job listed is pending
        return {"bulk": {name: sum(1 for j in matches if waits(j, now)) if spec.delayed_only
                         else lane_total if spec.takes("pending") else 0 for name, spec in specs.items()},
                "bulk_in_segments": 0}
    here = [j for j in matches if not j.get("segment")]
    return {"bulk": {name: sum(1 for j in here if spec.takes(j["status"]) and (not spec.delayed_only or waits(j, now)))
                     for name, spec in specs.items()},
            "bulk_in_segments": len(matches) - len(here)}


def _row(snapshot: Snapshot, item: Doc, redact: Redactor) -> dict[str, Any]:
    lease = item.get("lease")
    view = describe(redact(item.get("payload")))
    return {
        "job": item,
        "task": task_call(view) if view is not None else None,
        "status": item["status"],
        "enqueued_at": moment(item.get("enqueued_at")),
        "not_before": moment(item.get("not_before")),
        "worker": lease["worker"] if lease else None,
        # Who ran the last attempt of a job no one holds (what the worker filter also matches).
        "last_worker": None if lease else job_worker(item),
        # Why it is dead, or why its last attempt failed (a retry): shown under its status.
        "error": job_error(item),
        "died_at": moment(item.get("died_at")),
        "payload": payload_text(item, redact),
        # Read from a segment object: no per-job action reaches it there (act on its queue).
        "segment": item.get("segment"),
    }


def find_job(snapshot: Snapshot, job_id: str) -> tuple[tuple[Doc, str] | None, str | None, str | None]:
    """The job ``job_id`` and its status, looked up in the document, then
    (format 2) in segment objects within :func:`.segments.find_in_segments`'s
    bound; also an error reading a segment, if one stopped the lookup, and
    the key of the segment the job was found in (None: not in one)."""
    found = snapshot.job(job_id)
    if found is not None or not (snapshot.lanes or snapshot.delays):
        return found, None, None
    try:
        hit = segments.find_in_segments(job_id, snapshot.segment_refs(),
                                        sealed_recently=snapshot.sealed_recently(job_id))
    except EngineError as exc:
        return None, segments.describe(exc), None
    return ((hit[0], "pending"), None, hit[2]) if hit is not None else (None, None, None)
