"""Each job's database connections, handled the way Django handles a request's.

Django never reconnects by itself. In a web process it closes a thread's
connections at the start and the end of each request that are broken or past
``CONN_MAX_AGE`` (``close_old_connections`` on ``request_started`` and
``request_finished``), and resets the ``DEBUG`` query log. A worker has no
requests: without this, each handler thread kept one connection for the
worker's whole life, and once the server ended it (a restart, a failover, an
idle timeout) every later job of that thread failed with the same
``OperationalError`` until the worker was restarted.

:func:`each_job_like_a_request` wraps a handler so that each job gets the
request's treatment, in the thread that runs it: with ``CONN_MAX_AGE = 0``
(Django's default and this app's) a job's connection is closed when it ends;
with persistent connections, one that failed or aged out is replaced before
the next job, and ``CONN_HEALTH_CHECKS`` is honoured as for a request.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.db import close_old_connections, reset_queries


def each_job_like_a_request[T, R](handler: Callable[[T], R]) -> Callable[[T], R]:
    """``handler`` with its thread's connections checked before each call and
    after it, whatever it returns or raises. The wrapper adds no other
    behaviour: the same value comes back, the same exception propagates."""

    @functools.wraps(handler)
    def run(job: T) -> R:
        reset_queries()
        close_old_connections()
        try:
            return handler(job)
        finally:
            close_old_connections()

    return run
