"""The chaos checker, fed hand-made histories: each broken guarantee must be
flagged, and a clean history must pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chaos.checker import Limits, check, recovered_after
from chaos.history import Call, Fault, History, Idle, Version

NODE_A = "http://127.0.0.1:1001"
NODE_B = "http://127.0.0.1:1002"


class Recorder:
    """Builds a history call by call, on a fake clock that moves one second per call."""

    def __init__(self) -> None:
        self.history = History()
        self.now = 0.0

    def call(self, op: str, args: dict[str, Any], *, status: int | None = 200, answer: Any = None,
             error: str | None = None, node: str = NODE_A, seconds: float = 0.5, end: bool = True) -> Call:
        self.now += 1.0
        call = Call(id=len(self.history.calls), client="c", op=op, node=node, args=args, start=self.now)
        if end:
            call.end = self.now + seconds
            call.status, call.answer, call.error = status, answer, error
        self.history.calls.append(call)
        return call

    def push(self, job: str, **kw: Any) -> Call:
        kw.setdefault("status", 201)
        kw.setdefault("answer", {"ids": [job]})
        return self.call("push", {"queue": "q", "jobs": [{"id": job, "payload": 1}]}, **kw)

    def claim(self, job: str, lease: str, **kw: Any) -> Call:
        kw.setdefault("answer", {"jobs": [{"id": job, "lease": lease}]})
        return self.call("claim", {"worker": "w"}, **kw)

    def complete(self, job: str, lease: str, **kw: Any) -> Call:
        kw.setdefault("answer", {"ok": True})
        return self.call("complete", {"job": job, "lease": lease}, **kw)

    def store_version(self, seq: int, *, epoch: int = 1, broker: str = "b1", digest: str | None = None) -> None:
        self.now += 0.1
        self.history.versions.append(Version(at=self.now, source="store", seq=seq, epoch=epoch, broker=broker,
                                             writer=broker, digest=digest or f"d{seq}"))

    def final(self, jobs: list[str] = (), dead: list[str] = ()) -> History:  # type: ignore[assignment]
        self.history.final_document = {"jobs": [{"id": j} for j in jobs], "dead": [{"id": j} for j in dead]}
        return self.history


def clean() -> Recorder:
    r = Recorder()
    r.store_version(1)
    r.push("j1")
    r.push("j2")
    r.push("j3")
    r.claim("j1", "L1")
    r.complete("j1", "L1")
    r.claim("j2", "L2")
    r.store_version(2)
    r.store_version(3, epoch=2, broker="b2")
    return r


def test_a_clean_history_passes() -> None:
    verdict = check(clean().final(jobs=["j2", "j3"]))

    assert verdict.ok, verdict.failures
    assert verdict.figures["pushes_acknowledged"] == 3
    assert verdict.figures["completed"] == 1
    assert verdict.figures["lost"] == 0


def test_a_lost_push_is_flagged() -> None:
    verdict = check(clean().final(jobs=["j2"]))  # j3 was acknowledged, never completed, and is gone

    assert not verdict.ok
    assert len(verdict.failures["lost_pushes"]) == 1
    assert "j3" in verdict.failures["lost_pushes"][0]


def test_a_refused_or_unanswered_push_is_not_owed() -> None:
    r = clean()
    r.push("j4", status=503, answer={"error": "store_unavailable"})
    r.call("push", {"jobs": [{"id": "j5"}]}, status=None, error="timeout", node=NODE_B)
    r.history.faults.append(Fault(kind="pause", node=NODE_B, start=r.now - 0.5, end=r.now + 1, recovered_at=r.now + 1))

    assert check(r.final(jobs=["j2", "j3"])).ok


def test_a_dead_letter_or_an_unconfirmed_completion_is_not_lost() -> None:
    r = clean()
    r.claim("j3", "L3")
    r.complete("j3", "L3", status=None, answer=None, error="ConnectError: reset")  # outcome unknown

    verdict = check(r.final(dead=["j2"]))

    assert verdict.failures["lost_pushes"] == []
    assert verdict.figures["unconfirmed"] == 1


def test_a_stale_completion_is_flagged() -> None:
    r = clean()
    r.claim("j3", "L3")
    r.claim("j3", "L4")  # L3 expired; the job was leased again, acknowledged...
    r.complete("j3", "L3")  # ...and the old lease's complete was still accepted

    verdict = check(r.final(jobs=["j2"]))

    assert len(verdict.failures["stale_completions"]) == 1
    assert "L3" in verdict.failures["stale_completions"][0]


def test_a_refused_stale_completion_is_a_redelivery_not_a_failure() -> None:
    r = clean()
    r.claim("j3", "L3")
    r.claim("j3", "L4")
    r.complete("j3", "L3", status=409, answer={"error": "lease_lost"})
    r.complete("j3", "L4")

    verdict = check(r.final(jobs=["j2"]))

    assert verdict.ok, verdict.failures
    assert verdict.figures["redelivered"] == 1
    assert verdict.figures["executed_twice"] == 1


def test_seq_going_back_is_flagged() -> None:
    r = clean()
    r.store_version(1, epoch=0, broker="b3")  # the document was re-created

    verdict = check(r.final(jobs=["j2", "j3"]))

    assert any("seq went back" in p for p in verdict.failures["seq_epoch"])


def test_two_contents_for_one_seq_are_flagged() -> None:
    r = clean()
    r.store_version(3, epoch=2, broker="b2", digest="other")

    assert any("two different contents" in p for p in check(r.final(jobs=["j2", "j3"])).failures["seq_epoch"])


@pytest.mark.parametrize("versions", [
    [(4, 1, "b2")],  # epoch went back
    [(4, 2, "b3")],  # epoch 2 held by b2 and b3
])
def test_epoch_trouble_is_flagged(versions: list[tuple[int, int, str]]) -> None:
    r = clean()
    for seq, epoch, broker in versions:
        r.store_version(seq, epoch=epoch, broker=broker)

    assert check(r.final(jobs=["j2", "j3"])).failures["seq_epoch"]


def test_two_nodes_leading_with_one_epoch_are_flagged() -> None:
    r = clean()
    for node, broker in ((NODE_A, "b2"), (NODE_B, "b9")):
        r.history.versions.append(Version(at=r.now, source=node, seq=3, epoch=2, broker=broker, role="leader"))

    assert check(r.final(jobs=["j2", "j3"])).failures["seq_epoch"]


def test_an_unanswered_call_is_flagged() -> None:
    r = clean()
    r.call("claim", {"worker": "w"}, end=False)  # never ended

    assert check(r.final(jobs=["j2", "j3"])).failures["unanswered"]


def test_a_timeout_without_a_fault_is_flagged_and_with_one_is_not() -> None:
    r = clean()
    r.call("push", {"jobs": [{"id": "j9"}]}, status=None, error="timeout", node=NODE_B, seconds=3)
    assert check(r.final(jobs=["j2", "j3"])).failures["unanswered"]

    r.history.faults.append(Fault(kind="freeze", node=NODE_B, start=r.now + 1, end=r.now + 5, recovered_at=r.now + 2))
    assert check(r.final(jobs=["j2", "j3"])).failures["unanswered"] == []


@pytest.mark.parametrize(("op", "kind", "explained"), [
    ("purge", "freeze", True), ("purge", "pause", True), ("purge", "slow", False), ("push", "freeze", False),
    ("limit", "pause", True), ("rate_limit", "freeze", True), ("pause_schedule", "pause", True),
    ("rate_limit", "slow", False), ("claim", "pause", False),
])
def test_an_operator_call_is_explained_by_another_node_stopped_holding_the_shared_database(
        op: str, kind: str, explained: bool) -> None:
    # A purge writes its nonce to the database the nodes share: a node paused
    # or frozen inside its own transaction holds SQLite's lock (chaos seed 64).
    # Other calls, and other faults elsewhere, explain nothing.
    r = clean()
    r.call(op, {"jobs": ["j3"]}, status=None, error="timeout", node=NODE_B, seconds=3)
    r.history.faults.append(Fault(kind=kind, node=NODE_A, start=r.now - 0.5, end=r.now + 5, recovered_at=r.now + 2))

    assert (check(r.final(jobs=["j2", "j3"])).failures["unanswered"] == []) is explained


def test_a_500_is_flagged() -> None:
    r = clean()
    r.call("fail", {"job": "j2", "lease": "L2"}, status=500, answer=None)

    assert check(r.final(jobs=["j2", "j3"])).failures["unanswered"]


def test_a_job_completed_twice_is_flagged() -> None:
    r = clean()
    r.push("j1")  # the push retried after its answer was lost brings j1 back...
    r.claim("j1", "L9")
    r.complete("j1", "L9")  # ...and it runs again

    verdict = check(r.final(jobs=["j2", "j3"]))

    assert len(verdict.failures["double_completions"]) == 1
    assert "re-created" in verdict.failures["double_completions"][0]


def test_busy_idle_nodes_are_flagged() -> None:
    r = clean()
    r.history.idle = [
        Idle(node=NODE_A, phase="before", seconds=5, cpu_seconds=0.05, store_requests=40, heartbeat_seconds=0.25),
        Idle(node=NODE_A, phase="after", seconds=5, cpu_seconds=4.9, store_requests=4000, heartbeat_seconds=0.25),
        Idle(node=NODE_B, phase="after", seconds=5, cpu_seconds=0.05, store_requests=40, heartbeat_seconds=0.25),
    ]

    problems = check(r.final(jobs=["j2", "j3"])).failures["idle"]

    assert len(problems) == 2 and all(NODE_A in p for p in problems)


def test_no_recovery_and_no_takeover_during_a_long_pause_are_flagged() -> None:
    r = clean()
    r.history.faults = [
        Fault(kind="kill", node=NODE_A, start=1, end=2, recovered_at=None),
        Fault(kind="freeze", node=NODE_A, start=10, end=20, recovered_at=21),  # pushes resumed only after it
        Fault(kind="pause", node=NODE_A, start=30, end=40, recovered_at=33),  # a standby took over: fine
    ]

    verdict = check(r.final(jobs=["j2", "j3"]), Limits(long_pause_seconds=7))

    assert len(verdict.failures["failover"]) == 2
    assert verdict.figures["recovery_worst_seconds"] == 11
    assert verdict.figures["recovery_median_seconds"] == 7


def test_a_stopped_node_that_did_not_exit_0_or_a_leader_that_did_not_hand_over_is_flagged() -> None:
    r = clean()

    def stop(start: float, *, status: int | None = 0, led: bool = True, down: float = 3.0,
             recovered: float = 0.3) -> Fault:
        exited = start + 0.1
        return Fault(kind="stop", node=NODE_A, start=start, end=exited + down, exit_status=status, exited_at=exited,
                     led=led, recovered_at=exited + recovered)

    r.history.faults = [
        stop(10),  # handed over: pushes resumed 0.3 s after it exited
        stop(20, recovered=1.6),  # no sooner than after a crash (1.5 s): flagged
        stop(30, led=False, recovered=1.6),  # a standby: nothing to hand over
        stop(40, down=1.0, recovered=1.1),  # restarted before the bound: its own takeover on restart counts
        stop(50, status=-15),  # died of the signal: flagged
        stop(60, status=None),  # did not exit in time: flagged
    ]

    limits = Limits(takeover_seconds=2, heartbeat_seconds=0.25)  # a crash costs at least 1.5 s
    problems = check(r.final(jobs=["j2", "j3"]), limits).failures["failover"]

    assert len(problems) == 3, problems
    assert "at 20.000 led and did not hand over: pushes resumed 1.6s after it exited" in problems[0]
    assert "at 50.000 exited with status -15" in problems[1] and "at 60.000 exited with status None" in problems[2]


def _marks(r: Recorder, ticks: list[tuple[float, str]]) -> None:
    """Store versions seen at ``at`` (seconds) whose schedule mark is ``tick`` (its seconds past 02:10)."""
    for seq, (at, second) in enumerate(ticks, start=10):
        r.history.versions.append(Version(at=at, source="store", seq=seq, epoch=2, broker="b2", writer="b2",
                                          digest=f"m{seq}", schedules={"tick": f"2026-12-04T02:10:{second}Z"}))


def test_a_schedule_mark_that_goes_back_or_stalls_without_a_fault_is_flagged() -> None:
    r = clean()
    # Every 2 s, then a 9 s stall (no fault), then back from :14 to :12.
    _marks(r, [(100, "00"), (102, "02"), (104, "04"), (113, "14"), (113.1, "12")])
    verdict = check(r.final(jobs=["j2", "j3"]), Limits(schedule_seconds=2, schedule_slack_seconds=3))
    problems = verdict.failures["schedules"]
    assert len(problems) == 2, problems
    assert "went back from 2026-12-04T02:10:14Z to 2026-12-04T02:10:12Z at seq 14" in problems[0]
    assert "no tick after 2026-12-04T02:10:04Z for 9.0s" in problems[1]


def test_a_schedule_stall_during_a_fault_or_its_recovery_is_allowed() -> None:
    r = clean()
    _marks(r, [(100, "00"), (102, "02"), (112, "12"), (114, "14")])
    r.history.faults = [Fault(kind="kill", node=NODE_A, start=103, end=104, recovered_at=106)]
    verdict = check(r.final(jobs=["j2", "j3"]), Limits(schedule_seconds=2, schedule_slack_seconds=3,
                                                        recovery_cap_seconds=20))
    assert verdict.failures["schedules"] == []
    assert verdict.figures["schedule_ticks_seen"] == 4


def test_a_schedule_fired_while_paused_is_flagged_and_skipped_ticks_are_counted() -> None:
    r = clean()
    _marks(r, [(100, "00"), (102, "02"), (104, "04"), (106, "06")])
    paused = "2026-12-04T02:10:01.500Z"
    # A whole second is written without a fraction: "…:04Z" sorts before "…:01.500Z" as text.
    for version, (outcome, at) in zip(r.history.versions[-4:], [("fired", "2026-12-04T02:10:00.010Z"),
                                                               ("skipped", "2026-12-04T02:10:02.010Z"),
                                                               ("fired", "2026-12-04T02:10:04Z"),
                                                               ("fired", "2026-12-04T02:10:06.010Z")], strict=True):
        version.schedule_marks = {"tick": [outcome, at]}
    # Paused from the second version on; the fourth was resumed (no pause in it): only the third is wrong.
    for version in r.history.versions[-3:-1]:
        version.schedule_pauses = {"tick": paused}
    verdict = check(r.final(jobs=["j2", "j3"]), Limits(schedule_seconds=2, schedule_slack_seconds=3))
    assert verdict.failures["schedules"] == [
        f"schedule tick: its tick 2026-12-04T02:10:04Z fired at 2026-12-04T02:10:04Z, while paused since {paused} "
        "(seq 12)"]
    assert verdict.figures["schedule_ticks_skipped_seen"] == 1


def test_a_pause_stamped_by_a_clock_behind_after_a_fire_is_judged_by_the_documents_order() -> None:
    """Chaos seed 134: a leader whose clock read 7.4 s behind paused the
    schedule just after an earlier fire; the pause's stamp came out before
    the fire's. The versions' order says the fire came first: not flagged.
    A fire first seen after the pause is, whatever its stamp says."""
    r = clean()
    _marks(r, [(100, "00"), (102, "02"), (104, "02"), (106, "06")])
    fired = ["fired", "2026-12-04T02:10:02.005Z"]
    for version in r.history.versions[-3:-1]:
        version.schedule_marks = {"tick": fired}
    r.history.versions[-2].schedule_pauses = {"tick": "2026-12-04T02:09:58.900Z"}  # stamped 3 s before the fire
    r.history.versions[-1].schedule_marks = {"tick": ["fired", "2026-12-04T02:09:59.000Z"]}  # after, by order
    r.history.versions[-1].schedule_pauses = {"tick": "2026-12-04T02:09:58.900Z"}

    problems = check(r.final(jobs=["j2", "j3"]), Limits(schedule_seconds=2, schedule_slack_seconds=3)).failures[
        "schedules"]

    assert len(problems) == 1 and "its tick 2026-12-04T02:10:06Z fired at 2026-12-04T02:09:59.000Z" in problems[0]


def _limited(r: Recorder, seen: list[tuple[int | None, int]]) -> None:
    """Store versions whose chaos queue has limit and running jobs as given (None: no limit)."""
    for seq, (limit, running) in enumerate(seen, start=30):
        r.history.versions.append(Version(
            at=200 + seq, source="store", seq=seq, epoch=2, broker="b2", writer="b2", digest=f"l{seq}",
            limits=None if limit is None else {"chaos": limit}, running=None if limit is None else {"chaos": running}))


def test_more_jobs_running_than_the_limit_is_flagged_but_those_running_when_it_was_set_carry_on() -> None:
    r = clean()
    # Set to 2 with 4 running (they carry on), down to 3, back up to 4 (a new start above the limit: wrong),
    # then 2 and 3 (wrong again); removed, then 1 with 5 running when first seen (fine).
    _limited(r, [(None, 0), (2, 4), (2, 3), (2, 4), (2, 2), (2, 3), (None, 6), (1, 5), (1, 1)])
    verdict = check(r.final(jobs=["j2", "j3"]))
    assert verdict.failures["limits"] == [
        "queue chaos: 4 jobs running at seq 33, above its limit of 2 (at most 3 could still run)",
        "queue chaos: 3 jobs running at seq 35, above its limit of 2 (at most 2 could still run)"]
    assert verdict.figures["limited_versions_seen"] == 7 and verdict.figures["limited_most_running"] == 5
    assert verdict.figures["limited_versions_full"] == 2  # (2, 2) and (1, 1)


def _rated(r: Recorder, seen: list[tuple[int, str | None, int, list[tuple[str, str]]]]) -> None:
    """Store versions whose chaos queue has a rate of ``jobs`` per second, its window and count, and
    the running jobs' [id, claimed_at] as given."""
    for seq, (jobs, start, started, leases) in enumerate(seen, start=40):
        r.history.versions.append(Version(
            at=300 + seq, source="store", seq=seq, epoch=2, broker="b2", writer="b2", digest=f"r{seq}",
            rates={"chaos": [jobs, 1.0, start, started]}, rate_starts={"chaos": [list(lease) for lease in leases]}))


