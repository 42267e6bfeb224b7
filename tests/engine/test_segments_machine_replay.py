"""The segments machine (:mod:`tests.engine.segments_machine`) does the same
for the same steps however fast it runs. Hypothesis replays steps while it
generates and shrinks, and refuses a test whose replay draws differently
(FlakyStrategyDefinition): a keeper that paced its refills by the real
clock took more or fewer jobs into a queue's front when a step happened to
be slow, and the fuzz suite failed now and then on a busy CI machine."""

from __future__ import annotations

import time
from typing import Any

from hypothesis import settings

from tests.engine.segments_machine import SegmentMachine


def _runs(pause: float) -> list[Any]:
    """What the machine's examples did: per example, the front each refill
    the keeper planned aimed for, and the jobs and segment references it
    ended with, without the random names (segment keys, lease tokens) that
    differ between runs anyway. ``pause``: seconds each step sleeps (a
    keeper on the real clock then boosts the refills it plans, as it does
    only now and then when the steps run fast)."""
    ends: list[Any] = []

    class Timed(SegmentMachine):
        def __init__(self) -> None:
            super().__init__()
            self.fronts: list[tuple[str, int, int]] = []
            aim = self.keeper._front_target

            def front_target(queue: str, now: float, ready: int, shares: Any, *, others: int = 0) -> int:
                target = aim(queue, now, ready, shares, others=others)
                self.fronts.append((queue, ready, target))
                return target

            self.keeper._front_target = front_target  # type: ignore[method-assign]

        def after_step(self) -> None:
            time.sleep(pause)
            super().after_step()

        def teardown(self) -> None:
            state = self.state
            ends.append((
                self.steps,
                self.fronts,
                sorted((job_id, job.status, job.attempts, state.pos[job_id]) for job_id, job in state.jobs.items()),
                {queue: [(ref.total, ref.consumed) for ref in refs] for queue, refs in state.lanes.items()},
            ))

    case = Timed.TestCase
    case.settings = settings(max_examples=30, stateful_step_count=40, deadline=None, database=None,
                             derandomize=True)
    case().runTest()
    return ends


def test_the_segments_machine_does_the_same_for_the_same_steps_however_fast_they_run() -> None:
    fast, slow = _runs(0.0), _runs(0.012)
    assert len(fast) >= 30  # every example, and those Hypothesis discarded
    assert fast == slow
