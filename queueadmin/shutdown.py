"""Stop the embedded broker when the server stops.

A SIGTERM (a deploy, ``kill``, a container's stop) or Ctrl-C makes daphne
stop Twisted's reactor. Without this module nothing stopped the broker: the
process exited with the document still naming it, and the standbys waited
``QUEUE_TAKEOVER_SECONDS`` without commits before one took over. Stopped
here, a leader commits what it was given and hands the lead over
(:meth:`engine.Broker.stop`), and a standby takes over at its next poll.

The stop runs on a thread of the reactor's pool, from a "before shutdown"
trigger that returns its Deferred: the reactor (and the asyncio loop it runs
on) keeps answering requests while the last commits land, and daphne goes on
shutting down only once the broker has stopped. Each wait inside is bounded
(:data:`STOP_SECONDS`), so a store that hangs cannot hold the exit much longer.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

from queueadmin import runtime
from queueadmin.metrics import sampler

log = logging.getLogger(__name__)

#: The bound on each wait of the stop (the control thread, the hand-over's
#: commit, the committer's last writes).
STOP_SECONDS = 5.0

_lock = threading.Lock()
_installed = False


def install() -> bool:
    """Have the serving reactor stop this process's broker and metrics
    sampler as it shuts down (idempotent). Returns whether a reactor was
    there to ask: only under daphne (its CLI or runserver), which installs
    Twisted's reactor before it imports the application; another server
    must call :func:`stop_serving` itself."""
    global _installed
    if "twisted.internet.reactor" not in sys.modules:
        return False
    from twisted.internet import reactor

    with _lock:
        if not _installed:
            # (Twisted's interface declares its methods without self, which mypy misreads.)
            reactor.addSystemEventTrigger("before", "shutdown", _stop_on_a_thread)  # type: ignore[arg-type]
            _installed = True
    return True


def _stop_on_a_thread() -> Any:
    """The trigger: :func:`stop_serving` on the reactor's thread pool; the
    Deferred makes the shutdown wait for it."""
    from twisted.internet import threads

    deferred = threads.deferToThread(stop_serving)
    # A failure is logged, never left to stop the shutdown itself.
    deferred.addErrback(lambda failure: log.error("stopping the broker failed: %s", failure.getTraceback()))
    return deferred


def stop_serving(timeout: float = STOP_SECONDS) -> None:
    """Stop the metrics sampler, then the broker: on the leader its last
    commit hands the lead over. Blocks; each wait bounded by ``timeout``."""
    sampler.stop_sampler(timeout)
    broker = runtime.running_broker()
    if broker is not None:
        log.info("stopping broker %s (%s)", broker.id, broker.role)
    runtime.stop_broker(timeout)
