"""``manage.py queuecheck``: whether the store at QUEUE_STORE_URL can hold the queue.

It reaches the store with this machine's credentials and checks that it
honours conditional writes (``engine.storecheck``), on one probe object of
its own beside the document, which it deletes. It never reads or writes the
document. Every node runs the same check as it starts, and never writes on a
store that fails it; run this before deploying to a new store, or from a
machine whose credentials you want to try. Exits non-zero with the reason
when the store cannot be used.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from engine import DOCUMENT_KEY, EngineError, StoreUnavailable, check_conditions
from queueadmin.management import open_document_store


class Command(BaseCommand):
    help = ("Check that QUEUE_STORE_URL's store is reachable and honours conditional writes (If-Match, "
            "If-None-Match: *), on a probe object it deletes; the queue document is not touched.")

    def handle(self, *args: Any, **options: Any) -> None:
        store, _ = open_document_store()
        described = store.describe()
        began = time.monotonic()
        try:
            check_conditions(store, DOCUMENT_KEY)
        except StoreUnavailable as exc:
            raise CommandError(f"{exc} (the store did not answer; nothing was decided: try again)") from exc
        except EngineError as exc:
            raise CommandError(str(exc)) from exc
        finally:
            store.close()
        self.stdout.write(f"store     {described}: reachable, and it refuses a second create "
                          "(If-None-Match: *) and a stale If-Match, as the queue needs")
        self.stdout.write(f"checked   in {(time.monotonic() - began) * 1000:.0f} ms (nine requests), on a probe "
                          f"object it deleted; {DOCUMENT_KEY} was not touched")
