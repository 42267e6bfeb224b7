"""``manage.py enqueue QUEUE PAYLOAD``: push one job through the broker and print its id."""

from __future__ import annotations

from typing import Any

import orjson
from django.core.management.base import BaseCommand, CommandError, CommandParser

from engine import DEFAULT_MAX_ATTEMPTS, EngineError
from queueadmin.management import broker_client


class Command(BaseCommand):
    help = "Push one job with a JSON payload to a queue through the broker; print the new job's id."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queue", help="the queue's name")
        parser.add_argument("payload", help='the job\'s payload as JSON, e.g. \'{"to": "ada@example.com"}\'')
        parser.add_argument("--max-attempts", type=int, default=None,
                            help=f"attempts before the job goes to the dead letters ({DEFAULT_MAX_ATTEMPTS})")
        parser.add_argument("--delay", type=float, default=0.0, metavar="SECONDS",
                            help="not claimable before this many seconds from now (0)")
        parser.add_argument("--broker", action="append", dest="brokers", metavar="URL",
                            help="a broker node's URL (repeatable); default: the leader named by the document "
                                 "at QUEUE_STORE_URL")
        parser.add_argument("--id", dest="job_id", metavar="ID",
                            help="the job's id (1-200 letters, digits, _ . : -), so that running the command again "
                                 "(a retried cron job or deploy step) pushes nothing while that job is in the queue "
                                 "or left it less than 15 minutes ago; default: a new id")
        parser.add_argument("--token", help="the broker API token (default: QUEUE_API_TOKEN)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            # orjson is strict: NaN, Infinity and trailing garbage are refused.
            payload = orjson.loads(options["payload"])
        except orjson.JSONDecodeError as exc:
            raise CommandError(f"the payload is not valid JSON: {exc}") from exc
        with broker_client(brokers=options["brokers"], token=options["token"]) as client:
            try:
                [job_id] = client.push(
                    options["queue"], [payload], max_attempts=options["max_attempts"], delay_seconds=options["delay"],
                    ids=None if options["job_id"] is None else [options["job_id"]],
                )
            except EngineError as exc:
                raise CommandError(f"{type(exc).__name__}: {exc}") from exc
        self.stdout.write(job_id)
