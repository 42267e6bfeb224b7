"""engine.backoff.jittered: the one jittered exponential backoff every retry loop uses."""

from __future__ import annotations

import random

import pytest

from engine.backoff import MAX_EXPONENT, jittered


@pytest.mark.parametrize("attempt", [0, 1, 2, 5, 16, 40, 10_000])
def test_the_delay_stays_within_zero_and_the_capped_ceiling(attempt: int) -> None:
    rng = random.Random(attempt)
    ceiling = min(1.0, 0.01 * 2 ** min(attempt, MAX_EXPONENT))
    for _ in range(200):
        assert 0 <= jittered(attempt, 0.01, 1.0, rng.random) < ceiling


@pytest.mark.parametrize(("attempt", "expected"), [(0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0), (30, 5.0)])
def test_the_ceiling_doubles_per_attempt_up_to_the_cap(attempt: int, expected: float) -> None:
    just_below_one = 1 - 2**-53
    assert jittered(attempt, 0.5, 5.0, lambda: just_below_one) == pytest.approx(expected)


def test_the_jitter_scales_the_ceiling_linearly() -> None:
    assert jittered(3, 0.25, 100.0, lambda: 0.0) == 0.0
    assert jittered(3, 0.25, 100.0, lambda: 0.5) == 1.0  # half of 0.25 * 2 ** 3


def test_the_exponent_stops_growing_so_huge_attempts_do_not_overflow() -> None:
    huge = jittered(10**9, 1.0, float("inf"), lambda: 0.5)
    assert huge == 0.5 * 2**MAX_EXPONENT


def test_it_matches_random_uniform_for_the_same_random_stream() -> None:
    # What the retry loops computed before sharing it: random.uniform(0, ceiling).
    a, b = random.Random(7), random.Random(7)
    for attempt in range(20):
        ceiling = min(10.0, 0.5 * 2 ** min(attempt, 16))
        assert jittered(attempt, 0.5, 10.0, a.random) == b.uniform(0, ceiling)

