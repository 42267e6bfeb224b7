"""The queue operations over the broker's HTTP API (docs/api.md): :class:`BrokerClient`.

``BrokerClient`` has the same methods as :class:`~engine.DirectClient` and
:class:`~engine.GroupCommitter`, and validates input through the same
operation builders, so bad input raises ValidationError before any request
is sent. It finds the leading broker, follows a change of leader, and retries
what is safe to retry within a time budget. What it sends and reads is
:mod:`engine.wire`'s; finding the leader is :class:`~engine.discovery.LeaderDiscovery`'s.

What this client raises, from the engine's tree (:mod:`engine.errors`)::

    EngineError
    ├── Unauthorized               the broker refused the token; fix it, retrying won't help
    │   └── Forbidden              the token's scope does not cover the call or queue
    ├── NotLeader                  no broker led for the whole retry budget
    ├── StoreError
    │   └── StoreUnavailable       the broker's store failed (503 store_unavailable)
    │       └── BrokerUnavailable  no broker answered: refused, reset, timed out
    ├── DocumentError              queue.json is unreadable; an operator must repair it
    └── QueueError                 LeaseLost, JobNotFound, ValidationError, ... as locally

A StoreUnavailable (or BrokerUnavailable) after a write is *ambiguous*: the
operation may have landed. Pushes are idempotent (the client chooses the job
ids), so retrying them is always safe; see docs/api.md for the others.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson

from engine import wire
from engine.backoff import jittered
from engine.client import QueueClient
from engine.discovery import LeaderDiscovery
from engine.errors import (
    BrokerUnavailable,
    EngineError,
    NotLeader,
    QueueError,
    StoreUnavailable,
    Unauthorized,
    ValidationError,
)
from engine.http_transport import HttpAnswer, HttpTransport, PooledTransport
from engine.model import ClaimedJob
from engine.ops import claim_op
from engine.optypes import Claim, Complete, Fail, Heartbeat, Operation
from engine.policy import DOCUMENT_KEY, Policy
from engine.stores.base import ObjectStore
from engine.wire import MAX_WAIT_SECONDS

__all__ = ["API_PREFIX", "BrokerClient"]

log = logging.getLogger(__name__)

API_PREFIX = "/api/v1"
DEFAULT_TIMEOUT_SECONDS = 10.0
DEFAULT_RETRY_SECONDS = 30.0
DEFAULT_BACKOFF_SECONDS = 0.05
DEFAULT_BACKOFF_CAP_SECONDS = 2.0
DEFAULT_HEALTH_TIMEOUT_SECONDS = 2.0
# Pooled connections, all kept alive: a worker's handler and heartbeat threads
# (or a benchmark's) each hold one while a request is in flight.
DEFAULT_MAX_CONNECTIONS = 100
# not_leader redirects followed back to back before pausing: two nodes that
# name each other during a takeover must not be ping-ponged at full speed.
MAX_QUICK_REDIRECTS = 3


def _with_message(exc: EngineError, message: str) -> EngineError:
    """Use the broker's own wording instead of the local default message."""
    exc.args = (message,)
    return exc


