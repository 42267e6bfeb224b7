"""The queue operations over the broker's HTTP API (docs/api.md): :class:`BrokerClient`.

``BrokerClient`` has the same methods as :class:`~engine.DirectClient` and
:class:`~engine.GroupCommitter`, and validates input through the same
operation builders, so bad input raises ValidationError before any request
is sent. It finds the leading broker, follows a change of leader, and retries
what is safe to retry within a time budget.

Errors, beyond the engine's own tree (:mod:`engine.errors`)::

    EngineError
    ├── Unauthorized               the broker refused the token; fix it, retrying won't help
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

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, NoReturn
from urllib.parse import quote, urlsplit

import httpx
import orjson

from engine.backoff import jittered
from engine.client import QueueClient
from engine.errors import (
    DocumentError,
    DocumentMissing,
    EngineError,
    InvalidPayload,
    JobNotFound,
    LeaseLost,
    NotLeader,
    OperationFailed,
    PayloadTooLarge,
    StoreUnavailable,
    ValidationError,
)
from engine.model import ClaimedJob, FailOutcome
from engine.operations import (
    Claim,
    Complete,
    Fail,
    GetJob,
    Heartbeat,
    Operation,
    Purge,
    Push,
    Requeue,
    SetPaused,
    claim_op,
)
from engine.policy import DOCUMENT_KEY, Policy
from engine.stores.base import ObjectStore

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
MAX_WAIT_SECONDS = 30.0
# not_leader redirects followed back to back before pausing: two nodes that
# name each other during a takeover must not be ping-ponged at full speed.
MAX_QUICK_REDIRECTS = 3
# Gateways and throttling in front of a broker: the request was not served.
_RETRY_STATUSES = frozenset({429, 502, 503, 504})


class Unauthorized(EngineError):
    """The broker refused the token (missing, wrong, or none configured there).

    Set the right token (``QUEUE_API_TOKEN`` or ``--token``); retrying won't help.
    """

    code = "unauthorized"


class BrokerUnavailable(StoreUnavailable):
    """No broker answered in time: connection refused or reset, a timeout, a
    gateway error. To this client the broker *is* the store, so this is a
    StoreUnavailable: a write may have landed; settle it as docs/api.md says."""

    code = "broker_unavailable"


def _with_message(exc: EngineError, message: str) -> EngineError:
    """Use the broker's own wording instead of the local default message."""
    exc.args = (message,)
    return exc


def _parse_time(value: object) -> datetime:
    if not isinstance(value, str):
        raise EngineError(f"the broker sent {value!r} where a time was expected")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise EngineError(f"the broker sent {value!r} where a time was expected") from None
    if moment.tzinfo is None:
        raise EngineError(f"the broker sent a time without a timezone: {value!r}")
    return moment


def _check_url(url: str) -> str:
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"broker URL must be an absolute http:// or https:// URL, got {url!r}")
    return url.rstrip("/")


