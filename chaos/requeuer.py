"""An operator who requeues running jobs and redrives dead letters, some at
a pace, and stops running jobs, while the nemesis runs.

The dashboard's requeue and redrive reach the leader as signed operator
requests (``POST /api/v1/operator``, :mod:`queueadmin.api.forward`): this
client sends the same requests, signed with the nodes' secret key, so that
they meet every fault the producers and workers meet. Every second or three
it picks a few jobs it saw leased and not yet acknowledged (likely running)
or failed into the dead letters, and requeues them as a dry run would: each
expected in the status it guessed (the engine skips those that changed).
Half of the requeues are paced (2 to 20 jobs a second): the i-th job moved
is due i / pace seconds after the requeue, the first at once.

Half of its turns (:data:`STOP_SHARE`) stop the oldest few of the running
jobs instead (``stop_op``, each expected running, as the dashboard's Stop sends
them): they go to the dead letters, and later turns may redrive them.
Each stop is recorded as a ``stop`` call with ``args["jobs"]`` and
``args["expect"]``; its answer's ``result`` lists the ids stopped.

A share of its turns (:data:`RUN_NOW_SHARE`) makes delayed jobs due at once
instead, as the dashboard's Run now does (``make_due_op``, each expected
pending): jobs a producer pushed with a delay that is not over by a margin
and that no claim leased yet. With a delayed horizon (``--delayed-horizon``)
some of them wait in delayed segments, which the leader writes again without
them in the same commit. Each is recorded as a ``run_now`` call with
``args["jobs"]`` and ``args["expect"]``; its answer's ``result`` lists the
ids made due. The checker (``run_now``, ``delays``) says what must hold: it
made due only ids it was sent, and only a job named by a run now sent before
its claim was answered may be leased before its delay is over.

Each requeue is recorded as a ``requeue`` call with ``args["jobs"]``,
``args["expect"]`` and ``args["per_second"]`` (None: all at once); its
answer's ``result`` lists the ids that moved, in their order. A requeue
whose answer is unknown is not sent again. The checker (``requeues``) says
what must hold: a requeued job is still owed, its revoked lease can no
longer complete it, and a paced job is never leased before its turn.
"""

from __future__ import annotations

import time
from typing import Any

from chaos.cluster import LEASE_SECONDS
from chaos.history import Call
from chaos.pauser import Operator
from engine.ops import make_due_op, requeue_op, stop_op

REQUEUE_EVERY_SECONDS = (1.0, 3.0)
MOST_IDS = 4
PACED_SHARE = 0.5
PACE_PER_SECOND = (2.0, 20.0)
STOP_SHARE = 0.5
RUN_NOW_SHARE = 0.3
#: A delayed job is picked for a run now only while its delay has at least
#: this long left: it is still waiting when the run now lands.
RUN_NOW_MARGIN_SECONDS = 0.5


def waiting(calls: list[Call], now: float) -> list[str]:
    """From a snapshot of the history's calls: the jobs pushed with a delay
    that has more than :data:`RUN_NOW_MARGIN_SECONDS` left (from the first
    push sent) and that no claim has leased yet, oldest first."""
    due: dict[str, float] = {}
    leased: set[str] = set()
    for call in calls:
        if call.op == "push":
            for job in call.args.get("jobs", []):
                if isinstance(job, dict) and isinstance(job.get("delay_seconds"), int | float):
                    due.setdefault(str(job["id"]), call.start + float(job["delay_seconds"]))
        elif call.op == "claim" and isinstance(call.answer, dict):
            leased.update(str(job.get("id")) for job in call.answer.get("jobs", []) if isinstance(job, dict))
    return [job_id for job_id, at in due.items() if job_id not in leased and at - now > RUN_NOW_MARGIN_SECONDS]


def candidates(calls: list[Call], now: float) -> tuple[list[str], list[str]]:
    """From a snapshot of the history's calls: the jobs leased within the
    last lease and not yet completed or failed with that lease (likely
    running), and those a fail answered "dead" and no requeue moved since
    (dead letters, by a fail or an operator's stop), each oldest first."""
    running: dict[str, str] = {}  # job -> its latest lease seen, if recent and not acknowledged
    dead: dict[str, None] = {}
    for call in calls:
        if call.op == "claim" and call.ok and call.end is not None and now - call.end < LEASE_SECONDS:
            if call.args.get("dropped"):
                continue  # the worker never saw these leases
            answer = call.answer if isinstance(call.answer, dict) else {}
            for job in answer.get("jobs", []):
                if isinstance(job, dict):
                    running[str(job.get("id"))] = str(job.get("lease"))
        elif call.op in ("complete", "fail"):
            job_id = str(call.args.get("job"))
            if running.get(job_id) == str(call.args.get("lease")):
                del running[job_id]
            if call.op == "fail" and call.ok and isinstance(call.answer, dict) and call.answer.get("status") == "dead":
                dead[job_id] = None
        elif call.op == "requeue" and call.ok and isinstance(call.answer, dict):
            for job_id in map(str, call.answer.get("result") or []):
                dead.pop(job_id, None)
                running.pop(job_id, None)
        elif call.op == "stop" and call.ok and isinstance(call.answer, dict):
            for job_id in map(str, call.answer.get("result") or []):
                running.pop(job_id, None)
                dead[job_id] = None
    return list(running), list(dead)


class Requeuer(Operator):
    """Requeues a few running or dead jobs every second or three (module docstring)."""

    def __init__(self, *args: Any) -> None:
        super().__init__("requeuer", *args)

    def loop(self) -> None:
        while not self.stop_event.wait(self.rng.uniform(*REQUEUE_EVERY_SECONDS)):
            self.requeue_some()

    def requeue_some(self) -> None:
        calls, now = list(self.history.calls), time.monotonic()
        if self.rng.random() < RUN_NOW_SHARE and (delayed := waiting(calls, now)):
            ids = self.rng.sample(delayed, min(len(delayed), self.rng.randint(1, MOST_IDS)))
            expect = ["pending"] * len(ids)
            self.operate("run_now", make_due_op(ids, expect=expect), {"jobs": ids, "expect": expect})
            return
        running, dead = candidates(calls, now)
        if running and self.rng.random() < STOP_SHARE:
            # The oldest leases not yet acknowledged: most jobs finish within a
            # moment, and these (a watched job works for up to 5 s) still run.
            ids = running[:self.rng.randint(1, MOST_IDS)]
            expect = ["running"] * len(ids)
            self.operate("stop", stop_op(ids, expect=expect), {"jobs": ids, "expect": expect})
            return
        picks = [(job_id, "running") for job_id in running] + [(job_id, "dead") for job_id in dead]
        if not picks:
            return
        chosen = self.rng.sample(picks, min(len(picks), self.rng.randint(1, MOST_IDS)))
        pace = round(self.rng.uniform(*PACE_PER_SECOND), 3) if self.rng.random() < PACED_SHARE else None
        ids = [job_id for job_id, _ in chosen]
        expect = [status for _, status in chosen]
        self.operate("requeue", requeue_op(ids, expect=expect, per_second=pace),
                     {"jobs": ids, "expect": expect, "per_second": pace})
