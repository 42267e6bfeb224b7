"""Figures of a chaos run, as text for the terminal and as docs/reliability.md."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

from chaos.checker import Verdict
from chaos.run import Outcome

CHECKS = {
    "lost_pushes": "no acknowledged push lost (I2)",
    "fifo": "first claims follow push order within the queue (I7)",
    "delays": "no delayed job leased before it was due, unless a run now named it first",
    "run_now": "a run now makes due only what it was sent",
    "lookups": "a pushed job not yet completed is found by id, in a segment or not",
    "purges": "a purged job is never leased, completed or kept afterwards; a refused purge changes nothing",
    "requeues": "a requeue moves only what it was sent, its revoked leases complete nothing, and a paced "
                "requeue's jobs are not leased before their turn",
    "stops": "a stop moves only what it was sent, to the dead letters, where it stays until a redrive; its revoked "
             "leases complete nothing",
    "watches": "a lease watch that says a lease is lost is right: a requeue, a stop, a purge or its end explains "
               "it, and no result with that lease is accepted afterwards",
    "stale_completions": "no completion accepted from a stale lease (I4)",
    "seq_epoch": "seq and epoch only rise, one writer per version (I3, I5, I10)",
    "unanswered": "every call got exactly one answer, no undocumented 5xx (I8)",
    "double_completions": "no job completed twice (push ids are idempotency keys)",
    "idle": "idle CPU and store requests flat after the faults (I11)",
    "failover": "every fault recovered; a long-paused leader is replaced during its pause",
    "document": "a deleted document is not re-created, an unreadable one not overwritten (I6, I10)",
    "limits": "a queue never runs more jobs than its concurrency limit, but those running when it was set",
    "rates": "a rate window never starts more jobs than its rate, nor fewer than the leases claimed in it show",
    "schedules": "a schedule's tick only moves forward, stalls only during a fault, and never fires while paused "
                 "(recurring jobs)",
    "harness": "the run went as planned (nemesis, healing, a leader before each idle measurement)",
}
MAX_EXAMPLES = 5


def figures_lines(outcome: Outcome) -> list[str]:
    f = outcome.verdict.figures
    lines = [
        f"faults injected: {f['faults']} ({_pairs(f['faults_by_kind'])})",
        f"store faults injected by the fault stores: {_pairs(f['store_faults_injected']) or 'none'}",
        f"operations recorded: {f['operations']} ({_pairs(f['operations_by_kind'])})",
        f"answers: {_pairs(f['answers_by_status'])}",
        f"document versions seen: {f['versions_seen']}",
        f"pushes acknowledged: {f['pushes_acknowledged']}; completed: {f['completed']}; "
        f"dead letters: {f['dead_letters']}; left pending or running: {f['left_pending_or_running']}; "
        f"completion unconfirmed (answer lost): {f['unconfirmed']}",
        f"acknowledged pushes lost: {f['lost']}",
        f"format 2: segments referenced by the versions seen {f.get('segments_seen', 0)} (delayed: "
        f"{f.get('delayed_segments_seen', 0)}; at most "
        f"{f.get('most_segments_at_once', 0)} at once); left in segments {f.get('left_in_segments', 0)}; "
        f"segment objects left unreferenced at the end {f.get('unreferenced_segments', 0)}; "
        f"id indexes left without their segment {f.get('orphan_indexes', 0)}",
        f"FIFO: {f.get('fifo_compared', 0)} first claims compared, {f.get('fifo_violations', 0)} out of order",
        f"delayed pushes: {f.get('delayed_pushes', 0)}, leased {f.get('delayed_leased', 0)}; the earliest lease "
        f"{_margin(f.get('delayed_earliest_margin'))}",
        f"lookups by id of earlier pushes: {f.get('look_backs', 0)}, found {f.get('look_backs_found', 0)}",
        f"operator purges by id (signed, /api/v1/operator): {f.get('purges', 0)} sent, "
        f"{f.get('purges_refused', 0)} refused; jobs purged {f.get('purged', 0)}, "
        f"maybe purged (answer unknown) {f.get('maybe_purged', 0)}",
        f"operator requeues and redrives (signed, /api/v1/operator): {f.get('requeues', 0)} sent; jobs moved "
        f"{f.get('requeued_jobs', 0)}, of which paced {f.get('requeued_paced_jobs', 0)}",
        f"operator stops (signed, /api/v1/operator): {f.get('stops', 0)} sent; jobs stopped "
        f"{f.get('stopped_jobs', 0)}",
        f"operator run nows (signed, /api/v1/operator): {f.get('run_nows', 0)} sent; delayed jobs made due "
        f"{f.get('made_due', 0)}",
        f"lease watches: {f.get('watches', 0)} sent, {f.get('watches_told_lost', 0)} told the lease was lost "
        f"({_pairs(f.get('watches_lost_by', {})) or 'none'}); results sent anyway and refused "
        f"{f.get('results_refused_after_watch', 0)}",
        f"stale completions accepted: {f['stale_completions']}",
        f"unanswered calls: {f['unanswered']} (timeouts explained by a fault on the node: "
        f"{f['timeouts_during_faults']})",
        f"duplicates: {f['redelivered']} jobs delivered more than once, {f['executed_twice']} run to completion "
        f"by two leases, {f['completed_twice']} completed twice",
        f"versions with a concurrency limit seen: {f.get('limited_versions_seen', 0)}, with as many running as the "
        f"limit: {f.get('limited_versions_full', 0)}, the most running under one (jobs running when it was set "
        f"included): {f.get('limited_most_running', 0)}",
        f"rate windows seen: {f.get('rate_windows_seen', 0)}, versions with a window used up: "
        f"{f.get('rate_windows_full', 0)}, leases seen claimed inside a window: {f.get('rate_starts_seen', 0)}",
        f"schedule ticks seen moving: {f.get('schedule_ticks_seen', 0)}, of which skipped (paused): "
        f"{f.get('schedule_ticks_skipped_seen', 0)}",
        f"recovery time after a fault: worst {f['recovery_worst_seconds']} s, median {f['recovery_median_seconds']} s",
    ]
    for why, jobs in sorted(outcome.verdict.duplicates.items()):
        lines.append(f"  redelivered, {len(jobs)}: {why}")
    for row in f["idle"]:
        lines.append(f"  idle {row['phase']:6} {row['node']}: cpu {row['cpu_share']:.1%}, "
                     f"{row['store_requests_per_heartbeat']} store requests per heartbeat")
    return lines


def check_lines(verdict: Verdict) -> list[str]:
    lines = []
    for name, title in CHECKS.items():
        problems = verdict.failures.get(name, [])
        lines.append(f"{'PASS' if not problems else 'FAIL'}  {title}" + (f": {len(problems)}" if problems else ""))
        lines.extend(f"        {p}" for p in problems[:MAX_EXAMPLES])
        if len(problems) > MAX_EXAMPLES:
            lines.append(f"        ... and {len(problems) - MAX_EXAMPLES} more")
    return lines


def text(outcome: Outcome) -> str:
    o = outcome.options
    head = (f"chaos run: seed {o.seed}, {o.store} store, {o.nodes} nodes, {o.producers} producers, "
            f"{o.workers} workers, {outcome.seconds:.0f} s; kinds {','.join(o.kinds)}; odd strings {o.odd_strings:g}, "
            f"deep payloads {o.deep_payloads:g}, dropped answers {o.drop_answer:g}"
            + (f"; format 2, segments {','.join(map(str, o.segments))} (segment, head, refill-below jobs), "
               f"delayed horizon {o.delayed_horizon:g} s" if o.segments else ""))
    verdict = "all checks passed" if outcome.verdict.ok else f"CHECKS FAILED; history in {outcome.workdir}"
    return "\n".join([head, *figures_lines(outcome), *check_lines(outcome.verdict), verdict]) + "\n"


def write_docs(outcomes: list[Outcome], path: Path) -> None:
    """Write docs/reliability.md with the figures of ``outcomes`` and the commands that made them."""
    commands = "\n".join(dict.fromkeys(o.options.command or "python -m chaos" for o in outcomes))
    parts = [
        "# Reliability: the chaos harness's figures\n",
        "These figures come from `python -m chaos` (the `chaos/` package): real daphne nodes on one store, "
        "producers and workers on the HTTP API recording every call and its answer, a seeded nemesis "
        "(kill -9, SIGSTOP/SIGCONT at random moments and in the middle of a write, store errors, lost "
        "replies, slow and hung requests through `engine/stores/faults.py`, deletion and corruption of "
        "`queue.json`), and a checker over the recorded history. See `chaos/checker.py` for what each "
        "check means exactly. Produced by:\n",
        f"```\n{commands}\n```\n",
        f"on commit `{_revision()}`, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.\n",
    ]
    for outcome in outcomes:
        parts.append(f"## {outcome.options.store} store, seed {outcome.options.seed}\n")
        parts.append("```\n" + text(outcome) + "```\n")
    parts.append(
        "Duplicates are at-least-once redeliveries, not losses: a job is handed out again when the "
        "lease of the worker holding it expires (the worker stalled, its claim's answer was lost, or a "
        "node was paused long enough), or after the worker failed it. A late complete from the old "
        "lease is refused (`lease_lost`), which the stale-completion check verifies.\n"
    )
    path.write_text("\n".join(parts))


def _revision() -> str:
    try:
        done = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=Path(__file__).resolve().parents[1],
                              capture_output=True, text=True, timeout=10)
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"


def _margin(seconds: float | None) -> str:
    """How long after its due time the earliest-leased delayed job was handed out, at the latest."""
    if seconds is None:
        return "none"
    return f"{seconds:.3f} s after it was due, at the latest" if seconds >= 0 else f"{-seconds:.3f} s EARLY"


def _pairs(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())