class BrokerClient(QueueClient):
    """Queue operations sent to the leading broker over HTTP.

    Thread-safe: one pool of kept-alive connections (``transport``, by
    default a :class:`~engine.http_transport.PooledTransport`) serves every thread. Each call
    validates locally, then sends one request to the leader; on a connection
    error, a timeout, 503 or a change of leader it finds the leader again and
    retries with jittered backoff until ``retry_seconds`` have passed, then
    raises the last error (NotLeader, StoreUnavailable or BrokerUnavailable).
    Every other error is raised at once. Returns only after the broker has
    acknowledged, i.e. after the commit containing the operation landed (I1).

    The leader is found from ``urls`` (each node's ``GET /api/v1/health``
    says whether it leads, and whom it believes leads) and, if ``store`` is
    given, from the ``broker.url`` the document names. The store is only
    ever read. ``requeue`` and ``purge`` are operator actions with no HTTP
    endpoint: they raise EngineError.
    """

    def __init__(
        self,
        urls: Sequence[str] = (),
        *,
        token: str,
        store: ObjectStore | None = None,
        key: str = DOCUMENT_KEY,
        policy: Policy | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
        backoff_seconds: float = DEFAULT_BACKOFF_SECONDS,
        backoff_cap_seconds: float = DEFAULT_BACKOFF_CAP_SECONDS,
        health_timeout: float = DEFAULT_HEALTH_TIMEOUT_SECONDS,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        transport: HttpTransport | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(urls, str):  # a lone URL is an easy mistake; a str is a Sequence
            urls = [urls]
        self.urls = tuple(dict.fromkeys(wire.check_url(u) for u in urls))
        if not self.urls and store is None:
            raise ValueError("BrokerClient needs broker URLs, a store whose document names the leader, or both")
        if not isinstance(token, str) or not token:
            raise ValueError("BrokerClient needs a non-empty API token")
        if timeout <= 0 or retry_seconds < 0 or backoff_seconds < 0 or backoff_cap_seconds < backoff_seconds:
            raise ValueError("need timeout > 0, retry_seconds >= 0 and 0 <= backoff_seconds <= backoff_cap_seconds")
        self.store = store
        self.key = key
        self.policy = policy or Policy()
        self.timeout = timeout
        self.retry_seconds = retry_seconds
        self.backoff_seconds = backoff_seconds
        self.backoff_cap_seconds = backoff_cap_seconds
        self.health_timeout = min(health_timeout, timeout)
        self.monotonic = monotonic
        #: HTTP requests sent (health checks included), for benchmarks.
        self.requests = 0
        self._http: HttpTransport = transport or PooledTransport(max_connections=max_connections, pool_timeout=timeout)
        headers = {"Authorization": f"Bearer {token}", "User-Agent": "queueadmin-broker-client/1"}
        self._headers = {False: headers, True: {**headers, "Content-Type": "application/json"}}
        self._lock = threading.Lock()  # guards requests
        self._discovery = LeaderDiscovery(self.urls, ask=self._health, store=store, key=key)
        self._closed = threading.Event()
        # Whether an ack request may carry a claim; False once a broker from
        # before that field refused one.
        self._ack_claims = True

    # -- lifecycle -------------------------------------------------------------

    def close(self) -> None:
        """Close the connection pool and wake any call waiting to retry (it
        raises EngineError). Idempotent."""
        self._closed.set()
        self._http.close()

    def __enter__(self) -> BrokerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def leader_url(self) -> str | None:
        """The broker this client currently sends to (None until it has found one)."""
        return self._discovery.leader

    # -- operations ------------------------------------------------------------

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
        """Lease up to ``max_jobs`` jobs of ``queues``, oldest first (with
        ``in_order``, the first queue's before the second's). May return [].

        With ``wait_seconds`` (0 to 30) the broker holds the request until a
        job can be claimed or the time is up. Without ``lease_seconds`` the
        broker's configured lease length applies. A claim retried after a lost
        answer may have leased jobs nobody received: they expire and are
        handed out again (at-least-once).
        """
        op = claim_op(worker, queues, policy=self.policy, max_jobs=max_jobs, lease_seconds=lease_seconds,
                      in_order=in_order)
        request = wire.request_for(op, wait_seconds=_wait(wait_seconds), send_lease=lease_seconds is not None)
        return self._execute(op, request)  # type: ignore[no-any-return]

    def execute(self, op: Operation) -> Any:
        """Send one validated operation to the leader and return its outcome."""
        return self._execute(op, wire.request_for(op))

    def execute_many(self, ops: Sequence[Operation]) -> list[Any]:
        """Carry ``ops`` in as few requests as the API allows and return one
        outcome per operation, in order: its result, or the EngineError its
        item was refused with (LeaseLost, JobNotFound, ... returned, not raised).

        Complete and Fail operations go in ``POST /ack`` requests, Heartbeat
        operations (grouped by lease length) in ``POST /heartbeat`` requests,
        at most :data:`~engine.wire.MAX_BATCH_ITEMS` per request; the first
        Claim among them rides the last ack request (its ``claim``: one
        commit, applied after those acks, no long poll); any other operation
        is sent on its own. The requests are sent one after the other, acks
        first, so operations of different kinds are not applied in the order
        given. Each request is retried like a single call. Every outcome
        comes from the broker's answer, given only after the commit holding
        its item landed (I1).

        Raises Unauthorized at once. Raises a request's failure (NotLeader,
        BrokerUnavailable, StoreUnavailable, ... after the retry budget) if
        no earlier request of this call was answered; once one was, the
        operations of a failed request get that error as their outcome
        instead, so that no answered outcome is dropped.
        """
        ops = list(ops)
        outcomes: list[Any] = [None] * len(ops)
        answered = False
        for indices, send in self._batches(ops):
            chunk = [ops[i] for i in indices]
            try:
                results = send(chunk)
            except Unauthorized:
                raise
            except EngineError as exc:
                if not answered:
                    raise
                results = [exc] * len(chunk)
            answered = True
            for index, result in zip(indices, results, strict=True):
                outcomes[index] = result
        return outcomes

    def _batches(self, ops: list[Operation]) -> list[tuple[list[int], Callable[[list[Operation]], list[Any]]]]:
        """The requests that carry ``ops``: each as the indices of its
        operations and the function that sends them and reads the outcomes."""
        acks: list[int] = []
        beats: dict[float | None, list[int]] = {}
        singles: list[int] = []
        claim: int | None = None
        for index, op in enumerate(ops):
            if isinstance(op, Complete | Fail):
                acks.append(index)
            elif isinstance(op, Heartbeat):
                beats.setdefault(op.lease_seconds, []).append(index)
            elif isinstance(op, Claim) and claim is None and self._ack_claims:
                claim = index
            else:
                singles.append(index)
        if claim is not None and not acks:
            singles.insert(0, claim)
            claim = None
        step = wire.MAX_BATCH_ITEMS
        plan: list[tuple[list[int], Callable[[list[Operation]], list[Any]]]] = []
        for start in range(0, len(acks), step):
            chunk = acks[start:start + step]
            if claim is not None and start + step >= len(acks):  # the last ack request carries it
                plan.append(([*chunk, claim], self._send_acks_with_claim))
            else:
                plan.append((chunk, functools.partial(self._send_batch, wire.ack_request)))
        for group in beats.values():
            for start in range(0, len(group), step):
                plan.append((group[start:start + step], functools.partial(self._send_batch, wire.heartbeats_request)))
        plan.extend(([index], self._send_single) for index in singles)
        return plan

    def _send_batch(self, build: Callable[[Any], wire.Request], ops: list[Operation]) -> list[Any]:
        request = build(ops)
        answer = self._call(request.method, request.path, request.body)
        return wire.batch_results_from(answer, ops, key=self.key)

    def _send_acks_with_claim(self, ops: list[Operation]) -> list[Any]:
        """``ops`` is acks then one Claim: one ``POST /ack`` with a ``claim``.
        A broker from before that field refuses the whole request, having
        applied nothing (400 naming ``claim``): then the acks and the claim
        are sent apart, and from then on always apart."""
        *acks, claim = ops
        assert isinstance(claim, Claim)
        request = wire.ack_request(acks, claim=claim)
        try:
            answer = self._call(request.method, request.path, request.body)
        except ValidationError as exc:
            if "claim" not in str(exc):
                raise
            log.warning("the broker does not take a claim with acknowledgements (%s); sending them apart", exc)
            self._ack_claims = False
            return [*self._send_batch(wire.ack_request, acks), *self._send_single([claim])]
        outcomes = wire.batch_results_from(answer, acks, key=self.key)
        return [*outcomes, wire.claim_outcome_from(answer, claim, key=self.key)]

    def _send_single(self, ops: list[Operation]) -> list[Any]:
        [op] = ops
        try:
            return [self.execute(op)]
        except QueueError as exc:  # refused alone; anything else fails the request
            return [exc]

    def _execute(self, op: Operation, request: wire.Request) -> Any:
        answer = self._call(
            request.method, request.path, request.body, job_id=request.job_id, wait_seconds=request.wait_seconds
        )
        return wire.outcome_from(op, answer)

    def watch_leases(self, leases: Sequence[tuple[str, str]], wait_seconds: float) -> list[tuple[str, EngineError]]:
        """Which of ``leases`` (job id, lease token) the broker no longer holds
        for this caller, and why (the LeaseLost or JobNotFound a heartbeat
        would get), as soon as one is lost, or ``[]`` after ``wait_seconds``
        (0 to 30): ``POST /api/v1/leases/watch`` (:mod:`engine.leasewatch`).
        Writes nothing. A broker of a release without lease watches answers
        404 ``not_found``: a plain EngineError."""
        request = wire.watch_request(list(leases), _wait(wait_seconds))
        answer = self._call(request.method, request.path, request.body, wait_seconds=request.wait_seconds)
        return wire.watch_outcome_from(answer)

    def document(self) -> dict[str, Any]:
        """The committed document from the leader (lease tokens hidden as :data:`engine.wire.HIDDEN_TOKEN`)."""
        answer = self._call("GET", "/document", None)
        if not isinstance(answer, dict):
            raise EngineError("the broker answered /document with something other than a JSON object")
        return answer

    # -- requests, retries and errors -----------------------------------------

    def _call(
        self, method: str, path: str, body: dict[str, Any] | None, *, job_id: str = "", wait_seconds: float = 0.0
    ) -> Any:
        """Send to the leader, retrying what is retryable within the budget."""
        content = None if body is None else orjson.dumps(body)
        read_timeout = self.timeout + wait_seconds
        started = self.monotonic()
        deadline = started + self.retry_seconds + wait_seconds
        attempts = redirects = 0
        while True:
            if self._closed.is_set():
                raise EngineError("the BrokerClient is closed")
            attempts += 1
            base: str | None = None
            last: EngineError
            try:
                base = self._target()
                url = base + API_PREFIX + path
                return self._answer(self._send(method, url, content, read_timeout), method, url, job_id)
            except NotLeader as exc:
                last = exc
                named = exc.leader_url if exc.leader_url != base else None
                self._set_leader(named, forget=base)
                if named is not None and redirects < MAX_QUICK_REDIRECTS:
                    redirects += 1
                    continue  # another node is named: go there at once
            except BrokerUnavailable as exc:
                last = exc
                self._set_leader(None, forget=base)
            except StoreUnavailable as exc:  # the leader answered; its store did not
                last = exc
            redirects = 0
            delay = jittered(attempts, self.backoff_seconds, self.backoff_cap_seconds)
            if self.monotonic() + delay >= deadline:
                elapsed = self.monotonic() - started
                raise _with_message(last, f"{last} (gave up after {attempts} attempts in {elapsed:.1f}s)")
            log.debug("%s %s: %s; retrying in %.2fs", method, path, last, delay)
            if self._closed.wait(delay):
                raise EngineError("the BrokerClient is closed")

    def _send(self, method: str, url: str, content: bytes | None, read_timeout: float) -> HttpAnswer:
        """One request; BrokerUnavailable if no answer came."""
        if self._closed.is_set():  # a thread racing close(): no new connection
            raise EngineError("the BrokerClient is closed")
        with self._lock:
            self.requests += 1
        return self._http.send(method, url, content, self._headers[content is not None],
                               connect_timeout=min(self.timeout, read_timeout), read_timeout=read_timeout)

    def _answer(self, response: HttpAnswer, method: str, url: str, job_id: str) -> Any:
        """The parsed JSON of a 2xx answer to ``method url``; otherwise raise the matching error."""
        try:
            data = orjson.loads(response.content) if response.content else None
        except orjson.JSONDecodeError:
            data = None
            if response.ok:
                raise EngineError(f"{url}: the broker answered with non-JSON") from None
        if response.ok:
            return data
        raise wire.error_from_answer(
            response.status,
            data if isinstance(data, dict) else {},
            reason=response.reason,
            where=f"{method} {url}",
            job_id=job_id,
            key=self.key,
        )

    # -- finding the leader (engine.discovery) ---------------------------------

    def _set_leader(self, url: str | None, *, forget: str | None) -> None:
        """Switch to ``url``, or forget the leader we had if it was ``forget``."""
        self._discovery.follow(url, forget=forget)

    def _target(self) -> str:
        return self._discovery.target()

    def _health(self, url: str) -> tuple[str, str | None]:
        """Ask the node at ``url`` for its role and the leader it names."""
        health = f"{url}{API_PREFIX}/health"
        return wire.health_from(self._answer(self._send("GET", health, None, self.health_timeout), "GET", health, ""))


def _wait(wait_seconds: float) -> float:
    """A long poll's wait, checked before anything is sent (0 to MAX_WAIT_SECONDS)."""
    if isinstance(wait_seconds, bool) or not isinstance(wait_seconds, int | float) or not (
        math.isfinite(wait_seconds) and 0 <= wait_seconds <= MAX_WAIT_SECONDS
    ):
        raise ValidationError(f"wait_seconds must be between 0 and {MAX_WAIT_SECONDS:g}, got {wait_seconds!r}")
    return float(wait_seconds)
