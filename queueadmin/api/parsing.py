"""Request bodies into engine operations, strictly.

Every body is one JSON object whose fields are checked by name: a missing
field, a field of the wrong type and an unknown field are each refused with
``400 invalid`` and a message naming the field. Values are then handed to the
engine's builders (:mod:`engine.operations`), so ranges, queue names, ids and
payloads follow exactly the engine's rules. Nothing here does I/O besides
reading the request body, and nothing reaches a commit until it all passed.

Optional fields may be sent as ``null``, which means the same as leaving them
out (clients built on dataclasses tend to send ``None``).
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson
from django.http import HttpRequest

from engine import Policy, ValidationError
from engine.model import new_job_id
from engine.operations import (
    Claim,
    Complete,
    Fail,
    Heartbeat,
    NewJob,
    Push,
    check_queue,
    claim_op,
    complete_op,
    fail_op,
    heartbeat_op,
    push_op,
)
from queueadmin.api.errors import ApiError, from_engine, too_large

#: The longest a claim may hold a request (docs/api.md: wait_seconds 0..30).
MAX_WAIT_SECONDS = 30.0

# orjson reads integers beyond 64 bits as floats, which would silently change
# a payload. A run of 19+ digits can be such an integer, so those bodies are
# read by the exact (slower) standard parser instead.
_LONG_DIGITS = re.compile(rb"[0-9]{19}")
# A lone surrogate: a code point of the UTF-16 surrogate range in a str (a
# well-formed pair has already been joined into one character by the parser).
_SURROGATE = re.compile("[\ud800-\udfff]")

_TYPE_NAMES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
               float: "a number", type(None): "null"}


def _json_type(value: object) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def read_body(request: HttpRequest, limit: int) -> bytes:
    """The raw request body, refusing one over ``limit`` bytes with 413.

    Reads the stream directly (not ``request.body``, which has its own,
    unrelated limit) and never more than ``limit + 1`` bytes.
    """
    declared = request.META.get("CONTENT_LENGTH") or ""
    if declared.isdigit() and int(declared) > limit:
        raise too_large(limit, int(declared))
    body: bytes = request.read(limit + 1)
    if len(body) > limit:  # no (or a false) Content-Length: the size is only known to be above the limit
        raise too_large(limit)
    return body


def loads(body: bytes) -> Any:
    """Parse JSON exactly, or raise ApiError malformed_json.

    Numbers JSON allows but a float cannot hold (``1e400``) parse to infinity
    and are refused later as an invalid payload; ``NaN``/``Infinity`` literals
    are not JSON and are malformed, and so is a string or key holding a lone
    UTF-16 surrogate escape (``"\\ud800"``): it is not Unicode text, and no
    later step could encode it.
    """
    if not _LONG_DIGITS.search(body):
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass  # maybe valid JSON that orjson cannot represent; let the exact parser decide
    try:
        data = json.loads(body, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ApiError("malformed_json", f"the body is not valid JSON: {exc}") from None
    # orjson refuses lone surrogates; the standard parser lets "\ud800" through
    # as a str that no UTF-8 encoder can write, so it would fail only later,
    # inside a commit (I8). Refuse it here, where the client can be told.
    where = lone_surrogate_at(data)
    if where is not None:
        raise ApiError("malformed_json", f"the body is not valid JSON text: {where} holds a lone UTF-16 "
                                         "surrogate escape (\\ud800-\\udfff without its pair), which is not Unicode")
    return data


def lone_surrogate_at(data: Any, where: str = "body") -> str | None:
    """Where in ``data`` (a parsed JSON value) a string, key or value, holds a
    lone UTF-16 surrogate, as ``body.jobs[0].payload``; None if nowhere.

    Iterative, so any nesting the parser accepted is walked without recursion.
    """
    stack: list[tuple[Any, str]] = [(data, where)]
    while stack:
        value, at = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                return at
        elif isinstance(value, dict):
            for key, item in value.items():
                if _SURROGATE.search(key):
                    return f"a key of {at}"
                stack.append((item, f"{at}.{key}"))
        elif isinstance(value, list):
            stack.extend((item, f"{at}[{index}]") for index, item in enumerate(value))
    return None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class Fields:
    """One JSON object of a request, read field by field.

    ``where`` names the object in messages (``"body"``, ``"jobs[2]"``).
    Call :meth:`done` after reading every known field: it refuses the rest.
    """

    def __init__(self, data: object, where: str = "body") -> None:
        if not isinstance(data, dict):
            raise ApiError("invalid", f"{where} must be a JSON object, not {_json_type(data)}")
        self.data: dict[str, Any] = data
        self.where = where
        self._known: list[str] = []

    def _name(self, name: str) -> str:
        return name if self.where == "body" else f"{self.where}.{name}"

    def required(self, name: str) -> Any:
        """The value of ``name``, which may be any JSON value including null."""
        self._known.append(name)
        if name not in self.data:
            raise ApiError("invalid", f"missing field {self._name(name)!r}")
        return self.data[name]

    def optional(self, name: str) -> Any:
        """The value of ``name``, or None when it is absent or null."""
        self._known.append(name)
        return self.data.get(name)

    def string(self, name: str) -> str:
        """The required string field ``name``."""
        return self._check_string(name, self.required(name))

    def optional_string(self, name: str) -> str | None:
        """The string field ``name``, or None when it is absent or null."""
        value = self.optional(name)
        return None if value is None else self._check_string(name, value)

    def _check_string(self, name: str, value: object) -> str:
        if not isinstance(value, str):
            raise ApiError("invalid", f"{self._name(name)!r} must be a string, not {_json_type(value)}")
        return value

    def array(self, name: str) -> list[Any]:
        value = self.required(name)
        if not isinstance(value, list):
            raise ApiError("invalid", f"{self._name(name)!r} must be an array, not {_json_type(value)}")
        return value

    def done(self) -> None:
        unknown = sorted(set(self.data) - set(self._known))
        if unknown:
            raise ApiError(
                "invalid",
                f"unknown field {self._name(unknown[0])!r}; {self.where} takes {', '.join(sorted(self._known))}",
            )


def _built(where: str | None, build: Any, *args: Any, **kwargs: Any) -> Any:
    """Run an engine builder, turning its ValidationError into the API error."""
    try:
        return build(*args, **kwargs)
    except ValidationError as exc:
        raise from_engine(exc, where=where) from None


def push_from(data: object, policy: Policy) -> Push:
    """``POST /api/v1/jobs``: ``{"queue", "payload", ...job fields}`` or
    ``{"queue", "jobs": [{"payload", "id"?, "max_attempts"?, "delay_seconds"?}, ...]}``.

    All jobs go into one Push, so they land in one commit and are answered
    together. Missing ids are generated here, once, so a re-applied push
    keeps them.
    """
    body = Fields(data)
    queue = body.string("queue")
    _built(None, check_queue, queue)
    if "jobs" in body.data:
        if "payload" in body.data:
            raise ApiError("invalid", "send 'payload' for one job or 'jobs' for several, not both")
        entries = body.array("jobs")
        if not entries:
            raise ApiError("invalid", "'jobs' must hold at least one job")
        body.done()
        return Push(queue=queue, jobs=tuple(_new_job(queue, Fields(e, f"jobs[{i}]"), policy)
                                            for i, e in enumerate(entries)))
    if "payload" not in body.data:
        raise ApiError("invalid", "missing field 'payload' (or 'jobs' for several)")
    job = _new_job(queue, body, policy)  # the single form is one job's fields beside "queue"
    return Push(queue=queue, jobs=(job,))


def _new_job(queue: str, job: Fields, policy: Policy) -> NewJob:
    payload = job.required("payload")
    job_id = job.optional_string("id")
    max_attempts = job.optional("max_attempts")
    delay = job.optional("delay_seconds")
    job.done()
    where = None if job.where == "body" else job.where
    # One job through the engine's own builder: the same checks as every client.
    op: Push = _built(
        where, push_op, queue, [payload], policy=policy, max_attempts=max_attempts,
        delay_seconds=0 if delay is None else delay, ids=[new_job_id() if job_id is None else job_id],
    )
    return op.jobs[0]


def claim_from(data: object, policy: Policy) -> tuple[Claim, float]:
    """``POST /api/v1/claim``: the Claim and how long to wait for a job (seconds)."""
    body = Fields(data)
    worker = body.string("worker")
    queues = body.array("queues")
    for index, name in enumerate(queues):
        if not isinstance(name, str):
            raise ApiError("invalid", f"'queues[{index}]' must be a string, not {_json_type(name)}")
    max_jobs = body.optional("max_jobs")
    lease_seconds = body.optional("lease_seconds")
    wait = body.optional("wait_seconds")
    body.done()
    if wait is None:
        wait = 0.0
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= MAX_WAIT_SECONDS:
        raise ApiError("invalid", f"'wait_seconds' must be a number from 0 to {MAX_WAIT_SECONDS:g}, got {wait!r}")
    op: Claim = _built(
        None, claim_op, worker, queues, policy=policy, max_jobs=1 if max_jobs is None else max_jobs,
        lease_seconds=lease_seconds,
    )
    return op, float(wait)


def heartbeat_from(job_id: str, data: object) -> Heartbeat:
    """``POST /api/v1/jobs/<id>/heartbeat``: ``{"lease", "lease_seconds"?}``."""
    body = Fields(data)
    lease = body.string("lease")
    lease_seconds = body.optional("lease_seconds")
    body.done()
    op: Heartbeat = _built(None, heartbeat_op, job_id, lease, lease_seconds=lease_seconds)
    return op


def complete_from(job_id: str, data: object) -> Complete:
    """``POST /api/v1/jobs/<id>/complete``: ``{"lease"}``."""
    body = Fields(data)
    lease = body.string("lease")
    body.done()
    op: Complete = _built(None, complete_op, job_id, lease)
    return op


def fail_from(job_id: str, data: object, policy: Policy) -> Fail:
    """``POST /api/v1/jobs/<id>/fail``: ``{"lease", "error", "retry_in_seconds"?, "give_up"?}``."""
    body = Fields(data)
    lease = body.string("lease")
    error = body.string("error")
    retry = body.optional("retry_in_seconds")
    give_up = body.optional("give_up")
    body.done()
    op: Fail = _built(None, fail_op, job_id, lease, error=error, retry_in_seconds=retry, policy=policy,
                      give_up=False if give_up is None else give_up)
    return op
