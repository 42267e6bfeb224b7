"""``manage.py queueworker``: run a worker against the broker until stopped.

With ``--handler`` it calls that function with each job's payload; without
one it runs Django tasks (:mod:`queueadmin.tasks.worker`), from the queues of
the ``ObjectStoreBackend`` backends in ``TASKS`` unless ``--queue`` is given,
and deletes expired task results now and then.

SIGTERM or SIGINT stops claiming and gives running jobs ``--grace-seconds``
to finish; a second signal exits at once (running jobs are then left to
expire, and the broker hands them out again). A worker with no job running
exits at once, without waiting out its long poll (see ``engine.worker``).
``--reload`` restarts it when the code changes (:mod:`queueadmin.management.reloading`).
One line per job outcome goes
to stderr. Finished jobs are acknowledged in batches (``POST /api/v1/ack``,
each carrying the next claim, on the same commit) and leases heartbeated
together, unless ``--no-batch`` asks for one request each.
"""

from __future__ import annotations

import importlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper

from engine import (
    DEFAULT_GRACE_SECONDS,
    DEFAULT_WAIT_SECONDS,
    EngineError,
    ValidationError,
    Worker,
    WorkerOptions,
    new_worker_id,
)
from queueadmin import config
from queueadmin.dbcycle import each_job_like_a_request
from queueadmin.management import broker_client, reloading
from queueadmin.tasks.worker import ResultCleaner, TaskRunner, task_queues, task_stores

LOGGERS = ("engine.worker", "engine.http_client", "queueadmin.tasks")


def import_handler(path: str) -> Callable[[Any], Any]:
    """Import ``"package.module:function"`` (the function may be a dotted
    attribute path). Raises CommandError saying what is wrong."""
    module_name, colon, attribute = path.partition(":")
    if not colon or not module_name or not attribute:
        raise CommandError(f"--handler must look like package.module:function, got {path!r}")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise CommandError(f"cannot import handler module {module_name!r}: {exc}") from exc
    except Exception as exc:  # the module itself failed while importing
        raise CommandError(f"importing handler module {module_name!r} failed: {type(exc).__name__}: {exc}") from exc
    for name in attribute.split("."):
        try:
            target = getattr(target, name)
        except AttributeError:
            raise CommandError(f"handler {path!r}: {module_name!r} has no attribute {attribute!r}") from None
    if not callable(target):
        raise CommandError(f"handler {path!r} is not callable (it is a {type(target).__name__})")
    return target  # type: ignore[no-any-return]


class _StderrHandler(logging.Handler):
    """Sends log records to the command's stderr (so call_command can capture them)."""

    def __init__(self, stream: OutputWrapper) -> None:
        super().__init__(logging.INFO)
        self.stream = stream
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.stream.write(self.format(record))
        except Exception:
            self.handleError(record)