class BrokerClient(QueueClient):
    """Queue operations sent to the leading broker over HTTP.

    Thread-safe: one pooled ``httpx.Client`` serves every thread. Each call
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

    #: ``claim`` accepts ``wait_seconds`` (a long poll); the Worker checks this.
    supports_wait = True

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
        transport: httpx.BaseTransport | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(urls, str):  # a lone URL is an easy mistake; a str is a Sequence
            urls = [urls]
        self.urls = tuple(dict.fromkeys(_check_url(u) for u in urls))
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
        self._http = httpx.Client(
            transport=transport,
            timeout=timeout,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            headers={"Authorization": f"Bearer {token}", "User-Agent": "queueadmin-broker-client/1"},
        )
        self._lock = threading.Lock()  # guards _leader and requests
        self._discovering = threading.Lock()  # one discovery at a time; the others wait for its answer
        self._leader: str | None = None
        self._closed = threading.Event()

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
        return self._leader

    # -- operations ------------------------------------------------------------

    def claim(
        self,
        worker: str,
        queues: Iterable[str],
        *,
        max_jobs: int = 1,
        lease_seconds: float | None = None,
        wait_seconds: float = 0,
    ) -> list[ClaimedJob]:
        """Lease up to ``max_jobs`` jobs of ``queues``, oldest first. May return [].

        With ``wait_seconds`` (0 to 30) the broker holds the request until a
        job can be claimed or the time is up. Without ``lease_seconds`` the
        broker's configured lease length applies. A claim retried after a lost
        answer may have leased jobs nobody received: they expire and are
        handed out again (at-least-once).
        """
        op = claim_op(worker, queues, policy=self.policy, max_jobs=max_jobs, lease_seconds=lease_seconds)
        if isinstance(wait_seconds, bool) or not isinstance(wait_seconds, int | float) or not (
            math.isfinite(wait_seconds) and 0 <= wait_seconds <= MAX_WAIT_SECONDS
        ):
            raise ValidationError(f"wait_seconds must be between 0 and {MAX_WAIT_SECONDS:g}, got {wait_seconds!r}")
        return self._claim(op, wait_seconds=float(wait_seconds), send_lease=lease_seconds is not None)

    def execute(self, op: Operation) -> Any:
        """Send one validated operation to the leader and return its outcome."""
        match op:
            case Push():
                jobs = [
                    {"id": j.id, "payload": orjson.Fragment(j.payload), "max_attempts": j.max_attempts,
                     "delay_seconds": j.delay_seconds}
                    for j in op.jobs
                ]
                # The ids travel with the body, which is built once: every retry
                # sends the same ids, so a push that landed is not duplicated.
                answer = self._call("POST", "/jobs", {"queue": op.queue, "jobs": jobs})
                return list(self._field(answer, "ids", list))
            case Claim():
                return self._claim(op, wait_seconds=0.0, send_lease=True)
            case Heartbeat():
                body: dict[str, Any] = {"lease": op.lease}
                if op.lease_seconds is not None:
                    body["lease_seconds"] = op.lease_seconds
                answer = self._call("POST", self._job_path(op.job_id, "/heartbeat"), body, job_id=op.job_id)
                return _parse_time(self._field(answer, "lease_expires_at", str))
            case Complete():
                self._call("POST", self._job_path(op.job_id, "/complete"), {"lease": op.lease}, job_id=op.job_id)
                return None
            case Fail():
                body = {"lease": op.lease, "error": op.error}
                if op.retry_in_seconds is not None:
                    body["retry_in_seconds"] = op.retry_in_seconds
                if op.give_up:
                    body["give_up"] = True
                answer = self._call("POST", self._job_path(op.job_id, "/fail"), body, job_id=op.job_id)
                status = self._field(answer, "status", str)
                if status not in ("pending", "dead"):
                    raise EngineError(f"the broker answered fail with status {status!r}")
                not_before = answer.get("not_before")
                return FailOutcome(status=status, not_before=None if not_before is None else _parse_time(not_before))
            case GetJob():
                answer = self._call("GET", self._job_path(op.job_id, ""), None, job_id=op.job_id)
                if not isinstance(answer, dict):
                    raise EngineError("the broker answered get_job with something other than a JSON object")
                return answer
            case Requeue() | Purge() | SetPaused():
                name = {Requeue: "requeue", Purge: "purge", SetPaused: "pause"}[type(op)]
                raise EngineError(
                    f"{name} is an operator action with no broker API endpoint: do it on the dashboard, "
                    "where it is audited (or with a DirectClient on the store, for maintenance)"
                )
            case _:
                raise EngineError(f"{type(op).__name__} is internal to the broker and cannot be sent over HTTP")

    def document(self) -> dict[str, Any]:
        """The committed document from the leader (lease tokens hidden as "…")."""
        answer = self._call("GET", "/document", None)
        if not isinstance(answer, dict):
            raise EngineError("the broker answered /document with something other than a JSON object")
        return answer

    def _claim(self, op: Claim, *, wait_seconds: float, send_lease: bool) -> list[ClaimedJob]:
        body: dict[str, Any] = {"worker": op.worker, "queues": list(op.queues), "max_jobs": op.max_jobs}
        if send_lease:
            body["lease_seconds"] = op.lease_seconds
        if wait_seconds > 0:
            body["wait_seconds"] = wait_seconds
        answer = self._call("POST", "/claim", body, wait_seconds=wait_seconds)
        try:
            return [
                ClaimedJob(
                    id=str(j["id"]),
                    queue=str(j["queue"]),
                    payload=j["payload"],
                    attempt=int(j["attempt"]),
                    lease=str(j["lease"]),
                    lease_expires_at=_parse_time(j["lease_expires_at"]),
                )
                for j in self._field(answer, "jobs", list)
            ]
        except (KeyError, TypeError, ValueError) as exc:
            raise EngineError(f"the broker sent a malformed claim answer: {exc!r}") from exc

    @staticmethod
    def _job_path(job_id: str, action: str) -> str:
        return f"/jobs/{quote(job_id, safe='')}{action}"

    @staticmethod
    def _field(answer: Any, name: str, kind: type) -> Any:
        if not isinstance(answer, dict) or not isinstance(answer.get(name), kind):
            raise EngineError(f"the broker's answer has no {kind.__name__} {name!r}: {answer!r:.200}")
        return answer[name]

    # -- requests, retries and errors -----------------------------------------

    def _call(
        self, method: str, path: str, body: dict[str, Any] | None, *, job_id: str = "", wait_seconds: float = 0.0
    ) -> Any:
        """Send to the leader, retrying what is retryable within the budget."""
        content = None if body is None else orjson.dumps(body)
        timeout = httpx.Timeout(self.timeout, read=self.timeout + wait_seconds)
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
                response = self._send(method, base + API_PREFIX + path, content, timeout)
                return self._answer(response, job_id)
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

    def _send(self, method: str, url: str, content: bytes | None, timeout: httpx.Timeout) -> httpx.Response:
        with self._lock:
            self.requests += 1
        headers = {"Content-Type": "application/json"} if content is not None else None
        try:
            return self._http.request(method, url, content=content, headers=headers, timeout=timeout)
        except httpx.TransportError as exc:
            raise BrokerUnavailable(f"{method} {url}: {type(exc).__name__}: {exc}") from exc
        except RuntimeError as exc:  # httpx refuses requests on a closed client
            if self._closed.is_set():
                raise EngineError("the BrokerClient is closed") from exc
            raise

    def _answer(self, response: httpx.Response, job_id: str) -> Any:
        """The parsed JSON of a 2xx answer; otherwise raise the matching error."""
        try:
            data = orjson.loads(response.content) if response.content else None
        except orjson.JSONDecodeError:
            data = None
            if response.is_success:
                raise EngineError(f"{response.request.url}: the broker answered with non-JSON") from None
        if response.is_success:
            return data
        self._raise(response, data if isinstance(data, dict) else {}, job_id)

    def _raise(self, response: httpx.Response, data: dict[str, Any], job_id: str) -> NoReturn:
        status, code = response.status_code, data.get("error")
        message = str(data.get("message") or f"HTTP {status} {response.reason_phrase}".strip())
        where = f"{response.request.method} {response.request.url}"
        if code == "not_leader":
            leader = data.get("leader_url")
            leader_url = _check_url(leader) if isinstance(leader, str) and leader else None
            raise NotLeader(leader_url, message)
        if code == "store_unavailable":
            raise StoreUnavailable(message)
        if code is None and status in _RETRY_STATUSES:
            raise BrokerUnavailable(f"{where}: {message}")
        if code == "lease_lost":
            raise _with_message(LeaseLost(job_id), message)
        if code == "job_not_found":
            raise _with_message(JobNotFound(job_id), message)
        if code == "invalid_payload":
            raise InvalidPayload(message)
        if code == "payload_too_large":
            size, limit = data.get("size"), data.get("limit")
            exc = PayloadTooLarge(size if isinstance(size, int) else 0, limit if isinstance(limit, int) else 0)
            raise _with_message(exc, message)
        if code in ("invalid", "malformed_json"):
            raise ValidationError(message)
        if code == "unauthorized" or status == 401:
            raise Unauthorized(f"{message} (check the API token)")
        if code == "document_error":
            raise _with_message(DocumentError(self.key, message), message)
        if code == "document_missing":  # I10: an operator must act; retrying does not help
            raise _with_message(DocumentMissing(self.key, message), message)
        if code == "operation_failed":  # I8: this request alone was refused
            raise OperationFailed(message)
        raise EngineError(f"{where}: the broker answered {status}{f' {code}' if code else ''}: {message}")

    # -- finding the leader ----------------------------------------------------

    def _set_leader(self, url: str | None, *, forget: str | None) -> None:
        """Switch to ``url``, or forget the leader we had if it was ``forget``."""
        with self._lock:
            if url is not None:
                if url != self._leader:
                    log.info("broker leader is now %s", url)
                self._leader = url
            elif forget is not None and self._leader == forget:
                self._leader = None

    def _target(self) -> str:
        leader = self._leader
        if leader is not None:
            return leader
        with self._discovering:
            leader = self._leader  # found by another thread while we waited
            if leader is None:
                leader = self._discover()
                self._set_leader(leader, forget=None)
            return leader

    def _discover(self) -> str:
        """Ask the known nodes who leads; raises NotLeader or BrokerUnavailable."""
        candidates = list(self.urls)
        problems: list[str] = []
        consulted_store = answered = False
        i = 0
        while True:
            if i == len(candidates):
                if consulted_store or self.store is None:
                    break
                consulted_store = True
                named = self._url_from_store(problems)
                if named is None or named in candidates:
                    break
                candidates.append(named)
            url = candidates[i]
            i += 1
            try:
                role, named = self._health(url)
            except EngineError as exc:
                problems.append(f"{url}: {exc}")
                continue
            answered = True
            if role == "leader":
                return url
            problems.append(f"{url} is a {role}" + (f" naming {named} as leader" if named else ""))
            if named and named not in candidates:
                candidates.insert(i, named)  # ask the node it names next
        summary = "; ".join(problems) or "no broker URL to try"
        if answered:
            raise NotLeader(None, f"no broker leads right now ({summary})")
        raise BrokerUnavailable(f"no broker could be reached ({summary})")

    def _health(self, url: str) -> tuple[str, str | None]:
        response = self._send("GET", f"{url}{API_PREFIX}/health", None, httpx.Timeout(self.health_timeout))
        data = self._answer(response, "")
        role = data.get("role") if isinstance(data, dict) else None
        if not isinstance(role, str):
            raise EngineError("its health answer has no role")
        broker = data.get("broker")
        named = broker.get("url") if isinstance(broker, dict) else None
        try:
            return role, _check_url(named) if isinstance(named, str) and named else None
        except ValueError:
            return role, None

    def _url_from_store(self, problems: list[str]) -> str | None:
        """The leader's URL as the document names it. Only reads the store."""
        assert self.store is not None
        try:
            blob = self.store.get(self.key)
            broker = orjson.loads(blob.data).get("broker") if blob is not None else None
        except (EngineError, orjson.JSONDecodeError, AttributeError) as exc:
            problems.append(f"store {self.key}: {exc}")
            return None
        named = broker.get("url") if isinstance(broker, dict) else None
        if not isinstance(named, str) or not named:
            problems.append(f"{self.key} names no broker URL (is a broker running, with QUEUE_ADVERTISE_URL set?)")
            return None
        try:
            return _check_url(named)
        except ValueError as exc:
            problems.append(f"{self.key}: {exc}")
            return None
