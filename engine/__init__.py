"""queueadmin's engine: a FIFO job queue whose whole state is one JSON document
on object storage, changed only by conditional writes. Pure Python; it never
imports Django.

Layers, bottom to top, each handed the one below in its constructor:

* stores (:func:`open_store`): one object, read and written conditionally;
* transitions (:mod:`engine.transitions`): pure functions of (state,
  operation, now) that the layers above apply;
* the direct client (:class:`DirectClient`, layer 1): one read and one
  conditional write per operation (:mod:`engine.cas`);
* the group committer (:class:`GroupCommitter`, layer 2): one writer, one
  conditional write per batch;
* the broker (:class:`Broker`, layers 3 and 4): runs the group committer for
  every client, with failover between nodes;
* the HTTP client and the worker (:class:`BrokerClient`, :class:`Worker`):
  reach the broker over HTTP (through an :class:`HttpTransport`, by default
  a :class:`PooledTransport`); the worker runs handlers on claimed jobs.

The public API is this package's ``__all__`` and four public submodules:

* :mod:`engine.ops`: the operations (``Push``, ``Claim``, …) and their
  validating builders (``push_op``, ``claim_op``, …);
* :mod:`engine.transitions`: the pure transitions, for tools and tests that
  drive a :class:`QueueState` directly;
* :mod:`engine.wire`: the broker API's wire format, both directions;
* :mod:`engine.stores`: the store backends and :func:`open_store`'s helpers.

Everything else is internal and may change without notice; code outside
``engine/`` imports only these (``tests/test_engine_boundary.py`` enforces it).
Every error is an :class:`EngineError`; the tree is in :mod:`engine.errors`.
"""

from __future__ import annotations

from engine.broker import DEFAULT_HEARTBEAT_SECONDS, DEFAULT_TAKEOVER_SECONDS, Broker
from engine.cancellation import Cancellation, JobCancelled, cancelled, check_cancelled, current_cancellation
from engine.client import AsyncQueueMethods, QueueClient
from engine.collector import DEFAULT_GC_THRESHOLDS, check_gc_thresholds, tune_collector
from engine.committer import MAX_HEDGE_SECONDS, CommitStats, GroupCommitter
from engine.decoding import DecodedDocument, DocumentDecoder, decode_document_json
from engine.direct import DirectClient
from engine.document import FORMAT, FORMAT_DELAYED, FORMAT_SEGMENTS, QueueState
from engine.encoding import counters_dict
from engine.errors import (
    BrokerUnavailable,
    CommitterStopped,
    CommitTimeout,
    DocumentError,
    DocumentMissing,
    EngineError,
    Forbidden,
    InitRefused,
    InvalidPayload,
    JobNotFound,
    JobSealed,
    LeaseLost,
    MalformedJson,
    NotLeader,
    OperationFailed,
    PayloadTooLarge,
    PreconditionFailed,
    QueueError,
    SegmentUnreadable,
    StoreConfigError,
    StoreError,
    StoreUnavailable,
    StoreUnsafe,
    Unauthorized,
    ValidationError,
)
from engine.http_client import API_PREFIX, BrokerClient
from engine.http_transport import HttpAnswer, HttpTransport, PooledTransport
from engine.idindex import IndexCache, shared_index_cache
from engine.lifecycle import STOPPED_ERROR
from engine.lineage import initialise, marker_key, read_marker
from engine.lookup import RangedFinds, one_job, ranged_job
from engine.model import (
    Attempt,
    BrokerInfo,
    ClaimedJob,
    DeadLetter,
    Departure,
    FailOutcome,
    Job,
    Lease,
    QueueCounters,
    decode_payload,
    new_job_id,
    utc_now,
)
from engine.parsing import empty_state, parse_document
from engine.pending import Buckets
from engine.policy import (
    DEFAULT_DELAYED_HORIZON_SECONDS,
    DEFAULT_HEAD_JOBS,
    DEFAULT_LEASE_SECONDS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_MERGE_JOBS,
    DEFAULT_REFILL_BELOW,
    DEFAULT_SEGMENT_JOBS,
    DOCUMENT_KEY,
    MAX_DELAY_SECONDS,
    Policy,
)
from engine.rates import RateLimit
from engine.readiness import Readiness
from engine.schedules import (
    DEFAULT_CATCH_UP_SECONDS,
    Schedule,
    ScheduleMark,
    check_schedule_name,
    fire_op,
    forget_schedule_op,
    pause_schedule_op,
    schedule,
    tick_of,
)
from engine.segments import JOB_LOOKUP_READS, SEGMENT_KINDS, DelayedRef, SegmentRef, newest_first, read_segment
from engine.storecheck import check_conditions
from engine.stores import Blob, FaultyStore, FileStore, LatencyStore, MemoryStore, ObjectStore, check_key, open_store
from engine.waiters import WaitingClaims
from engine.worker import PermanentFailure, Worker, WorkerStats, new_worker_id
from engine.workeroptions import (
    DEFAULT_ACK_LINGER_SECONDS,
    DEFAULT_GRACE_SECONDS,
    DEFAULT_WAIT_SECONDS,
    WorkerOptions,
    default_heartbeat_interval,
)

