"""An operator who pauses and resumes the nodes' schedule while the nemesis runs.

A pause is a signed operator request (``POST /api/v1/operator``, kind
``pause_schedule``), as a standby's dashboard or ``manage.py queueaction``
sends it, so it meets every fault the other clients meet. The checker does
not need its answers: each document version the watcher sees says whether
the schedule is paused and since when, and what its mark's last tick did
(``chaos.checker``, ``schedules``: no tick fires in a version that has the
schedule paused since before that tick's commit). Recorded as
``pause_schedule`` calls with ``args["paused"]``.
"""

from __future__ import annotations

from typing import Any

from chaos.clients import Client
from chaos.cluster import SCHEDULE_NAME, SECRET_KEY
from engine import pause_schedule_op
from queueadmin.api import forward

#: How long each state (paused, running) is held before the next toggle:
#: several of the schedule's 2 s ticks, so that both skipped and fired ones are seen.
HOLD_SECONDS = (3.0, 9.0)
NOT_LEADER_RETRIES = 5


class SchedulePauser(Client):
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
        op = pause_schedule_op(SCHEDULE_NAME, paused=paused)
        for attempt in range(NOT_LEADER_RETRIES):
            # A fresh signature each time: a signed request runs once (its nonce).
            call = self.send("pause_schedule", "/operator", {}, args={"paused": op.paused},
                             raw=forward.sign(op, key=SECRET_KEY).encode())
            if call.code != "not_leader":
                if call.ok:
                    self.paused = op.paused
                return
            self.backoff(attempt + 1)
