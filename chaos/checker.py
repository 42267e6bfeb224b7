"""The checker: reads a :class:`~chaos.history.History` and says which
guarantees held. Pure: no I/O, no clock; tests feed it hand-made histories.

Checks (each a key of :attr:`Verdict.failures`, empty when it held):

* ``lost_pushes`` — every push answered 2xx is completed (a complete answered
  2xx), or still in the final document (pending, running or dead), or had a
  complete whose outcome is unknown (sent, answer lost: counted apart as
  ``unconfirmed``). Anything else was lost (I2).
  Format 2: jobs still in the segment objects the final document references
  count as remaining; a referenced segment that cannot be read is a failure.
* ``purges`` — a job an operator's purge removed (``chaos.purger``) is never
  leased or completed by a call sent after the purge was answered, and is
  not in the final document; a purge removes only ids it names; an
  all-or-nothing purge naming an unknown id is refused. Purged jobs, and
  those of purges whose answer is unknown, are not owed by ``lost_pushes``.
* ``fifo`` — within the queue, first claims follow push order (I7): when A's
  push was acknowledged before B's was first sent, the claim that first
  leased B (attempt 1) must not have been answered before the one that first
  leased A was sent. Jobs whose first lease went to an answer nobody saw
  (a 5xx, a timeout) are not compared: their first lease seen has an
  attempt above 1. (Not "a lease at attempt 1": a redrive from the dead
  letters starts a job's attempts again, at the back of its queue.)
* ``requeues`` — an operator's requeue (``chaos.requeuer``) answered 2xx
  moved only ids it was sent; a job it moved is still owed (``lost_pushes``);
  a complete or fail sent after the requeue was answered, with a lease
  granted before it was sent (revoked by it), is never accepted; and a paced
  requeue's i-th job moved is not leased by a claim sent after the requeue
  was answered before ``i / per_second`` after the requeue was sent.
* ``stops`` — an operator's stop (``chaos.requeuer``) answered 2xx moved
  only ids it was sent; a complete or fail sent after the stop was
  answered, with a lease granted before it was sent (revoked by it), is
  never accepted; a stopped job is not leased by a claim sent after the
  stop was answered unless a requeue naming it was sent after the stop
  (a redrive); and one no requeue named after its stop is a dead letter in
  the final document (kept, not lost).
* ``watches`` — a lease watch (``POST /api/v1/leases/watch``) that says a
  lease is lost is right, and stays right: no heartbeat, complete or fail
  with that lease sent after the watch was answered is accepted (the
  watching worker sends its result anyway, chaos.clients); and the loss is
  one the history explains: a requeue, stop or purge of the job sent before the
  watch was answered (answered 2xx with the job moved, or with its outcome
  unknown), or the lease's end, no earlier than a lease after the latest
  call that renewed it (its claim or a heartbeat, answered 2xx) was sent
  (less the offset of a ``clock`` fault in between: a clock stepped forward
  ends a lease that much sooner).
* ``stale_completions`` — no complete or fail answered 2xx with a lease token
  that a later claim of the same job, acknowledged before the call was sent,
  had superseded (I4).
* ``seq_epoch`` — the versions the watcher saw: seq never goes back, one seq
  never has two contents, epoch never goes back, and no two brokers held one
  epoch (I3, I5, I10); and no two nodes said they lead with one epoch.
* ``unanswered`` — every call has an end; none timed out unless a fault
  (pause, kill, hang, ...) on its node overlapped it; no 5xx other than the
  documented 503s (I8).
* ``double_completions`` — no job was completed twice (a retried push must
  not bring a completed job back).
* ``idle`` — after the nemesis stopped, each node's CPU share and store
  requests per heartbeat stay under small bounds (I11).
* ``failover`` — every fault was followed by a successful push within the
  recovery cap, and a leader paused for a long time was replaced during the
  pause.
* ``document`` — the nemesis found no re-created deleted document (I10) and
  no overwritten unreadable one (I6).
* ``schedules`` — in the versions the watcher saw, a schedule's marked tick
  never goes back (I3, I5), and it moves on every period: a stall longer
  than the period and a slack is allowed only while a fault, or the
  recovery after one (``recovery_cap_seconds``), lasts. A version that has a
  schedule paused never has its mark *fired* by a commit applied after the
  pause began (an operator pauses and resumes it, chaos.pauser): judged by
  the order the watcher saw them in, and by their stamps only when it first
  saw both in one version (as far as a ``clock`` fault lets clocks differ).
* ``limits`` — in the versions the watcher saw, a queue with a
  concurrency limit never has more jobs running than the limit, except
  those already running when the limit was first seen (they carry on, and
  the allowance shrinks as they finish). An operator sets and removes the
  chaos queue's limit (chaos.pauser).
* ``rates`` — in the versions the watcher saw, a rate-limited queue's
  window never counts more starts than its rate allows when a claim raises
  the count, and the leases seen claimed inside a window (by their
  ``claimed_at``, counted for the window of the version each is first seen
  in) are never more than the window counted. An operator sets
  and removes the chaos queue's rate (chaos.pauser).
* ``harness`` — the run itself went as planned: the nemesis did not crash,
  the cluster healed, a node led before each idle measurement, and the final
  document's dead letters are all of them (no queue counts ``dead_dropped``:
  a letter the dead-letter bound dropped would read as a lost push or an
  unkept stop).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

from chaos.history import Call, Fault, History

# An idle node measured ~1-3 % of a core and ~1-2 store requests per heartbeat
# (a leader writes once; a standby checks the ETag and, as the leader wrote,
# reads once). A busy loop shows as 40-100 % and tens to thousands.
IDLE_CPU_SHARE = 0.08  # of one core
IDLE_REQUESTS_PER_HEARTBEAT = 4.0
#: Fault kinds whose window explains a client timeout on the faulted node.
_STALLING = frozenset({"pause", "freeze", "kill", "stop", "hang", "slow", "error", "lost", "delete", "corrupt"})
_PAUSES = frozenset({"pause", "freeze"})
#: The calls sent to ``POST /api/v1/operator`` (chaos.purger, chaos.pauser):
#: each writes its nonce to the database the nodes share.
OPERATOR_OPS = frozenset({"purge", "requeue", "stop", "run_now", "limit", "rate_limit", "pause_schedule"})
DOCUMENTED_5XX = frozenset({503})
EXPLAIN_MARGIN_SECONDS = 1.0


@dataclass(slots=True, kw_only=True)
class Limits:
    """The bounds the checker applies (the run's configuration)."""

    heartbeat_seconds: float = 0.25
    #: How long a standby waits without commits before it takes over
    #: (chaos.cluster.TAKEOVER_SECONDS): what a crash costs, and a leader
    #: stopped with SIGTERM must not (it hands the lead over).
    takeover_seconds: float = 2.0
    long_pause_seconds: float = 7.0
    recovery_cap_seconds: float = 20.0
    idle_cpu_share: float = IDLE_CPU_SHARE
    idle_requests_per_heartbeat: float = IDLE_REQUESTS_PER_HEARTBEAT
    #: The nodes' schedule's period (chaos.cluster.SCHEDULES), and how much
    #: longer than it a mark may take to move on with no fault about.
    schedule_seconds: float = 2.0
    schedule_slack_seconds: float = 3.0
    #: The lease the workers claim and heartbeat for (chaos.cluster.LEASE_SECONDS).
    lease_seconds: float = 4.0


@dataclass(slots=True)
class Verdict:
    """What the checker found: figures for the report, and failures per check."""

    figures: dict[str, Any] = field(default_factory=dict)
    failures: dict[str, list[str]] = field(default_factory=dict)
    duplicates: dict[str, list[str]] = field(default_factory=dict)  # explanation -> job ids

    @property
    def ok(self) -> bool:
        return not any(self.failures.values())


def _jobs_of(call: Call) -> list[dict[str, Any]]:
    jobs = call.answer.get("jobs") if call.ok and isinstance(call.answer, dict) else None
    return [j for j in jobs if isinstance(j, dict)] if isinstance(jobs, list) else []


def _pushed_ids(call: Call) -> list[str]:
    return [str(j["id"]) for j in call.args.get("jobs", []) if isinstance(j, dict) and "id" in j]


def _delays(calls: list[Call]) -> dict[str, float]:
    """The delay asked for by each job id pushed delayed (its first push's)."""
    delays: dict[str, float] = {}
    for call in calls:
        if call.op == "push":
            for job in call.args.get("jobs", []):
                if isinstance(job, dict) and "id" in job and isinstance(job.get("delay_seconds"), int | float):
                    delays.setdefault(str(job["id"]), float(job["delay_seconds"]))
    return delays


def _unknown(call: Call) -> bool:
    """The call's outcome is unknown to its client (no answer, a 5xx, or an answer it dropped)."""
    return call.status is None or call.status >= 500 or bool(call.args.get("dropped"))


def check(history: History, limits: Limits | None = None) -> Verdict:
    """Run every check over ``history``. Pure."""
    limits = limits or Limits()
    verdict = Verdict()
    calls = list(history.calls)
    verdict.figures["operations"] = len(calls)
    verdict.figures["operations_by_kind"] = dict(sorted(_count(c.op for c in calls).items()))
    _check_pushes(history, calls, verdict)
    _check_purges(history, calls, verdict)
    _check_requeues(calls, verdict)
    _check_stops(history, calls, verdict)
    _check_watches(calls, limits, history.faults, verdict)
    _check_fifo(calls, verdict)
    _check_delays(calls, history.faults, verdict)
    _check_run_now(calls, verdict)
    _check_leases(calls, verdict)
    _check_versions(history, verdict)
    _check_answers(history, calls, verdict)
    _check_lookups(calls, verdict)
    _check_idle(history, limits, verdict)
    _check_recovery(history, limits, verdict)
    _check_schedules(history, limits, verdict)
    _check_limits(history, verdict)
    _check_rates(history, verdict)
    verdict.failures["document"] = [text for _, text in history.events if text.startswith(("I6:", "I10:"))]
    verdict.failures["harness"] = [text for _, text in history.events if text.startswith("harness:")]
    verdict.failures["harness"] += _dropped_dead_letters(history.final_document or {})
    return verdict


def _dropped_dead_letters(final: dict[str, Any]) -> list[str]:
    """A failure if the dead-letter bound dropped letters (``dead_dropped``
    in a queue's counters): ``lost_pushes`` and ``stops`` read the final
    dead letters, and cannot tell a dropped one from a lost job."""
    queues = final.get("queues")
    dropped = {name: counters.get("dead_dropped") for name, counters in queues.items()
               if isinstance(counters, dict) and counters.get("dead_dropped")} if isinstance(queues, dict) else {}
    if not dropped:
        return []
    listed = ", ".join(f"{count} in {name}" for name, count in sorted(dropped.items()))
    return [f"the dead-letter bound dropped dead letters ({listed}): the lost_pushes and stops checks read the "
            "final dead letters and cannot tell a dropped one from a lost job; raise the bound or run shorter"]


def _count(items: Any) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for item in items:
        counts[item] += 1
    return dict(counts)


def _check_pushes(history: History, calls: list[Call], verdict: Verdict) -> None:
    acked: dict[str, float] = {}  # job id -> when its first push was acknowledged
    pushes_acked: dict[str, list[float]] = defaultdict(list)
    for call in calls:
        if call.op == "push" and call.ok and call.end is not None:
            for job_id in _pushed_ids(call):
                acked.setdefault(job_id, call.end)
                pushes_acked[job_id].append(call.end)
    completed: dict[str, list[Call]] = defaultdict(list)
    unconfirmed: set[str] = set()
    for call in calls:
        if call.op == "complete":
            job_id = str(call.args.get("job"))
            if call.ok:
                completed[job_id].append(call)
            elif _unknown(call):
                unconfirmed.add(job_id)
    final = history.final_document or {}
    remaining = {str(j.get("id")) for j in final.get("jobs", []) if isinstance(j, dict)}
    # Format 2: the jobs in the segments the final document references (see chaos.run).
    in_segments = {str(j.get("id")) for j in final.get("segment_jobs", []) if isinstance(j, dict)}
    remaining |= in_segments
    verdict.figures["left_in_segments"] = len(in_segments & acked.keys())
    verdict.figures["unreferenced_segments"] = len(final.get("unreferenced_segments", []))
    verdict.figures["orphan_indexes"] = len(final.get("orphan_indexes", []))
    dead = {str(j.get("id")) for j in final.get("dead", []) if isinstance(j, dict)}
    purged, maybe_purged = _purged(calls)
    lost = sorted(j for j in acked if j not in completed and j not in remaining and j not in dead
                  and j not in unconfirmed and j not in purged and j not in maybe_purged)
    verdict.failures["lost_pushes"] = [f"push of {j} acknowledged at {acked[j]:.3f}, then gone" for j in lost]
    verdict.failures["lost_pushes"] += [f"final document: {p}" for p in final.get("segment_problems", [])]
    verdict.figures["pushes_acknowledged"] = len(acked)
    verdict.figures["completed"] = len(completed)
    verdict.figures["left_pending_or_running"] = len(remaining & acked.keys())
    verdict.figures["dead_letters"] = len(dead & acked.keys())
    verdict.figures["unconfirmed"] = len((unconfirmed - completed.keys()) & acked.keys())
    verdict.figures["purged"] = len(purged.keys() & acked.keys())
    verdict.figures["maybe_purged"] = len((maybe_purged - purged.keys()) & acked.keys())
    verdict.figures["lost"] = len(lost)
    # A job completed twice: its push was retried (or sent again) after it completed.
    twice = []
    for job_id, done in completed.items():
        accepted = {c.args.get("lease") for c in done}
        if len(accepted) > 1:
            first_end = min(c.end or 0 for c in done)
            again = any(t > first_end for t in pushes_acked.get(job_id, []))
            why = "a push acknowledged after it completed re-created it" if again else "two leases completed"
            twice.append(f"{job_id} completed {len(accepted)} times: {why}")
    verdict.failures["double_completions"] = twice
    verdict.figures["completed_twice"] = len(twice)


def _purged(calls: list[Call]) -> tuple[dict[str, Call], set[str]]:
    """The jobs an operator's purge removed (by the answer's ``result``: id ->
    the first purge that did), and those of purges whose outcome is unknown
    (no answer, a 5xx, or an answer the client dropped)."""
    purged: dict[str, Call] = {}
    maybe: set[str] = set()
    for call in calls:
        if call.op != "purge":
            continue
        result = call.answer.get("result") if call.ok and isinstance(call.answer, dict) else None
        if isinstance(result, list):
            for job_id in map(str, result):
                purged.setdefault(job_id, call)
        if _unknown(call) and call.code != "not_leader":
            maybe.update(map(str, call.args.get("jobs", [])))
    return purged, maybe


def _check_purges(history: History, calls: list[Call], verdict: Verdict) -> None:
    """A purged job is gone for good: no claim sent after the purge was
    answered leases it, no completion sent after that is accepted, and the
    final document (segments included) does not hold it. A purge refused
    answers 4xx and changes nothing: its jobs stay owed (``lost_pushes``).
    A purge answered 2xx removes only ids it was sent, and an all-or-nothing
    purge naming an unknown id is never answered 2xx."""
    purged, _ = _purged(calls)
    problems: list[str] = []
    for call in calls:
        if call.op == "purge" and call.ok and isinstance(call.answer, dict):
            if (unsent := _acted_beyond(call)) is not None:
                problems.append(unsent)
            elif call.args.get("unknown"):
                problems.append(f"call {call.id}: an all-or-nothing purge naming an unknown id answered "
                                f"{call.status}, removing {call.answer.get('result')}")
    for call in calls:
        if call.op == "claim" and call.end is not None:
            for job in _jobs_of(call):
                job_id = str(job.get("id"))
                gone = purged.get(job_id)
                if gone is not None and gone.end is not None and gone.end < call.start:
                    problems.append(f"{job_id} was purged (answer at {gone.end:.3f}), then leased by call "
                                    f"{call.id} sent at {call.start:.3f}")
        elif call.op == "complete" and call.ok:
            job_id = str(call.args.get("job"))
            gone = purged.get(job_id)
            if gone is not None and gone.end is not None and gone.end < call.start:
                problems.append(f"{job_id} was purged (answer at {gone.end:.3f}), then a complete sent at "
                                f"{call.start:.3f} was accepted")
    final = history.final_document or {}
    for key in ("jobs", "segment_jobs", "dead"):
        for job in final.get(key, []):
            if isinstance(job, dict) and str(job.get("id")) in purged:
                problems.append(f"{job.get('id')} was purged but is still in the final document ({key})")
    verdict.failures["purges"] = problems
    verdict.figures["purges"] = sum(1 for c in calls if c.op == "purge")
    verdict.figures["purges_refused"] = sum(1 for c in calls if c.op == "purge" and c.status is not None
                                            and 400 <= c.status < 500)


def _acted_beyond(call: Call) -> str | None:
    """The problem with an operator's purge or requeue answered 2xx whose
    ``result`` is not a list of ids it was sent; None if it is one."""
    assert isinstance(call.answer, dict)
    result = call.answer.get("result")
    sent = set(map(str, call.args.get("jobs", [])))
    if isinstance(result, list) and set(map(str, result)) <= sent:
        return None
    return f"call {call.id}: a {call.op} of {sorted(sent)} answered {call.answer!r}"


def _requeued(calls: list[Call], op: str = "requeue") -> dict[str, list[Call]]:
    """The requeues (or the calls ``op``, such as stops) answered 2xx, by
    each job they moved (in the answer's ``result``)."""
    moved: dict[str, list[Call]] = defaultdict(list)
    for call in calls:
        if call.op == op and call.ok and isinstance(call.answer, dict):
            for job_id in map(str, call.answer.get("result") or []):
                moved[job_id].append(call)
    return moved


def _granted(calls: list[Call]) -> dict[str, float]:
    """Lease -> when the claim handing it out was answered."""
    granted: dict[str, float] = {}
    for call in calls:
        if call.op == "claim" and call.end is not None:
            for job in _jobs_of(call):
                granted[str(job.get("lease"))] = call.end
    return granted


def _revoked_yet_accepted(calls: list[Call], moved: dict[str, list[Call]], what: str) -> list[str]:
    """A complete or fail answered 2xx, sent after an operator's ``what``
    (requeue, stop) of its job was answered, with a lease granted before
    that was sent: the operation had revoked it."""
    granted = _granted(calls)
    problems = []
    for call in calls:
        if call.op not in ("complete", "fail") or not call.ok:
            continue
        job_id, lease = str(call.args.get("job")), str(call.args.get("lease"))
        given = granted.get(lease)
        for revoker in moved.get(job_id, []):
            assert revoker.end is not None
            if given is not None and given < revoker.start and revoker.end < call.start:
                problems.append(f"{call.op} of {job_id} with lease {lease} (granted at {given:.3f}) accepted at "
                                f"{call.end:.3f}, though a {what} answered at {revoker.end:.3f} had revoked it")
    return problems


def _check_requeues(calls: list[Call], verdict: Verdict) -> None:
    """See ``requeues`` in the module docstring."""
    problems: list[str] = []
    moved = _requeued(calls)
    problems += [unsent for call in calls if call.op == "requeue" and call.ok and isinstance(call.answer, dict)
                 and (unsent := _acted_beyond(call)) is not None]
    problems += _revoked_yet_accepted(calls, moved, "requeue")
    paced = 0
    for requeue in calls:
        pace = requeue.args.get("per_second") if requeue.op == "requeue" else None
        if not requeue.ok or not isinstance(pace, int | float) or not isinstance(requeue.answer, dict):
            continue
        assert requeue.end is not None
        turns = {job_id: i / pace for i, job_id in enumerate(map(str, requeue.answer.get("result") or []))}
        paced += len(turns)
        for call in calls:
            if call.op != "claim" or call.end is None or call.start <= requeue.end:
                continue
            for job in _jobs_of(call):
                turn = turns.pop(str(job.get("id")), None)  # its first lease after the requeue
                if turn is not None and call.end - requeue.start < turn - DELAY_TOLERANCE_SECONDS:
                    problems.append(f"{job.get('id')}, the job due {turn:.3f} s after a paced requeue (call "
                                    f"{requeue.id}), was leased {call.end - requeue.start:.3f} s after it was sent")
    verdict.failures["requeues"] = problems
    verdict.figures["requeues"] = sum(1 for c in calls if c.op == "requeue")
    verdict.figures["requeued_jobs"] = len(moved)
    verdict.figures["requeued_paced_jobs"] = paced


def _check_stops(history: History, calls: list[Call], verdict: Verdict) -> None:
    """See ``stops`` in the module docstring."""
    stopped = _requeued(calls, "stop")
    problems = [unsent for call in calls if call.op == "stop" and call.ok and isinstance(call.answer, dict)
                and (unsent := _acted_beyond(call)) is not None]
    problems += _revoked_yet_accepted(calls, stopped, "stop")
    # The requeues that may have moved a job (2xx naming it, or sent with an unknown outcome), by job.
    revivers: dict[str, list[Call]] = defaultdict(list)
    for call in calls:
        if call.op == "requeue":
            result = call.answer.get("result") if call.ok and isinstance(call.answer, dict) else None
            named = map(str, result) if isinstance(result, list) else (
                map(str, call.args.get("jobs", [])) if _unknown(call) else ())
            for job_id in named:
                revivers[job_id].append(call)
    for claim in calls:
        if claim.op != "claim" or claim.end is None or not claim.ok:
            continue
        for job in _jobs_of(claim):
            job_id = str(job.get("id"))
            for stop in stopped.get(job_id, []):
                assert stop.end is not None
                if stop.end < claim.start and not any(
                        stop.start < r.start < claim.end for r in revivers.get(job_id, [])):
                    problems.append(f"{job_id} was stopped (answer at {stop.end:.3f}), then leased by claim "
                                    f"{claim.id} sent at {claim.start:.3f} with no redrive of it in between")
    final = history.final_document
    if final is not None:
        dead = {str(j.get("id")) for j in final.get("dead", []) if isinstance(j, dict)}
        for job_id, stops in stopped.items():
            last = max(s.start for s in stops)
            if job_id not in dead and not any(r.start > last for r in revivers.get(job_id, [])):
                problems.append(f"{job_id} was stopped (call {stops[-1].id}) and never redriven, but is not a "
                                "dead letter in the final document")
    verdict.failures["stops"] = problems
    verdict.figures["stops"] = sum(1 for c in calls if c.op == "stop")
    verdict.figures["stopped_jobs"] = len(stopped)


def _clock_slack(faults: list[Fault], start: float, end: float) -> float:
    """How far node clocks may have read apart between ``start`` and ``end``
    (harness time): the largest offset of a ``clock`` fault overlapping it.
    A node's stamps (a due time, a lease's end) are read by another node, or
    by itself after its clock stepped, off by that much at most."""
    return max((abs(f.clock_offset) for f in faults
                if f.kind == "clock" and f.start <= end and (f.end if f.end is not None else end) >= start),
               default=0.0)


def _check_watches(calls: list[Call], limits: Limits, faults: list[Fault], verdict: Verdict) -> None:
    """See ``watches`` in the module docstring."""
    problems: list[str] = []
    renewed: dict[str, list[float]] = defaultdict(list)  # lease -> starts of the calls that renewed it (2xx)
    for call in calls:
        if call.op == "claim" and call.ok:
            for job in _jobs_of(call):
                renewed[str(job.get("lease"))].append(call.start)
        elif call.op == "heartbeat" and call.ok:
            renewed[str(call.args.get("lease"))].append(call.start)
    revokers: dict[str, list[Call]] = defaultdict(list)  # job -> requeues, stops and purges that may have moved it
    for call in calls:
        if call.op in ("requeue", "stop", "purge"):
            result = call.answer.get("result") if call.ok and isinstance(call.answer, dict) else None
            named = map(str, result) if isinstance(result, list) else (
                map(str, call.args.get("jobs", [])) if _unknown(call) and call.code != "not_leader" else ())
            for job_id in named:
                revokers[job_id].append(call)
    told: dict[str, Call] = {}  # lease -> the first watch answered that it was lost
    causes: dict[str, int] = defaultdict(int)
    for watch in calls:
        lost = watch.answer.get("lost") if watch.op == "watch" and watch.ok and isinstance(watch.answer, dict) else None
        if not lost:
            continue
        assert watch.end is not None
        job_id, lease = str(watch.args.get("job")), str(watch.args.get("lease"))
        told.setdefault(lease, watch)
        earliest_end = max((t for t in renewed.get(lease, []) if t < watch.end), default=None)
        if any(c.start < watch.end for c in revokers.get(job_id, [])):
            causes[revokers[job_id][0].op] += 1
        elif earliest_end is not None and (
                earliest_end + limits.lease_seconds - _clock_slack(faults, earliest_end, watch.end) <= watch.end):
            causes["expiry"] += 1
        else:
            problems.append(f"watch {watch.id} was told at {watch.end:.3f} that lease {lease} of {job_id} was lost "
                            f"({lost!r:.120}), but no requeue, stop or purge of it was sent before, and the lease "
                            f"renewed at {earliest_end} could not have run out")
    refused = 0
    for call in calls:
        watch = told.get(str(call.args.get("lease"))) if call.op in ("heartbeat", "complete", "fail") else None
        if watch is None or watch.end is None or call.start <= watch.end:
            continue
        if call.ok:
            problems.append(f"{call.op} of {call.args.get('job')} with lease {call.args.get('lease')}, sent at "
                            f"{call.start:.3f}, was accepted, though watch {watch.id} was told at {watch.end:.3f} "
                            "that the lease was lost")
        elif call.code in ("lease_lost", "job_not_found"):
            refused += 1
    verdict.failures["watches"] = problems
    verdict.figures["watches"] = sum(1 for c in calls if c.op == "watch")
    verdict.figures["watches_told_lost"] = len(told)
    verdict.figures["watches_lost_by"] = dict(sorted(causes.items()))
    verdict.figures["results_refused_after_watch"] = refused


def _check_fifo(calls: list[Call], verdict: Verdict) -> None:
    first_sent: dict[str, float] = {}  # job id -> when a push of it was first sent
    acked: dict[str, float] = {}  # job id -> when a push of it was first acknowledged
    first_lease: dict[str, tuple[Call, object]] = {}  # job id -> the first claim that leased it, at which attempt
    for call in calls:
        if call.op == "push":
            for job_id in _pushed_ids(call):
                first_sent[job_id] = min(first_sent.get(job_id, call.start), call.start)
                if call.ok and call.end is not None:
                    acked[job_id] = min(acked.get(job_id, call.end), call.end)
        elif call.op == "claim" and call.end is not None:
            for job in _jobs_of(call):
                first_lease.setdefault(str(job.get("id")), (call, job.get("attempt")))
    first_claim = {job_id: call for job_id, (call, attempt) in first_lease.items() if attempt == 1}
    # Sweep B by first send, keeping the latest first-claim start among the
    # A acknowledged before it: one later than B's first claim's answer is a
    # job that should have been handed out before B. A delayed A may rightly
    # go after B (it was not due); a delayed B, once due, still goes after
    # every A pushed before it, so it stays on that side.
    delayed = _delays(calls)
    earlier = sorted((acked[j], first_claim[j].start, j) for j in acked if j in first_claim and j not in delayed)
    violations: list[str] = []
    latest: tuple[float, str] | None = None
    i = 0
    for sent, job_id in sorted((first_sent[j], j) for j in first_claim if j in first_sent):
        while i < len(earlier) and earlier[i][0] < sent:
            if latest is None or earlier[i][1] > latest[0]:
                latest = (earlier[i][1], earlier[i][2])
            i += 1
        end = first_claim[job_id].end
        assert end is not None
        if latest is not None and latest[0] > end:
            violations.append(f"{job_id} was first leased (answer at {end:.3f}) before {latest[1]}, "
                              f"pushed before it (its first lease asked for at {latest[0]:.3f})")
    verdict.failures["fifo"] = violations
    verdict.figures["fifo_compared"] = len(earlier)
    verdict.figures["fifo_violations"] = len(violations)


#: How much earlier than due a lease may look, for the clocks: the node's
#: wall clock sets ``not_before``, the client's monotonic clock times the calls.
DELAY_TOLERANCE_SECONDS = 0.01


def _check_delays(calls: list[Call], faults: list[Fault], verdict: Verdict) -> None:
    """No delayed job is leased before it is due. The node sets its
    ``not_before`` to the moment a push of it landed, plus its delay: at the
    earliest when its first push was sent. A lease is handed out at the
    latest when the claim's answer arrived. So a first lease whose claim was
    answered less than the delay after the first push was sent was handed
    out early, whatever the faults. A job named by an operator's run now
    (``chaos.requeuer``) sent before the claim was answered may be leased
    earlier: that is what it asks for. While a ``clock`` fault set a node's
    clock off, a job may be leased as much earlier (a due time stamped by a
    clock behind, read by one that is not: docs/format.md, "Clocks")."""
    delays = _delays(calls)
    run_now: dict[str, float] = {}  # job -> when the first run now naming it was sent
    for call in calls:
        if call.op == "run_now":
            for job_id in map(str, call.args.get("jobs", [])):
                run_now.setdefault(job_id, call.start)
    first_sent: dict[str, float] = {}
    for call in calls:
        if call.op == "push":
            for job_id in _pushed_ids(call):
                if job_id in delays:
                    first_sent[job_id] = min(first_sent.get(job_id, call.start), call.start)
    early: list[str] = []
    margins: list[float] = []
    leased: set[str] = set()
    for call in calls:
        if call.op != "claim" or call.end is None:
            continue
        for job in _jobs_of(call):
            job_id = str(job.get("id"))
            if job_id not in delays or job_id in leased or job_id not in first_sent:
                continue
            leased.add(job_id)
            if run_now.get(job_id, float("inf")) < call.end:
                continue  # made due by an operator before this claim was answered
            margin = call.end - first_sent[job_id] - delays[job_id]
            margins.append(margin)
            if margin < -DELAY_TOLERANCE_SECONDS - _clock_slack(faults, first_sent[job_id], call.end):
                early.append(f"{job_id}, delayed {delays[job_id]:g} s, was leased {-margin:.3f} s before it was due "
                             f"(claim answered {call.end - first_sent[job_id]:.3f} s after its first push was sent)")
    verdict.failures["delays"] = early
    verdict.figures["delayed_pushes"] = len(delays)
    verdict.figures["delayed_leased"] = len(leased)
    verdict.figures["delayed_earliest_margin"] = round(min(margins), 3) if margins else None


def _check_run_now(calls: list[Call], verdict: Verdict) -> None:
    """An operator's run now (``chaos.requeuer``) answered 2xx made due
    only ids it was sent (each expected pending: a job that was claimed,
    purged or due meanwhile is skipped, not refused)."""
    problems: list[str] = []
    made = 0
    for call in calls:
        if call.op != "run_now" or not call.ok or not isinstance(call.answer, dict):
            continue
        result = [str(job_id) for job_id in call.answer.get("result") or []]
        made += len(result)
        if unsent := set(result) - set(map(str, call.args.get("jobs", []))):
            problems.append(f"run now call {call.id} made due {sorted(unsent)}, which it was not sent")
    verdict.failures["run_now"] = problems
    verdict.figures["run_nows"] = sum(1 for c in calls if c.op == "run_now")
    verdict.figures["made_due"] = made


def _check_leases(calls: list[Call], verdict: Verdict) -> None:
    # lease -> (job, when the claim handing it out was acknowledged)
    granted: dict[str, tuple[str, float]] = {}
    by_job: dict[str, list[tuple[float, str]]] = defaultdict(list)
    lost_claims: set[str] = set()  # leases handed out in answers the client never saw
    for call in calls:
        if call.op == "claim" and call.end is not None:
            for job in _jobs_of(call):
                lease, job_id = str(job.get("lease")), str(job.get("id"))
                granted[lease] = (job_id, call.end)
                by_job[job_id].append((call.end, lease))
                if call.args.get("dropped"):
                    lost_claims.add(lease)
    stale = []
    for call in calls:
        if call.op not in ("complete", "fail") or not call.ok:
            continue
        lease = str(call.args.get("lease"))
        job_id = str(call.args.get("job"))
        mine = granted.get(lease)
        if mine is None:
            continue
        later = [(t, other) for t, other in by_job[job_id] if other != lease and mine[1] < t < call.start]
        if later:
            t, other = later[0]
            stale.append(f"{call.op} of {job_id} with lease {lease} accepted at {call.end:.3f}, "
                         f"though lease {other} was granted at {t:.3f}")
    verdict.failures["stale_completions"] = stale
    verdict.figures["stale_completions"] = len(stale)
    # At-least-once: jobs handed out more than once, and why.
    sent: dict[str, set[str]] = defaultdict(set)  # job -> leases whose work reached complete
    rejected: set[str] = set()
    failed: set[str] = set()
    for call in calls:
        if call.op in ("complete", "fail"):
            lease = str(call.args.get("lease"))
            if call.op == "complete":
                sent[str(call.args.get("job"))].add(lease)
            if call.op == "fail" and call.ok:
                failed.add(lease)
            if call.code in ("lease_lost", "job_not_found"):
                rejected.add(lease)
    duplicates: dict[str, list[str]] = defaultdict(list)
    requeued = _requeued(calls)
    for job_id, leases in by_job.items():
        if len(leases) < 2:
            continue
        first = sorted(leases)[0][1]
        if job_id in requeued:
            why = "an operator requeued it (chaos.requeuer)"
        elif first in lost_claims:
            why = "the answer of the claim that first leased it was lost; that lease expired"
        elif first in failed:
            why = "the worker failed it, and it was retried"
        elif first in rejected:
            why = "its lease expired while the worker stalled; the late complete was refused"
        else:
            why = "its lease expired (worker stalled, or its node was paused or killed)"
        duplicates[why].append(job_id)
    verdict.duplicates = dict(duplicates)
    verdict.figures["redelivered"] = sum(len(v) for v in duplicates.values())
    verdict.figures["executed_twice"] = sum(1 for leases in sent.values() if len(leases) > 1)


def _check_versions(history: History, verdict: Verdict) -> None:
    problems: list[str] = []
    seen = [v for v in history.versions if v.source == "store"]
    by_seq: dict[int, str | None] = {}
    epochs: dict[int, set[str]] = defaultdict(set)
    previous = None
    for version in seen:
        if previous is not None:
            if version.seq < previous.seq:
                problems.append(f"seq went back from {previous.seq} to {version.seq} at {version.at:.3f}")
            elif version.seq > previous.seq and version.epoch < previous.epoch:
                problems.append(f"epoch went back from {previous.epoch} to {version.epoch} at seq {version.seq}")
        known = by_seq.setdefault(version.seq, version.digest)
        if known != version.digest:
            problems.append(f"seq {version.seq} has two different contents (two writers)")
        if version.broker is not None and version.epoch > 0:
            epochs[version.epoch].add(version.broker)
        previous = version
    leaders: dict[int, set[str]] = defaultdict(set)
    for version in history.versions:
        if version.role == "leader" and version.broker is not None:
            leaders[version.epoch].add(version.broker)
    for epoch, brokers in sorted(epochs.items()):
        if len(brokers) > 1:
            problems.append(f"epoch {epoch} was held by {len(brokers)} brokers in the store: {sorted(brokers)}")
    for epoch, brokers in sorted(leaders.items()):
        if len(brokers) > 1 and len(epochs.get(epoch, ())) <= 1:
            problems.append(f"{len(brokers)} nodes said they lead with epoch {epoch}: {sorted(brokers)}")
    verdict.failures["seq_epoch"] = problems
    verdict.figures["versions_seen"] = len(seen)
    # Format 2: how much sealing the run saw (every key a version referenced).
    keys = [v.segments for v in history.versions if v.segments is not None]
    verdict.figures["segments_seen"] = len({key for refs in keys for key in refs})
    # Format 3: of them, delayed segments (their keys' folder says so).
    verdict.figures["delayed_segments_seen"] = len({key for refs in keys for key in refs if "/delayed/" in key})
    verdict.figures["most_segments_at_once"] = max((len(refs) for refs in keys), default=0)


def _explained(call: Call, faults: list[Fault]) -> bool:
    """Whether a fault on the call's node overlapped it (so a timeout is
    expected). An operator request (:data:`OPERATOR_OPS`) also writes the
    database the nodes share (its nonce, on the leader): a node paused or
    frozen inside a transaction of its own holds the shared SQLite file's
    lock, and the request waits up to SQLite's busy timeout (5 s, beyond the
    clients' 3 s) before it is refused with 503 database_unavailable (chaos
    seed 64 for a purge; a fresh clone's test run for limit, rate_limit and
    pause_schedule, which stops 34 and 35 added without this rule)."""
    end = call.end if call.end is not None else float("inf")
    for fault in faults:
        shared_db = call.op in OPERATOR_OPS and fault.kind in _PAUSES
        if fault.kind not in _STALLING or (fault.node not in (None, call.node) and not shared_db):
            continue
        fault_end = (fault.end if fault.end is not None else float("inf")) + EXPLAIN_MARGIN_SECONDS
        if fault.start <= end and call.start <= fault_end:
            return True
    return False


def _check_lookups(calls: list[Call], verdict: Verdict) -> None:
    """A producer's look back at a job it pushed (``GET /jobs/<id>``) must not
    answer 404 while the job can only be pending or running: its push was
    acknowledged before the lookup was sent, and no complete or fail of it
    was sent before the lookup was answered (a job waiting deep in a
    segment object is found by id, docs/format.md "Id indexes")."""
    acked: dict[str, float] = {}
    finishing: dict[str, float] = {}  # job id -> when its first complete or fail was sent
    for call in calls:
        if call.op == "push" and call.ok and call.end is not None:
            for job_id in _pushed_ids(call):
                acked[job_id] = min(acked.get(job_id, call.end), call.end)
        elif call.op in ("complete", "fail"):
            job_id = str(call.args.get("job"))
            finishing[job_id] = min(finishing.get(job_id, call.start), call.start)
        elif call.op == "purge":
            for job_id in map(str, call.args.get("jobs", [])):
                finishing[job_id] = min(finishing.get(job_id, call.start), call.start)
    looks = [c for c in calls if c.op == "get" and c.args.get("look_back") and c.end is not None]
    problems = []
    for call in looks:
        job_id = str(call.args.get("job"))
        assert call.end is not None
        pending = acked.get(job_id, float("inf")) <= call.start and finishing.get(job_id, float("inf")) > call.end
        if pending and call.status == 404:
            problems.append(f"call {call.id} ({call.client} GET job {job_id} from {call.node}): 404 while the job "
                            "could only be pending or running")
    verdict.failures["lookups"] = problems
    verdict.figures["look_backs"] = len(looks)
    verdict.figures["look_backs_found"] = sum(1 for c in looks if c.ok)


def _check_answers(history: History, calls: list[Call], verdict: Verdict) -> None:
    problems = []
    timeouts = explained = 0
    for call in calls:
        if call.end is None:
            problems.append(f"call {call.id} ({call.client} {call.op} to {call.node}) never ended")
        elif call.error == "timeout":
            timeouts += 1
            if _explained(call, history.faults):
                explained += 1
            else:
                problems.append(f"call {call.id} ({call.client} {call.op} to {call.node}) got no answer "
                                f"in {call.end - call.start:.1f}s, with no fault on that node")
        elif call.status is not None and call.status >= 500 and call.status not in DOCUMENTED_5XX:
            problems.append(f"call {call.id} ({call.client} {call.op}) answered {call.status}: {call.answer!r:.200}")
    verdict.failures["unanswered"] = problems
    verdict.figures["unanswered"] = len(problems)
    verdict.figures["timeouts_during_faults"] = explained
    verdict.figures["answers_by_status"] = dict(sorted(_count(_answer_kind(c) for c in calls).items()))


def _answer_kind(call: Call) -> str:
    """What ``call`` got, for the answers' tally: its status, or its error's
    kind (an item of a batched ack without an answer of its own points to
    its call by number: one kind for all of them)."""
    if call.status is not None:
        return str(call.status)
    kind = (call.error or "none").split(":")[0]
    return "ack item without an answer" if kind.startswith("ack call ") else kind


def _check_idle(history: History, limits: Limits, verdict: Verdict) -> None:
    problems = []
    rows = []
    for idle in history.idle:
        beats = idle.seconds / idle.heartbeat_seconds
        cpu = idle.cpu_seconds / idle.seconds
        per_beat = idle.store_requests / beats
        rows.append({"node": idle.node, "phase": idle.phase, "cpu_share": round(cpu, 3),
                     "store_requests_per_heartbeat": round(per_beat, 2)})
        if idle.phase != "after":
            continue
        if cpu > limits.idle_cpu_share:
            problems.append(f"{idle.node} used {cpu:.0%} of a core while idle after the faults")
        if per_beat > limits.idle_requests_per_heartbeat:
            problems.append(f"{idle.node} sent {per_beat:.1f} store requests per heartbeat while idle after the faults")
    verdict.failures["idle"] = problems
    verdict.figures["idle"] = rows


def _check_recovery(history: History, limits: Limits, verdict: Verdict) -> None:
    problems = []
    times = []
    for fault in history.faults:
        where = f"{fault.kind} of {fault.node or 'the document'} at {fault.start:.3f}"
        if fault.recovered_at is None:
            problems.append(f"no push succeeded within {limits.recovery_cap_seconds:g}s after {where}")
            continue
        times.append(fault.recovered_at - fault.start)
        length = (fault.end or fault.start) - fault.start
        if (fault.kind in _PAUSES and length >= limits.long_pause_seconds and "never froze" not in fault.detail
                and fault.end is not None and fault.recovered_at > fault.end):
            problems.append(f"no takeover during the {length:.1f}s {where}: pushes resumed only "
                            f"{fault.recovered_at - fault.end:.1f}s after it ended")
    problems += _stop_problems(history, limits)
    verdict.failures["failover"] = problems
    verdict.figures["faults"] = len(history.faults)
    verdict.figures["faults_by_kind"] = dict(sorted(_count(f.kind for f in history.faults).items()))
    verdict.figures["store_faults_injected"] = dict(history.store_faults)
    verdict.figures["recovery_worst_seconds"] = round(max(times), 2) if times else None
    verdict.figures["recovery_median_seconds"] = round(statistics.median(times), 2) if times else None


def _check_schedules(history: History, limits: Limits, verdict: Verdict) -> None:
    problems = []
    moves: dict[str, list[tuple[float, str]]] = defaultdict(list)  # per schedule: (when seen, tick) as it moved
    skips: set[tuple[str, str]] = set()
    # Per schedule, the seq at which the watcher first saw each pause and each fired mark: which came first is
    # read from the document's order, not from their stamps, which two leaders' clocks may have written.
    first_pause: dict[tuple[str, str], int] = {}
    first_fire: dict[tuple[str, str, str], int] = {}
    for version in history.versions:
        if version.source != "store" or not version.schedules:
            continue
        for name, (outcome, at) in (version.schedule_marks or {}).items():
            if outcome == "fired":
                first_fire.setdefault((name, version.schedules.get(name, ""), at), version.seq)
        for name, since in (version.schedule_pauses or {}).items():
            first_pause.setdefault((name, since), version.seq)
            outcome, at = (version.schedule_marks or {}).get(name, ["", ""])
            if outcome != "fired":
                continue
            fired = first_fire[(name, version.schedules.get(name, ""), at)]
            paused = first_pause[(name, since)]
            # Seen first in one version: then their stamps tell, as far as the
            # clocks that wrote them agree (parsed: a whole second is written
            # without a fraction, so text order is not time order). Equal: the
            # fire and the pause in one commit (one ``now``), the fire applied
            # first, which is right.
            slack = timedelta(seconds=_clock_slack(history.faults, version.at - limits.recovery_cap_seconds,
                                                   version.at))
            if fired > paused or (
                    fired == paused and datetime.fromisoformat(at) > datetime.fromisoformat(since) + slack):
                problems.append(f"schedule {name}: its tick {version.schedules.get(name)} fired at {at}, while "
                                f"paused since {since} (seq {version.seq})")
        for name, (outcome, _) in (version.schedule_marks or {}).items():
            if outcome == "skipped":
                skips.add((name, version.schedules[name]))
        for name, tick in version.schedules.items():
            seen = moves[name]
            # Ticks are written alike ("2026-12-04T02:10:00Z"): text order is time order.
            if seen and tick < seen[-1][1]:
                problems.append(f"schedule {name}: its mark went back from {seen[-1][1]} to {tick} "
                                f"at seq {version.seq}")
            elif not seen or tick != seen[-1][1]:
                seen.append((version.at, tick))
    windows = [(f.start, (f.end or f.start) + limits.recovery_cap_seconds) for f in history.faults]
    longest = limits.schedule_seconds + limits.schedule_slack_seconds
    for name, seen in moves.items():
        for (before, tick), (after, _) in pairwise(seen):
            if after - before > longest and not any(start < after and before < end for start, end in windows):
                problems.append(f"schedule {name}: no tick after {tick} for {after - before:.1f}s "
                                f"(from {before:.3f}), with no fault about")
    verdict.failures["schedules"] = problems
    verdict.figures["schedule_ticks_seen"] = sum(len(seen) for seen in moves.values())
    verdict.figures["schedule_ticks_skipped_seen"] = len(skips)


def _check_limits(history: History, verdict: Verdict) -> None:
    problems = []
    seen: dict[str, tuple[int, int]] = {}  # per queue: (its limit, the most that may run now)
    under = most = full = 0
    for version in history.versions:
        if version.source != "store":
            continue
        limits = version.limits or {}
        for queue in [q for q in seen if q not in limits]:
            del seen[queue]  # the limit was removed
        for queue, limit in limits.items():
            running = (version.running or {}).get(queue, 0)
            under += 1
            most = max(most, running)
            full += running == limit
            was = seen.get(queue)
            if was is None or was[0] != limit:
                # First seen with this limit: jobs running then carry on (and any
                # claimed under the old limit in versions the watcher missed).
                seen[queue] = (limit, max(limit, running))
                continue
            if running > was[1]:
                problems.append(f"queue {queue}: {running} jobs running at seq {version.seq}, above its limit of "
                                f"{limit} (at most {was[1]} could still run)")
            seen[queue] = (limit, max(limit, min(was[1], running)))
    verdict.failures["limits"] = problems
    verdict.figures["limited_versions_seen"] = under
    verdict.figures["limited_most_running"] = most
    verdict.figures["limited_versions_full"] = full


def _check_rates(history: History, verdict: Verdict) -> None:
    problems: list[str] = []
    # Per (queue, window start): the distinct starts seen claimed in that
    # window, and the most the document counted for it.
    starts: dict[tuple[str, str], set[tuple[str, str]]] = {}
    counted: dict[tuple[str, str], int] = {}
    # Per queue: the previous version's rate, window and count.
    last: dict[str, tuple[int, str | None, int]] = {}
    # Every (queue, job, claimed_at) seen in a version with a window so far.
    leases_seen: set[tuple[str, str, str]] = set()
    for version in history.versions:
        if version.source != "store":
            continue
        for queue, (jobs, seconds, window_start, started) in (version.rates or {}).items():
            was = last.get(queue)
            last[queue] = (jobs, window_start, started)
            if window_start is None:
                continue
            key = (queue, window_start)
            # Judged between two versions with the same rate: one lowered in
            # between (in versions the watcher missed) keeps the count.
            if was is not None and was[:2] == (jobs, window_start) and started > was[2] and started > jobs:
                # Only claims raise the count, and a claim starts no more than the window has left.
                problems.append(f"queue {queue}: {started} starts counted at seq {version.seq} in the window opened "
                                f"at {window_start}, above its rate of {jobs} per {seconds:g} s")
            counted[key] = max(counted.get(key, 0), started)
            opened = datetime.fromisoformat(window_start)
            closes = opened + timedelta(seconds=seconds)
            for job, claimed_at in (version.rate_starts or {}).get(queue, ()):
                # A lease belongs to the window of the version it is first seen
                # in, if its stamp falls inside it: a lease seen before, under
                # an earlier window, is not this one's, whatever its stamp says.
                # (A clock fault can stamp a window over an earlier lease's
                # stamp: chaos seed 148, a leader 4.7 s behind opened windows
                # whose span held a lease claimed 4.5 s earlier by its true clock.)
                if (queue, job, claimed_at) in leases_seen:
                    continue
                leases_seen.add((queue, job, claimed_at))
                if opened <= datetime.fromisoformat(claimed_at) < closes:
                    starts.setdefault(key, set()).add((job, claimed_at))
        for queue in [q for q in last if q not in (version.rates or {})]:
            del last[queue]  # the rate was removed
    for (queue, window_start), seen in sorted(starts.items()):
        if len(seen) > counted[(queue, window_start)]:
            problems.append(f"queue {queue}: {len(seen)} jobs seen claimed in the window opened at {window_start}, "
                            f"which counted {counted[(queue, window_start)]} starts")
    verdict.failures["rates"] = problems
    verdict.figures["rate_windows_seen"] = len(counted)
    verdict.figures["rate_windows_full"] = sum(
        1 for version in history.versions if version.source == "store"
        for jobs, _, start, started in (version.rates or {}).values() if start is not None and started >= jobs)
    verdict.figures["rate_starts_seen"] = sum(len(seen) for seen in starts.values())


def _stop_problems(history: History, limits: Limits) -> list[str]:
    """A node stopped with SIGTERM exits 0; a leader so stopped hands the
    lead over: if it stays down long enough to tell, a push succeeds on
    another node sooner than a crashed leader can be replaced. A standby
    takes over a crashed leader once it saw no commit for the takeover
    interval, and the leader's last commit came at most a heartbeat before
    it died, seen at most a poll (a heartbeat) later: no sooner than the
    interval less two heartbeats. Handed over, a standby takes over at its
    next poll."""
    problems = []
    for fault in history.faults:
        if fault.kind != "stop":
            continue
        where = f"{fault.node} stopped with SIGTERM at {fault.start:.3f}"
        if fault.exit_status != 0:
            problems.append(f"{where} exited with status {fault.exit_status} (None: not within the bound), not 0")
            continue
        exited, restarted, recovered = fault.exited_at, fault.end, fault.recovered_at
        if not fault.led or exited is None or restarted is None or recovered is None:
            continue
        bound = limits.takeover_seconds - 2 * limits.heartbeat_seconds
        if restarted - exited >= bound and recovered - exited >= bound:
            problems.append(f"{where} led and did not hand over: pushes resumed {recovered - exited:.1f}s after it "
                            f"exited, no sooner than after a crash (the takeover interval less two heartbeats, "
                            f"{bound:g}s)")
    return problems


def recovered_after(calls: list[Call], since: float) -> float | None:
    """When the first push sent at or after ``since`` was acknowledged (None: not yet)."""
    ends = [c.end for c in calls[-5000:] if c.op == "push" and c.ok and c.start >= since and c.end is not None]
    return min(ends) if ends else None
