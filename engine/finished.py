"""The dedup window: ids of jobs that recently left the document.

A push carries its jobs' ids, so a push retried after its answer was lost is
not enqueued twice while the job is still in the document. Once the job has
left (completed, purged, or a dead letter dropped because the list was full)
its id would be free again, and the retried push would run the job a second
time. ``FinishedIds`` remembers those ids for a window bounded both in count
and in age (``Policy.dedup_window_ids`` and ``dedup_window_seconds``), so a
retried push within the window is answered with the same id and enqueues
nothing.

In the document the window is the ``finished`` list (see docs/format.md):
ids grouped by the time they left, oldest first, each group
``["<time>", "<id> <id> ..."]`` (ids never contain spaces). Groups are
encoded once and cached, like jobs, so a commit re-encodes only the group
that changed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import orjson

from engine.sequence import EncodedSequence


@dataclass(slots=True)
class _Group:
    key: str
    at: datetime
    ids: list[str] = field(default_factory=list)


class FinishedIds:
    """Recently finished job ids with the time each left, oldest first."""

    def __init__(self) -> None:
        self._at: dict[str, datetime] = {}
        self._groups: deque[_Group] = deque()
        self._encoded = EncodedSequence()
        self._stale: dict[str, _Group] = {}  # groups changed since last encoded, in creation order
        self._next_key = 0

    def __len__(self) -> int:
        return len(self._at)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._at

    def __iter__(self) -> Iterator[tuple[str, datetime]]:
        """``(id, time)`` pairs, oldest first."""
        for group in self._groups:
            for job_id in group.ids:
                yield job_id, group.at

    def add(self, job_id: str, at: datetime) -> None:
        """Remember that ``job_id`` left the document at ``at``. An id already
        in the window keeps its first time."""
        if job_id in self._at:
            return
        group = self._groups[-1] if self._groups and self._groups[-1].at == at else None
        if group is None:
            group = _Group(key=str(self._next_key), at=at)
            self._next_key += 1
            self._groups.append(group)
        group.ids.append(job_id)
        self._at[job_id] = at
        self._stale[group.key] = group

    def prune(self, now: datetime, *, max_ids: int, max_seconds: float) -> bool:
        """Forget ids that left ``max_seconds`` or more before ``now``, then
        the oldest ids beyond ``max_ids``. Returns whether anything was forgotten."""
        changed = False
        cutoff = now - timedelta(seconds=max_seconds)
        while self._groups and self._groups[0].at <= cutoff:
            self._drop_oldest_group()
            changed = True
        return self.trim(max_ids) or changed

    def trim(self, max_ids: int) -> bool:
        """Forget the oldest ids beyond ``max_ids`` (the count half of
        :meth:`prune`, for one id added to a full window). Returns whether
        anything was forgotten."""
        changed = False
        excess = len(self._at) - max_ids
        while excess > 0:
            oldest = self._groups[0]
            if len(oldest.ids) <= excess:
                excess -= len(oldest.ids)
                self._drop_oldest_group()
            else:
                for job_id in oldest.ids[:excess]:
                    del self._at[job_id]
                del oldest.ids[:excess]
                self._stale[oldest.key] = oldest
                excess = 0
            changed = True
        return changed

    def parts(self) -> Iterator[bytes]:
        """The groups as JSON array contents, comma-separated, in a few pieces.
        Only groups that changed since the last call are encoded again (a
        batch of completions adds many ids to one group: encoded once)."""
        for group in self._stale.values():
            data = orjson.dumps([group.at, " ".join(group.ids)], option=orjson.OPT_UTC_Z)
            if group.key in self._encoded:
                self._encoded.update(group.key, data)
            else:
                self._encoded.append(group.key, data)  # new groups come in creation order
        self._stale.clear()
        return self._encoded.parts()

    def _drop_oldest_group(self) -> None:
        group = self._groups.popleft()
        for job_id in group.ids:
            del self._at[job_id]
        self._stale.pop(group.key, None)
        if group.key in self._encoded:
            self._encoded.remove(group.key)
