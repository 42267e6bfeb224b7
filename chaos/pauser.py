"""Operators who toggle settings while the nemesis runs: one pauses and
resumes the nodes' schedule, one sets and removes the chaos queue's
concurrency limit, one its rate limit.

A pause is a signed operator request (``POST /api/v1/operator``, kind
``pause_schedule``), as a standby's dashboard or ``manage.py queueaction``
sends it, so it meets every fault the other clients meet. The checker does
not need its answers: each document version the watcher sees says whether
the schedule is paused and since when, and what its mark's last tick did
(``chaos.checker``, ``schedules``: no tick fires in a version that has the
schedule paused since before that tick's commit). Recorded as
``pause_schedule`` calls with ``args["paused"]``.

The limiter sends ``limit`` requests the same way (``args["max_running"]``),
a limit of 1 to 4 or none, and removes it at the end so the drain is the
workers' alone; the checker reads the limit and the running jobs from each
version (``limits``). The rate limiter sends ``rate_limit`` requests
(``args["jobs"]``, ``args["seconds"]``): one start every quarter second,
three or twenty a second, or none, removed at the end too; the checker
compares each version's window with the leases claimed in it (``rates``).
"""

from __future__ import annotations

from typing import Any

from chaos.clients import QUEUE, Client
from chaos.cluster import SCHEDULE_NAME, SECRET_KEY
from engine import pause_schedule_op
from engine.ops import Operation, limit_op, rate_limit_op
from queueadmin.api import forward

#: How long each state (paused, running) is held before the next toggle:
#: several of the schedule's 2 s ticks, so that both skipped and fired ones are seen.
HOLD_SECONDS = (3.0, 9.0)
NOT_LEADER_RETRIES = 5


#: The limits the limiter sets (None: it removes the limit).
LIMITS = (1, 2, 4, None)


class Operator(Client):
    """Sends one signed operator request, following not_leader answers."""

    def operate(self, kind: str, op: Operation, args: dict[str, Any]) -> bool:
        """Whether it was acknowledged (False: refused, or the answer is unknown)."""
        for attempt in range(NOT_LEADER_RETRIES):
            # A fresh signature each time: a signed request runs once (its nonce).
            call = self.send(kind, "/operator", {}, args=args, raw=forward.sign(op, key=SECRET_KEY).encode())
            if call.code != "not_leader":
                return call.ok
            self.backoff(attempt + 1)
        return False


class QueueLimiter(Operator):
    """Sets the chaos queue's concurrency limit every few seconds (module docstring)."""

    def __init__(self, *args: Any) -> None:
        super().__init__("limiter", *args)

    def loop(self) -> None:
        while not self.stop_event.wait(self.rng.uniform(*HOLD_SECONDS)):
            limit = self.rng.choice(LIMITS)
            self.operate("limit", limit_op(QUEUE, limit), {"max_running": limit})
        # Removed at the end (sent until acknowledged, a few times at most): the drain must not wait on it.
        for _ in range(NOT_LEADER_RETRIES):
            if self.operate("limit", limit_op(QUEUE, None), {"max_running": None}):
                return


#: The rates the rate limiter sets, (jobs, seconds) (None: it removes the rate).
RATES = ((1, 0.25), (3, 1.0), (20, 1.0), None)


class QueueRateLimiter(Operator):
    """Sets the chaos queue's rate limit every few seconds (module docstring)."""

    def __init__(self, *args: Any) -> None:
        super().__init__("rate-limiter", *args)

    def loop(self) -> None:
        while not self.stop_event.wait(self.rng.uniform(*HOLD_SECONDS)):
            rate = self.rng.choice(RATES)
            jobs, seconds = rate if rate is not None else (None, None)
            self.operate("rate_limit", rate_limit_op(QUEUE, jobs, seconds), {"jobs": jobs, "seconds": seconds})
        for _ in range(NOT_LEADER_RETRIES):  # removed at the end, as the concurrency limit is
            if self.operate("rate_limit", rate_limit_op(QUEUE, None), {"jobs": None, "seconds": None}):
                return


class SchedulePauser(Operator):
    """Toggles the schedule's pause every few seconds (module docstring)."""

    def __init__(self, *args: Any) -> None:
        super().__init__("pauser", *args)
        self.paused = False

    def loop(self) -> None:
        while not self.stop_event.wait(self.rng.uniform(*HOLD_SECONDS)):
            self.set(not self.paused)
        self.set(False)  # leave it running, as the nodes' settings have it (a resume of a running one is a no-op)

    def set(self, paused: bool) -> None:
        """Pause or resume; an answer lost or refused leaves ``self.paused`` as it was (sent again next time)."""
        if self.operate("pause_schedule", pause_schedule_op(SCHEDULE_NAME, paused=paused), {"paused": paused}):
            self.paused = paused
