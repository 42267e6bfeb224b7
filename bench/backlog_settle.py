"""Settling a backlog run's lane keeper: waiting until the leader's
:class:`~engine.lanes.LaneKeeper` has nothing left to seal, refill or merge,
so a phase starts, or a probe is timed, with no segment I/O in flight.

Used by the run (:mod:`bench.backlog_run`) and its lookup probe
(:mod:`bench.backlog_probes`). Split from :mod:`bench.backlog_run`.
"""

from __future__ import annotations

import time

from engine import Broker, Policy
from engine.ops import Tick

SETTLE_TIMEOUT_SECONDS = 600.0


def _keeper_idle(broker: Broker) -> bool:
    keeper = broker._keeper
    if keeper is None:
        return True
    with keeper._cond:
        return not keeper._tasks and not keeper._busy and keeper._merge_slot is None and not keeper._delayed_busy


def _settle(broker: Broker, policy: Policy) -> float:
    """Wait until the LaneKeeper has nothing left to seal or refill.

    The keeper plans only when a commit lands, and skips a queue while its
    previous task is running, so the commit of a task's own Seal plans
    nothing for that queue: without other commits the next seal would wait
    for the next heartbeat. Each step here commits a Tick to make it plan;
    settled is two Ticks in a row after which nothing was planned."""
    started = time.monotonic()
    if policy.segment_jobs <= 0:
        return 0.0
    committer = broker.committer
    assert committer is not None
    quiet = 0
    while quiet < 2:
        if time.monotonic() - started > SETTLE_TIMEOUT_SECONDS:
            raise TimeoutError(f"the backlog was not sealed down within {SETTLE_TIMEOUT_SECONDS:g} s")
        while not _keeper_idle(broker):
            time.sleep(0.01)
        committer.execute(Tick(), timeout=SETTLE_TIMEOUT_SECONDS)
        quiet = quiet + 1 if _keeper_idle(broker) else 0
    return time.monotonic() - started
