"""The batch calls (docs/api.md, "Batches"), in both directions.

``POST /api/v1/ack`` completes or fails many jobs and ``POST /api/v1/heartbeat``
extends many leases, each item with its own lease and its own outcome:

* Broker side: :func:`ack_from` and :func:`heartbeats_from` read a body into
  one entry per item, in order: the item's operation, or an
  :class:`InvalidItem` (a ValidationError) for an item that is refused alone.
  A body that is not the batch's shape at all raises ValidationError for the
  whole request. :func:`batch_results_json` answers every item, in order.
* Client side: :func:`ack_request` and :func:`heartbeats_request` give the
  request that carries up to :data:`MAX_BATCH_ITEMS` operations, and
  :func:`batch_results_from` reads the answer back into one outcome per
  operation: its result, or the EngineError it was refused with (returned,
  not raised), as :data:`~engine.wire.codes.ERROR_BY_CODE` rebuilds it.

An acknowledgement may carry the worker's next claim (``"claim"``, read by
:func:`ack_claim_from`, sent by ``ack_request(..., claim=...)``, answered by
:func:`claim_json` and read back by :func:`claim_outcome_from`): it is
submitted with the acks, so it rides their commit, and applied after them.
It never waits: a worker acknowledging jobs has a handler free already, and
its acknowledgements must not be held back by a long poll.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.errors import EngineError, ValidationError
from engine.ops import heartbeat_op
from engine.optypes import Claim, Complete, Fail, Heartbeat, Operation
from engine.policy import Policy
from engine.wire.answers import outcome_from, outcome_json
from engine.wire.codes import STATUS_BY_CODE, error_from_answer, error_json
from engine.wire.reading import Fields, json_type
from engine.wire.requests import Request, claim_from, complete_from, fail_from, request_for

#: The most items one batch call may carry; more is refused with 413 as a whole.
MAX_BATCH_ITEMS = 1000

ACK_PATH = "/ack"
HEARTBEATS_PATH = "/heartbeat"

Item = Operation | ValidationError


class InvalidItem(ValidationError):
    """One item of a batch call that failed validation: it alone is refused
    (``invalid``, or the narrower code of ``cause``) and is not submitted.
    ``job_id`` is the item's ``id`` if it was a string, else None."""

    def __init__(self, message: str, *, job_id: str | None, code: str = "invalid") -> None:
        super().__init__(message)
        self.job_id = job_id
        self.code = code


class TooManyItems(ValidationError):
    """A batch call with more than :data:`MAX_BATCH_ITEMS` items (413 as a whole)."""

    code = "payload_too_large"


def _items(data: object, name: str) -> tuple[Fields, list[Any]]:
    """The batch's object and its non-empty list ``name`` (at most MAX_BATCH_ITEMS)."""
    body = Fields(data)
    items = body.array(name)
    if not items:
        raise ValidationError(f"{name!r} must hold at least one item")
    if len(items) > MAX_BATCH_ITEMS:
        raise TooManyItems(f"{name!r} holds {len(items)} items; the limit is {MAX_BATCH_ITEMS} per request")
    return body, items


def _item(where: str, raw: object, read: Any) -> Item:
    """``read(job_id, rest)`` for one item, or its InvalidItem."""
    job_id = raw.get("id") if isinstance(raw, dict) else None
    job_id = job_id if isinstance(job_id, str) else None
    try:
        if not isinstance(raw, dict):
            raise ValidationError(f"must be a JSON object, not {json_type(raw)}")
        if job_id is None:
            raise ValidationError("missing field 'id'" if "id" not in raw else "'id' must be a string")
        op: Operation = read(job_id, {k: v for k, v in raw.items() if k != "id"})
        return op
    except ValidationError as exc:
        code = exc.code if exc.code in STATUS_BY_CODE else "invalid"
        return InvalidItem(f"{where}: {exc}", job_id=job_id, code=code)


def ack_from(data: object, policy: Policy) -> list[Item]:
    """``POST /api/v1/ack``: ``{"acks": [{"id", "lease", "outcome": "complete"}
    | {"id", "lease", "outcome": "fail", "error", "retry_in_seconds"?, "give_up"?}, ...]}``.

    One entry per item, in order: its Complete or Fail (through the same
    readers and builders as the single calls), or its InvalidItem. Raises
    ValidationError (TooManyItems above the limit) for a body that is not
    this shape, a ``claim`` included (see :func:`ack_claim_from`): then
    nothing is submitted.
    """
    body, items = _items(data, "acks")
    body.done()
    return _acks(items, policy)


