"""The dry runs of a queue's limits, and what their runs did: the
concurrency limit (``max_running``: at most N of its jobs run at once) and
the rate limit (``rate_limit``: at most N of its jobs start in each window of
S seconds). Both act on the queue, not on its jobs, and both are kept in the
document, so every worker and every later leader obeys them (engine.rates).

The run is the generic one (:func:`.actions.run`): a conditional operation
through the broker, audited with ``target`` ``queue=<name> max_running=<N>``
or ``queue=<name> rate=<N>/<S>s``; its answer is the limit before.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from django.utils.translation import ngettext

from engine import RateLimit
from queueadmin.dashboard.pages import age_text
from queueadmin.dashboard.snapshot import Snapshot

if TYPE_CHECKING:
    from queueadmin.dashboard.actions import Plan


def _planned_rate(p: Plan) -> RateLimit | None:
    """The rate a rate-limit plan sets (None: it removes the rate)."""
    if p.rate_jobs is None or p.rate_seconds is None:
        return None
    return RateLimit(jobs=p.rate_jobs, seconds=p.rate_seconds)


def _same(a: RateLimit | None, b: RateLimit | None) -> bool:
    """Whether two rates allow the same (their windows aside)."""
    if a is None or b is None:
        return a is b
    return (a.jobs, a.seconds) == (b.jobs, b.seconds)


def plan_limit(p: Plan, snapshot: Snapshot) -> Plan:
    """A concurrency limit for ``p.queue``: what it changes, as of ``snapshot``."""
    p.target = f"queue={p.queue} max_running={p.max_running if p.max_running is not None else 'none'}"
    q = snapshot.queues.get(p.queue)
    current = q.max_running if q is not None else None
    if current == p.max_running:
        p.problems.append(p.spec.needless % p.words if current is not None else
                          f"Queue {p.queue} has no limit.")
        p.needless = True
        return p
    was = f"now at most {current}" if current is not None else "now no limit"
    running = q.running if q is not None else 0
    if p.max_running is None:
        p.notes.append(f"Queue {p.queue} ({was}) hands out its jobs as fast as workers claim them: as many run as "
                       "the workers' concurrency allows.")
    elif running > p.max_running:
        p.notes.append(ngettext(
            "Queue %(queue)s (%(was)s) has %(n)d job running: more than the new limit. It carries on; no job of "
            "the queue starts until fewer than %(limit)d run.",
            "Queue %(queue)s (%(was)s) has %(n)d jobs running: more than the new limit. They carry on; no job "
            "of the queue starts until fewer than %(limit)d run.", running)
            % {"queue": p.queue, "was": was, "n": running, "limit": p.max_running})
    else:
        p.notes.append(f"Queue {p.queue} ({was}; {running} running now) starts a job only while fewer than "
                       f"{p.max_running} of its jobs run, across every worker.")
    return p


def plan_rate(p: Plan, snapshot: Snapshot) -> Plan:
    """A rate limit for ``p.queue``: what it changes, as of ``snapshot``,
    and how long its ready jobs would take to start at the new rate."""
    new = _planned_rate(p)
    p.target = f"queue={p.queue} rate={f'{new.jobs}/{new.seconds:g}s' if new else 'none'}"
    q = snapshot.queues.get(p.queue)
    current = q.rate if q is not None else None
    if _same(current, new):
        p.problems.append(p.spec.needless % p.words if current is not None else
                          f"Queue {p.queue} has no rate limit.")
        p.needless = True
        return p
    was = f"now {current.describe()}" if current is not None else "now no rate limit"
    if new is None:
        p.notes.append(f"Queue {p.queue} ({was}) starts its jobs as fast as workers claim them.")
        return p
    p.notes.append(f"Queue {p.queue} ({was}) starts at most {new.jobs} of its jobs in each window of "
                   f"{new.seconds:g} s, across every worker; a window opens at the first start after the last "
                   "one closed." + (" The window open now keeps the starts it has counted." if current else ""))
    ready = q.ready if q is not None else 0
    if ready > new.jobs:
        p.notes.append(ngettext(
            "At this rate its %(n)d ready job takes at least %(time)s to start.",
            "At this rate its %(n)d ready jobs take at least %(time)s to start.", ready)
            % {"n": ready, "time": age_text(_last_start(new, ready))})
    return p


def _last_start(rate: RateLimit, jobs: int) -> float:
    """Seconds from the first of ``jobs`` starts to the last, at the least,
    under ``rate`` from a fresh window: each window starts ``rate.jobs``."""
    return (math.ceil(jobs / rate.jobs) - 1) * rate.seconds


def paced(queue: str, rate: RateLimit, n: int, *, ahead: int) -> str:
    """How ``queue``'s rate limit paces ``n`` jobs going back to it behind
    ``ahead`` ready ones (a requeue's or redrive's dry run): the way to
    redrive at a set pace is to set the queue's rate first."""
    jobs = ngettext("the %(n)d job going back to it waits", "the %(n)d jobs going back to it wait", n) % {"n": n}
    return (f"Queue {queue} starts at most {rate.describe()}: {jobs} behind its {ahead} ready, and the last of "
            f"them starts {age_text(_last_start(rate, ahead + n))} from now at the earliest.")


def limited(p: Plan, *, was: Any) -> tuple[str, bool]:
    """What a concurrency limit did, from the limit before (the engine's
    answer); and whether it was overtaken (nothing changed)."""
    if was == p.max_running:
        return p.spec.overtaken % p.words, True
    before = f"at most {was}" if was is not None else "no limit"
    if p.max_running is None:
        return f"removed the limit of {p.queue} (was {before})", False
    return f"limited {p.queue} to {p.max_running} running job{'' if p.max_running == 1 else 's'} (was {before})", \
        False


def rated(p: Plan, *, was: Any) -> tuple[str, bool]:
    """What a rate limit did, from the rate before (the engine's answer:
    ``{"jobs", "seconds"}`` or None); and whether it was overtaken."""
    before = RateLimit(jobs=int(was["jobs"]), seconds=float(was["seconds"])) if isinstance(was, dict) else None
    new = _planned_rate(p)
    if _same(before, new):
        return p.spec.overtaken % p.words, True
    if new is None:
        return f"removed the rate limit of {p.queue} (was {before.describe() if before else 'no rate limit'})", False
    return f"limited {p.queue} to {new.describe()} (was {before.describe() if before else 'no rate limit'})", False
