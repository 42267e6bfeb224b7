"""Bounds on a run: a deadline for the operations still in flight, and a
ceiling on the process's resident memory.

A :class:`Watchdog` is a daemon thread, so it fires even while the event
loop is blocked in CPU-bound work (jqueue decoding a large document). Firing
calls ``abort()`` once, which makes the run's store refuse every later call;
the submitters then fail fast and the run ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import threading
import time
from collections.abc import Callable

MAX_GROWTH_BYTES = 8 * 1024**3
POLL_SECONDS = 0.1


def rss_bytes() -> int:
    """This process's current resident set size, from /proc/self/statm."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_limit() -> int:
    """The RSS at which a run is aborted: the RSS now plus 8 GiB, or plus half
    of the memory still available if that is less."""
    try:
        with open("/proc/meminfo") as f:
            available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        available = 2 * MAX_GROWTH_BYTES
    return rss_bytes() + min(MAX_GROWTH_BYTES, available // 2)


def release_memory() -> None:
    """Collect garbage and hand freed heap pages back to the OS (glibc's
    ``malloc_trim``), so one run's garbage does not count against the next."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class Watchdog:
    """Calls ``abort`` once: when the deadline (set with :meth:`set_deadline`)
    passes, or when RSS exceeds ``rss_limit``. ``reason`` says which ("timeout"
    or "memory"); ``start_rss`` is the RSS when it was made; ``in_flight_at_fire`` is ``in_flight()`` at that moment;
    ``peak_rss`` is the highest RSS it saw."""

    def __init__(self, abort: Callable[[], None], in_flight: Callable[[], int], *, rss_limit: int) -> None:
        self._abort = abort
        self._in_flight = in_flight
        self.rss_limit = rss_limit
        self.start_rss = rss_bytes()
        self.reason: str | None = None
        self.in_flight_at_fire = 0
        self.peak_rss = 0
        self._deadline: float | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="bench-watchdog", daemon=True)

    def start(self) -> Watchdog:
        self._thread.start()
        return self

    def set_deadline(self, monotonic_deadline: float) -> None:
        self._deadline = monotonic_deadline

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(5.0)

    @property
    def fired(self) -> bool:
        return self.reason is not None

    def _watch(self) -> None:
        while not self._stopped.wait(POLL_SECONDS):
            rss = rss_bytes()
            self.peak_rss = max(self.peak_rss, rss)
            if rss > self.rss_limit:
                self._fire("memory")
                return
            if self._deadline is not None and time.monotonic() >= self._deadline:
                self._fire("timeout")
                return

    def _fire(self, reason: str) -> None:
        self.in_flight_at_fire = self._in_flight()
        self.reason = reason
        self._abort()
