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
  reach the broker over HTTP; the worker runs handlers on claimed jobs.
"""

from __future__ import annotations

from engine.broker import Broker
from engine.client import AsyncQueueMethods, QueueClient
from engine.committer import CommitStats, GroupCommitter
from engine.decoding import DecodedDocument, DocumentDecoder, decode_document_json
from engine.direct import DirectClient
from engine.document import FORMAT, QueueState
from engine.errors import (
    BrokerUnavailable,
    CommitterStopped,
    DocumentError,
    EngineError,
    InvalidPayload,
    JobNotFound,
    LeaseLost,
    NotLeader,
    PayloadTooLarge,
    PreconditionFailed,
    QueueError,
    StoreConfigError,
    StoreError,
    StoreUnavailable,
    Unauthorized,
    ValidationError,
)
from engine.http_client import BrokerClient
from engine.model import Attempt, BrokerInfo, ClaimedJob, DeadLetter, FailOutcome, Job, Lease, QueueCounters, utc_now
from engine.parsing import parse_document
from engine.policy import DOCUMENT_KEY, MAX_DELAY_SECONDS, Policy
from engine.stores import Blob, FaultyStore, FileStore, LatencyStore, MemoryStore, ObjectStore, open_store
from engine.worker import Worker, WorkerOptions, WorkerStats, default_heartbeat_interval

__all__ = [
    "DOCUMENT_KEY",
    "FORMAT",
    "MAX_DELAY_SECONDS",
    "AsyncQueueMethods",
    "Attempt",
    "Blob",
    "Broker",
    "BrokerClient",
    "BrokerInfo",
    "BrokerUnavailable",
    "ClaimedJob",
    "CommitStats",
    "CommitterStopped",
    "DeadLetter",
    "DecodedDocument",
    "DirectClient",
    "DocumentDecoder",
    "DocumentError",
    "EngineError",
    "FailOutcome",
    "FaultyStore",
    "FileStore",
    "GroupCommitter",
    "InvalidPayload",
    "Job",
    "JobNotFound",
    "LatencyStore",
    "Lease",
    "LeaseLost",
    "MemoryStore",
    "NotLeader",
    "ObjectStore",
    "PayloadTooLarge",
    "Policy",
    "PreconditionFailed",
    "QueueClient",
    "QueueCounters",
    "QueueError",
    "QueueState",
    "StoreConfigError",
    "StoreError",
    "StoreUnavailable",
    "Unauthorized",
    "ValidationError",
    "Worker",
    "WorkerOptions",
    "WorkerStats",
    "decode_document_json",
    "default_heartbeat_interval",
    "open_store",
    "parse_document",
    "utc_now",
]
