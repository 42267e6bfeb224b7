"""Jittered exponential backoff: how long to wait before retrying, once.

Every retry loop in the engine (the direct client, the group committer, the
HTTP client and the worker) waits ``jittered(attempt, base, cap)`` seconds:
a uniformly random time between 0 and ``base * 2 ** attempt``, capped at
``cap``. The full jitter spreads out callers that failed together, so that
they do not retry in lockstep and collide again.
"""

from __future__ import annotations

import random
from collections.abc import Callable

#: Reads of the document that fail with StoreUnavailable retried in a row
#: before the call fails (the direct client's calls, a committer's start): a
#: read that raced the document's creation by another writer reads "absent,
#: then present" once, and reading again sees it; a store that is down is
#: still reported after a few reads, not after a caller's whole retry budget.
READ_RETRIES = 3

# 2 ** 16 times any sensible base is far above any sensible cap: the exponent
# stops growing there, so that a long run of failures never overflows a float.
MAX_EXPONENT = 16


def jittered(attempt: int, base: float, cap: float, rand: Callable[[], float] = random.random) -> float:
    """A delay in seconds, uniform in ``[0, min(cap, base * 2 ** attempt))``.

    ``attempt`` counts failures so far (the exponent stops at
    :data:`MAX_EXPONENT`); ``rand`` returns a float in ``[0, 1)`` and is
    injectable for tests. Pure: no I/O, no sleeping.
    """
    return rand() * min(cap, base * 2.0 ** min(attempt, MAX_EXPONENT))