T0, T1 = "2026-12-04T12:00:00Z", "2026-12-04T12:00:01.5Z"


def test_a_window_counting_past_its_rate_or_fewer_starts_than_were_claimed_in_it_is_flagged() -> None:
    r = clean()
    _rated(r, [
        (2, None, 0, []),
        (2, T0, 1, [("a", "2026-12-04T12:00:00Z")]),
        (2, T0, 2, [("a", "2026-12-04T12:00:00Z"), ("b", "2026-12-04T12:00:00.5Z")]),
        (2, T0, 3, [("c", "2026-12-04T12:00:00.9Z")]),  # a claim raised the count past the rate: wrong
        # The next window: the document counts one, but two leases were claimed in it (one
        # claimed before it opened, at 12:00:01, is not in it; one at 12:00:02.5 is past its end).
        (2, T1, 1, [("d", "2026-12-04T12:00:01.5Z"), ("e", "2026-12-04T12:00:01Z")]),
        (2, T1, 1, [("f", "2026-12-04T12:00:02.4Z"), ("g", "2026-12-04T12:00:02.5Z")]),
        (1, T1, 1, []),  # lowered below the count by an operator: not a claim, fine
    ])
    verdict = check(r.final(jobs=["j2", "j3"]))
    assert verdict.failures["rates"] == [
        f"queue chaos: 3 starts counted at seq 43 in the window opened at {T0}, above its rate of 2 per 1 s",
        f"queue chaos: 2 jobs seen claimed in the window opened at {T1}, which counted 1 starts"]
    assert verdict.figures["rate_windows_seen"] == 2 and verdict.figures["rate_starts_seen"] == 5


