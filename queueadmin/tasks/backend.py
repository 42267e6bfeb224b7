"""``ObjectStoreBackend``: Django Tasks on this queue.

Each ``enqueue`` pushes one job (payload: :mod:`queueadmin.tasks.payload`)
to the engine queue named like the task's ``queue_name``; the job id is the
result id. ``manage.py queueworker`` (with no ``--handler``) runs them.
``get_result`` combines the job as the document shows it with its result
object (:mod:`queueadmin.tasks.results`):

============================  ==========================================
job in the document           status
============================  ==========================================
pending                       READY (also while a failed attempt waits to retry)
running                       RUNNING
dead                          FAILED
gone, result object present   the object's: SUCCESSFUL or FAILED
gone, no result object        TaskResultDoesNotExist (unknown, purged, or expired)
============================  ==========================================

``attempts`` and ``worker_ids`` follow the job's claims: the workers of its
finished attempts (the document keeps the last 10) and of the running one.

Not supported: priority (the engine's queues are strictly FIFO, I7), so
``supports_priority`` is False and a task with a priority is refused.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, transaction
from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskError
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone
from django.utils.module_loading import import_string

from engine import DOCUMENT_KEY, MAX_DELAY_SECONDS, STOPPED_ERROR, EngineError, JobNotFound, ValidationError
from engine.ops import ID_PATTERN, check_queue, push_op
from queueadmin import config
from queueadmin.config import DEFAULT_RESULT_TTL_SECONDS
from queueadmin.tasks.connection import BrokerLink
from queueadmin.tasks.payload import TaskView, describe, task_payload
from queueadmin.tasks.results import StoredResult, load_result

OPTION_NAMES = frozenset({"BROKERS", "TOKEN", "STORE_URL", "RESULT_TTL_SECONDS", "MAX_ATTEMPTS", "ENQUEUE_ON_COMMIT"})


class LeaseExpired(Exception):
    """An attempt's lease ran out (its worker stopped heartbeating) and no
    error was reported; it stands for such an attempt in ``TaskResult.errors``."""


class JobStopped(Exception):
    """An operator stopped the task while it ran (the dashboard's Stop,
    ``engine.ops.stop_op``): it stands for that in ``TaskResult.errors``."""


class ObjectStoreBackend(BaseTaskBackend):
    """Runs Django Tasks on this queue. ``OPTIONS`` (all optional):

    * ``BROKERS``: broker node URLs for HTTP (default: the leader that the
      document at the store names);
    * ``TOKEN``: the broker API token (default ``QUEUE_API_TOKEN``);
    * ``STORE_URL``: the queue's store, also where results live (default
      ``QUEUE_STORE_URL``);
    * ``RESULT_TTL_SECONDS``: how long a finished task's result is kept
      (default 7 days);
    * ``MAX_ATTEMPTS``: attempts before a failing task is FAILED for good
      (default: the engine's, 3);
    * ``ENQUEUE_ON_COMMIT``: ``True`` (the ``default`` database) or a
      database alias: a task enqueued inside a transaction on that database
      is pushed only once it commits, and never if it rolls back (default
      ``False``: pushed at once, as Django's own backends do).

    ``__init__`` does no I/O (Django builds backends at import time, once per
    thread); the store and the HTTP client are made on first use, and
    :meth:`check` reports misconfiguration.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = False

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.problems: list[str] = []  # reported by check(), raised on use
        # Whatever settings.TASKS holds: the stubs type it as a dict, the settings need not be one.
        raw_options: object = self.options
        options = raw_options if isinstance(raw_options, dict) else {}
        if not isinstance(raw_options, dict):
            self.problems.append(f"OPTIONS must be a dict, got {type(raw_options).__name__}")
        unknown = sorted(set(options) - OPTION_NAMES)
        if unknown:
            self.problems.append(f"unknown OPTIONS {', '.join(unknown)} (known: {', '.join(sorted(OPTION_NAMES))})")
        brokers = options.get("BROKERS", [])
        if isinstance(brokers, str) or not isinstance(brokers, list | tuple) or not all(
            isinstance(b, str) and b.startswith(("http://", "https://")) for b in brokers
        ):
            self.problems.append(f"OPTIONS['BROKERS'] must be a list of http(s) URLs, got {brokers!r}")
            brokers = []
        token, store_url = options.get("TOKEN"), options.get("STORE_URL")
        if token is not None and not (isinstance(token, str) and token):
            self.problems.append("OPTIONS['TOKEN'] must be a non-empty string")
            token = None
        if store_url is not None and not (isinstance(store_url, str) and "://" in store_url):
            self.problems.append(f"OPTIONS['STORE_URL'] must be a store URL (scheme://...), got {store_url!r}")
            store_url = None
        ttl = options.get("RESULT_TTL_SECONDS", DEFAULT_RESULT_TTL_SECONDS)
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not (math.isfinite(ttl) and ttl > 0):
            self.problems.append(f"OPTIONS['RESULT_TTL_SECONDS'] must be a positive number, got {ttl!r}")
            ttl = DEFAULT_RESULT_TTL_SECONDS
        self.result_ttl_seconds = float(ttl)
        attempts = options.get("MAX_ATTEMPTS")
        if attempts is not None and (isinstance(attempts, bool) or not isinstance(attempts, int)
                                     or not 1 <= attempts <= 1000):
            self.problems.append(f"OPTIONS['MAX_ATTEMPTS'] must be a whole number from 1 to 1000, got {attempts!r}")
            attempts = None
        self.max_attempts: int | None = attempts
        on_commit = options.get("ENQUEUE_ON_COMMIT", False)
        self.enqueue_on_commit: str | None = None  # the database alias whose transactions hold pushes back
        if on_commit is True:
            self.enqueue_on_commit = DEFAULT_DB_ALIAS
        elif isinstance(on_commit, str) and on_commit in settings.DATABASES:
            self.enqueue_on_commit = on_commit
        elif on_commit is not False:
            self.problems.append(f"OPTIONS['ENQUEUE_ON_COMMIT'] must be True, False or a database alias "
                                 f"({', '.join(sorted(settings.DATABASES))}), got {on_commit!r}")
        if not self.queues:
            self.problems.append("QUEUES must name at least one queue (the worker takes jobs from them)")
        for name in sorted(self.queues):
            try:
                check_queue(name)
            except ValidationError as exc:
                self.problems.append(f"QUEUES: {exc}")
        self.link = BrokerLink(brokers=brokers, token=token, store_url=store_url)

    # -- checks ----------------------------------------------------------------

    # The stubs say list; Django's task checks only iterate it (`yield from backend.check()`).
    def check(self, **kwargs: Any) -> Iterator[checks.CheckMessage]:  # type: ignore[override]
        """System checks: OPTIONS and QUEUES (errors), then whether the store
        can be opened (error) and read (warning: it may be a passing outage),
        and whether a token is set for HTTP (warning: only a process whose
        embedded broker leads can enqueue without one). Reads the store once."""
        yield from super().check(**kwargs)
        where = f"TASKS[{self.alias!r}]"
        for problem in self.problems:
            yield checks.Error(f"{where}: {problem}", id="queueadmin.tasks.E001")
        try:
            store = self.link.store()
        except EngineError as exc:
            yield checks.Error(f"{where}: the store {self.link.store_url!r} cannot be opened: {exc}",
                               id="queueadmin.tasks.E002")
        else:
            try:
                store.etag(DOCUMENT_KEY)
            except Exception as exc:  # any failure to read counts as unreachable
                yield checks.Warning(
                    f"{where}: the store {store.describe()} is unreachable: {type(exc).__name__}: {exc}",
                    hint="Check QUEUE_STORE_URL (or OPTIONS['STORE_URL']) and the store's credentials.",
                    id="queueadmin.tasks.W001",
                )
        if not self.link.token:
            yield checks.Warning(
                f"{where}: no broker API token, so tasks can only be enqueued in a process whose embedded "
                "broker leads, and read only there",
                hint="Set QUEUE_API_TOKEN (or OPTIONS['TOKEN']).",
                id="queueadmin.tasks.W002",
            )

    def _usable(self) -> None:
        if self.problems:
            raise ImproperlyConfigured(f"TASKS[{self.alias!r}] is misconfigured: {'; '.join(self.problems)}")

    # -- enqueue ---------------------------------------------------------------

    def _push_op[**P, R](self, task: Task[P, R], args: Any, kwargs: Any) -> tuple[Any, TaskResult[P, R]]:
        self._usable()
        self.validate_task(task)
        payload = task_payload(task, args, kwargs, backend=self.alias)
        now = timezone.now()
        delay = 0.0
        if task.run_after is not None:
            delay = max(0.0, (task.run_after - now).total_seconds())
            if delay > MAX_DELAY_SECONDS:
                raise InvalidTask(f"run_after may be at most {MAX_DELAY_SECONDS / 86400:g} days away")
        op = push_op(task.queue_name, [payload], policy=config.policy(), max_attempts=self.max_attempts,
                     delay_seconds=delay)
        result = TaskResult(
            task=task,
            id=op.jobs[0].id,  # chosen before the push, so a retried push is not doubled
            status=TaskResultStatus.READY,
            enqueued_at=now,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=payload["args"],
            kwargs=payload["kwargs"],
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        return op, result

    def enqueue[**P, R](self, task: Task[P, R], args: Any, kwargs: Any) -> TaskResult[P, R]:
        """Push the task as a job; returns once the push is committed (I1).
        Raises InvalidTask, TypeError (arguments that are not JSON), the
        engine's errors (PayloadTooLarge, NotLeader, StoreUnavailable...) and
        ImproperlyConfigured (no token when HTTP is needed).

        With ``ENQUEUE_ON_COMMIT``, inside a transaction on its database, the
        task is checked and its id chosen now, and the push waits for the
        transaction: the READY result comes back at once, ``task_enqueued``
        is sent and the job exists only once the transaction has committed
        (``get_result`` raises TaskResultDoesNotExist until then), and a
        rollback (of the transaction, or of the savepoint around the call)
        drops the push. A push that fails at the commit raises from the
        end of the ``atomic`` block, after the transaction committed:
        Django's ``on_commit`` contract."""
        op, result = self._push_op(task, args, kwargs)
        using = self.enqueue_on_commit
        if using is not None and transaction.get_connection(using).in_atomic_block:
            transaction.on_commit(functools.partial(self._push, op, result), using=using)
        else:
            self._push(op, result)
        return result

    def _push(self, op: Any, result: TaskResult[..., Any]) -> None:
        self.link.execute(op)
        task_enqueued.send(type(self), task_result=result)

    async def aenqueue[**P, R](self, task: Task[P, R], args: Any, kwargs: Any) -> TaskResult[P, R]:
        """Like :meth:`enqueue`; awaits the embedded broker's commit, or sends
        over HTTP from a worker thread. Always pushed at once: Django has no
        transactions in async code (a sync function run with
        ``sync_to_async`` that calls ``enqueue`` gets ``ENQUEUE_ON_COMMIT``)."""
        op, result = self._push_op(task, args, kwargs)
        await self.link.aexecute(op)
        await task_enqueued.asend(type(self), task_result=result)
        return result

    # -- results ---------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult[..., Any]:
        """The task's result now. Reads the job (through the broker) and then
        its result object (in the store), in that order: see
        :mod:`queueadmin.tasks.results`. Raises TaskResultDoesNotExist for an
        unknown id, a job that is not a task, or a result past its retention."""
        self._usable()
        if not isinstance(result_id, str) or not ID_PATTERN.fullmatch(result_id):
            raise TaskResultDoesNotExist(result_id)
        try:
            job: dict[str, Any] | None = self.link.get_job(result_id)
        except JobNotFound:
            job = None
        stored = self._stored(result_id)
        return self._combine(result_id, job, stored)

    async def aget_result(self, result_id: str) -> TaskResult[..., Any]:
        self._usable()
        if not isinstance(result_id, str) or not ID_PATTERN.fullmatch(result_id):
            raise TaskResultDoesNotExist(result_id)
        try:
            job: dict[str, Any] | None = await self.link.aget_job(result_id)
        except JobNotFound:
            job = None
        stored = await sync_to_async(self._stored, thread_sensitive=False)(result_id)
        return self._combine(result_id, job, stored)

    def _stored(self, result_id: str) -> StoredResult | None:
        return load_result(self.link.store(), result_id, now=timezone.now())

    def _combine(self, result_id: str, job: dict[str, Any] | None, stored: StoredResult | None) -> TaskResult[..., Any]:
        view = describe(job["payload"]) if job is not None else stored.task if stored is not None else None
        if view is None:
            raise TaskResultDoesNotExist(result_id)
        task = load_task(view)
        errors = [TaskError(exception_class_path=e.exception_class_path, traceback=e.traceback)
                  for e in (stored.errors if stored is not None else ())]
        return_value = None
        if job is None:
            assert stored is not None
            status = TaskResultStatus(stored.status)
            return_value = stored.return_value if stored.status == "SUCCESSFUL" else None
            worker_ids = list(stored.worker_ids)
            enqueued_at, started_at = stored.enqueued_at, stored.started_at
            last_attempted_at, finished_at = stored.last_attempted_at, stored.finished_at
        else:
            claims = [*job.get("history", []), *([job["lease"]] if job.get("lease") else [])]
            worker_ids = [c["worker"] for c in claims]
            claimed = [_time(c["claimed_at"]) for c in claims]
            enqueued_at = _time(job["enqueued_at"])
            started_at = min(claimed, default=None)
            last_attempted_at = max(claimed, default=None)
            finished_at = None
            status = {"pending": TaskResultStatus.READY, "running": TaskResultStatus.RUNNING,
                      "dead": TaskResultStatus.FAILED}[job["status"]]
            if job["status"] == "dead":
                finished_at = _time(job["died_at"])
                history = job.get("history", [])
                if history and history[-1].get("end") == "expired":
                    # Its worker vanished: no error was reported for the last attempt.
                    errors.append(TaskError(exception_class_path=f"{__name__}.LeaseExpired",
                                            traceback=str(job.get("error", ""))))
                elif job.get("error") == STOPPED_ERROR:
                    # Its worker only saw its lease lost (JobCancelled, if it wrote the attempt): say who.
                    errors.append(TaskError(exception_class_path=f"{__name__}.JobStopped", traceback=STOPPED_ERROR))
        result = TaskResult(
            task=task,
            id=result_id,
            status=status,
            enqueued_at=enqueued_at,
            started_at=started_at,
            finished_at=finished_at,
            last_attempted_at=last_attempted_at,
            args=view.args,
            kwargs=view.kwargs,
            backend=view.backend,
            errors=errors,
            worker_ids=worker_ids,
        )
        object.__setattr__(result, "_return_value", return_value)
        return result


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value)


def load_task(view: TaskView) -> Task[..., Any]:
    """Import the task a payload names, with the payload's queue, backend and
    ``run_after``. Raises InvalidTask when the path names no Task (or cannot
    be imported, or its backend refuses it)."""
    try:
        task = import_string(view.task)
    except ImportError as exc:
        raise InvalidTask(f"{view.task!r} cannot be imported: {exc}") from exc
    if not isinstance(task, Task):
        raise InvalidTask(f"{view.task!r} is not a Task (it is a {type(task).__name__}): only @task functions run")
    return task.using(queue_name=view.queue_name, backend=view.backend, run_after=view.run_after)
