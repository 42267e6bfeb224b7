"""``queueworker --reload``: restart the worker when its code changes, for
development, with Django's autoreloader (the one ``runserver`` uses).

The command's process becomes a parent that restarts a child whenever the
child exits with code 3. In the child, the process's main thread watches the
files of every imported module, and the worker runs on another thread.

* **A code change** stops the worker gracefully before the restart: no
  more claims, and running jobs get ``--grace-seconds`` to finish and be
  acknowledged. Then the child exits with 3 and a new child starts with
  the new code. (A bare restart would abandon them, and they would run
  again once their leases ran out.)
* **A worker that ends by itself** (``--max-jobs``, claims refused for good,
  a bad handler) ends the process with its exit code, as without
  ``--reload``.
* **SIGTERM or Ctrl-C** end the process at once, as under ``runserver``:
  jobs still running then run again once their leases run out. That is
  why this is for development only.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandError
from django.utils import autoreload

from engine import Worker

log = logging.getLogger(__name__)

#: Serves one worker until it stops, calling its argument with the worker once built.
Serve = Callable[[Callable[[Worker], None]], None]


def run(serve: Serve, *, grace_seconds: float, stderr: Callable[[str], Any]) -> None:
    """Run ``serve`` under the autoreloader. Returns only in the parent, once
    a child ended other than to be restarted (never in a child: it exits)."""
    autoreload.run_with_reloader(_child, serve, grace_seconds, stderr)


class _Child:
    """The child's worker and whether a code change is stopping it."""

    def __init__(self, grace_seconds: float, stderr: Callable[[str], Any]) -> None:
        self.grace_seconds = grace_seconds
        self.stderr = stderr
        self.worker: Worker | None = None
        self.reloading = False
        self.done = threading.Event()

    def attach(self, worker: Worker) -> None:
        self.worker = worker

    def on_change(self, sender: Any, file_path: Any, **kwargs: Any) -> None:
        """A watched file changed (on the main thread, before the restart):
        stop the worker gracefully and wait for it. Returns None, so that the
        reloader restarts the process."""
        self.reloading = True
        if self.worker is None:
            return
        self.stderr(f"{file_path} changed: no more claims; running jobs have {self.grace_seconds:g}s to finish, "
                    "then the worker restarts")
        self.worker.stop()
        # run() returns by the end of the grace period; the slack covers its last acknowledgements.
        self.done.wait(self.grace_seconds + 30)


def _child(serve: Serve, grace_seconds: float, stderr: Callable[[str], Any]) -> None:
    """The worker's thread in a child process."""
    child = _Child(grace_seconds, stderr)
    autoreload.file_changed.connect(child.on_change, weak=False)
    # Django logs this only under DEBUG; say it always, as runserver does.
    autoreload.autoreload_started.connect(
        lambda sender, **kwargs: stderr(f"watching for code changes ({type(sender).__name__})"), weak=False)
    code = 0
    try:
        serve(child.attach)
    except CommandError as exc:
        stderr(f"CommandError: {exc}")
        code = 1
    except BaseException:
        log.exception("the worker failed")
        code = 1
    finally:
        child.done.set()
    if not child.reloading:
        # The worker ended by itself: so does the process, with its code (the
        # main thread is the file watcher, which would run on for ever).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