def ack_claim_from(data: object, policy: Policy) -> tuple[list[Item], Claim | None]:
    """``POST /api/v1/ack`` as :func:`ack_from` reads it, plus an optional
    ``"claim": {"worker", "queues", "max_jobs"?, "lease_seconds"?}`` (the
    fields of ``POST /api/v1/claim`` but ``wait_seconds``, which may only be
    0): the items and the Claim (None without one). A claim that is not valid
    refuses the whole request with ValidationError, naming ``claim``, so
    that nothing is submitted: a worker must not have its acknowledgements
    applied while it believes they were refused."""
    body, items = _items(data, "acks")
    raw = body.optional("claim")
    body.done()
    claim: Claim | None = None
    if raw is not None:
        if isinstance(raw, dict) and raw.get("wait_seconds") not in (None, 0):
            raise ValidationError("'claim.wait_seconds' must be 0 or absent: a claim that rides "
                                  "acknowledgements never waits")
        try:
            claim, _ = claim_from(raw, policy)
        except ValidationError as exc:
            exc.args = (f"claim: {exc}",)
            raise
    return _acks(items, policy), claim


def _acks(items: list[Any], policy: Policy) -> list[Item]:
    def read(job_id: str, rest: dict[str, Any]) -> Operation:
        outcome = rest.pop("outcome", None)
        if outcome == "complete":
            return complete_from(job_id, rest)
        if outcome == "fail":
            return fail_from(job_id, rest, policy)
        raise ValidationError(f"'outcome' must be \"complete\" or \"fail\", got {outcome!r}")

    return [_item(f"acks[{i}]", raw, read) for i, raw in enumerate(items)]


def heartbeats_from(data: object) -> list[Item]:
    """``POST /api/v1/heartbeat``: ``{"leases": [{"id", "lease"}, ...], "lease_seconds"?}``.

    One entry per item, in order: its Heartbeat (every one asking for
    ``lease_seconds``, or the broker's lease length), or its InvalidItem.
    Raises ValidationError for a body that is not this shape.
    """
    body, items = _items(data, "leases")
    lease_seconds = body.optional("lease_seconds")
    body.done()
    heartbeat_op("-", "-", lease_seconds=lease_seconds)  # a bad length refuses the whole request

    def read(job_id: str, rest: dict[str, Any]) -> Operation:
        item = Fields(rest)
        lease = item.string("lease")
        item.done()  # the lease length is the batch's: an item may not ask for its own
        return heartbeat_op(job_id, lease, lease_seconds=lease_seconds)

    return [_item(f"leases[{i}]", raw, read) for i, raw in enumerate(items)]


def item_id(item: Item) -> str | None:
    """The job an item names (None for an InvalidItem without a string id)."""
    if isinstance(item, InvalidItem):
        return item.job_id
    job_id = getattr(item, "job_id", None)
    return job_id if isinstance(job_id, str) else None


def batch_results_json(items: Sequence[Item], outcomes: Sequence[Any]) -> dict[str, Any]:
    """The answer to a batch call: ``{"results": [...]}``, one per item in
    order. ``outcomes[i]`` is item i's result, or the EngineError it was
    refused with (an InvalidItem is its own outcome). Raises ValueError if
    the lengths differ."""
    if len(items) != len(outcomes):
        raise ValueError(f"{len(items)} items but {len(outcomes)} outcomes")
    results = []
    for item, outcome in zip(items, outcomes, strict=True):
        head = {"id": item_id(item)}
        if isinstance(outcome, InvalidItem):
            results.append({**head, "error": outcome.code, "message": str(outcome)})
        elif isinstance(outcome, EngineError):
            results.append({**head, **error_json(outcome)})
        else:
            assert not isinstance(item, ValidationError)
            results.append({**head, **outcome_json(item, outcome)})
    return {"results": results}


def claim_json(claim: Claim, outcome: Any) -> dict[str, Any]:
    """The ``"claim"`` of an acknowledgement's answer: what ``POST /claim``
    would answer, ``{"jobs": [...]}``, or ``{"error", "message"}`` for the
    EngineError the claim failed with."""
    if isinstance(outcome, EngineError):
        return error_json(outcome, where="claim")
    return outcome_json(claim, outcome)


# -- the client's side ---------------------------------------------------------------------------


