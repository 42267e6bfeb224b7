"""Closed-loop submitters: push, wait for the acknowledgement, push again.

The driver flips a shared :class:`Clock`; each submitter records into a
:class:`Tally` (one per thread, so threads never contend on it; one per event
loop for asyncio tasks).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from bench.stores import RunAborted

perf_counter = time.perf_counter


class Clock:
    """Flags the driver flips and submitters read: keep going / inside the
    window / the run was aborted (errors after that are not the system's)."""

    __slots__ = ("aborted", "measuring", "running")

    def __init__(self) -> None:
        self.running = True
        self.measuring = False
        self.aborted = False


class Tally:
    """What submitters record. One per thread (no locking), or one per event loop."""

    __slots__ = ("acked", "completed", "errors", "in_flight", "latencies")

    def __init__(self) -> None:
        self.acked = 0
        self.completed = 0
        self.in_flight = 0
        self.latencies: list[float] = []
        self.errors: Counter[str] = Counter()

    def merge(self, other: Tally) -> None:
        self.acked += other.acked
        self.completed += other.completed
        self.latencies.extend(other.latencies)
        self.errors.update(other.errors)


async def async_submitter(push: Callable[[], Awaitable[Any]], clock: Clock, tally: Tally) -> None:
    while clock.running:
        measured = clock.measuring
        start = perf_counter()
        tally.in_flight += 1
        try:
            await push()
        except RunAborted:
            return
        except Exception as exc:
            if measured and not clock.aborted:
                tally.errors[type(exc).__name__] += 1
            await asyncio.sleep(0)  # never spin on an error without yielding
            continue
        finally:
            tally.in_flight -= 1
        tally.acked += 1
        if measured:
            tally.latencies.append(perf_counter() - start)
        if clock.measuring:
            tally.completed += 1


def thread_submitter(push: Callable[[], Any], clock: Clock, tally: Tally) -> None:
    while clock.running:
        measured = clock.measuring
        start = perf_counter()
        tally.in_flight = 1
        try:
            push()
        except RunAborted:
            return
        except Exception as exc:
            if measured and not clock.aborted:
                tally.errors[type(exc).__name__] += 1
            continue
        finally:
            tally.in_flight = 0
        tally.acked += 1
        if measured:
            tally.latencies.append(perf_counter() - start)
        if clock.measuring:
            tally.completed += 1