def test_a_lease_seen_under_an_earlier_window_is_not_counted_in_a_later_one_its_stamp_falls_in() -> None:
    """A leader whose clock a fault set behind opens windows whose span holds
    the stamp of a lease claimed earlier, by the true clock (chaos seed 148):
    that lease was counted by the window it was claimed in, not by these."""
    r = clean()
    _rated(r, [
        (1, T0, 1, [("a", "2026-12-04T12:00:01.8Z")]),  # claimed at true time, in T0's window...
        (1, T1, 1, [("a", "2026-12-04T12:00:01.8Z"), ("b", T1)]),  # ...and T1 opened by a clock behind
    ])
    verdict = check(r.final(jobs=["j2", "j3"]))
    assert verdict.failures["rates"] == [] and verdict.figures["rate_starts_seen"] == 1


def test_a_rate_raised_between_two_versions_may_count_more_and_a_clean_history_passes() -> None:
    r = clean()
    _rated(r, [(2, T0, 2, [("a", T0), ("b", T0)]), (5, T0, 4, [("c", T0)]), (5, T1, 5, [])])
    verdict = check(r.final(jobs=["j2", "j3"]))
    assert verdict.failures["rates"] == [] and verdict.figures["rate_windows_full"] == 2


def test_document_events_are_flagged() -> None:
    r = clean()
    r.history.event("I10: a node re-created the deleted document")

    assert check(r.final(jobs=["j2", "j3"])).failures["document"]