def _check_size(ops: Sequence[Operation]) -> None:
    if not 1 <= len(ops) <= MAX_BATCH_ITEMS:
        raise ValueError(f"a batch call carries 1 to {MAX_BATCH_ITEMS} operations, got {len(ops)}")


def ack_request(ops: Sequence[Operation], *, claim: Claim | None = None) -> Request:
    """The ``POST /ack`` that carries ``ops``, Complete and Fail operations
    (validated by their builders), and ``claim`` if given (it never waits). Raises ValueError for any other
    operation, or for a count outside 1..MAX_BATCH_ITEMS."""
    _check_size(ops)
    acks: list[dict[str, Any]] = []
    for op in ops:
        if isinstance(op, Complete):
            acks.append({"id": op.job_id, "lease": op.lease, "outcome": "complete"})
        elif isinstance(op, Fail):
            ack: dict[str, Any] = {"id": op.job_id, "lease": op.lease, "outcome": "fail", "error": op.error}
            if op.retry_in_seconds is not None:
                ack["retry_in_seconds"] = op.retry_in_seconds
            if op.give_up:
                ack["give_up"] = True
            acks.append(ack)
        else:
            raise ValueError(f"{type(op).__name__} cannot be acknowledged in a batch")
    body: dict[str, Any] = {"acks": acks}
    if claim is not None:
        claimed = request_for(claim).body
        assert claimed is not None and "wait_seconds" not in claimed
        body["claim"] = claimed
    return Request("POST", ACK_PATH, body)


def heartbeats_request(ops: Sequence[Heartbeat]) -> Request:
    """The ``POST /heartbeat`` that extends every lease of ``ops``, which
    must all ask for the same ``lease_seconds``. Raises ValueError otherwise,
    or for a count outside 1..MAX_BATCH_ITEMS."""
    _check_size(ops)
    if not all(isinstance(op, Heartbeat) for op in ops):
        raise ValueError("a heartbeat batch carries only Heartbeat operations")
    lengths = {op.lease_seconds for op in ops}
    if len(lengths) != 1:
        raise ValueError(f"a heartbeat batch asks for one lease length, not {sorted(map(str, lengths))}")
    body: dict[str, Any] = {"leases": [{"id": op.job_id, "lease": op.lease} for op in ops]}
    (lease_seconds,) = lengths
    if lease_seconds is not None:
        body["lease_seconds"] = lease_seconds
    return Request("POST", HEARTBEATS_PATH, body)


def batch_results_from(data: Any, ops: Sequence[Operation], *, key: str = "") -> list[Any]:
    """One outcome per operation of ``ops`` from a batch call's parsed 200
    answer: the operation's result (as :func:`outcome_from` reads it), or
    the EngineError its item was refused with, rebuilt as the single call's
    error would be (LeaseLost, JobNotFound with its ``job_id``, ...).
    ``key`` names the document, for DocumentError. Raises EngineError for an
    answer that does not match ``ops`` (count, order of ids, shape)."""
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list) or len(results) != len(ops):
        count = len(results) if isinstance(results, list) else "no"
        raise EngineError(f"the broker answered a batch of {len(ops)} with {count} results")
    outcomes: list[Any] = []
    for op, result in zip(ops, results, strict=True):
        job_id = getattr(op, "job_id", None)
        if not isinstance(result, dict) or result.get("id") != job_id:
            raise EngineError(f"the broker's batch answer does not match job {job_id!r}: {result!r:.200}")
        code = result.get("error")
        if code is None:
            outcomes.append(outcome_from(op, result))
            continue
        status = STATUS_BY_CODE.get(code, 500) if isinstance(code, str) else 500
        outcomes.append(error_from_answer(status, result, where=f"job {job_id!r}", job_id=str(job_id), key=key))
    return outcomes


def claim_outcome_from(data: Any, claim: Claim, *, key: str = "") -> Any:
    """The outcome of the ``claim`` an acknowledgement carried, from its
    parsed 200 answer: the claimed jobs, or the EngineError the claim failed
    with (returned, not raised). Raises EngineError for an answer without a
    ``claim`` object (a broker that does not know the field refuses the
    whole request instead)."""
    answer = data.get("claim") if isinstance(data, dict) else None
    if not isinstance(answer, dict):
        raise EngineError(f"the broker's acknowledgement answer has no claim: {data!r:.200}")
    code = answer.get("error")
    if code is None:
        return outcome_from(claim, answer)
    status = STATUS_BY_CODE.get(code, 500) if isinstance(code, str) else 500
    return error_from_answer(status, answer, where="claim", key=key)
