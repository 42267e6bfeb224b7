"""A worker's tunables: :class:`WorkerOptions`, the named constants that are
its defaults, and :func:`default_heartbeat_interval`, the heartbeat interval
a lease gets when none is given. No I/O; the worker they tune is in
:mod:`engine.worker`.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.wire import MAX_WAIT_SECONDS

__all__ = [
    "DEFAULT_ACK_LINGER_SECONDS",
    "DEFAULT_BACKOFF_CAP_SECONDS",
    "DEFAULT_BACKOFF_SECONDS",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_GRACE_SECONDS",
    "DEFAULT_POLL_SECONDS",
    "DEFAULT_WAIT_SECONDS",
    "HEARTBEAT_SHARE",
    "WorkerOptions",
    "default_heartbeat_interval",
]

DEFAULT_CONCURRENCY = 1
DEFAULT_WAIT_SECONDS = 10.0
# A worker heartbeats every lease_seconds * this, unless told otherwise: two
# missed beats still leave a third of the lease.
HEARTBEAT_SHARE = 1 / 3
DEFAULT_GRACE_SECONDS = 30.0
DEFAULT_POLL_SECONDS = 1.0
DEFAULT_BACKOFF_SECONDS = 0.5
DEFAULT_BACKOFF_CAP_SECONDS = 10.0
# A batching worker's finished jobs wait this long (at most) for others to
# join their acknowledgement request: a few ms, far below a commit's latency.
DEFAULT_ACK_LINGER_SECONDS = 0.005


def default_heartbeat_interval(lease_seconds: float) -> float:
    """How often, in seconds, a :class:`~engine.worker.Worker` heartbeats a
    lease of ``lease_seconds`` when it is not given ``heartbeat_interval``. A
    lease whose last heartbeat is older than this (plus some slack) has
    missed a beat. No I/O."""
    return lease_seconds * HEARTBEAT_SHARE


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerOptions:
    """A worker's tunables. Every default is a named constant of this module.

    * ``concurrency`` — handler threads: how many jobs run at once;
    * ``lease_seconds`` — the lease asked for with every claim (None: the
      client's policy), so the heartbeat schedule matches the leases it gets;
    * ``heartbeat_interval`` — None: the lease times :data:`HEARTBEAT_SHARE`;
    * ``wait_seconds`` — the long poll per claim, 0 to ``MAX_WAIT_SECONDS``
      (0 in burst mode); ``stop()`` does not wait it out;
    * ``poll_seconds`` — the least time between two claims that found nothing;
    * ``burst`` — return as soon as a claim finds nothing and no job is
      running; delayed jobs (retry backoff, delayed pushes) are left for later;
    * ``grace_seconds`` — after ``stop()``, how long running jobs may finish;
    * ``backoff_seconds`` / ``backoff_cap_seconds`` — the jittered backoff
      (:func:`~engine.backoff.jittered`) after a failed claim or report;
    * ``batch`` — acknowledge and heartbeat in batches through the client's
      ``execute_many`` (one ``POST /api/v1/ack`` for many finished jobs, one
      ``POST /api/v1/heartbeat`` per beat for all leases; see
      :mod:`engine.reporter`), each acknowledgement request also carrying
      the claim for the slots free then (one commit for both). False: one
      request per acknowledgement and per heartbeat, as before (the
      single-job calls). Either way a claim asks for as many jobs as there
      are free handler threads;
    * ``ack_linger_seconds`` — with ``batch``, how long a finished job's
      acknowledgement may wait for others to join it;
    * ``timeout_seconds`` — None: no limit. Else a job whose handler has run
      this long is timed out: cancelled (:mod:`engine.cancellation`), its
      lease no longer renewed, and failed with a ``JobTimeout`` error once
      the handler returns (retried with backoff, or dead when its attempts
      are used up); a handler that ignores its cancellation keeps its thread
      and the lease runs out, which fails the attempt too;
    * ``max_jobs`` — None: no limit. Else the worker claims at most this many
      jobs (each attempt counts), then stops claiming, lets the running ones
      end, and ``run()`` returns: a process that leaks memory, or must pick
      up new code, is replaced by its supervisor after N jobs (Celery's
      ``max-tasks-per-child``, RQ's ``--max-jobs``);
    * ``in_order`` — False: each claim takes the oldest jobs across the
      worker's queues. True: the queues, in the order given, are priorities
      (as an RQ worker's): a job of a queue is claimed only when no queue
      before it has one the claim may take, so a busy first queue starves
      the later ones (:func:`~engine.ops.claim_op`);
    * ``watch_leases`` — True: while jobs run, a thread keeps a long-poll
      lease watch open (``POST /api/v1/leases/watch``, with a client that
      has ``watch_leases``, as :class:`~engine.BrokerClient`), so that a job
      an operator requeued or purged, or whose lease ran out, is cancelled
      as soon as that commit lands, not at the next heartbeat. It writes
      nothing; heartbeats still extend the leases. False, or a broker
      without lease watches: heartbeats alone find a lost lease.

    Raises ValueError for a value no worker could use; ``heartbeat_interval``
    is checked against the lease by the :class:`~engine.worker.Worker`,
    which knows it.
    """

    concurrency: int = DEFAULT_CONCURRENCY
    lease_seconds: float | None = None
    heartbeat_interval: float | None = None
    wait_seconds: float = DEFAULT_WAIT_SECONDS
    poll_seconds: float = DEFAULT_POLL_SECONDS
    burst: bool = False
    grace_seconds: float = DEFAULT_GRACE_SECONDS
    backoff_seconds: float = DEFAULT_BACKOFF_SECONDS
    backoff_cap_seconds: float = DEFAULT_BACKOFF_CAP_SECONDS
    batch: bool = True
    ack_linger_seconds: float = DEFAULT_ACK_LINGER_SECONDS
    timeout_seconds: float | None = None
    max_jobs: int | None = None
    in_order: bool = False
    watch_leases: bool = True

    def __post_init__(self) -> None:
        concurrency = self.concurrency
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be a positive integer, got {concurrency!r}")
        if not 0 <= self.wait_seconds <= MAX_WAIT_SECONDS or self.poll_seconds <= 0 or self.grace_seconds < 0:
            raise ValueError(f"need 0 <= wait_seconds <= {MAX_WAIT_SECONDS:g}, poll_seconds > 0, grace_seconds >= 0")
        if not isinstance(self.batch, bool) or not 0 <= self.ack_linger_seconds <= 1:
            raise ValueError("need batch to be a bool and 0 <= ack_linger_seconds <= 1")
        if self.timeout_seconds is not None and not 0 < self.timeout_seconds < float("inf"):
            raise ValueError(f"timeout_seconds must be positive and finite (or None), got {self.timeout_seconds!r}")
        max_jobs = self.max_jobs
        if max_jobs is not None and (isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1):
            raise ValueError(f"max_jobs must be a positive integer (or None), got {max_jobs!r}")
        if not isinstance(self.in_order, bool):
            raise ValueError(f"in_order must be a bool, got {self.in_order!r}")
        if not isinstance(self.watch_leases, bool):
            raise ValueError(f"watch_leases must be a bool, got {self.watch_leases!r}")
