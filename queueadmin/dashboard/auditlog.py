"""The audit log's filters, and its export as CSV or JSON.

The audit page and its export read the same filters (:func:`filtered`), so
an export holds exactly the entries the page lists, on every page, newest
first, each with every job id it names (the page shows 20).

An export is streamed, :data:`CHUNK` entries at a time, so a long log costs
neither the node's memory nor a request timeout. A CSV cell that a
spreadsheet would run as a formula (one starting with ``=``, ``+``, ``-``,
``@``, a tab or a carriage return) is written with a leading ``'``: reasons
are typed by operators and job ids may be chosen by whoever pushes, so an
export opened in a spreadsheet must not run what they wrote.
"""

from __future__ import annotations

import csv
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from datetime import UTC, date, datetime, time, timedelta

import orjson
from asgiref.sync import sync_to_async
from django.db.models import QuerySet

from queueadmin.models import AuditEntry

__all__ = ["CHUNK", "COLUMNS", "FILTERS", "FORMATS", "filtered", "holding_pause", "record", "stream"]

#: The page's filters: query parameter names, each matched exactly, but
#: ``since`` and ``until``: UTC dates (YYYY-MM-DD), both days included.
FILTERS = ("action", "outcome", "user", "queue", "job", "since", "until")
#: The export's formats: ``?format=`` to content type.
FORMATS = {"csv": "text/csv; charset=utf-8", "json": "application/json"}
#: An export's fields, in the CSV's column order (``job_ids``: space-separated there, a list in JSON).
COLUMNS = ("id", "created_at", "username", "action", "queue", "target", "count", "outcome", "reason",
           "detail", "seq", "job_ids")


def holding_pause(pause: AuditEntry.Action, resume: AuditEntry.Action, **where: str) -> AuditEntry | None:
    """The audited ``pause`` that holds what ``where`` selects (a queue, or a
    schedule's target) paused, as far as the log knows: its latest
    successful ``pause`` or ``resume``, when that is a pause. None when it is
    a resume, or there is none: paused by code (the engine's operations),
    which is not audited."""
    entry = (AuditEntry.objects.filter(outcome=AuditEntry.Outcome.OK, action__in=(pause, resume), **where)
             .order_by("-created_at", "-id").first())
    return entry if entry is not None and entry.action == pause else None


# Entries read from the database at a time (their job ids with them).
CHUNK = 500
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _day(value: str) -> date | None:
    try:
        return date.fromisoformat(value) if value else None
    except ValueError:
        return None


def filtered(params: Mapping[str, str], *,
             sees: Callable[[str], bool] | None = None) -> tuple[QuerySet[AuditEntry], dict[str, str]]:
    """The entries ``params`` (a query string's values) select, newest first,
    and the filters as read (stripped; "" for none, and for a date that is
    not one: that filter is then dropped, never guessed at). ``sees``: the
    queues the user may see (:func:`.scopes.visibility`; None: all); an
    entry of any other queue (or of none) is left out."""
    filters = {name: (params.get(name) or "").strip() for name in FILTERS}
    entries = AuditEntry.objects.all()
    if sees is not None:
        # Patterns are shell-style, which SQL cannot match portably; the
        # distinct queue names are few (an indexed column), so pick them here.
        names = AuditEntry.objects.order_by().values_list("queue", flat=True).distinct()
        entries = entries.filter(queue__in=[name for name in names if sees(name)])
    for name in ("since", "until"):
        day = _day(filters[name])
        if day is None:
            filters[name] = ""
            continue
        start = datetime.combine(day, time.min, tzinfo=UTC)
        if name == "since":
            entries = entries.filter(created_at__gte=start)
        elif day < date.max:  # up to the last day there is: no bound (found by the pages fuzz: a 500)
            entries = entries.filter(created_at__lt=start + timedelta(days=1))
    if filters["action"]:
        entries = entries.filter(action=filters["action"])
    if filters["outcome"]:
        entries = entries.filter(outcome=filters["outcome"])
    if filters["user"]:
        entries = entries.filter(username=filters["user"])
    if filters["queue"]:
        entries = entries.filter(queue=filters["queue"])
    if filters["job"]:
        entries = entries.filter(jobs__job_id=filters["job"])
    return entries.distinct(), filters