def test_recovered_after_finds_the_first_push_sent_after_the_fault() -> None:
    r = Recorder()
    r.push("a")  # start 1, end 1.5
    r.push("b", status=503)  # start 2
    r.push("c")  # start 3, end 3.5

    assert recovered_after(r.history.calls, 1.2) == 3.5
    assert recovered_after(r.history.calls, 3.2) is None


def test_a_harness_failure_fails_the_run() -> None:
    r = clean()
    r.history.event("harness: the nemesis crashed: RuntimeError()")

    assert check(r.final(jobs=["j2", "j3"])).failures["harness"]


def test_dead_letters_dropped_by_the_bound_fail_the_run_as_the_harness_not_as_lost_pushes_alone() -> None:
    r = clean()
    history = r.final(jobs=["j2", "j3"])
    assert history.final_document is not None
    history.final_document["queues"] = {"chaos": {"dead": 3, "dead_dropped": 0}}
    assert check(history).failures["harness"] == []

    history.final_document["queues"] = {"chaos": {"dead": 1003, "dead_dropped": 3}, "other": {"dead_dropped": 0}}
    (failure,) = check(history).failures["harness"]
    assert "dropped dead letters (3 in chaos)" in failure and "cannot tell a dropped one from a lost job" in failure


def test_a_dumped_history_checks_the_same_when_loaded(tmp_path: Path) -> None:
    r = clean()
    r.history.faults.append(Fault(kind="kill", node=NODE_A, start=1, end=2, recovered_at=3))
    r.history.event("harness: something")
    history = r.final(jobs=["j2"])
    history.dump(tmp_path / "history.json")

    loaded = History.load(tmp_path / "history.json")

    assert check(loaded).failures == check(history).failures
    assert check(loaded).figures == check(history).figures


