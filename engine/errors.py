"""The engine's exception tree, in one place.

Every error the engine raises derives from :class:`EngineError`::

    EngineError
    ├── StoreError                 the object store failed or refused
    │   ├── PreconditionFailed     a conditional write lost a race (S3 412 / 409)
    │   ├── StoreUnavailable       transient: timeout, 5xx, throttling; the write may have landed
    │   │   └── BrokerUnavailable  no broker answered a BrokerClient: refused, reset, timed out
    │   └── StoreConfigError       bad store URL, missing credentials or bucket; retrying won't help
    │       └── StoreUnsafe        the store does not honour conditional writes; nothing is written there
    ├── DocumentError              queue.json cannot be read safely (corrupt, foreign, unknown format)
    │   ├── DocumentMissing        queue.json existed and is gone; it is not re-created (I10)
    │   └── SegmentUnreadable      a segment the document references is missing or does not verify
    ├── NotLeader                  this broker does not (or no longer) lead; ask ``leader_url``
    ├── Unauthorized               the broker refused the API token; fix it, retrying won't help
    │   └── Forbidden              the token is good but its scope does not allow this call or queue
    ├── CommitterStopped           the group committer is not running; nothing was applied
    ├── CommitTimeout              no answer within the caller's deadline; the operation may yet commit
    ├── InitRefused                queueinit refused: a document exists or existed; nothing was written
    └── QueueError                 a queue operation was refused; nothing changed
        ├── JobNotFound            no job with that id
        ├── LeaseLost              the lease token is not the job's current lease
        ├── OperationFailed        one operation could not be applied or encoded; it alone was refused
        └── ValidationError        bad input: queue name, payload, numbers
            ├── MalformedJson      a request body that is not JSON text (the broker API)
            ├── InvalidPayload     not JSON-serialisable
            └── PayloadTooLarge    encoded payload above the configured limit

Errors carry a stable ``code`` string so that HTTP layers can map them without
``isinstance`` ladders.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.segments import SegmentRef


class EngineError(Exception):
    """Root of every error raised by :mod:`engine`."""

    code = "engine_error"


class StoreError(EngineError):
    """The object store failed or refused a request."""

    code = "store_error"


class PreconditionFailed(StoreError):
    """A conditional write lost a race: the object changed (or exists) since it was read.

    Re-read the object and retry the change on top of what is there now.
    """

    code = "precondition_failed"


class StoreUnavailable(StoreError):
    """A transient store failure: timeout, connection error, 5xx or throttling.

    For a write this is *ambiguous*: the write may have landed. Settle it by
    re-reading (the document records its writer id and sequence number).
    """

    code = "store_unavailable"


class BrokerUnavailable(StoreUnavailable):
    """No broker answered in time: connection refused or reset, a timeout, a
    gateway error. To this client the broker *is* the store, so this is a
    StoreUnavailable: a write may have landed; settle it as docs/api.md says."""

    code = "broker_unavailable"


class StoreConfigError(StoreError):
    """The store cannot be used as configured: a bad URL, a missing bucket,
    missing or rejected credentials. Fix the configuration; retrying won't help."""

    code = "store_config"


class StoreUnsafe(StoreConfigError):
    """The store accepted a write it should have refused (or refused one it
    should have accepted): conditional writes do not work there, so two
    writers could overwrite each other's versions and acknowledged
    operations would be lost. Nothing was written to the document. Use a
    store that supports ``If-Match`` and ``If-None-Match: *`` (AWS S3, MinIO,
    R2, GCS, Azure Blob Storage), or remove what strips the headers. Its
    code is its parent's (``store_config``): no broker answers it, since a
    node that found it never leads."""

    def __init__(self, problem: str, store: str = "the store") -> None:
        super().__init__(f"{store}: {problem}; conditional writes do not work on this store, so queueadmin "
                         "will not write its document there")
        self.problem = problem


class DocumentError(EngineError):
    """The queue document cannot be read safely, so it will not be overwritten (I6).

    The message names the object and the problem. Repair or move the object
    aside by hand; the engine never guesses.
    """

    code = "document_error"

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}; refusing to overwrite it")
        self.key = key
        self.problem = problem


class DocumentMissing(DocumentError):
    """The queue document existed and is gone now, so it is not re-created (I10).

    Re-creating it empty would reset its sequence number and counters and lose
    every job silently. The node stops writing and refuses operations until an
    operator restores the object, or re-initialises the store explicitly with
    ``manage.py queueinit --force --reason ...`` (audited); the nodes then
    resume by themselves. ``why`` says how this node knows the document existed.
    """

    code = "document_missing"

    def __init__(self, key: str, why: str) -> None:
        Exception.__init__(
            self,
            f"{key} is missing, but it existed ({why}); refusing to re-create it. Restore it, or re-initialise "
            "the store explicitly (manage.py queueinit --force --reason ...)",
        )
        self.key = key
        self.problem = f"missing; it existed ({why})"
        self.why = why