def record(entry: AuditEntry) -> dict[str, object]:
    """One entry as the export writes it (``entry.jobs`` prefetched)."""
    return {
        "id": entry.pk,
        "created_at": entry.created_at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "username": entry.username,
        "action": entry.action,
        "queue": entry.queue,
        "target": entry.target,
        "count": entry.count,
        "outcome": entry.outcome,
        "reason": entry.reason,
        "detail": entry.detail,
        "seq": entry.seq,
        "job_ids": [job.job_id for job in entry.jobs.all()],
    }


def _pks(entries: QuerySet[AuditEntry]) -> list[int]:
    return list(entries.values_list("pk", flat=True))


def _batch(pks: list[int]) -> list[dict[str, object]]:
    """The records of entries ``pks``, in that order (an entry deleted since is left out)."""
    found = {e.pk: e for e in AuditEntry.objects.filter(pk__in=pks).prefetch_related("jobs")}
    return [record(found[pk]) for pk in pks if pk in found]


def _batches(entries: QuerySet[AuditEntry]) -> Iterator[list[dict[str, object]]]:
    pks = _pks(entries)
    for start in range(0, len(pks), CHUNK):
        yield _batch(pks[start:start + CHUNK])


async def _abatches(entries: QuerySet[AuditEntry]) -> AsyncIterator[list[dict[str, object]]]:
    # Each read on Django's thread for database work, between the chunks the
    # server sends: the event loop never waits on the database.
    pks = await sync_to_async(_pks)(entries)
    for start in range(0, len(pks), CHUNK):
        yield await sync_to_async(_batch)(pks[start:start + CHUNK])


class _Line:
    """A file that hands back what the csv writer writes (one row at a time)."""

    def write(self, text: str) -> str:
        return text


def _cell(value: object) -> object:
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


_WRITER = csv.writer(_Line())
_CSV_HEADER: str = _WRITER.writerow(COLUMNS)


def _csv_line(row: dict[str, object]) -> str:
    ids = row["job_ids"]
    assert isinstance(ids, list)
    line: str = _WRITER.writerow([_cell(" ".join(ids) if name == "job_ids" else row[name]) for name in COLUMNS])
    return line


class _Encoder:
    """One export's bytes, a chunk of entries at a time: its head, each
    chunk's rows (a JSON array's commas between chunks too), its tail."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.head = _CSV_HEADER.encode() if kind == "csv" else b"["
        self.tail = b"" if kind == "csv" else b"]\n"
        self._first = True

    def chunk(self, rows: list[dict[str, object]]) -> bytes:
        if self.kind == "csv":
            return "".join(map(_csv_line, rows)).encode()
        data = (b"" if self._first else b",\n") + b",\n".join(orjson.dumps(row) for row in rows)
        self._first = False
        return data


def stream(entries: QuerySet[AuditEntry], kind: str, *, asynchronous: bool) -> Iterator[bytes] | AsyncIterator[bytes]:
    """The export of ``entries`` as ``kind`` (a key of :data:`FORMATS`), in
    chunks of :data:`CHUNK` entries: an async iterator for an ASGI server
    (daphne), which would otherwise read a sync one whole before sending
    it, and a sync one for WSGI (and Django's test client)."""
    if asynchronous:
        return _astream(entries, _Encoder(kind))
    return _stream(entries, _Encoder(kind))


def _stream(entries: QuerySet[AuditEntry], out: _Encoder) -> Iterator[bytes]:
    yield out.head
    yield from (out.chunk(rows) for rows in _batches(entries) if rows)
    yield out.tail


async def _astream(entries: QuerySet[AuditEntry], out: _Encoder) -> AsyncIterator[bytes]:
    yield out.head
    async for rows in _abatches(entries):
        if rows:
            yield out.chunk(rows)
    yield out.tail
