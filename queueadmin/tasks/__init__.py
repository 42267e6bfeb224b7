"""Django Tasks on this queue: ``TASKS = {"default": {"BACKEND": "queueadmin.tasks.ObjectStoreBackend"}}``.

* :class:`ObjectStoreBackend` (:mod:`.backend`): ``enqueue`` pushes a job,
  ``get_result`` reads it back;
* :mod:`.payload`: the job payload of a task, and :func:`describe`;
* :mod:`.results`: one result object per task job under ``results/``, and
  :func:`read_result`;
* :mod:`.worker`: what ``manage.py queueworker`` runs with no ``--handler``.

For pages that show jobs (the dashboard), two calls need no import of the
task and no broker:

* ``describe(payload) -> TaskView | None``: a job's payload as a task (its
  ``task`` path, ``name``, ``args``, ``kwargs``), or None if it is not a task job;
* ``read_result(job_id) -> StoredResult | None``: the stored outcome
  (``status``, ``return_value``, ``errors`` with tracebacks), or None.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.utils import timezone

from queueadmin.tasks.backend import ObjectStoreBackend
from queueadmin.tasks.connection import default_results_store
from queueadmin.tasks.payload import TaskView, describe
from queueadmin.tasks.results import StoredError, StoredResult, load_result

if TYPE_CHECKING:
    from engine import ObjectStore

__all__ = ["ObjectStoreBackend", "StoredError", "StoredResult", "TaskView", "describe", "read_result"]


def read_result(job_id: str, *, store: ObjectStore | None = None) -> StoredResult | None:
    """The stored result of task job ``job_id``, or None when there is none
    (not run yet, not a task job, or expired), with no import of the task.

    ``store``: where results live (default: the store at ``QUEUE_STORE_URL``,
    this process's embedded broker's own when it runs). One read of one small
    object; raises the store's errors (StoreUnavailable...). While the job is
    still in the document its status there (pending, running, dead) is the
    current one; this is the outcome of the attempts that have finished.
    """
    return load_result(store or default_results_store(), job_id, now=timezone.now())
