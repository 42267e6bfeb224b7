"""The client interface shared by :class:`DirectClient`, :class:`GroupCommitter`
and :class:`~engine.http_client.BrokerClient`.

All expose the same methods; they differ only in how an operation reaches
the store. Every method validates its input first (raising ValidationError
without any I/O), and returns only after the commit containing the operation
has landed (I1).
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from engine.errors import EngineError, QueueError, Unauthorized
from engine.model import ClaimedJob, FailOutcome
from engine.ops import (
    claim_op,
    complete_op,
    fail_op,
    get_job_op,
    heartbeat_op,
    limit_op,
    make_due_op,
    pause_op,
    purge_op,
    push_op,
    rate_limit_op,
    requeue_op,
    stop_op,
)
from engine.optypes import Operation
from engine.policy import Policy


class QueueClient(abc.ABC):
    """Queue operations over one document. Subclasses implement :meth:`execute`."""

    policy: Policy

    @abc.abstractmethod
    def execute(self, op: Operation) -> Any:
        """Commit ``op`` and return its outcome, or raise its QueueError / StoreError."""

    def execute_many(self, ops: Sequence[Operation]) -> list[Any]:
        """Commit every operation of ``ops`` and return one outcome per
        operation, in order: its result, or the EngineError it failed with
        (returned, not raised). Each is returned only after the commit
        holding it landed (I1); one operation's error never affects the others.

        This default runs :meth:`execute` once per operation, in order (so an
        error such as StoreUnavailable stops nothing: the next operation is
        still tried). Subclasses carry the operations together where they
        can: the group committer submits them at once, the HTTP client sends
        them as batch calls. Raises only for a failure of the whole call
        (Unauthorized, or NotLeader/BrokerUnavailable from a BrokerClient
        that could not reach a leader).
        """
        outcomes: list[Any] = []
        for op in ops:
            try:
                outcomes.append(self.execute(op))
            except EngineError as exc:
                if isinstance(exc, Unauthorized):
                    raise
                outcomes.append(exc)
        return outcomes

    @abc.abstractmethod
    def document(self) -> dict[str, Any]:
        """The committed document, as parsed JSON."""

    def push(
        self,
        queue: str,
        payloads: Sequence[Any],
        *,
        max_attempts: int | None = None,
        delay_seconds: float = 0,
        ids: Sequence[str] | None = None,
    ) -> list[str]:
        """Append one job per payload to ``queue``; return their ids in order.

        ``ids``, one per payload, are the jobs' ids (1-200 letters, digits,
        ``_ . : -``), chosen by the caller so that a push repeated after a
        crash or a lost answer is not doubled: an id still in the document, or
        in the dedup window after its job left, enqueues nothing and comes
        back as it was (README, "Delivery guarantees"). None: new ids."""
        op = push_op(queue, payloads, policy=self.policy, max_attempts=max_attempts, delay_seconds=delay_seconds,
                     ids=ids)
        result: list[str] = self.execute(op)
        return result

    def claim(
        self,
        worker: str,
        queues: Iterable[str],
        *,
        max_jobs: int = 1,
        lease_seconds: float | None = None,
        wait_seconds: float = 0,
        in_order: bool = False,
    ) -> list[ClaimedJob]:
        """Lease up to ``max_jobs`` eligible jobs of ``queues``, oldest first
        (with ``in_order``, the first queue's before the second's: see
        :func:`~engine.ops.claim_op`). May return [].

        ``wait_seconds`` is how long the caller is willing to wait for a job
        when none is claimable yet (a long poll). A client may honour it or
        answer at once: the :class:`~engine.http_client.BrokerClient` does
        (the broker holds the request); this implementation, which
        :class:`~engine.direct.DirectClient` and
        :class:`~engine.committer.GroupCommitter` use, ignores it and returns
        as soon as the claim has committed. A caller that wants to wait
        between empty claims must do so itself.
        """
        op = claim_op(worker, queues, policy=self.policy, max_jobs=max_jobs, lease_seconds=lease_seconds,
                      in_order=in_order)
        result: list[ClaimedJob] = self.execute(op)
        return result

    def heartbeat(self, job_id: str, lease: str, *, lease_seconds: float | None = None) -> datetime:
        """Extend a lease; returns the new deadline. Raises LeaseLost or JobNotFound."""
        result: datetime = self.execute(heartbeat_op(job_id, lease, lease_seconds=lease_seconds))
        return result

    def complete(self, job_id: str, lease: str) -> None:
        """Finish a job. Raises LeaseLost or JobNotFound."""
        self.execute(complete_op(job_id, lease))

    def fail(
        self, job_id: str, lease: str, *, error: str, retry_in_seconds: float | None = None, give_up: bool = False
    ) -> FailOutcome:
        """Record a failed attempt; the job retries later or goes to the dead
        letters (at once with ``give_up``, whatever attempts it has left)."""
        op = fail_op(job_id, lease, error=error, retry_in_seconds=retry_in_seconds, policy=self.policy,
                     give_up=give_up)
        result: FailOutcome = self.execute(op)
        return result

    def get_job(self, job_id: str) -> dict[str, Any]:
        """The job as the document shows it (status pending, running or dead),
        without its lease token. Raises JobNotFound."""
        result: dict[str, Any] = self.execute(get_job_op(job_id))
        return result

    def requeue(self, job_ids: Iterable[str]) -> list[str]:
        """Move running or dead jobs back to pending (all or nothing)."""
        result: list[str] = self.execute(requeue_op(job_ids))
        return result

    def stop_jobs(self, job_ids: Iterable[str]) -> list[str]:
        """Stop running jobs: to the dead letters, kept, their leases revoked
        (all or nothing; :class:`~engine.optypes.Stop`). Not ``stop``: that
        stops a committer or a broker, which are clients too."""
        result: list[str] = self.execute(stop_op(job_ids))
        return result

    def make_due(self, job_ids: Iterable[str]) -> list[str]:
        """Make delayed pending jobs due now, each in its FIFO place (all or
        nothing; :class:`~engine.optypes.MakeDue`); returns the ids made due
        (not those that were due already)."""
        result: list[str] = self.execute(make_due_op(job_ids))
        return result

    def purge(
        self, job_ids: Iterable[str] | None = None, *, queue: str | None = None, status: str | None = None
    ) -> list[str]:
        """Remove jobs by id, or all jobs of one queue and status; returns removed ids."""
        result: list[str] = self.execute(purge_op(job_ids, queue=queue, status=status))
        return result

    def pause(self, queue: str, *, paused: bool = True) -> bool:
        """Pause (or, with ``paused=False``, resume) ``queue``; returns whether
        it was paused before. A paused queue takes pushes but hands out no claims."""
        result: bool = self.execute(pause_op(queue, paused=paused))
        return result

    def limit(self, queue: str, max_running: int | None) -> int | None:
        """Let at most ``max_running`` of ``queue``'s jobs run at once, across
        every worker (None: no limit); returns the limit before."""
        result: int | None = self.execute(limit_op(queue, max_running))
        return result

    def rate_limit(self, queue: str, jobs: int | None, seconds: float | None = None) -> dict[str, Any] | None:
        """Let at most ``jobs`` of ``queue``'s jobs start in each window of
        ``seconds``, across every worker (``jobs`` None: no limit); returns
        the limit before (``{"jobs", "seconds"}``) or None."""
        result: dict[str, Any] | None = self.execute(rate_limit_op(queue, jobs, seconds))
        return result


def unwrap(result: Any) -> Any:
    """Raise ``result`` if it is an error outcome, else return it."""
    if isinstance(result, QueueError):
        raise result
    return result


class AsyncQueueMethods(abc.ABC):
    """The same operations as :class:`QueueClient`, for coroutines: each awaits
    the commit without blocking the event loop."""

    policy: Policy

    @abc.abstractmethod
    async def aexecute(self, op: Operation) -> Any:
        """Commit ``op`` and return its outcome, or raise its error."""

    async def aexecute_many(self, ops: Sequence[Operation]) -> list[Any]:
        """As :meth:`QueueClient.execute_many`, awaiting without blocking the
        loop. This default awaits :meth:`aexecute` for every operation at
        once (they may share a commit) and returns each one's outcome or
        EngineError; any other exception is raised."""
        outcomes = await asyncio.gather(*(self.aexecute(op) for op in ops), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, EngineError):
                raise outcome
        return list(outcomes)

    async def apush(
        self,
        queue: str,
        payloads: Sequence[Any],
        *,
        max_attempts: int | None = None,
        delay_seconds: float = 0,
        ids: Sequence[str] | None = None,
    ) -> list[str]:
        op = push_op(queue, payloads, policy=self.policy, max_attempts=max_attempts, delay_seconds=delay_seconds,
                     ids=ids)
        result: list[str] = await self.aexecute(op)
        return result

    async def aclaim(
        self, worker: str, queues: Iterable[str], *, max_jobs: int = 1, lease_seconds: float | None = None,
        in_order: bool = False,
    ) -> list[ClaimedJob]:
        op = claim_op(worker, queues, policy=self.policy, max_jobs=max_jobs, lease_seconds=lease_seconds,
                      in_order=in_order)
        result: list[ClaimedJob] = await self.aexecute(op)
        return result

    async def aheartbeat(self, job_id: str, lease: str, *, lease_seconds: float | None = None) -> datetime:
        result: datetime = await self.aexecute(heartbeat_op(job_id, lease, lease_seconds=lease_seconds))
        return result

    async def acomplete(self, job_id: str, lease: str) -> None:
        await self.aexecute(complete_op(job_id, lease))

    async def afail(
        self, job_id: str, lease: str, *, error: str, retry_in_seconds: float | None = None, give_up: bool = False
    ) -> FailOutcome:
        op = fail_op(job_id, lease, error=error, retry_in_seconds=retry_in_seconds, policy=self.policy,
                     give_up=give_up)
        result: FailOutcome = await self.aexecute(op)
        return result

    async def aget_job(self, job_id: str) -> dict[str, Any]:
        result: dict[str, Any] = await self.aexecute(get_job_op(job_id))
        return result

    async def arequeue(self, job_ids: Iterable[str]) -> list[str]:
        result: list[str] = await self.aexecute(requeue_op(job_ids))
        return result

    async def astop_jobs(self, job_ids: Iterable[str]) -> list[str]:
        result: list[str] = await self.aexecute(stop_op(job_ids))
        return result

    async def amake_due(self, job_ids: Iterable[str]) -> list[str]:
        result: list[str] = await self.aexecute(make_due_op(job_ids))
        return result

    async def apurge(
        self, job_ids: Iterable[str] | None = None, *, queue: str | None = None, status: str | None = None
    ) -> list[str]:
        result: list[str] = await self.aexecute(purge_op(job_ids, queue=queue, status=status))
        return result

    async def apause(self, queue: str, *, paused: bool = True) -> bool:
        result: bool = await self.aexecute(pause_op(queue, paused=paused))
        return result

    async def alimit(self, queue: str, max_running: int | None) -> int | None:
        result: int | None = await self.aexecute(limit_op(queue, max_running))
        return result

    async def arate_limit(self, queue: str, jobs: int | None, seconds: float | None = None) -> dict[str, Any] | None:
        result: dict[str, Any] | None = await self.aexecute(rate_limit_op(queue, jobs, seconds))
        return result