def test_items_of_a_batched_ack_are_checked_as_single_completions() -> None:
    r = clean()
    r.claim("j3", "L3")
    r.claim("j3", "L4")  # L3 expired and the job was leased again...
    batch = r.call("ack", {"jobs": ["j3", "j2"]}, answer={"results": [{"id": "j3", "ok": True},
                                                                      {"id": "j2", "error": "lease_lost"}]})
    r.history.part_of(batch, "complete", {"job": "j3", "lease": "L3"}, status=200, answer={"id": "j3", "ok": True},
                      error=None)  # ...and the old lease's batched complete was still accepted
    lost = r.history.part_of(batch, "complete", {"job": "j2", "lease": "L2"}, status=409,
                             answer={"id": "j2", "error": "lease_lost", "message": "gone"}, error=None)

    verdict = check(r.final(jobs=["j2"]))

    assert lost.start == batch.start and lost.end == batch.end and lost.code == "lease_lost"
    assert len(verdict.failures["stale_completions"]) == 1
    assert "L3" in verdict.failures["stale_completions"][0]
    assert not verdict.failures["unanswered"]


def test_jobs_in_segments_of_the_final_document_are_not_lost() -> None:
    history = clean().final(jobs=["j2"])
    assert history.final_document is not None
    history.final_document["segment_jobs"] = [{"id": "j3"}]

    verdict = check(history)

    assert verdict.ok, verdict.failures
    assert verdict.figures["left_in_segments"] == 1


def test_an_unreadable_segment_in_the_final_document_is_flagged() -> None:
    history = clean().final(jobs=["j2", "j3"])
    assert history.final_document is not None
    history.final_document["segment_problems"] = ["segment queue.json.seg/q/e1 of q is missing"]

    verdict = check(history)

    assert verdict.failures["lost_pushes"] == ["final document: segment queue.json.seg/q/e1 of q is missing"]


def first_claim(r: Recorder, job: str, lease: str, attempt: int = 1, **kw: Any) -> Call:
    return r.claim(job, lease, answer={"jobs": [{"id": job, "lease": lease, "attempt": attempt}]}, **kw)


def test_first_claims_out_of_push_order_are_flagged() -> None:
    r = Recorder()
    r.push("a")
    r.push("b")
    first_claim(r, "b", "Lb")  # b handed out first although a was pushed (acknowledged) before b was sent
    first_claim(r, "a", "La")

    verdict = check(r.final(jobs=["a", "b"]))

    assert len(verdict.failures["fifo"]) == 1
    assert "b was first leased" in verdict.failures["fifo"][0]


def test_first_claims_in_push_order_and_redeliveries_pass_the_fifo_check() -> None:
    r = Recorder()
    r.push("a")
    r.push("b")
    r.push("c")
    first_claim(r, "a", "La")
    first_claim(r, "b", "Lb")
    first_claim(r, "a", "La2", attempt=2)  # a redelivery goes to the back: not compared
    r.claim("x", "Lx", status=None, error="timeout", end=False)  # c's first lease went to a lost answer
    first_claim(r, "c", "Lc2", attempt=2)

    verdict = check(r.final(jobs=["a", "b", "c"]))

    assert verdict.failures["fifo"] == []
    assert verdict.figures["fifo_compared"] == 2


def test_a_job_whose_first_lease_went_unseen_is_not_compared_after_a_redrive_starts_its_attempts_again() -> None:
    # Seed 121 (s3): a's first lease went to a lost answer, its second was
    # stopped into the dead letters, and the operator's redrive put it at the
    # back at attempt 0; the claim that leased it then, at attempt 1, long
    # after b, is not its first lease.
    r = Recorder()
    r.push("a")
    r.push("b")
    r.claim("a", "La", status=None, error="timeout", end=False)
    first_claim(r, "a", "La2", attempt=2)
    r.call("stop", {"jobs": ["a"], "expect": ["running"]}, answer={"result": ["a"]})
    r.call("requeue", {"jobs": ["a"], "expect": ["dead"], "per_second": None}, answer={"result": ["a"]})
    first_claim(r, "b", "Lb")
    first_claim(r, "a", "La3")

    verdict = check(r.final(jobs=["a", "b"]))

    assert verdict.failures["fifo"] == []
    assert verdict.figures["fifo_compared"] == 1


def test_a_look_back_at_a_pending_job_answered_404_is_flagged_one_after_its_completion_is_not() -> None:
    r = Recorder()
    r.push("j1")
    r.push("j2")
    r.call("get", {"job": "j1", "look_back": True}, status=404, answer={"error": "job_not_found"})
    r.claim("j2", "L2")
    r.complete("j2", "L2")
    r.call("get", {"job": "j2", "look_back": True}, status=404, answer={"error": "job_not_found"})
    r.call("get", {"job": "j1", "look_back": True}, answer={"id": "j1", "status": "pending"})
    verdict = check(r.final(jobs=["j1"]))
    assert len(verdict.failures["lookups"]) == 1 and "GET job j1" in verdict.failures["lookups"][0]
    assert (verdict.figures["look_backs"], verdict.figures["look_backs_found"]) == (3, 1)