class SegmentUnreadable(DocumentError):
    """A segment object that the document references is missing, or its
    bytes do not match the reference's size and SHA-256, or do not parse.

    Like an unreadable document (I6) it is never worked around: the leader
    keeps the reference, never overwrites the object, stops refilling that
    queue (its other jobs, and other queues, carry on) and reports the
    object; it resumes by itself once the object is restored.
    """

    code = "segment_unreadable"

    def __init__(self, key: str, problem: str) -> None:
        Exception.__init__(self, f"segment {key}: {problem}; the queue stops at it until it is restored")
        self.key = key
        self.problem = problem


class NotLeader(EngineError):
    """This broker is not the leader, or stopped being it: nothing was applied.

    Send the request to ``leader_url`` (``None`` while no leader is known, for
    example during a takeover); retrying after a short wait is safe.
    """

    code = "not_leader"

    def __init__(self, leader_url: str | None, message: str | None = None) -> None:
        super().__init__(message or f"not the leader; the leader is {leader_url or 'unknown'}")
        self.leader_url = leader_url


class Unauthorized(EngineError):
    """The broker refused the token (missing, wrong, or none configured there).

    Set the right token (``QUEUE_API_TOKEN`` or ``--token``); retrying won't help.
    """

    code = "unauthorized"


class Forbidden(Unauthorized):
    """The broker knows the token, but the token's scope does not allow this
    call or this queue (an API token limited to some queues, or to pushing or
    working only). Nothing was changed.

    Use a token whose scope covers the call; retrying won't help. A subclass
    of :class:`Unauthorized`, so that whoever stops on a refused token (a
    worker, the client's failover) stops on this too.
    """

    code = "forbidden"


class CommitterStopped(EngineError):
    """The committer is not running; the operation was not applied.

    Start it (``GroupCommitter.start()``) or, through a broker, retry: the
    broker answers NotLeader instead, naming the node to ask.
    """

    code = "committer_stopped"


class CommitterNotRunning(CommitterStopped):
    """Raised when an operation is submitted to a committer that is not
    running: it was never taken, so it is in no write, now or later (unlike
    an operation failed by ``stop(drain=False)``, whose error is the one
    ``stop`` was given)."""


class CommitTimeout(EngineError):
    """No answer came within the caller's deadline (``execute(op, timeout=...)``).

    The outcome is unknown: the operation is still queued or being written and
    may yet commit. Treat it like an ambiguous write.
    """

    code = "commit_timeout"


class InitRefused(EngineError):
    """``initialise`` refused: a document exists, or one existed and
    ``force`` was not given. Nothing was written."""

    code = "init_refused"


class QueueError(EngineError):
    """A queue operation was refused. Nothing was changed by it."""

    code = "queue_error"


class JobNotFound(QueueError):
    """No job with this id is in the document (it may have completed or been purged)."""

    code = "job_not_found"

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id!r} not found")
        self.job_id = job_id


class JobSealed(JobNotFound):
    """The job is not in the document, and the document references segment
    objects (format 2): it may be pending in one of them. ``refs`` are the
    references to look in, as ``(queue, SegmentRef)``, newest first
    (``Broker.get_job`` does, through ``SegmentLookup.find_pending``). Over the
    wire it is a plain ``job_not_found``."""

    def __init__(
        self, job_id: str, refs: tuple[tuple[str, SegmentRef], ...], *, job_ids: tuple[str, ...] = (),
    ) -> None:
        super().__init__(job_id)
        self.refs = refs
        #: Every id looked for (a purge names them all; ``job_id`` is the first).
        self.job_ids = job_ids or (job_id,)


class LeaseLost(QueueError):
    """The lease token is not the job's current lease.

    The lease expired and the job was handed back (or to another worker), or an
    operator requeued it. Stop working on the job; your result is not applied.
    """

    code = "lease_lost"

    def __init__(self, job_id: str, reason: str = "lease is not current") -> None:
        super().__init__(f"job {job_id!r}: {reason}")
        self.job_id = job_id


class OperationFailed(QueueError):
    """This one operation could not be applied or stored (an unexpected error,
    for example a string the document cannot encode that got past validation).

    It was refused alone: nothing of it was written, and the other operations
    of its batch were committed as usual. Retrying it unchanged fails again.
    """

    code = "operation_failed"


class ValidationError(QueueError):
    """The operation's input is invalid: a bad queue name, number or state."""

    code = "invalid"


class MalformedJson(ValidationError):
    """The request body is not JSON text (``400 malformed_json``). Send JSON."""

    code = "malformed_json"


class InvalidPayload(ValidationError):
    """The payload is not a JSON value (for example a set, bytes or NaN)."""

    code = "invalid_payload"


class PayloadTooLarge(ValidationError):
    """The encoded payload is larger than the configured limit."""

    code = "payload_too_large"

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"payload is {size} bytes encoded; the limit is {limit}")
        self.size = size
        self.limit = limit