class Command(BaseCommand):
    help = (
        "Run a worker: claim jobs of the given queues from the broker, call the handler with each job's "
        "payload (or, with no --handler, run Django tasks), heartbeat running jobs, and complete or fail "
        "them. SIGTERM/SIGINT stop it gracefully."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--queue", action="append", dest="queues", metavar="QUEUE",
                            help="a queue to take jobs from (repeat for several; earlier jobs first across them, "
                                 "or with --in-order the first queue's first); "
                                 "required with --handler, else default: the QUEUES of the tasks backends in TASKS")
        parser.add_argument("--handler", metavar="MODULE:FUNCTION",
                            help="the function called with each job's payload, e.g. queueadmin.demo:work; a "
                                 "return completes the job, an exception fails it. Without it, the worker runs "
                                 "Django tasks (@task functions enqueued through queueadmin.tasks)")
        parser.add_argument("--concurrency", type=int, default=1, help="jobs run at once, one thread each (1)")
        parser.add_argument("--broker", action="append", dest="brokers", metavar="URL",
                            help="a broker node's URL (repeatable); default: the leader named by the document "
                                 "at QUEUE_STORE_URL, which is also where it looks when no node given answers")
        parser.add_argument("--burst", action="store_true",
                            help="exit once nothing can be claimed and no job is running")
        parser.add_argument("--token", help="the broker API token (default: QUEUE_API_TOKEN)")
        parser.add_argument("--lease-seconds", type=float, default=None,
                            help="lease length per claim; heartbeats renew it every third (QUEUE_LEASE_SECONDS)")
        parser.add_argument("--grace-seconds", type=float, default=DEFAULT_GRACE_SECONDS,
                            help=f"on SIGTERM/SIGINT, how long running jobs may finish ({DEFAULT_GRACE_SECONDS:g})")
        parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                            help="fail a job whose handler runs longer than this: it is cancelled (a handler that "
                                 "calls engine.check_cancelled() stops), its lease is no longer renewed, and the "
                                 "attempt fails with a JobTimeout error (default: no limit)")
        parser.add_argument("--max-jobs", type=int, default=None, metavar="N",
                            help="claim at most N jobs (each attempt counts), let them end, then exit 0, for a "
                                 "supervisor to start a fresh process (default: no limit)")
        parser.add_argument("--in-order", action="store_true",
                            help="the --queue options, in the order given, are priorities: a job of a queue is "
                                 "claimed only when no queue before it has one that may run now, as with an RQ "
                                 "worker's queues (default: the earliest jobs first across all of them)")
        parser.add_argument("--no-lease-watch", dest="lease_watch", action="store_false",
                            help="find a lost lease (a running job an operator purged or requeued, or whose lease "
                                 "ran out) at the next heartbeat only, instead of as soon as it is lost through a "
                                 "long-poll lease watch (default: watch)")
        parser.add_argument("--reload", action="store_true",
                            help="for development: restart when the code changes (Django's autoreloader), after "
                                 "letting running jobs finish within --grace-seconds; SIGTERM and Ctrl-C then end "
                                 "at once, and jobs still running run again when their leases run out")
        parser.add_argument("--wait-seconds", type=float, default=DEFAULT_WAIT_SECONDS,
                            help=f"long-poll time of one claim, 0-30 ({DEFAULT_WAIT_SECONDS:g})")
        parser.add_argument("--worker-id", help="the name leases show (default: host:pid:nonce)")
        parser.add_argument("--no-batch", action="store_false", dest="batch",
                            help="one request per acknowledgement and per heartbeat (the single-job calls "
                                 "POST /api/v1/jobs/<id>/complete, /fail and /heartbeat) instead of batching "
                                 "finished jobs into POST /api/v1/ack and all leases into POST /api/v1/heartbeat; "
                                 "for brokers older than these calls")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["reload"]:
            if options["burst"]:
                raise CommandError("--reload runs until stopped; it cannot be combined with --burst")
            reloading.run(lambda attach: self._serve(options, attach), grace_seconds=options["grace_seconds"],
                          stderr=self.stderr.write)
            return
        self._serve(options)

    def _serve(self, options: dict[str, Any], attach: Callable[[Worker], None] | None = None) -> None:
        """Build the worker ``options`` describe and run it until it stops;
        ``attach`` is called with it first (``--reload`` stops it on a change)."""
        tasks = options["handler"] is None  # no handler: run Django tasks
        queues = options["queues"] or (task_queues() if tasks else None)
        if not queues:
            raise CommandError("--queue is required with --handler" if not tasks else
                               "no queues: pass --queue, or give a queueadmin.tasks backend in TASKS its QUEUES")
        handler = None if tasks else import_handler(options["handler"])
        if options["concurrency"] < 1:
            raise CommandError("--concurrency must be at least 1")
        client = broker_client(brokers=options["brokers"], token=options["token"])
        worker_id = options["worker_id"] or new_worker_id()
        if handler is None:
            handler = TaskRunner(client, worker_id=worker_id)
        try:
            lease = options["lease_seconds"]
            worker = Worker(
                client,
                queues=queues,
                handler=each_job_like_a_request(handler),
                pass_job=tasks,
                worker_id=worker_id,
                options=WorkerOptions(
                    concurrency=options["concurrency"],
                    lease_seconds=lease if lease is not None else config.lease_seconds(),
                    wait_seconds=options["wait_seconds"],
                    burst=options["burst"],
                    grace_seconds=options["grace_seconds"],
                    batch=options["batch"],
                    timeout_seconds=options["timeout"],
                    max_jobs=options["max_jobs"],
                    in_order=options["in_order"],
                    watch_leases=options["lease_watch"],
                ),
            )
        except (ValueError, ValidationError) as exc:
            client.close()
            raise CommandError(str(exc)) from exc
        if attach is not None:
            attach(worker)
        with client, self._logging(), self._signals(worker):
            cleaner = ResultCleaner(task_stores()).start() if tasks else None
            try:
                worker.run()
            except EngineError as exc:  # claims refused for good (Unauthorized, ValidationError)
                raise CommandError(f"worker stopped: {exc}") from exc
            finally:
                if cleaner is not None:
                    cleaner.stop()

    @contextmanager
    def _logging(self) -> Iterator[None]:
        handler = _StderrHandler(self.stderr)
        loggers = [logging.getLogger(name) for name in LOGGERS]
        levels = [logger.level for logger in loggers]
        for logger in loggers:
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.removeHandler(handler)
                logger.setLevel(level)

    @contextmanager
    def _signals(self, worker: Worker) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # signal handlers can only be set from the main thread
            return
        received: list[int] = []

        def on_signal(signum: int, frame: FrameType | None) -> None:
            received.append(signum)
            if len(received) == 1:
                # Runs between bytecodes of the main thread: only set flags here.
                worker.stop()
                self.stderr.write(f"{signal.Signals(signum).name}: no more claims; running jobs have "
                                  f"{worker.grace_seconds:g}s to finish (signal again to exit now)")
            else:
                worker.stop(grace_seconds=0)

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
