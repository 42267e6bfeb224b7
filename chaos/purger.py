"""An operator who purges jobs by id while the nemesis runs.

The dashboard's purge of selected jobs reaches the leader as a signed
operator request (``POST /api/v1/operator``, :mod:`queueadmin.api.forward`):
this client sends the same requests, signed with the nodes' secret key, so
that purges travel the path a standby's dashboard uses and meet every fault
the producers and workers meet. It picks jobs it saw acknowledged and not
yet claimed, the oldest first: with small segments (``--segments``) those
wait deep in segment objects, where a purge rewrites the object
(docs/format.md, "Purging a job inside a segment").

Each purge is recorded as a ``purge`` call with ``args["jobs"]``; its
answer's ``result`` lists the ids removed. Half are conditional (each id
expected pending, as the dashboard sends them); the other half all or
nothing, and a fifth of those also name an id that never existed, so the
whole purge must be refused and change nothing. A purge whose answer is
unknown (a timeout, a 5xx other than not_leader, an answer it drops) is not
sent again: the checker counts its jobs as possibly purged.
"""

from __future__ import annotations

from typing import Any

from chaos.clients import Client
from chaos.cluster import SECRET_KEY
from chaos.history import Call
from engine.ops import Operation, Purge, PurgeStatus
from queueadmin.api import forward

PURGE_EVERY_SECONDS = (0.5, 2.5)
MOST_IDS = 4
UNKNOWN_SHARE = 0.2
NOT_LEADER_RETRIES = 5


def signed(op: Operation) -> bytes:
    """``op`` (a purge, a requeue, ...) as a standby's dashboard signs it (:func:`queueadmin.api.forward.sign`),
    with the nodes' key: the harness runs without Django settings."""
    return forward.sign(op, key=SECRET_KEY).encode()


def candidates(calls: list[Call]) -> list[str]:
    """Ids whose push was acknowledged and that no claim answer has leased,
    oldest first, from a snapshot of the history's calls."""
    acked: dict[str, None] = {}
    leased: set[str] = set()
    for call in calls:
        if call.op == "push" and call.ok:
            for job in call.args.get("jobs", []):
                if isinstance(job, dict) and "id" in job:
                    acked.setdefault(str(job["id"]), None)
        elif call.op == "claim" and call.end is not None and isinstance(call.answer, dict):
            leased.update(str(j.get("id")) for j in call.answer.get("jobs", []) if isinstance(j, dict))
    return [job_id for job_id in acked if job_id not in leased]


class Purger(Client):
    """Purges a few waiting jobs by id every second or two (module docstring)."""

    def __init__(self, *args: Any) -> None:
        super().__init__("purger", *args)
        self.sent = 0

    def loop(self) -> None:
        while not self.stop_event.wait(self.rng.uniform(*PURGE_EVERY_SECONDS)):
            self.purge_some()

    def purge_some(self) -> None:
        waiting = candidates(list(self.history.calls))
        if not waiting:
            return
        # The oldest third: the jobs most likely sealed into segments by now.
        pool = waiting[: max(1, len(waiting) // 3)]
        ids = self.rng.sample(pool, min(len(pool), self.rng.randint(1, MOST_IDS)))
        conditional = self.rng.random() < 0.5
        unknown = not conditional and self.rng.random() < UNKNOWN_SHARE
        if unknown:
            ids.append(f"never-pushed-{self.sent}")
        pending: PurgeStatus = "pending"
        expect = (pending,) * len(ids) if conditional else ()
        op = Purge(job_ids=tuple(ids), expect=expect)
        args = {"jobs": ids, "conditional": conditional, "unknown": unknown}
        for attempt in range(NOT_LEADER_RETRIES):
            # A fresh signature each time: a signed request runs once (its nonce).
            call = self.send("purge", "/operator", {}, args=args, raw=signed(op))
            self.sent += 1
            if call.code != "not_leader":
                self.drop(call)  # maybe pretend the answer was lost: its jobs are then "maybe purged"
                return
            self.backoff(attempt + 1)
