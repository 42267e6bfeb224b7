"""Fuzz format 2: the stateful machine of :mod:`tests.engine.segments_machine`
(pushes, claims, fails, requeues, purges and expiry interleaved with the lane
keeper's seals, refills and merges, fresh and stale, against a reference
model), under the fuzz suite's Hypothesis profile."""

from __future__ import annotations

from hypothesis import settings

from tests.engine.segments_machine import SegmentMachine
from tests.fuzz.profiles import scaled

TestSegmentMachine = SegmentMachine.TestCase
# Pure and fast: many sequences, long enough for a backlog to build up.
TestSegmentMachine.settings = settings(settings.default, max_examples=scaled(300), stateful_step_count=60)
