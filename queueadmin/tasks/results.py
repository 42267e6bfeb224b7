"""Task results: one small JSON object per task job, under ``results/`` in the
queue's store, outside ``queue.json`` so the document stays small.

``results/<job id>.json`` holds what the document cannot: the return value,
one error (exception class and traceback) per failed attempt, and enough of
the job (its payload, times, workers) to answer ``get_result`` after the job
has left the document.

**Ordering.** A worker writes the object *before* it commits the attempt's
outcome (complete or fail), and ``get_result`` reads the job from the
document *before* it reads the object. So while the job is in the document,
the document decides the status (pending: READY, running: RUNNING, dead:
FAILED); once it has left, the object was necessarily written first and
decides it (SUCCESSFUL or FAILED). A crash between the write and the commit
leaves an object for an attempt the document does not count: the lease
expires and the job runs again, and the next attempt updates the object. The
other order would lose the result for good on such a crash.

Objects are updated with conditional writes (read, merge, write with
``If-Match``), so two attempts of one job never lose each other's errors.
A stored success is never turned back into a failure by a later attempt (a
worker whose lease was lost may still finish): the later error is only
added. Each object expires ``RESULT_TTL_SECONDS`` after its last attempt;
:func:`delete_expired` removes expired ones (the task worker runs it).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal

import orjson

from engine import ObjectStore, PreconditionFailed, StoreConfigError, check_key
from queueadmin.tasks.payload import TaskView, describe

log = logging.getLogger(__name__)

PREFIX = "results/"
#: A result object that cannot be read is copied here, byte for byte, before a
#: new attempt's result replaces it: nothing unreadable is destroyed.
UNREADABLE_PREFIX = "results-unreadable/"
#: A result keeps at most this many errors (the newest), like the job's history.
MAX_ERRORS = 20
#: Each error's traceback keeps at most its last this many characters.
MAX_TRACEBACK_CHARS = 16384
MAX_WRITE_TRIES = 20

Outcome = Literal["SUCCESSFUL", "FAILED"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredError:
    """One failed attempt: the exception's class path and its traceback."""

    exception_class_path: str
    traceback: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredResult:
    """A task job's stored result, as the worker last wrote it.

    ``status`` is the outcome of the attempts so far: ``"SUCCESSFUL"`` once an
    attempt succeeded (``return_value`` is then its JSON-normalised return
    value), else ``"FAILED"``. While the job is still in the document (a
    failed attempt waiting for its retry) the document's status is the true
    one; ``get_result`` combines both.
    """

    id: str
    status: Outcome
    task: TaskView
    return_value: Any
    errors: tuple[StoredError, ...]
    worker_ids: tuple[str, ...]
    enqueued_at: datetime | None
    started_at: datetime | None
    last_attempted_at: datetime | None
    finished_at: datetime
    expires_at: datetime

    def to_json(self) -> bytes:
        return orjson.dumps({
            "id": self.id,
            "status": self.status,
            "task": self.task.payload(),
            "return_value": self.return_value,
            "errors": [{"exception_class_path": e.exception_class_path, "traceback": e.traceback}
                       for e in self.errors],
            "worker_ids": list(self.worker_ids),
            "enqueued_at": _time_out(self.enqueued_at),
            "started_at": _time_out(self.started_at),
            "last_attempted_at": _time_out(self.last_attempted_at),
            "finished_at": _time_out(self.finished_at),
            "expires_at": _time_out(self.expires_at),
        })