# -- an operator's purges (chaos.purger) ------------------------------------------

def purge(r: Recorder, jobs: list[str], removed: list[str] | None, **kw: Any) -> Call:
    """A purge call; ``removed`` is the answer's result (None: no 2xx answer)."""
    if removed is not None:
        kw.setdefault("answer", {"result": removed, "seq": 9})
    return r.call("purge", {"jobs": jobs, "conditional": False, "unknown": kw.pop("unknown", False)}, **kw)


def test_purged_jobs_and_those_of_an_unanswered_purge_are_not_lost() -> None:
    r = clean()
    r.push("j4")
    purge(r, ["j3"], ["j3"])
    purge(r, ["j4"], None, status=None, error="timeout")
    r.history.faults.append(Fault(kind="pause", node=NODE_A, start=r.now - 0.5, end=r.now + 1, recovered_at=r.now + 1))

    verdict = check(r.final(jobs=["j2"]))

    assert verdict.ok, verdict.failures
    assert (verdict.figures["purged"], verdict.figures["maybe_purged"], verdict.figures["lost"]) == (1, 1, 0)


def test_a_refused_purge_leaves_its_jobs_owed() -> None:
    r = clean()
    purge(r, ["j3", "nope"], None, status=404, answer={"error": "job_not_found"}, unknown=True)

    verdict = check(r.final(jobs=["j2"]))  # j3 gone although the purge was refused

    assert len(verdict.failures["lost_pushes"]) == 1 and "j3" in verdict.failures["lost_pushes"][0]
    assert verdict.figures["purges_refused"] == 1


def test_a_purged_job_leased_completed_or_left_behind_is_flagged() -> None:
    r = clean()
    purge(r, ["j3"], ["j3"])
    r.claim("j3", "L3")
    r.complete("j3", "L3")

    problems = check(r.final(jobs=["j2", "j3"])).failures["purges"]

    assert len(problems) == 3
    assert "leased by call" in problems[0] and "complete sent" in problems[1] and "final document" in problems[2]


def test_a_purge_removing_what_it_was_not_sent_or_an_unknown_id_is_flagged() -> None:
    r = clean()
    purge(r, ["j3"], ["j2", "j3"])
    purge(r, ["j3", "never-pushed-1"], ["j3"], unknown=True)

    problems = check(r.final()).failures["purges"]

    assert len(problems) == 2 and "answered" in problems[0] and "unknown id" in problems[1]


def test_a_look_back_after_a_purge_may_find_nothing() -> None:
    r = Recorder()
    r.push("j1")
    purge(r, ["j1"], ["j1"])
    r.call("get", {"job": "j1", "look_back": True}, status=404, answer={"error": "job_not_found"})

    verdict = check(r.final())

    assert verdict.ok, verdict.failures


def delayed_push(r: Recorder, job: str, delay: float) -> Call:
    return r.call("push", {"queue": "q", "jobs": [{"id": job, "payload": 1, "delay_seconds": delay}]},
                  status=201, answer={"ids": [job]})


def test_a_delayed_job_leased_before_it_was_due_is_flagged() -> None:
    r = Recorder()
    delayed_push(r, "d", 5.0)  # sent at 1
    first_claim(r, "d", "Ld")  # answered at 2.5: 3.5 s early, whatever the clocks

    verdict = check(r.final(jobs=["d"]))

    assert len(verdict.failures["delays"]) == 1 and "d, delayed 5 s, was leased 3.500 s before" in \
        verdict.failures["delays"][0]
    assert verdict.figures["delayed_pushes"] == verdict.figures["delayed_leased"] == 1


def test_a_delayed_job_leased_once_due_passes_and_may_go_after_later_pushes() -> None:
    r = Recorder()
    delayed_push(r, "d", 3.0)  # sent at 1, due at 4 at the latest: it may go after b
    r.push("b")  # sent at 2, after d was acknowledged
    first_claim(r, "b", "Lb")  # 3
    first_claim(r, "d", "Ld")  # 4, answered at 4.5
    delayed_push(r, "d", 3.0)  # a retry of its push (the answer lost): the first push's send counts

    verdict = check(r.final(jobs=["b", "d"]))

    assert verdict.failures["delays"] == [] and verdict.failures["fifo"] == []
    assert verdict.figures["delayed_earliest_margin"] == 0.5


@pytest.mark.parametrize(("offset", "flagged"), [(2.0, True), (-4.0, False)])
def test_a_delayed_job_may_be_leased_early_by_as_much_as_a_clock_fault_set_a_clock_off(
    offset: float, flagged: bool,
) -> None:
    r = Recorder()
    delayed_push(r, "d", 5.0)  # sent at 1 by a node whose clock read `offset` off
    r.history.faults.append(Fault(kind="clock", node=NODE_A, start=0.5, end=1.8, recovered_at=1.8,
                                  clock_offset=offset))
    first_claim(r, "d", "Ld")  # answered at 2.5: 3.5 s early by the harness's clock

    problems = check(r.final(jobs=["d"])).failures["delays"]

    assert len(problems) == (1 if flagged else 0), problems


def test_the_answers_tally_counts_unanswered_items_of_batched_acks_as_one_kind() -> None:
    r = clean()
    for n, job in enumerate(("j2", "j3")):
        batch = r.call("ack", {"jobs": [job]}, status=None, error="timeout")
        r.history.part_of(batch, "complete", {"job": job, "lease": f"L{n}"}, status=None, answer=None,
                          error=f"ack call {batch.id}: timeout")

    tally = check(r.final(jobs=["j2", "j3"])).figures["answers_by_status"]

    assert tally["ack item without an answer"] == 2 and tally["timeout"] == 2
    assert not any(kind.startswith("ack call") for kind in tally)


