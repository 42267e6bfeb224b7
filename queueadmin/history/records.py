"""Finished jobs: one row per job that left ``queue.json``, kept for the
retention period (``QUEUE_FINISHED_RETENTION_SECONDS``, a week by default).

A job leaves the document when a worker completes it, when an operator
purges it, or when it is a dead letter pushed out of the full list. The
document then keeps only its id (the dedup window) and its queue's
counters; this table keeps what an operator looks for afterwards: when and
how it finished, its worker, its attempts and their history, how long it
took, and the start of its payload. Who purged it and why is the purge's
audit entry (:class:`~queueadmin.models.AuditJob` finds it by job id), and a
Django task's return value is its result object
(:mod:`queueadmin.tasks.results`); the job page joins both.

Rows are written by :mod:`queueadmin.history.recorder` on the leader, after
the commit that removed the job has landed, never inside it. Looking one up
is a primary-key read, whatever the traffic; pruning deletes by the indexed
``finished_at``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import orjson
from django.db import connections, models, router, transaction

from engine import Attempt, DeadLetter, Departure, Job

#: A row keeps at most this many characters of the payload's JSON.
PAYLOAD_CHARS = 4000


class FinishedJob(models.Model):
    """A job that left the document: how, when, and what it had been through."""

    class How(models.TextChoices):
        COMPLETED = "completed", "completed"
        PURGED = "purged", "purged"
        DROPPED = "dropped", "dropped from the dead letters"

    job_id = models.CharField(max_length=200, primary_key=True)
    queue = models.CharField(max_length=100)
    how = models.CharField(max_length=16, choices=How.choices)
    #: When it left the document, by the leader's clock.
    finished_at = models.DateTimeField(db_index=True)
    #: Its status just before: pending, running or dead.
    was = models.CharField(max_length=16)
    enqueued_at = models.DateTimeField()
    attempts = models.PositiveIntegerField()
    max_attempts = models.PositiveIntegerField()
    #: The worker of its last attempt ("" if it never ran).
    worker = models.CharField(max_length=200, blank=True)
    last_error = models.TextField(blank=True)
    #: Its attempts, oldest first, as the document kept them (the last 10),
    #: the final one included: ``{"worker", "claimed_at", "heartbeat_at",
    #: "ended_at", "end", "error"}`` with ISO times; ``end`` is failed,
    #: expired, requeued, completed or purged.
    history = models.JSONField(default=list)
    #: The start of its payload's JSON (:data:`PAYLOAD_CHARS`), and its full size.
    payload = models.TextField(blank=True)
    payload_bytes = models.PositiveIntegerField(default=0)

    class Meta:
        ordering: ClassVar[list[str]] = ["-finished_at"]

    def __str__(self) -> str:
        return f"{self.job_id} {self.how} at {self.finished_at:%Y-%m-%d %H:%M:%S}"

    @property
    def duration(self) -> timedelta:
        """From enqueue to leaving the document."""
        return self.finished_at - self.enqueued_at

    @property
    def payload_cut(self) -> bool:
        return len(self.payload.encode()) < self.payload_bytes


# Every finished job's row formats four or five times, most shared by the
# jobs of one commit (claimed together, ended together, pushed together): a
# UTC time is formatted once and looked up after (~0.1 us against 1.7 us for
# isoformat, 2.8 us for the SQLite form), bounded by clearing. Only UTC times:
# equal times in other zones are equal as keys but format differently.
_ISO: dict[datetime, str] = {}
_SQLITE: dict[datetime, str] = {}
_FORMATTED_MAX = 4096


def _formatted(cache: dict[datetime, str], value: datetime, form: Callable[[datetime], str]) -> str:
    """``form(value)``, kept in ``cache`` for a UTC time (emptied when full)."""
    if value.tzinfo is not UTC:
        return form(value)
    text = cache.get(value)
    if text is None:
        if len(cache) >= _FORMATTED_MAX:
            cache.clear()
        text = cache[value] = form(value)
    return text


def _moment(value: datetime) -> str:
    return _formatted(_ISO, value, datetime.isoformat)


def _text(value: str) -> str:
    """``value`` without NUL characters, which PostgreSQL's text and jsonb
    refuse (the engine takes any text a JSON document can hold)."""
    return value.replace("\x00", "\ufffd") if "\x00" in value else value


def _attempt(a: Attempt) -> dict[str, Any]:
    return {
        "worker": _text(a.worker),
        "claimed_at": _moment(a.claimed_at),
        "heartbeat_at": _moment(a.heartbeat_at),
        "ended_at": _moment(a.ended_at),
        "end": a.end,
        "error": None if a.error is None else _text(a.error),
    }


#: A row as :func:`row_of` builds it: the values of :data:`COLUMNS`, in order.
Row = tuple[Any, ...]
#: The fields :func:`insert_rows` writes, the primary key first.
COLUMNS = (
    "job_id",
    "queue",
    "how",
    "finished_at",
    "was",
    "enqueued_at",
    "attempts",
    "max_attempts",
    "worker",
    "last_error",
    "history",
    "payload",
    "payload_bytes",
)


def row_of(departure: Departure) -> Row:
    """The row for one departure, as plain values (:data:`COLUMNS`). Pure; no
    I/O. Plain tuples rather than model instances: the recorder writes every
    finished job, and building a model instance per row costs several times more."""
    item, at = departure.item, departure.at
    history = [_attempt(a) for a in item.history]
    worker = history[-1]["worker"] if history else ""
    if isinstance(item, DeadLetter):
        was, last_error = "dead", _text(item.error)
    else:
        job: Job = item
        was, last_error = job.status, _text(job.last_error or "")
        if job.lease is not None:  # the running attempt ends here: completed, or purged under its worker
            worker = _text(job.lease.worker)
            history.append(
                {
                    "worker": worker,
                    "claimed_at": _moment(job.lease.claimed_at),
                    "heartbeat_at": _moment(job.lease.heartbeat_at),
                    "ended_at": _moment(at),
                    "end": departure.how,
                    "error": None,
                }
            )
    payload = item.payload[: 4 * PAYLOAD_CHARS].decode("utf-8", errors="replace")[:PAYLOAD_CHARS]
    return (
        item.id,
        item.queue,
        departure.how,
        at,
        was,
        item.enqueued_at,
        item.attempts,
        item.max_attempts,
        worker,
        last_error,
        history,
        payload,
        len(item.payload),
    )


def _sqlite_moment(value: datetime) -> str:
    """As Django stores an aware datetime in SQLite: naive UTC, ``str()``."""
    return _formatted(_SQLITE, value, lambda v: str(v.astimezone(UTC).replace(tzinfo=None)))


def _sqlite_json(value: Any) -> str:
    return orjson.dumps(value).decode()


def insert_rows(rows: list[Row]) -> None:
    """Insert ``rows`` (:func:`row_of`) in one transaction, one statement
    executed for all; a job id already recorded (an id pushed again once the
    dedup window had forgotten it) keeps its latest finish. Raw SQL (an
    upsert both SQLite and PostgreSQL take): ``bulk_create`` costs ~100 us a
    row in Python, which the recorder's thread would take from the committer's."""
    using = router.db_for_write(FinishedJob)
    connection = connections[using]
    ops = connection.ops
    quote = ops.quote_name
    names = [quote(name) for name in COLUMNS]  # no field sets db_column: columns are named as fields
    sql = (
        f"INSERT INTO {quote(FinishedJob._meta.db_table)} ({', '.join(names)}) "
        f"VALUES ({', '.join(['%s'] * len(names))}) "
        f"ON CONFLICT ({names[0]}) DO UPDATE SET {', '.join(f'{n} = excluded.{n}' for n in names[1:])}"
    )
    at, enqueued, history = COLUMNS.index("finished_at"), COLUMNS.index("enqueued_at"), COLUMNS.index("history")
    moment: Callable[[datetime], Any] = ops.adapt_datetimefield_value
    as_json: Callable[[Any], Any] = lambda value: ops.adapt_json_value(value, None)  # noqa: E731
    if connection.vendor == "sqlite":  # what Django's adapters give there, at a fifth of their cost
        moment, as_json = _sqlite_moment, _sqlite_json
    latest: dict[str, list[Any]] = {}  # one row per id in a statement (PostgreSQL requires it)
    for row in rows:
        values = list(row)
        values[at] = moment(values[at])
        values[enqueued] = moment(values[enqueued])
        values[history] = as_json(values[history])
        latest[values[0]] = values
    with transaction.atomic(using=using), connection.cursor() as cursor:
        cursor.executemany(sql, list(latest.values()))


def pretty_payload(row: FinishedJob) -> str:
    """The kept payload, indented when it is whole JSON (else as kept)."""
    if row.payload_cut:
        return row.payload
    try:
        return orjson.dumps(orjson.loads(row.payload), option=orjson.OPT_INDENT_2).decode()
    except orjson.JSONDecodeError:
        return row.payload


def find(job_id: str, *, retention_seconds: float, now: datetime) -> FinishedJob | None:
    """The row of ``job_id`` if it finished within the retention before
    ``now`` (a row past it that is not pruned yet is not shown), else None.
    One primary-key read."""
    return FinishedJob.objects.filter(pk=job_id, finished_at__gte=now - timedelta(seconds=retention_seconds)).first()
