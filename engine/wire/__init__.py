"""The broker API's wire format (docs/api.md): everything that crosses HTTP
between a client, the broker's API views, and a standby forwarding an
operator action to the leader, in both directions and in one place.

* **Requests** (:mod:`engine.wire.requests`): an operation becomes the
  request that carries it (:func:`request_for`), and a request's body is read
  back into the same operation, strictly, through the engine's builders
  (:func:`push_from`, :func:`claim_from`, :func:`heartbeat_from`,
  :func:`complete_from`, :func:`fail_from`). Operator operations travel as
  :func:`operator_json` and come back with :func:`operator_from_json`. The
  API's own limit: :data:`MAX_WAIT_SECONDS`, the longest a claim may wait.
* **Answers** (:mod:`engine.wire.answers`): an outcome becomes its answer
  (:func:`outcome_json`) and back (:func:`outcome_from`); a node's health
  answer is read by :func:`health_from`. Lease tokens never leave the broker:
  :data:`HIDDEN_TOKEN` stands in for them (:func:`hide_token`, :func:`hide_tokens`).
* **Errors** (:mod:`engine.wire.codes`): each error code's HTTP status
  (:data:`STATUS_BY_CODE`); an engine error becomes its code and body
  (:func:`error_code`, :func:`error_json`), and an error answer becomes the
  engine error again (:func:`error_from_answer`, :data:`ERROR_BY_CODE`).
* **Batches** (:mod:`engine.wire.batches`): ``POST /ack`` and ``POST
  /heartbeat`` carry up to :data:`MAX_BATCH_ITEMS` items, each answered on
  its own. The broker reads them with :func:`ack_from` and
  :func:`heartbeats_from` (an item refused alone is an :class:`InvalidItem`)
  and answers with :func:`batch_results_json`; a client sends
  :func:`ack_request` or :func:`heartbeats_request` and reads the answer
  with :func:`batch_results_from` (one result or EngineError per operation).
  An acknowledgement may carry the worker's next claim, riding the same
  commit (:func:`ack_claim_from`, :func:`claim_json`, :func:`claim_outcome_from`).
* **Lease watches** (:mod:`engine.wire.watches`): ``POST /leases/watch``
  parks until a lease it names is lost (:func:`watch_from`,
  :func:`watch_json`; :func:`watch_request`, :func:`watch_outcome_from`).
* **Reading JSON** (:mod:`engine.wire.reading`): :func:`loads` parses a
  body exactly, :class:`Fields` reads one object field by field.

The contract: for every operation with an endpoint, reading back what
:func:`request_for` sends gives the same operation, and reading back what
:func:`outcome_json` answers gives the same outcome. For every code in
:data:`ERROR_BY_CODE`, the error a client rebuilds from an answer has a code
with the same status. Bad input raises ValidationError, or a subclass whose
``code`` is the API's error code (:class:`MalformedJson` is
``malformed_json``); a malformed answer raises EngineError.

Pure: no I/O, no Django, no HTTP library; only :mod:`engine` and orjson.
"""

from __future__ import annotations

from engine.errors import MalformedJson
from engine.wire.answers import (
    HIDDEN_TOKEN,
    claimed_json,
    health_from,
    hide_token,
    hide_tokens,
    outcome_from,
    outcome_json,
)
from engine.wire.batches import (
    MAX_BATCH_ITEMS,
    InvalidItem,
    TooManyItems,
    ack_claim_from,
    ack_from,
    ack_request,
    batch_results_from,
    batch_results_json,
    claim_json,
    claim_outcome_from,
    heartbeats_from,
    heartbeats_request,
)
from engine.wire.codes import (
    ENGINE_ALIASES,
    ERROR_BY_CODE,
    RETRY_STATUSES,
    STATUS_BY_CODE,
    error_code,
    error_from_answer,
    error_json,
)
from engine.wire.reading import Fields, check_url, json_type, loads, lone_surrogate_at, parse_time
from engine.wire.requests import (
    MAX_WAIT_SECONDS,
    Request,
    claim_from,
    complete_from,
    fail_from,
    heartbeat_from,
    job_path,
    operator_from_json,
    operator_json,
    push_from,
    request_for,
)
from engine.wire.watches import WATCH_PATH, watch_from, watch_json, watch_outcome_from, watch_request

__all__ = [
    "ENGINE_ALIASES",
    "ERROR_BY_CODE",
    "HIDDEN_TOKEN",
    "MAX_BATCH_ITEMS",
    "MAX_WAIT_SECONDS",
    "RETRY_STATUSES",
    "STATUS_BY_CODE",
    "WATCH_PATH",
    "Fields",
    "InvalidItem",
    "MalformedJson",
    "Request",
    "TooManyItems",
    "ack_claim_from",
    "ack_from",
    "ack_request",
    "batch_results_from",
    "batch_results_json",
    "check_url",
    "claim_from",
    "claim_json",
    "claim_outcome_from",
    "claimed_json",
    "complete_from",
    "error_code",
    "error_from_answer",
    "error_json",
    "fail_from",
    "health_from",
    "heartbeat_from",
    "heartbeats_from",
    "heartbeats_request",
    "hide_token",
    "hide_tokens",
    "job_path",
    "json_type",
    "loads",
    "lone_surrogate_at",
    "operator_from_json",
    "operator_json",
    "outcome_from",
    "outcome_json",
    "parse_time",
    "push_from",
    "request_for",
    "watch_from",
    "watch_json",
    "watch_outcome_from",
    "watch_request",
]