def test_every_check_is_named_in_the_report() -> None:
    """A check missing from the report's list is computed but never printed nor counted (the rates check was)."""
    from chaos.report import CHECKS

    assert set(check(clean().final(jobs=["j2", "j3"])).failures) == set(CHECKS)


# -- an operator's requeues and redrives (chaos.requeuer) -------------------------------------------

def requeue(r: Recorder, jobs: list[str], moved: list[str] | None, *, per_second: float | None = None,
            **kw: Any) -> Call:
    """A requeue call; ``moved`` is the answer's result (None: no 2xx answer)."""
    if moved is not None:
        kw.setdefault("answer", {"result": moved, "seq": 9})
    return r.call("requeue", {"jobs": jobs, "expect": ["running"] * len(jobs), "per_second": per_second}, **kw)


def test_a_requeued_job_run_again_and_completed_passes_and_is_explained() -> None:
    r = clean()
    requeue(r, ["j2"], ["j2"])
    r.claim("j2", "L2b")
    r.complete("j2", "L2b")
    r.complete("j2", "L2", status=409, answer={"error": "lease_lost"})  # the revoked lease: refused

    verdict = check(r.final(jobs=["j3"]))

    assert verdict.ok, verdict.failures
    assert verdict.duplicates == {"an operator requeued it (chaos.requeuer)": ["j2"]}
    assert (verdict.figures["requeues"], verdict.figures["requeued_jobs"]) == (1, 1)


def test_a_completion_with_a_lease_a_requeue_revoked_is_flagged() -> None:
    r = clean()
    requeue(r, ["j2"], ["j2"])
    r.complete("j2", "L2")  # accepted: the requeue did not revoke the lease

    problems = check(r.final(jobs=["j3"])).failures["requeues"]

    assert len(problems) == 1 and "had revoked it" in problems[0]


def test_a_requeue_moving_what_it_was_not_sent_is_flagged_and_a_requeued_job_that_vanished_is_lost() -> None:
    r = clean()
    requeue(r, ["j2"], ["j2", "j3"])

    verdict = check(r.final(jobs=["j3"]))  # j2 neither completed nor in the document

    assert len(verdict.failures["requeues"]) == 1 and "answered" in verdict.failures["requeues"][0]
    assert len(verdict.failures["lost_pushes"]) == 1 and "j2" in verdict.failures["lost_pushes"][0]


def test_a_paced_requeues_job_leased_before_its_turn_is_flagged() -> None:
    r = clean()
    r.claim("j3", "L3")
    paced = requeue(r, ["j2", "j3"], ["j2", "j3"], per_second=0.25)  # j3 due 4 s after it was sent
    r.claim("j2", "L2b")  # at once: its turn
    early = r.claim("j3", "L3b")  # 2 s after the requeue was sent: 2 s early
    r.complete("j2", "L2b")
    r.complete("j3", "L3b")

    problems = check(r.final()).failures["requeues"]

    assert early.end is not None and paced.end is not None
    assert problems == [f"j3, the job due 4.000 s after a paced requeue (call {paced.id}), was leased "
                        f"{early.end - paced.start:.3f} s after it was sent"]
    r2 = clean()
    r2.claim("j3", "L3")
    requeue(r2, ["j2", "j3"], ["j2", "j3"], per_second=1.0)  # j3 due 1 s after: leased 2.5 s after, in time
    r2.claim("j2", "L2b")
    r2.claim("j3", "L3b")
    assert check(r2.final(jobs=["j2", "j3"])).failures["requeues"] == []


# -- an operator's stops (chaos.requeuer) -----------------------------------------------------------------------

def stop(r: Recorder, jobs: list[str], stopped: list[str] | None, **kw: Any) -> Call:
    """A stop call; ``stopped`` is the answer's result (None: no 2xx answer)."""
    if stopped is not None:
        kw.setdefault("answer", {"result": stopped, "seq": 9})
    return r.call("stop", {"jobs": jobs, "expect": ["running"] * len(jobs)}, **kw)


def test_a_stopped_job_kept_as_a_dead_letter_and_one_redriven_and_completed_pass() -> None:
    r = clean()
    watch(r, "j2", "L2", lost=False)
    stop(r, ["j2"], ["j2"])
    watch(r, "j2", "L2", lost=True)  # told: the stop explains it
    r.complete("j2", "L2", status=409, answer={"error": "lease_lost"})  # its late result: refused
    verdict = check(r.final(jobs=["j3"], dead=["j2"]))
    assert verdict.ok, verdict.failures
    assert (verdict.figures["stops"], verdict.figures["stopped_jobs"]) == (1, 1)
    assert verdict.figures["watches_lost_by"] == {"stop": 1}

    requeue(r, ["j2"], ["j2"])  # a redrive: it may run again
    r.claim("j2", "L2b")
    r.complete("j2", "L2b")
    verdict = check(r.final(jobs=["j3"]))
    assert verdict.ok, verdict.failures


def test_a_stopped_job_leased_again_completed_with_its_revoked_lease_or_not_kept_is_flagged() -> None:
    r = clean()
    stop(r, ["j2"], ["j2"])
    r.complete("j2", "L2")  # accepted: the stop did not revoke the lease
    r.claim("j2", "L2b")  # leased again with no redrive: it was not dead
    problems = check(r.final(jobs=["j2", "j3"])).failures["stops"]
    assert len(problems) == 3, problems
    assert "had revoked it" in problems[0] and "with no redrive of it in between" in problems[1]
    assert "is not a dead letter in the final document" in problems[2]

    r2 = clean()
    stop(r2, ["j2"], ["j2", "j3"])  # stopped what it was not sent
    assert "answered" in check(r2.final(jobs=["j3"], dead=["j2"])).failures["stops"][0]


