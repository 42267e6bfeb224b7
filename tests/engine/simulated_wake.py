"""A stand-in for a broker's wake-up event with a simulated clock: each wait
returns at once and moves the clock on by its timeout. Tests drive a broker's
control loop through many intervals in no real time."""

from __future__ import annotations

import threading
from collections.abc import Callable


class SimulatedWake:
    """Stands in for ``Broker._wake``. After ``budget`` waits it parks the
    control loop until :meth:`finish`, so the test can read the counters."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.now = 0.0
        self.waits = 0
        self.immediate = 0  # waits entered with the event already set
        self.hooks: dict[int, Callable[[], None]] = {}  # wait number -> run before that wait
        self.parked = threading.Event()
        self._release = threading.Event()
        self._flag = threading.Event()

    def monotonic(self) -> float:
        return self.now

    def set(self) -> None:
        self._flag.set()

    def clear(self) -> None:
        self._flag.clear()

    def is_set(self) -> bool:
        return self._flag.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        self.waits += 1
        hook = self.hooks.pop(self.waits, None)
        if hook is not None:
            hook()
        if self.waits >= self.budget and not self._release.is_set():
            self.parked.set()
            self._release.wait(30)
            return True
        if self._flag.is_set():
            self.immediate += 1
            return True
        assert timeout is not None
        self.now += timeout
        return False

    def finish(self) -> None:
        self._release.set()
        self._flag.set()
