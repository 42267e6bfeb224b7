"""Each job's database connections are handled like a request's
(queueadmin.dbcycle), in the handler's own thread, as a worker runs it.
The real worker against a PostgreSQL server that ends its connection is in
tests/e2e/test_postgres.py."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, reset_queries
from django.db.backends.base.base import BaseDatabaseWrapper
from django.test.utils import CaptureQueriesContext

from queueadmin.dbcycle import each_job_like_a_request

pytestmark = pytest.mark.django_db(transaction=True)


def in_a_thread(call: Callable[[], Any]) -> Any:
    """``call()`` in a new thread, as a worker's handler thread runs a job;
    its result, or its exception raised here."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = call()
        except BaseException as exc:
            out["error"] = exc
        finally:
            connection.close()  # the thread's own; the test's is untouched

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    if "error" in out:
        raise out["error"]
    return out["value"]


def query(job: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s", [job])
        (value,) = cursor.fetchone()
    return int(value)


def jobs(handler: Callable[[int], int], *job_ids: int, wrap: bool = True) -> list[str]:
    """Run ``handler`` for each job id in this thread, as a worker's handler
    thread does (through :func:`each_job_like_a_request` unless ``wrap`` is
    false); return when the thread's connection was closed: "before N"
    (before job N started), "during N" (while it ran) or "after N" (once it
    returned). A close really closes here: the test database is SQLite in
    memory, whose wrapper otherwise ignores a close."""
    closes: list[str] = []
    phase = [""]

    def close() -> None:
        closes.append(phase[0])
        BaseDatabaseWrapper.close(connection)

    def observed(job: int) -> int:
        phase[0] = f"during {job}"
        value = handler(job)
        phase[0] = f"after {job}"
        return value

    run = each_job_like_a_request(observed) if wrap else observed
    connection.close = close  # type: ignore[method-assign]
    try:
        for job in job_ids:
            phase[0] = f"before {job}"
            assert run(job) == job
    finally:
        del connection.close
    return closes


def test_a_job_s_connection_is_closed_when_it_ends_with_conn_max_age_zero() -> None:
    assert in_a_thread(lambda: jobs(query, 1, 2)) == ["after 1", "after 2"]
    # Unwrapped, a worker thread's connection was never closed.
    assert in_a_thread(lambda: jobs(query, 1, 2, wrap=False)) == []


def test_a_persistent_connection_that_broke_is_closed_before_the_next_job() -> None:
    """With CONN_MAX_AGE > 0 a connection outlives its job, and the next job
    of the thread gets it again; one that failed and is no longer usable
    must be closed first, and a healthy one kept."""

    def persistent(job: int) -> int:
        value = query(job)
        connection.close_at = None  # as with CONN_MAX_AGE = None
        broken = job == 1  # the server ended it, and the job's last query failed
        connection.errors_occurred = broken
        connection.is_usable = lambda: not broken  # type: ignore[method-assign]
        return value

    assert in_a_thread(lambda: jobs(persistent, 1, 2)) == ["after 1"]
    assert in_a_thread(lambda: jobs(persistent, 2, 3)) == []
    assert in_a_thread(lambda: jobs(persistent, 1, 2, wrap=False)) == []


def test_a_handler_s_result_and_exception_come_through_unchanged() -> None:
    class Boom(Exception):
        pass

    def fail(job: int) -> None:
        raise Boom(job)

    assert in_a_thread(lambda: each_job_like_a_request(lambda job: job * 2)(21)) == 42
    with pytest.raises(Boom):
        in_a_thread(lambda: each_job_like_a_request(fail)(1))


def test_the_debug_query_log_starts_empty_for_each_job(settings: Any) -> None:
    settings.DEBUG = True
    handler = each_job_like_a_request(lambda job: len(connection.queries_log))

    def after_queries() -> int:
        with CaptureQueriesContext(connection):
            query(1)
        connection.queries_log.append({"sql": "left by an earlier job", "time": "0"})
        return int(handler(1))

    reset_queries()
    assert in_a_thread(after_queries) == 0