__all__ = [
    "API_PREFIX",
    "DEFAULT_ACK_LINGER_SECONDS",
    "DEFAULT_CATCH_UP_SECONDS",
    "DEFAULT_DELAYED_HORIZON_SECONDS",
    "DEFAULT_GC_THRESHOLDS",
    "DEFAULT_GRACE_SECONDS",
    "DEFAULT_HEAD_JOBS",
    "DEFAULT_HEARTBEAT_SECONDS",
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "DEFAULT_MERGE_JOBS",
    "DEFAULT_REFILL_BELOW",
    "DEFAULT_SEGMENT_JOBS",
    "DEFAULT_TAKEOVER_SECONDS",
    "DEFAULT_WAIT_SECONDS",
    "DOCUMENT_KEY",
    "FORMAT",
    "FORMAT_DELAYED",
    "FORMAT_SEGMENTS",
    "JOB_LOOKUP_READS",
    "MAX_DELAY_SECONDS",
    "MAX_HEDGE_SECONDS",
    "SEGMENT_KINDS",
    "STOPPED_ERROR",
    "AsyncQueueMethods",
    "Attempt",
    "Blob",
    "Broker",
    "BrokerClient",
    "BrokerInfo",
    "BrokerUnavailable",
    "Buckets",
    "Cancellation",
    "ClaimedJob",
    "CommitStats",
    "CommitTimeout",
    "CommitterStopped",
    "DeadLetter",
    "DecodedDocument",
    "DelayedRef",
    "Departure",
    "DirectClient",
    "DocumentDecoder",
    "DocumentError",
    "DocumentMissing",
    "EngineError",
    "FailOutcome",
    "FaultyStore",
    "FileStore",
    "Forbidden",
    "GroupCommitter",
    "HttpAnswer",
    "HttpTransport",
    "IndexCache",
    "InitRefused",
    "InvalidPayload",
    "Job",
    "JobCancelled",
    "JobNotFound",
    "JobSealed",
    "LatencyStore",
    "Lease",
    "LeaseLost",
    "MalformedJson",
    "MemoryStore",
    "NotLeader",
    "ObjectStore",
    "OperationFailed",
    "PayloadTooLarge",
    "PermanentFailure",
    "Policy",
    "PooledTransport",
    "PreconditionFailed",
    "QueueClient",
    "QueueCounters",
    "QueueError",
    "QueueState",
    "RangedFinds",
    "RateLimit",
    "Readiness",
    "Schedule",
    "ScheduleMark",
    "SegmentRef",
    "SegmentUnreadable",
    "StoreConfigError",
    "StoreError",
    "StoreUnavailable",
    "StoreUnsafe",
    "Unauthorized",
    "ValidationError",
    "WaitingClaims",
    "Worker",
    "WorkerOptions",
    "WorkerStats",
    "cancelled",
    "check_cancelled",
    "check_conditions",
    "check_gc_thresholds",
    "check_key",
    "check_schedule_name",
    "counters_dict",
    "current_cancellation",
    "decode_document_json",
    "decode_payload",
    "default_heartbeat_interval",
    "empty_state",
    "fire_op",
    "forget_schedule_op",
    "initialise",
    "marker_key",
    "new_job_id",
    "new_worker_id",
    "newest_first",
    "one_job",
    "open_store",
    "parse_document",
    "pause_schedule_op",
    "ranged_job",
    "read_marker",
    "read_segment",
    "schedule",
    "shared_index_cache",
    "tick_of",
    "tune_collector",
    "utc_now",
]
