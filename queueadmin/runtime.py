"""The embedded broker: one :class:`engine.Broker` per serving process.

:func:`build_broker` makes it from what :mod:`queueadmin.config` reads from
the settings. The broker is a process-wide singleton, created lazily
by :func:`get_broker` and started by :func:`start_broker`, which
``queueadmin/asgi.py`` calls at import when ``QUEUE_BROKER_AUTOSTART`` is on.
Only the serving process imports the ASGI module (daphne, or runserver's
serving child), so ``migrate``, ``check``, the autoreloader's parent and the
test suite never start a broker unless they ask for one.

It also holds the commit notifier (:data:`commits`) that the dashboard's live
updates wait on: the committer calls :meth:`CommitNotifier.notify` on its
writer thread after every landed write, and the notifier wakes waiting
coroutines on whichever event loops they run on. Long-poll claims do not use
it: :func:`long_poll_claim` waits in the broker's own line of claims, which
wakes only as many of them as there are jobs to claim.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

from engine import Broker, ClaimedJob, QueueState, utc_now
from engine.ops import Claim
from engine.stores import FaultStore
from queueadmin import config

log = logging.getLogger(__name__)

class CommitNotifier:
    """Wakes coroutines waiting for "something was committed".

    :meth:`notify` is thread-safe and cheap; it is called on the committer's
    writer thread, so it only schedules wake-ups (one ``call_soon_threadsafe``
    per event loop with waiters) and never runs waiter code itself. Waiters may
    live on any number of event loops. A notification may be spurious (another
    broker in this process committed, or nothing claimable changed): waiters
    must re-check, never assume.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[asyncio.AbstractEventLoop, set[asyncio.Event]] = {}

    def notify(self, state: QueueState | None = None) -> None:
        """Wake every current waiter. Safe from any thread; does no I/O."""
        with self._lock:
            if not self._waiters:
                return
            targets = [(loop, tuple(events)) for loop, events in self._waiters.items()]
        for loop, events in targets:
            # A loop that closed between our snapshot and now has nobody
            # waiting on it any more (its waiters unregister as they unwind).
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_set_all, events)

    @contextlib.contextmanager
    def listen(self) -> Iterator[asyncio.Event]:
        """Register the calling coroutine for the duration of the ``with``.

        Yields an :class:`asyncio.Event` that is set after each commit; clear
        it *before* checking for work, so that a commit landing between the
        check and the wait is not missed. Must be used inside a running loop.
        """
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        with self._lock:
            self._waiters.setdefault(loop, set()).add(event)
        try:
            yield event
        finally:
            with self._lock:
                events = self._waiters.get(loop)
                if events is not None:
                    events.discard(event)
                    if not events:
                        del self._waiters[loop]

    def waiting(self) -> int:
        """How many coroutines are listening right now (for tests and health pages)."""
        with self._lock:
            return sum(len(events) for events in self._waiters.values())


def _set_all(events: Sequence[asyncio.Event]) -> None:
    for event in events:
        event.set()


#: The process-wide commit notifier; every broker built here reports to it.
commits = CommitNotifier()


class SeenWorkers:
    """Workers that asked this node for work, with when they last did and
    from which queues.

    A worker that is idle in a long-poll claim holds no lease, so the document
    does not show it; the claim endpoint notes it here and the dashboard lists
    it as alive. Bounded: at most ``limit`` names, the oldest dropped first.
    """

    def __init__(self, limit: int = 1000) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[datetime, tuple[str, ...]]] = {}

    def note(self, worker: str, queues: Sequence[str] = ()) -> None:
        """Record that ``worker`` asked for work from ``queues`` just now. Cheap; any thread."""
        with self._lock:
            self._seen.pop(worker, None)  # re-insert: dict order is recency order
            self._seen[worker] = (datetime.now(UTC), tuple(queues))
            while len(self._seen) > self.limit:
                self._seen.pop(next(iter(self._seen)))

    def items(self, *, since: datetime | None = None) -> dict[str, tuple[datetime, tuple[str, ...]]]:
        """Worker name to when it last asked for work and from which queues;
        with ``since``, only those that asked after it."""
        with self._lock:
            return {name: seen for name, seen in self._seen.items() if since is None or seen[0] > since}

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()


