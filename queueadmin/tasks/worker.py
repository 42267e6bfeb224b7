"""Running task jobs: the handler ``manage.py queueworker`` uses with no
``--handler``, and the clean-up of expired results.

For each claimed task job :class:`TaskRunner` imports the task, sends
``task_started``, calls it (with a :class:`~django.tasks.TaskContext` first
when ``takes_context``), writes the attempt to the job's result object, sends
``task_finished``, and returns or re-raises, so that the engine's Worker then
completes or fails the job: the result is written before that commit (see
:mod:`queueadmin.tasks.results`). A job that is not a task, or whose path
names no ``Task``, raises :class:`engine.worker.PermanentFailure`: its job
goes to the dead letters at once (``fail`` with ``give_up``), with the
reason as its error.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from traceback import format_exception
from typing import Any

from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
from django.tasks.base import TaskError
from django.tasks.signals import task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json

from engine import ClaimedJob, EngineError, ObjectStore, PermanentFailure, QueueClient
from queueadmin.config import DEFAULT_RESULT_TTL_SECONDS
from queueadmin.tasks.backend import ObjectStoreBackend, load_task
from queueadmin.tasks.connection import default_results_store
from queueadmin.tasks.payload import MARKER, TaskView, describe
from queueadmin.tasks.results import Outcome, StoredError, StoredResult, delete_expired, record_attempt

log = logging.getLogger(__name__)

#: How often a task worker deletes expired results.
CLEANUP_INTERVAL_SECONDS = 3600.0


def task_queues() -> list[str]:
    """The queues of every ``ObjectStoreBackend`` in ``TASKS``, in order. No I/O."""
    names: dict[str, None] = {}
    for alias in task_backends.settings:
        backend = task_backends[alias]
        if isinstance(backend, ObjectStoreBackend):
            names.update(dict.fromkeys(sorted(backend.queues)))
    return list(names)


def task_stores() -> list[ObjectStore]:
    """The result stores of every ``ObjectStoreBackend`` in ``TASKS``, one per store."""
    stores: dict[int, ObjectStore] = {}
    for alias in task_backends.settings:
        backend = task_backends[alias]
        if isinstance(backend, ObjectStoreBackend):
            store = backend.link.store()
            stores.setdefault(id(store), store)
    return list(stores.values())


def _error(exc: BaseException) -> StoredError:
    kind = type(exc)
    return StoredError(exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
                       traceback="".join(format_exception(exc)))


def _time(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


class TaskRunner:
    """The Worker handler for task jobs (use it with ``Worker(pass_job=True)``).

    ``client`` is the worker's queue client: each job's claims are read from
    the document with one ``get_job`` (for ``worker_ids`` and the context's
    ``attempt``). ``worker_id`` is the id the worker claims with.
    """

    def __init__(self, client: QueueClient, *, worker_id: str, clock: Callable[[], datetime] = timezone.now) -> None:
        self.client = client
        self.worker_id = worker_id
        self.clock = clock

    def __call__(self, job: ClaimedJob) -> None:
        view = describe(job.payload)
        if view is None:
            raise PermanentFailure(
                f"job {job.id} in queue {job.queue!r} is not a task job (its payload has no {MARKER!r} marker "
                "or a malformed field): this worker runs only Django tasks"
            )
        try:
            task = load_task(view)
        except Exception as exc:  # not a Task, not importable, unknown backend, refused by it
            self._refuse(job, view, exc)
            raise PermanentFailure(f"task job {job.id}: {type(exc).__name__}: {exc}") from exc
        backend = task.get_backend()
        if not isinstance(backend, ObjectStoreBackend):
            raise PermanentFailure(f"task job {job.id}: backend {view.backend!r} is not an ObjectStoreBackend")

        worker_ids, enqueued_at, started_at = self._claims(job)
        now = self.clock()
        result = TaskResult(
            task=task, id=job.id, status=TaskResultStatus.RUNNING, enqueued_at=enqueued_at,
            started_at=started_at or now, finished_at=None, last_attempted_at=now,
            args=view.args, kwargs=view.kwargs, backend=view.backend, errors=[], worker_ids=worker_ids,
        )
        task_started.send(type(backend), task_result=result)
        try:
            if task.takes_context:
                value = task.call(TaskContext(task_result=result), *view.args, **view.kwargs)
            else:
                value = task.call(*view.args, **view.kwargs)
            value = normalize_json(value)  # a return JSON cannot hold fails the attempt, as in Django's backends
        except BaseException as exc:  # SystemExit too; the Worker fails the attempt with it
            stored = self._record(backend, job, view, result, outcome="FAILED", error=_error(exc))
            self._finish(backend, result, stored, TaskResultStatus.FAILED)
            raise
        stored = self._record(backend, job, view, result, outcome="SUCCESSFUL", value=value)
        object.__setattr__(result, "_return_value", value)
        self._finish(backend, result, stored, TaskResultStatus.SUCCESSFUL)

    def _claims(self, job: ClaimedJob) -> tuple[list[str], datetime | None, datetime | None]:
        """The job's claims as the document shows them (this one last), its
        enqueue time and its first claim's time."""
        try:
            doc = self.client.get_job(job.id)
        except EngineError as exc:
            log.warning("task job %s: cannot read its claims (%s); worker_ids shows this attempt only", job.id, exc)
            return [self.worker_id], None, None
        claims = [*doc.get("history", []), *([doc["lease"]] if doc.get("lease") else [])]
        started = [t for t in (_time(c.get("claimed_at")) for c in claims) if t is not None]
        return [str(c["worker"]) for c in claims], _time(doc.get("enqueued_at")), min(started, default=None)

    def _record(
        self, backend: ObjectStoreBackend, job: ClaimedJob, view: TaskView, result: TaskResult[..., Any], *,
        outcome: Outcome, value: Any = None, error: StoredError | None = None,
    ) -> StoredResult:
        return record_attempt(
            backend.link.store(), job_id=job.id, task=view, outcome=outcome,
            return_value=value, error=error, worker_ids=result.worker_ids, enqueued_at=result.enqueued_at,
            started_at=result.started_at, last_attempted_at=result.last_attempted_at, finished_at=self.clock(),
            ttl_seconds=backend.result_ttl_seconds,
        )

    @staticmethod
    def _finish(backend: ObjectStoreBackend, result: TaskResult[..., Any], stored: StoredResult,
                status: TaskResultStatus) -> None:
        object.__setattr__(result, "status", status)
        object.__setattr__(result, "finished_at", stored.finished_at)
        result.errors[:] = [TaskError(exception_class_path=e.exception_class_path, traceback=e.traceback)
                            for e in stored.errors]
        task_finished.send(type(backend), task_result=result)

    def _refuse(self, job: ClaimedJob, view: TaskView, exc: Exception) -> None:
        """Store the refusal as the job's result, so it shows why it never ran."""
        backend = task_backends[view.backend] if view.backend in task_backends.settings else None
        if isinstance(backend, ObjectStoreBackend):
            store, ttl = backend.link.store(), backend.result_ttl_seconds
        else:
            store, ttl = default_results_store(), DEFAULT_RESULT_TTL_SECONDS
        now = self.clock()
        try:
            record_attempt(store, job_id=job.id, task=view, outcome="FAILED", error=_error(exc),
                           worker_ids=[self.worker_id], enqueued_at=None, started_at=now, last_attempted_at=now,
                           finished_at=now, ttl_seconds=ttl)
        except EngineError as write_error:
            log.warning("task job %s: could not store why it was refused: %s", job.id, write_error)


class ResultCleaner:
    """Deletes expired results from ``stores`` at start and then every
    ``interval`` seconds, on a daemon thread. ``stop()`` is idempotent."""

    def __init__(self, stores: Iterable[ObjectStore], *, interval: float = CLEANUP_INTERVAL_SECONDS,
                 clock: Callable[[], datetime] = timezone.now) -> None:
        self.stores = list(stores)
        self.interval = interval
        self.clock = clock
        self.deleted = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> int:
        deleted = 0
        for store in self.stores:
            try:
                deleted += delete_expired(store, now=self.clock())
            except EngineError as exc:  # try again next time
                log.warning("deleting expired task results in %s failed: %s", store.describe(), exc)
        self.deleted += deleted
        if deleted:
            log.info("deleted %d expired task result(s)", deleted)
        return deleted

    def start(self) -> ResultCleaner:
        def loop() -> None:
            while not self._stop.is_set():
                self.run_once()
                self._stop.wait(self.interval)

        self._thread = threading.Thread(target=loop, name="task-result-cleaner", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