def _time_out(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _time_in(value: Any) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def parse_result(data: bytes) -> StoredResult:
    """Parse a stored result object. Raises ValueError when it is malformed."""
    try:
        raw = orjson.loads(data)
        view = describe(raw["task"])
        if view is None or raw["status"] not in ("SUCCESSFUL", "FAILED"):
            raise ValueError("not a task result")
        finished_at, expires_at = _time_in(raw["finished_at"]), _time_in(raw["expires_at"])
        if finished_at is None or expires_at is None:
            raise ValueError("no finished_at or expires_at")
        return StoredResult(
            id=str(raw["id"]),
            status=raw["status"],
            task=view,
            return_value=raw["return_value"],
            errors=tuple(StoredError(exception_class_path=str(e["exception_class_path"]),
                                     traceback=str(e["traceback"])) for e in raw["errors"]),
            worker_ids=tuple(str(w) for w in raw["worker_ids"]),
            enqueued_at=_time_in(raw["enqueued_at"]),
            started_at=_time_in(raw["started_at"]),
            last_attempted_at=_time_in(raw["last_attempted_at"]),
            finished_at=finished_at,
            expires_at=expires_at,
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed task result: {exc}") from exc


def result_key(job_id: str) -> str | None:
    """The object key of ``job_id``'s result, or None for an id no key can hold.

    Job ids use letters, digits and ``_.:-``; keys take no ``:``, so it
    becomes ``=`` (which ids never contain, so the mapping is one to one).
    """
    try:
        return check_key(f"{PREFIX}{job_id.replace(':', '=')}.json")
    except StoreConfigError:
        return None


def load_result(store: ObjectStore, job_id: str, *, now: datetime) -> StoredResult | None:
    """``job_id``'s result from ``store``, or None if there is none, it has
    expired, or it is malformed (logged). One read; store errors propagate."""
    key = result_key(job_id) if isinstance(job_id, str) else None
    if key is None:
        return None
    blob = store.get(key)
    if blob is None:
        return None
    try:
        result = parse_result(blob.data)
    except ValueError as exc:
        log.warning("ignoring task result %s in %s: %s", key, store.describe(), exc)
        return None
    return None if result.expires_at <= now else result


def record_attempt(
    store: ObjectStore,
    *,
    job_id: str,
    task: TaskView,
    outcome: Outcome,
    return_value: Any = None,
    error: StoredError | None = None,
    worker_ids: Sequence[str],
    enqueued_at: datetime | None,
    started_at: datetime | None,
    last_attempted_at: datetime | None,
    finished_at: datetime,
    ttl_seconds: float,
) -> StoredResult:
    """Merge one finished attempt into ``job_id``'s result object and write it
    (conditionally, retrying lost races). Returns what was written.

    Call it before committing the attempt's outcome (see the module's
    docstring). Raises StoreError subclasses when the store fails.
    """
    key = result_key(job_id)
    if key is None:
        raise StoreConfigError(f"job id {job_id!r} cannot name a result object")
    new_errors = (error,) if error is not None else ()
    if error is not None:
        new_errors = (replace(error, traceback=error.traceback[-MAX_TRACEBACK_CHARS:]),)
    for _ in range(MAX_WRITE_TRIES):
        blob = store.get(key)
        old: StoredResult | None = None
        if blob is not None:
            try:
                old = parse_result(blob.data)
            except ValueError as exc:
                aside = _keep_unreadable(store, key, blob.data, now=finished_at)
                log.warning("task result %s is malformed (%s); kept as %s and replaced", key, exc, aside)
        status, value = outcome, return_value
        if old is not None and old.status == "SUCCESSFUL" and outcome == "FAILED":
            status, value = "SUCCESSFUL", old.return_value  # a late failure never undoes a success
        errors = ((old.errors if old is not None else ()) + new_errors)[-MAX_ERRORS:]
        result = StoredResult(
            id=job_id,
            status=status,
            task=task,
            return_value=value,
            errors=errors,
            worker_ids=tuple(worker_ids),
            enqueued_at=enqueued_at,
            started_at=min((t for t in (started_at, old.started_at if old is not None else None) if t is not None),
                           default=None),
            last_attempted_at=last_attempted_at,
            finished_at=finished_at,
            expires_at=finished_at + timedelta(seconds=ttl_seconds),
        )
        try:
            if blob is None:
                store.put(key, result.to_json(), if_none_match=True)
            else:
                store.put(key, result.to_json(), if_match=blob.etag)
        except PreconditionFailed:
            continue  # another attempt of this job wrote meanwhile: merge again
        return result
    raise PreconditionFailed(f"{key}: lost {MAX_WRITE_TRIES} races in a row writing a task result")


def _keep_unreadable(store: ObjectStore, key: str, data: bytes, *, now: datetime) -> str:
    """Copy an unreadable result object under :data:`UNREADABLE_PREFIX` (never
    over an earlier copy); return the copy's key."""
    name = key.removeprefix(PREFIX)
    aside = f"{UNREADABLE_PREFIX}{name}.{now.strftime('%Y%m%dT%H%M%S%f')}"
    # Already there: another attempt kept the same bytes at this instant.
    with contextlib.suppress(PreconditionFailed):
        store.put(aside, data, if_none_match=True)
    return aside


def delete_expired(store: ObjectStore, *, now: datetime) -> int:
    """Delete every result object past its expiry; return how many. A
    malformed object is left alone (logged): nothing unreadable is destroyed.
    Reads each object under ``results/``: run it now and then, not per job.
    Store errors propagate."""
    deleted = 0
    for key in store.list(PREFIX):
        blob = store.get(key)
        if blob is None:
            continue
        try:
            expired = parse_result(blob.data).expires_at <= now
        except ValueError as exc:
            log.warning("not deleting malformed task result %s: %s", key, exc)
            continue
        if expired:
            store.delete(key)
            deleted += 1
    return deleted
