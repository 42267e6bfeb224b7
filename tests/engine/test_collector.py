"""engine.tune_collector: a long-running node's garbage collector settings
(engine/collector.py). Process-wide, so each test puts the thresholds back."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from engine import DEFAULT_GC_THRESHOLDS, check_gc_thresholds, tune_collector


@pytest.fixture(autouse=True)
def _thresholds_put_back() -> Iterator[None]:
    before = gc.get_threshold()
    enabled = gc.isenabled()
    gc.enable()  # pytest or a plugin may have turned it off; these tests need it on
    yield
    gc.set_threshold(*before)
    if not enabled:
        gc.disable()


class _Node:
    """An object that can sit in a reference cycle and be watched by a weak reference."""

    __slots__ = ("__weakref__", "other")

    def __init__(self) -> None:
        self.other: _Node | None = None


def test_it_sets_the_thresholds_and_freezes_what_is_alive() -> None:
    alive = _Node()

    tune_collector()

    assert gc.get_threshold() == DEFAULT_GC_THRESHOLDS == (50_000, 10, 10)
    # Frozen objects are in no generation: no collection walks them any more.
    assert not any(obj is alive for obj in gc.get_objects())
    assert gc.get_freeze_count() > 0


def test_garbage_in_cycles_is_still_freed_without_anyone_collecting() -> None:
    """The young threshold is raised, not removed: cycles made after the
    tuning, more of them than the threshold, are freed by the automatic
    collections alone."""
    tune_collector()
    watched: list[weakref.ref[_Node]] = []
    for _ in range(40_000):  # two objects each: 80,000 allocated, none freed by counting
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        watched.append(weakref.ref(a))
        del a, b

    freed = sum(1 for ref in watched if ref() is None)
    assert freed >= 20_000, f"only {freed} of 40,000 cycles freed"


def test_other_thresholds_are_taken_and_bad_ones_refused_before_anything_changes() -> None:
    tune_collector((1_000, 5, 7))
    assert gc.get_threshold() == (1_000, 5, 7)

    for bad in [(1, 2), (1, 2, 3, 4), (-1, 10, 10), (700, 0, 10), (700, 10, 0), (700.0, 10, 10), (True, 10, 10)]:
        with pytest.raises(ValueError, match="the collector's thresholds"):
            tune_collector(bad)  # type: ignore[arg-type]
        assert gc.get_threshold() == (1_000, 5, 7)
    assert check_gc_thresholds((0, 1, 1)) == (0, 1, 1)  # 0: no automatic collection, as in CPython
