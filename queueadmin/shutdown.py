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

daphne's own shutdown trigger cancels every request still in flight
(``Server.kill_all_applications``). Run at once, it would cut off requests
whose commits the stop is about to land: a push answered by a dropped
connection (its client retries it, the same ids), and a claim whose job is
then leased to nobody until its lease runs out. So it waits for the stop
first: requests in flight are answered (2xx once their commit landed, or
``503 not_leader``, as every request that arrives meanwhile is), and only
what is left after that (a dashboard's websocket, say) is cancelled.
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
#: How long requests woken by the stop's last commits may take to answer
#: before daphne cancels what is left.
ANSWER_SECONDS = 1.0
#: The stop under way, once the reactor began to shut down (its Deferred).
_stopping: Any = None


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

    events: Any = reactor  # Twisted's interfaces declare their methods without self, which mypy misreads
    with _lock:
        if not _installed:
            # Registered as the application is imported, before daphne's
            # server registers its own as it starts: the reactor calls this
            # one first, so it is under way when daphne's runs.
            events.addSystemEventTrigger("before", "shutdown", _stop_on_a_thread)
            _cancel_after_the_stop()
            _installed = True
    return True


def _stop_on_a_thread() -> Any:
    """The trigger: :func:`stop_serving` on the reactor's thread pool; the
    Deferred makes the shutdown wait for it."""
    from twisted.internet import threads

    global _stopping
    deferred = threads.deferToThread(stop_serving)
    # A failure is logged, never left to stop the shutdown itself.
    deferred.addErrback(lambda failure: log.error("stopping the broker failed: %s", failure.getTraceback()))
    _stopping = deferred
    return deferred


def _cancel_after_the_stop() -> None:
    """Make daphne's server cancel the requests in flight only once the
    broker's stop is over (see the module's docstring). Without a stop under
    way (the trigger did not run first), it cancels at once, as before."""
    import daphne.server
    from twisted.internet import defer

    server = daphne.server.Server
    cancel_now = getattr(server, "kill_all_applications", None)
    if cancel_now is None:  # a daphne without it: requests in flight are cut off as its shutdown goes
        log.warning("daphne's Server has no kill_all_applications; requests in flight at shutdown are not waited for")
        return
    if getattr(cancel_now, "after_the_broker_stop", False):
        return

    def kill_all_applications(self: Any) -> Any:
        stopping = _stopping
        if stopping is None:
            return cancel_now(self)
        done: Any = defer.Deferred()

        def then(result: Any) -> Any:
            # The stop's last commits woke their requests, which answer on
            # the loop's next turns: let them, then cancel what is left;
            # whatever happens, the cancelling runs and ``done`` fires, or
            # the reactor's shutdown would wait for it forever.
            try:
                waited = _answered(self)
            except Exception:
                log.exception("waiting for the requests in flight failed; cancelling them now")
                waited = defer.succeed(None)
            waited.addBoth(lambda _: cancel_now(self)).chainDeferred(done)
            return result

        stopping.addBoth(then)
        return done

    kill_all_applications.after_the_broker_stop = True  # type: ignore[attr-defined]
    server.kill_all_applications = kill_all_applications


def stop_serving(timeout: float = STOP_SECONDS) -> None:
    """Stop the metrics sampler, then the broker: on the leader its last
    commit hands the lead over. Blocks; each wait bounded by ``timeout``."""
    sampler.stop_sampler(timeout)
    broker = runtime.running_broker()
    if broker is not None:
        log.info("stopping broker %s (%s)", broker.id, broker.role)
    runtime.stop_broker(timeout)


def unsent(protocol: Any) -> int:
    """Bytes ``protocol``'s transport was given and has not sent yet. The
    reactor's shutdown drops them (it closes every connection without
    flushing), so an answer written just before would never reach its
    client: a claim's leases then belong to nobody until they run out.
    0 for a transport of another shape."""
    transport = getattr(protocol, "transport", None)
    buffered = getattr(transport, "dataBuffer", b"")
    offset = getattr(transport, "offset", 0)
    later = getattr(transport, "_tempDataLen", 0)
    try:
        return max(len(buffered) - int(offset), 0) + int(later)
    except (TypeError, ValueError):
        return 0


def _answered(server: Any) -> Any:
    """A Deferred that fires once no HTTP request of daphne's ``server`` is
    still running and every answer is sent (:func:`unsent`), or after
    :data:`ANSWER_SECONDS` (a websocket, which runs until it is cancelled,
    is not waited for)."""
    from daphne.ws_protocol import WebSocketProtocol
    from twisted.internet import defer, reactor

    # Any: Twisted's interfaces declare their methods without self, which mypy misreads.
    clock: Any = reactor
    done: Any = defer.Deferred()
    deadline = clock.seconds() + ANSWER_SECONDS

    def running() -> bool:
        return any(
            not isinstance(protocol, WebSocketProtocol)
            and (unsent(protocol) or (details.get("application_instance") is not None
                                      and not details["application_instance"].done()))
            for protocol, details in list(server.connections.items())
        )

    def check() -> None:
        try:
            busy = running()
        except Exception:  # daphne's bookkeeping changed shape: wait no longer
            log.exception("cannot tell which requests are still running")
            busy = False
        if not busy or clock.seconds() >= deadline:
            done.callback(None)
        else:
            clock.callLater(0.01, check)

    check()
    return done

