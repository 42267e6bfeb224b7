"""``manage.py queuetoken``: make, list and revoke the broker API tokens kept
in the database (:class:`~queueadmin.models.ApiToken`), as Django admin
does, for deployments that script their set-up.

* ``queuetoken create NAME [--queues PATTERN ...] [--push-only | --work-only]``
  prints the new token, once (only its digest is stored);
* ``queuetoken list`` prints every token's name, hint, scope and state;
* ``queuetoken revoke NAME`` revokes one: every node refuses it within
  seconds (``queueadmin.api.auth.TOKEN_CACHE_SECONDS``).

What a narrowed token may do: :mod:`queueadmin.api.grants`.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from queueadmin.models import ApiToken


class Command(BaseCommand):
    help = "Make, list or revoke broker API tokens (the ones Django admin manages)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="{create,list,revoke}")
        create = actions.add_parser("create", help="make a token and print it (it is not shown again)")
        create.add_argument("name", help="who uses it, e.g. 'billing workers' (unique)")
        create.add_argument("--queues", nargs="+", default=[], metavar="PATTERN",
                            help="only these queues, as shell-style patterns (billing 'billing-*'); "
                                 "default: every queue")
        calls = create.add_mutually_exclusive_group()
        calls.add_argument("--push-only", action="store_true", help="it may push jobs, and not claim or ack them")
        calls.add_argument("--work-only", action="store_true",
                           help="it may claim, heartbeat, complete and fail jobs, and not push them")
        actions.add_parser("list", help="every token: name, hint, scope, state")
        revoke = actions.add_parser("revoke", help="revoke a token: every node refuses it within seconds")
        revoke.add_argument("name")

    def handle(self, *args: Any, **options: Any) -> None:
        {"create": self._create, "list": self._list, "revoke": self._revoke}[options["action"]](options)

    def _create(self, options: dict[str, Any]) -> None:
        row = ApiToken(name=options["name"], queues=" ".join(options["queues"]),
                       may_push=not options["work_only"], may_work=not options["push_only"])
        token = row.issue()
        try:
            row.full_clean()
        except ValidationError as exc:
            problems = "; ".join(f"{field}: {' '.join(errors)}" for field, errors in exc.message_dict.items())
            raise CommandError(f"no token made: {problems}") from None
        row.save()
        self.stderr.write(f"made the API token {row.name!r} ({row.scope}); it is printed once, below, and cannot "
                          "be read back")
        self.stdout.write(token)

    def _list(self, options: dict[str, Any]) -> None:
        for row in ApiToken.objects.all():
            state = f"revoked {row.revoked_at:%Y-%m-%d %H:%M}" if row.revoked_at else "active"
            self.stdout.write(f"{row.name}\t{row.hint}…\t{row.scope}\t{state}")

    def _revoke(self, options: dict[str, Any]) -> None:
        count = ApiToken.objects.filter(name=options["name"]).revoke()
        if not count:
            known = ApiToken.objects.filter(name=options["name"]).exists()
            raise CommandError(f"the token {options['name']!r} is already revoked" if known else
                               f"no API token is named {options['name']!r} (queuetoken list shows them)")
        self.stdout.write(f"revoked {options['name']!r}: every node refuses it within a few seconds")
