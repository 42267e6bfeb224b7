"""The calls a :class:`~engine.broker.Broker` serves: operations run on the
leader's committer (:meth:`BrokerCalls.execute`, :meth:`BrokerCalls.aexecute`,
:meth:`BrokerCalls.aexecute_many`), a job looked up by id, segments included
(:meth:`BrokerCalls.get_job`), and lease watches
(:meth:`BrokerCalls.awatch_leases`). Each raises NotLeader (with the
leader's URL, when known) on a node that does not lead, after waiting out a
takeover under way, and the reason no node leads a lost document (I10).

Every field it reads is the broker's, declared below; the control loop
(:mod:`engine.broker`) sets them. Split from :mod:`engine.broker`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeGuard

import orjson

from engine.committer import GroupCommitter
from engine.duenow import make_due_by_ids
from engine.encoding import encode_job
from engine.errors import CommitterStopped, JobNotFound, JobSealed, NotLeader
from engine.excision import purge_by_ids
from engine.lanes import LaneKeeper
from engine.leasewatch import LeaseWatches, Lost
from engine.lineage import Presence
from engine.model import BrokerInfo
from engine.ops import MakeDue, Operation, Purge, get_job_op
from engine.optypes import QueueScope

if TYPE_CHECKING:
    from engine.broker import Role

__all__ = ["BrokerCalls"]


def _purges_ids(op: Operation) -> TypeGuard[Purge]:
    """Whether ``op`` is a purge by ids as a client sends it (never the
    leader's own retry of one, which has ``seek`` or ``excisions``)."""
    return isinstance(op, Purge) and bool(op.job_ids) and not op.seek and not op.excisions


def _makes_due(op: Operation) -> TypeGuard[MakeDue]:
    """Whether ``op`` is a run now as a client sends it (as :func:`_purges_ids`)."""
    return isinstance(op, MakeDue) and not op.seek and not op.excisions


class BrokerCalls:
    """The serving half of a :class:`~engine.broker.Broker` (see the module)."""

    # The broker's fields this part reads (see Broker.__init__).
    role: Role
    leader: BrokerInfo
    presence: Presence
    takeover_seconds: float
    lease_watches: LeaseWatches
    _settled: threading.Event
    _committer: GroupCommitter | None
    _keeper: LaneKeeper | None

    def _leading(self) -> GroupCommitter:
        if not self._settled.is_set():
            self._settled.wait(self.takeover_seconds)
        return self._now_leading()

    async def _aleading(self) -> GroupCommitter:
        """Like :meth:`_leading`, waiting for a takeover without blocking the
        event loop. It polls rather than parking a thread per request: a
        takeover is short and rare, while many waiting requests (a hundred
        long-polling workers) would each hold one of the loop's few
        executor threads."""
        deadline = time.monotonic() + self.takeover_seconds
        while not self._settled.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        return self._now_leading()

    async def arequire_leading(self) -> None:
        """Return once this node leads; raise NotLeader (with the leader's
        URL) if it does not, or the reason no node leads a lost document.
        Waits for a takeover under way, as every operation does. For a
        caller that must refuse before doing anything else: the operator
        endpoint records a request's nonce in the shared database only on
        the leader."""
        await self._aleading()

    def _now_leading(self) -> GroupCommitter:
        missing = self.presence.missing
        if missing is not None:
            raise missing  # no node leads a lost document: say why, not "ask someone else"
        committer = self._committer
        if self.role != "leader" or committer is None:
            raise NotLeader(self.leader.url)
        return committer

    def execute(self, op: Operation) -> Any:
        """Run ``op`` on this node's committer. Raises NotLeader if not leading.
        A purge by ids also removes jobs pending inside segments (format 2,
        see :meth:`_purge_by_ids`)."""
        if _purges_ids(op):
            return self._purge_by_ids(op)
        if _makes_due(op):
            # Delayed jobs in delayed segments too (format 3), as a purge by ids.
            return make_due_by_ids(op, execute=self._execute, keeper=self._lane_keeper)
        return self._execute(op)

    def _execute(self, op: Operation) -> Any:
        try:
            return self._leading().execute(op)
        except CommitterStopped as exc:
            raise NotLeader(self.leader.url) from exc

    def _purge_by_ids(self, op: Purge) -> Any:
        """A purge by ids, jobs pending inside segments included (see
        :func:`engine.excision.purge_by_ids`). On this thread: never the event loop's."""
        return purge_by_ids(op, execute=self._execute, keeper=self._lane_keeper)

    def _lane_keeper(self) -> LaneKeeper:
        """This leader's lane keeper. Raises NotLeader when there is none."""
        keeper = self._keeper
        if keeper is None:
            raise NotLeader(self.leader.url)
        return keeper

    async def aexecute(self, op: Operation) -> Any:
        """Like :meth:`execute`, awaiting without blocking the event loop."""
        if _purges_ids(op) or _makes_due(op):
            return await asyncio.to_thread(self.execute, op)  # it may read and write segments
        try:
            return await (await self._aleading()).aexecute(op)
        except CommitterStopped as exc:
            raise NotLeader(self.leader.url) from exc

    def get_job(self, job_id: str) -> dict[str, Any]:
        """The job as ``GetJob`` shows it (pending, running or dead, no lease
        token), or, in format 2, a pending job that sits in a segment object,
        shown as a pending job with ``"segment"``, its object's key (see
        ``SegmentLookup.find_pending`` for where it looks and the reads it may
        take: a job in a merged segment is found through its id index, one
        in a seal's segment among the ``JOB_LOOKUP_READS`` segments it may
        read). Raises JobNotFound otherwise, NotLeader, or
        SegmentUnreadable/StoreError from a segment read."""
        try:
            view: dict[str, Any] = self.execute(get_job_op(job_id))
            return view
        except JobSealed as sealed:
            return self._sealed_job(sealed)

    async def aget_job(self, job_id: str) -> dict[str, Any]:
        """Like :meth:`get_job`; segment reads run on a worker thread."""
        try:
            view: dict[str, Any] = await self.aexecute(get_job_op(job_id))
            return view
        except JobSealed as sealed:
            return await asyncio.to_thread(self._sealed_job, sealed)

    def _sealed_job(self, sealed: JobSealed) -> dict[str, Any]:
        keeper = self._keeper
        found = keeper.lookup.find_pending(sealed.job_id, sealed.refs) if keeper is not None else None
        if found is None:
            raise JobNotFound(sealed.job_id) from None
        job, _, ref = found
        view: dict[str, Any] = orjson.loads(encode_job(job))  # every field, as GetJob shows a job
        view["segment"] = ref.key
        return view

    async def awatch_leases(
        self, leases: Sequence[tuple[str, str]], wait: float, *, scope: QueueScope | None = None
    ) -> list[Lost]:
        """Which of ``leases`` (job id, lease token) are no longer current, as
        soon as a landed commit shows one (or at once, if one is not now), or
        ``[]`` after ``wait`` seconds (:mod:`engine.leasewatch`). Writes
        nothing. Raises NotLeader if this node does not lead, or stops
        leading while it waits."""
        committer = await self._aleading()
        return await self.lease_watches.watch(leases, wait, lambda: committer.state, scope=scope)

    async def aexecute_many(self, ops: Sequence[Operation]) -> list[Any]:
        """Submit every operation of ``ops`` to this node's committer at once
        and await them all: one outcome per operation, in order, its result
        or the EngineError it failed with (returned), each answered only after
        its commit landed (I1). Raises NotLeader if not leading."""
        try:
            outcomes = await (await self._aleading()).aexecute_many(ops)
        except CommitterStopped as exc:
            raise NotLeader(self.leader.url) from exc
        # Stopped under our feet (a step down): to a client that is "not the leader".
        return [NotLeader(self.leader.url) if isinstance(o, CommitterStopped) else o for o in outcomes]

