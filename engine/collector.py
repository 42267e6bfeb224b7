"""CPython's cyclic garbage collector, set for a long-running node.

A busy node allocates and frees tens of thousands of small objects per
commit cycle (each caller's operation, future and job), nearly all freed by
reference counting. With CPython's default thresholds (700, 10, 10) that
churn still runs the collector about a hundred times a second, and every
tenth time it walks the jobs the document holds, while no other thread may
run: measured in ``python -m bench backlog --depths 0 --queues 1
--duration 8`` (2,048 submitters on the 50 ms store), 0.6 s of collections in
9 s, up to 30 ms each, which made a write start without the callers caught
in them and added a whole commit cycle to their pushes (docs/benchmark.md,
"The collector's pauses").

:func:`tune_collector` is the process-wide setting a server applies once,
at the end of its start-up: ``queueadmin/asgi.py`` does (with
``QUEUE_GC_THRESHOLDS``), and ``python -m bench backlog``, which embeds a
broker, does what the server does. The engine itself never calls it: the
collector is the process's, and an application that embeds the engine
decides.
"""

from __future__ import annotations

import gc

__all__ = ["DEFAULT_GC_THRESHOLDS", "check_gc_thresholds", "tune_collector"]

#: The collector's thresholds :func:`tune_collector` sets: a young
#: collection once 50,000 more objects were allocated than freed (above what
#: 2,048 callers have in flight at once, about 30,000), and the older
#: generations at CPython's usual ratios (every tenth, then every tenth of
#: those, and a full one only once the long-lived objects grew by a quarter).
#: Garbage in reference cycles is still freed: it counts towards the
#: threshold, as it is never freed otherwise, so at most 50,000 objects of it
#: wait for a young collection.
DEFAULT_GC_THRESHOLDS: tuple[int, int, int] = (50_000, 10, 10)


def check_gc_thresholds(thresholds: tuple[int, ...]) -> tuple[int, int, int]:
    """``thresholds`` as ``gc.set_threshold`` takes them, or ValueError: three
    whole numbers, the first 0 or more (0 turns automatic collection off, as
    in CPython) and the other two at least 1."""
    if len(thresholds) != 3 or any(type(n) is not int for n in thresholds):
        raise ValueError(f"the collector's thresholds are three whole numbers, got {thresholds!r}")
    young, middle, old = thresholds
    if young < 0 or middle < 1 or old < 1:
        raise ValueError(f"the collector's thresholds must be 0 or more (the first) and at least 1 (the other two), "
                         f"got {thresholds!r}")
    return young, middle, old


def tune_collector(thresholds: tuple[int, ...] = DEFAULT_GC_THRESHOLDS) -> None:
    """Collect once, move every object alive now (the imports, the
    framework, what start-up loaded) into the collector's permanent
    generation (``gc.freeze``), so that no later collection walks them, and
    set the collector's ``thresholds`` (checked by :func:`check_gc_thresholds`;
    ValueError before anything changes). Process-wide; call it once, at the
    end of a server's start-up. Objects that die later are still freed."""
    young, middle, old = check_gc_thresholds(thresholds)
    gc.collect()
    gc.freeze()
    gc.set_threshold(young, middle, old)