# -- lease watches (chaos.clients.Worker.watch) ---------------------------------------------------------------

def watch(r: Recorder, job: str, lease: str, *, lost: bool, **kw: Any) -> Call:
    """A watch of one lease, answered that it was lost or (after its wait) that it was not."""
    error = {"id": job, "error": "lease_lost", "message": "the lease expired or the job was handed to someone else"}
    kw.setdefault("answer", {"lost": [error] if lost else []})
    return r.call("watch", {"job": job, "lease": lease, "wait_seconds": 2.0}, **kw)


def test_a_watch_told_of_a_requeue_whose_late_result_is_refused_passes() -> None:
    r = clean()
    watch(r, "j2", "L2", lost=False)
    requeue(r, ["j2"], ["j2"])
    watch(r, "j2", "L2", lost=True)
    r.complete("j2", "L2", status=409, answer={"error": "lease_lost"})  # sent anyway, refused
    r.claim("j2", "L2b")
    r.complete("j2", "L2b")

    verdict = check(r.final(jobs=["j3"]))

    assert verdict.ok, verdict.failures
    assert verdict.figures["watches"] == 2 and verdict.figures["watches_told_lost"] == 1
    assert verdict.figures["watches_lost_by"] == {"requeue": 1}
    assert verdict.figures["results_refused_after_watch"] == 1


def test_a_result_accepted_after_a_watch_said_its_lease_was_lost_is_flagged() -> None:
    r = clean()
    requeue(r, ["j2"], ["j2"])
    told = watch(r, "j2", "L2", lost=True)
    r.complete("j2", "L2")  # accepted: the watch was wrong, or the lease came back

    problems = check(r.final(jobs=["j3"])).failures["watches"]

    assert len(problems) == 1 and f"though watch {told.id} was told" in problems[0]


def test_a_watch_told_of_a_loss_nothing_explains_is_flagged_and_an_expiry_explains_one() -> None:
    r = clean()
    r.claim("j3", "L3")  # renewed at its claim, one call before the watch: 4 s lease, not run out
    early = watch(r, "j3", "L3", lost=True)

    problems = check(r.final(jobs=["j2", "j3"])).failures["watches"]

    assert len(problems) == 1 and f"watch {early.id} was told" in problems[0]
    assert "could not have run out" in problems[0]
    r2 = clean()
    r2.claim("j3", "L3")
    r2.call("get", {"job": "j1"})
    r2.call("get", {"job": "j1"})
    r2.call("get", {"job": "j1"})
    watch(r2, "j3", "L3", lost=True)  # 4.5 s after the claim was sent: the lease may have run out
    verdict = check(r2.final(jobs=["j2", "j3"]))
    assert verdict.ok, verdict.failures
    assert verdict.figures["watches_lost_by"] == {"expiry": 1}


def test_a_lease_ended_early_by_a_clock_stepped_forward_is_explained_and_only_by_so_much() -> None:
    for offset, explained in ((3.0, True), (1.0, False)):
        r = clean()
        r.claim("j3", "L3")  # renewed at its claim; a 4 s lease
        r.history.faults.append(Fault(kind="clock", node=NODE_A, start=r.now + 0.2, end=r.now + 1.5,
                                      recovered_at=r.now + 1.5, clock_offset=-offset))
        watch(r, "j3", "L3", lost=True)  # 1.5 s later: the leader's clock, behind, stepped forward

        verdict = check(r.final(jobs=["j2", "j3"]))

        assert (verdict.failures["watches"] == []) is explained, (offset, verdict.failures["watches"])


def run_now(r: Recorder, jobs: list[str], result: list[str]) -> Call:
    return r.call("run_now", {"jobs": jobs, "expect": ["pending"] * len(jobs)}, answer={"result": result, "seq": 9})


def test_a_delayed_job_made_due_by_a_run_now_may_be_leased_early_and_only_then() -> None:
    r = Recorder()
    delayed_push(r, "d", 30.0)  # sent at 1, due at 31
    delayed_push(r, "e", 30.0)  # sent at 2
    run_now(r, ["d"], ["d"])  # sent at 3
    first_claim(r, "d", "Ld")  # answered at 4.5: early, as asked
    first_claim(r, "e", "Le")  # early, and no run now named it

    verdict = check(r.final(jobs=["d", "e"]))

    assert [line.split(",")[0] for line in verdict.failures["delays"]] == ["e"]
    assert verdict.failures["run_now"] == []
    assert (verdict.figures["run_nows"], verdict.figures["made_due"]) == (1, 1)


def test_a_run_now_sent_after_the_claim_was_answered_does_not_excuse_it() -> None:
    r = Recorder()
    delayed_push(r, "d", 30.0)
    first_claim(r, "d", "Ld")  # answered at 2.5
    run_now(r, ["d"], [])  # sent at 3

    assert len(check(r.final(jobs=["d"])).failures["delays"]) == 1


def test_a_run_now_that_made_due_a_job_it_was_not_sent_is_flagged() -> None:
    r = Recorder()
    delayed_push(r, "d", 30.0)
    delayed_push(r, "x", 30.0)
    run_now(r, ["d"], ["d", "x"])

    [problem] = check(r.final(jobs=["d", "x"])).failures["run_now"]
    assert "made due ['x'], which it was not sent" in problem
