"""Finding the one operation that broke a batch (I8).

When something unexpected escapes while a batch is applied or encoded, the
in-memory state may be half changed, so the group committer throws it away
and calls :func:`reapply_alone`: read the document again, re-apply the
operations one by one, and refuse alone each one whose transition raises or
after which the document no longer encodes. The others stay applied to the
fresh state, ready to be written together as usual.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from engine.document import QueueState
from engine.errors import OperationFailed
from engine.pending import Pending, printable
from engine.transitions import apply_batch

log = logging.getLogger("engine.committer")


def reapply_alone(
    batch: list[Pending],
    *,
    load: Callable[[], QueueState],
    clock: Callable[[], datetime],
    writer_id: str,
    refuse: Callable[[Pending, OperationFailed], None],
) -> tuple[QueueState, list[Pending]]:
    """Re-apply ``batch`` one operation at a time on freshly loaded states.

    Each culprit is handed to ``refuse`` with an OperationFailed naming its
    error (it is answered at once), and the search starts again on a new
    :func:`load` without it. Returns the state holding the rest, applied, and
    the rest, in order, each with its ``result`` set. Raises what ``load``
    raises (the caller then fails the whole batch: it cannot be written).

    Costs one read per culprit, plus one when a whole pass applied but did not
    encode (then every operation is followed by a trial encoding).
    """
    remaining = list(batch)
    probe = False  # encode after every operation (once a whole pass applied but did not encode)
    while True:
        state = load()
        now = clock()
        if probe:
            state.encode(seq=state.seq + 1, writer=writer_id, now=now)  # the base itself must encode
        culprit: tuple[int, BaseException] | None = None
        for i, pending in enumerate(remaining):
            try:
                [pending.result] = apply_batch(state, [pending.op], now)
                if probe:
                    state.encode(seq=state.seq + 1, writer=writer_id, now=now)
            except Exception as raised:
                culprit = (i, raised)
                break
        if culprit is None:
            if probe or not state.dirty:
                return state, remaining
            try:
                state.encode(seq=state.seq + 1, writer=writer_id, now=now)
                return state, remaining
            except Exception:
                probe = True
                continue
        index, error = culprit
        bad = remaining.pop(index)
        problem = printable(f"{type(error).__name__}: {error}")
        log.error("group commit: refusing one %s operation alone: %s", type(bad.op).__name__, problem)
        refuse(bad, OperationFailed(
            f"the {type(bad.op).__name__} operation could not be applied or encoded ({problem}); "
            "it was refused and nothing of it was written"
        ))