#: Workers seen by this node's claim endpoint.
seen_workers = SeenWorkers()

_lock = threading.Lock()
_broker: Broker | None = None


def build_broker() -> Broker:
    """A new, unstarted Broker configured from the current Django settings
    (through :mod:`queueadmin.config`), reporting its commits to :data:`commits`
    and the jobs that leave the document to the finished-job recorder.

    Opens the store (no I/O except creating a local folder); raises
    StoreConfigError for a bad ``QUEUE_STORE_URL``. Tests call it after
    overriding settings to get a broker of their own.
    """
    from queueadmin.history.recorder import shared_recorder  # a model module: imported once apps are ready

    policy = config.policy()
    recorder = shared_recorder(retention_seconds=config.finished_retention_seconds())
    store = config.open_queue_store()
    return Broker(
        store,
        # A chaos run's fault store may set this node's clock off (FaultStore.clock); any other reads the real one.
        clock=store.clock if isinstance(store, FaultStore) else utc_now,
        url=config.advertise_url(),  # None: a single node that advertises nothing
        policy=policy,
        heartbeat_seconds=config.heartbeat_seconds(),
        takeover_seconds=config.takeover_seconds(),
        hedge_seconds=config.store_hedge_seconds(store),
        on_commit=commits.notify,
        # Jobs leaving the document are recorded off the commit path (queueadmin.history).
        on_departures=recorder.offer,
        schedules=config.schedules(),
    )


def get_broker() -> Broker:
    """This process's broker, created on first use (thread-safe). Does not start it.

    Views call this on every request (so tests may patch it). Until
    :func:`start_broker` runs, the broker's role is ``"stopped"`` and every
    operation raises NotLeader.
    """
    global _broker
    broker = _broker
    if broker is None:
        with _lock:
            if _broker is None:
                _broker = build_broker()
            broker = _broker
    return broker


def running_broker() -> Broker | None:
    """This process's broker if it has been started, else None. No I/O.

    Unlike :func:`get_broker`, it never builds a broker, so code that may run
    in any process (a task backend, a command) can ask whether one runs here.
    """
    broker = _broker
    return broker if broker is not None and broker.role != "stopped" else None


def start_broker() -> Broker:
    """Start this process's broker (idempotent) and return it.

    Returns at once: election happens on the broker's own thread, and the node
    answers 503 not_leader until it leads.
    """
    broker = get_broker()
    if broker.role == "stopped":
        log.info(
            "starting broker %s on %s (advertised as %s)",
            broker.id, broker.store.describe(), broker.url or "nothing: single node",
        )
    return broker.start()


def stop_broker(timeout: float | None = None) -> None:
    """Stop and forget this process's broker, if any (idempotent).

    In-flight operations are committed first. The next :func:`get_broker`
    builds a fresh one from the settings then in force.
    """
    global _broker
    with _lock:
        broker, _broker = _broker, None
    if broker is not None:
        broker.stop(timeout)


async def long_poll_claim(broker: Broker, op: Claim, wait: float) -> list[ClaimedJob]:
    """Run ``op`` until it leases a job or ``wait`` seconds have passed.

    It claims once at once; after that it waits in ``broker``'s line
    (:class:`engine.WaitingClaims`) and claims again only when a landed
    commit, or a delayed job's due time, made a job claimable for it: many
    waiting workers never turn one commit into a claim each. Every attempt is
    a real claim through the committer, so a lease is only ever handed out by
    a landed commit (I1). Raises what the broker raises (NotLeader when this
    node stops leading meanwhile, also while waiting).
    """
    return await broker.waiters.claim(broker.aexecute, op, wait)
