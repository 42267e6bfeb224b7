"""``manage.py queueinit``: create queue.json explicitly, or re-create it after it was lost (I10).

Nodes create the document by themselves only on a fresh store: one with no
``queue.json`` and no creation marker (``queue.json.created``). Once a store
had a document, a missing one is treated as lost: every node stops writing
and refuses with ``document_missing`` until an operator acts. This command is
that act:

* on a fresh store it creates an empty document (nodes would have, too);
* when the document existed it refuses, unless ``--force`` is given with a
  ``--reason``; then it creates an empty document whose seq and broker epoch
  start above anything the nodes recorded of the lost one, so neither ever
  goes back. Every job the lost document held is gone: restore it from a
  backup instead if you can;
* it never overwrites a document that exists.

Every attempt that reaches the store is written to the audit log (action
``init``), with who ran it and why. The nodes watch the store and resume by
themselves within a poll interval.
"""

from __future__ import annotations

import getpass
import socket
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from engine import DOCUMENT_KEY, EngineError, InitRefused, check_conditions, initialise, marker_key
from queueadmin import config
from queueadmin.management import open_document_store
from queueadmin.models import AuditEntry


class Command(BaseCommand):
    help = (
        "Create queue.json on a fresh store, or, with --force and --reason, re-create it empty after it was "
        "lost (every job it held is gone). Never overwrites a document that exists. Audited."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--force", action="store_true",
                            help="re-create the document although one existed and was lost (its jobs are gone)")
        parser.add_argument("--reason", default="", help="why; required with --force, kept in the audit log")
        parser.add_argument("--user", default="",
                            help="the Django user to record in the audit log (default: this OS user)")

    def handle(self, *args: Any, **options: Any) -> None:
        force: bool = options["force"]
        reason: str = options["reason"].strip()
        if force and not reason:
            raise CommandError("--force needs --reason: say why the lost document is being replaced")
        user, username = self._who(options["user"])
        writer = f"queueinit:{socket.gethostname()}:{username}"[:200]
        store, where = open_document_store()
        try:
            # Its refusals rest on the store's conditions, as a node's writes do (engine.storecheck).
            check_conditions(store, DOCUMENT_KEY)
            done = initialise(store, DOCUMENT_KEY, policy=config.policy(), writer=writer, force=force)
        except InitRefused as exc:
            self._audit(user, username, reason, force, ok=False, detail=f"refused: {exc}", seq=None)
            raise CommandError(f"{where}: {exc}") from exc
        except EngineError as exc:
            self._audit(user, username, reason, force, ok=False, detail=f"store error: {exc}", seq=None)
            raise CommandError(f"{where}: {exc}") from exc
        finally:
            store.close()
        if done.previous is None:
            detail = f"created {DOCUMENT_KEY} on a fresh store (seq {done.seq})"
        else:
            detail = (f"re-created {DOCUMENT_KEY} after it was lost: seq {done.seq}, broker epoch from {done.epoch}, "
                      f"lineage {done.previous.lineage} -> {done.lineage}; every job the lost document held is gone")
        self._audit(user, username, reason, force, ok=True, detail=detail, seq=done.seq)
        self.stdout.write(f"{where}: {detail}. Marker: {marker_key(DOCUMENT_KEY)}. "
                          "Nodes watching the store resume by themselves.")

    def _who(self, name: str) -> tuple[Any, str]:
        """The user to record: the named Django user, or this OS user by name."""
        if name:
            model = get_user_model()
            try:
                user = model._default_manager.get_by_natural_key(name)
            except model.DoesNotExist:
                raise CommandError(f"--user {name!r}: no such user") from None
            return user, user.get_username()
        try:
            os_user = getpass.getuser()
        except (KeyError, OSError):
            os_user = "unknown"
        return None, f"{os_user} (manage.py queueinit)"[:150]

    def _audit(self, user: Any, username: str, reason: str, force: bool, *, ok: bool, detail: str,
               seq: int | None) -> None:
        AuditEntry.objects.create(
            user=user,
            username=username,
            action=AuditEntry.Action.INIT,
            reason=reason or "(none given)",
            target=f"{DOCUMENT_KEY}{' --force' if force else ''}",
            count=0,
            outcome=AuditEntry.Outcome.OK if ok else AuditEntry.Outcome.FAILED,
            detail=detail,
            seq=seq,
        )
