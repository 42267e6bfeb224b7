"""Producers and workers that talk to the nodes over the real HTTP API and
record every request and its answer in the :class:`~chaos.history.History`.

They are deliberately thin (plain httpx, not engine.BrokerClient) so that
each HTTP request is one recorded call, and so that they can behave like a
bad network: now and then a client *drops* an answer it got (recorded with
``args["dropped"] = True``) and acts as if the request had timed out, which
makes it retry a push that already landed, or lose a claim's leases.
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from chaos.cluster import LEASE_SECONDS, TOKEN
from chaos.history import Call, History
from engine.wire import STATUS_BY_CODE

QUEUE = "chaos"
REQUEST_TIMEOUT = 3.0
CLAIM_WAIT_SECONDS = 1.0
RETRY_BUDGET_SECONDS = 60.0
# How many of its latest acknowledged pushes a producer may look back at.
LOOK_BACK_IDS = 2000
DROPPED_PUSH_RETRY_SECONDS = (2.0, 12.0)
# A delayed push is due this long after it lands: long enough to span a few
# commits, seals and faults, short enough to be claimed within the run.
DELAY_SECONDS = (0.5, 4.0)
# How long a watching worker works a job, with one lease watch open and no
# heartbeat: some beyond the lease (chaos.cluster.LEASE_SECONDS), so that an
# expiry answers the watch too, and long enough to meet the requeuer.
WATCH_SECONDS = (0.5, 5.0)
# Answers that mean "not served, the outcome is unknown or nothing happened: retry".
_RETRY_CODES = frozenset({"not_leader", "store_unavailable", "document_error", "committer_stopped"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Behaviour:
    """How clients misbehave, as probabilities per call."""

    drop_answer: float = 0.02  # act as if a push/claim/complete answer was lost, and retry
    stall: float = 0.02  # a worker stalls past its lease before completing
    fail: float = 0.05  # a worker fails the job (it is retried)
    give_up: float = 0.2  # of those fails, the share that gives up: a dead letter (an operator may redrive it)
    odd_strings: float = 0.0  # a worker sends a lone surrogate in a fail's error or its name
    deep_payloads: float = 0.0  # a producer pushes a payload nested close to JSON's depth limit
    peek: float = 0.1  # a worker reads its job (GET /jobs/<id>) before working on it
    look_back: float = 0.1  # a producer reads a job it pushed earlier (maybe waiting deep in a segment)
    batch: float = 0.5  # a worker acknowledges the jobs of one claim in one POST /ack
    delayed: float = 0.0  # a producer pushes a delayed job (due in DELAY_SECONDS): never leased before it is due
    watch: float = 0.0  # a worker works a job for WATCH_SECONDS with a lease watch open instead of heartbeating


class Router:
    """One client's idea of who leads: follows not_leader answers, else tries the next node."""

    def __init__(self, urls: list[str], rng: random.Random) -> None:
        self.urls = urls
        self.leader = rng.choice(urls)

    def failed(self, url: str, call: Call) -> None:
        named = call.answer.get("leader_url") if isinstance(call.answer, dict) else None
        if isinstance(named, str) and named in self.urls and named != url:
            self.leader = named
        elif self.leader == url:
            self.leader = self.urls[(self.urls.index(url) + 1) % len(self.urls)]


class Client(threading.Thread):
    """A thread that records every request it sends."""

    def __init__(self, name: str, urls: list[str], history: History, rng: random.Random,
                 stop: threading.Event, behaviour: Behaviour) -> None:
        super().__init__(name=name, daemon=True)
        self.history = history
        self.rng = rng
        self.stop_event = stop
        self.behaviour = behaviour
        self.router = Router(urls, rng)
        self.http = httpx.Client(headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})

    def send(self, op: str, path: str, body: dict[str, Any] | None, *, args: dict[str, Any] | None = None,
             raw: bytes | None = None, wait: float = 0.0) -> Call:
        """Send ``body`` (or ``raw`` bytes) to whom we think leads, and record it
        with ``args`` (default: the body). Never raises for network trouble."""
        url = self.router.leader
        call = self.history.begin(self.name, op, url, (body or {}) if args is None else args)
        timeout = httpx.Timeout(REQUEST_TIMEOUT + wait, connect=1.0)
        try:
            if body is None:
                response = self.http.get(f"{url}/api/v1{path}", timeout=timeout)
            else:
                content = raw if raw is not None else orjson.dumps(body)
                response = self.http.post(f"{url}/api/v1{path}", content=content, timeout=timeout)
        except httpx.TimeoutException:
            self.history.finish(call, error="timeout")
        except httpx.HTTPError as exc:
            self.history.finish(call, error=f"{type(exc).__name__}: {exc}")
        else:
            try:
                answer = response.json() if response.content else None
            except (ValueError, RecursionError):
                answer = {"non_json": response.text[:200]}
            if op == "get":
                answer = {k: v for k, v in answer.items() if k != "payload"} if isinstance(answer, dict) else None
            if isinstance(answer, dict) and isinstance(answer.get("jobs"), list):
                # The checker needs ids and leases; payloads (maybe nested too deep to dump) stay out.
                answer["jobs"] = [{k: v for k, v in j.items() if k != "payload"} if isinstance(j, dict) else j
                                  for j in answer["jobs"]]
            self.history.finish(call, status=response.status_code, answer=answer)
        if not call.ok:
            self.router.failed(url, call)
        return call

    def retryable(self, call: Call) -> bool:
        return call.status is None or call.status >= 500 or call.code in _RETRY_CODES

    def backoff(self, attempt: int) -> None:
        time.sleep(self.rng.uniform(0, min(0.5, 0.02 * 2**attempt)))

    def drop(self, call: Call) -> bool:
        """Whether to pretend ``call``'s answer never arrived (a lossy network)."""
        if call.ok and self.rng.random() < self.behaviour.drop_answer:
            call.args = {**call.args, "dropped": True}
            return True
        return False

    def run(self) -> None:
        try:
            self.loop()
        finally:
            self.http.close()

    def loop(self) -> None:
        raise NotImplementedError


class Producer(Client):
    """Pushes one job at a time with a known id and payload, retrying with the
    same id until it is acknowledged (or the retry budget runs out)."""

    def __init__(self, index: int, pace: float, *args: Any) -> None:
        super().__init__(f"producer-{index}", *args)
        self.index = index
        self.pace = pace

    def loop(self) -> None:
        n = 0
        # Pushes whose answer we dropped, sent again later (when, id, payload, delay).
        later: list[tuple[float, str, Any, float | None]] = []
        acked: list[str] = []  # the ids of the last acknowledged pushes, to look back at
        while not self.stop_event.is_set():
            if later and later[0][0] <= time.monotonic():
                _, job_id, payload, delay = later.pop(0)
            else:
                job_id = f"{self.index:04x}{n:028x}"
                payload = {"producer": self.index, "n": n, "text": "x" * self.rng.randrange(0, 200)}
                if self.rng.random() < self.behaviour.deep_payloads:
                    payload = self.deep_payload()
                delay = (round(self.rng.uniform(*DELAY_SECONDS), 3)
                         if self.rng.random() < self.behaviour.delayed else None)
                n += 1
            outcome = self.push(job_id, payload, delay)
            if outcome == "dropped":
                # Like a client whose connection broke after sending: it retries
                # the same id later, when the job may well have run already.
                later.append((time.monotonic() + self.rng.uniform(*DROPPED_PUSH_RETRY_SECONDS), job_id, payload,
                              delay))
                later.sort(key=lambda item: item[0])
            elif outcome == "acked":
                acked = [*acked[-(LOOK_BACK_IDS - 1):], job_id]
            if acked and self.rng.random() < self.behaviour.look_back:
                # A client polling a job it pushed a while ago: pending (in the
                # document or in a segment), running, or completed since.
                earlier = self.rng.choice(acked)
                self.send("get", f"/jobs/{earlier}", None, args={"job": earlier, "look_back": True})
            self.stop_event.wait(self.rng.uniform(0, 2 * self.pace))

    def deep_payload(self) -> Any:
        """A list nested close to the depth serializers allow (orjson: 254 levels).
        Push must refuse it, or every later read of the job must work."""
        payload: Any = self.index
        for _ in range(self.rng.randrange(248, 255)):
            payload = [payload]
        return payload

    def push(self, job_id: str, payload: Any, delay: float | None = None) -> str:
        """Push (due in ``delay`` seconds, if given) until acknowledged
        ("acked"), refused ("refused"), out of budget ("gave up"), or
        acknowledged but the answer dropped ("dropped")."""
        extra = {"delay_seconds": delay} if delay is not None else {}
        body = {"queue": QUEUE, "jobs": [{"id": job_id, "payload": payload, "max_attempts": 50, **extra}]}
        # json, not orjson: orjson refuses to write what is nested too deep.
        raw = json.dumps(body).encode() if isinstance(payload, list) else None
        if raw is not None:
            body = {"queue": QUEUE, "jobs": [{"id": job_id, "payload": "deeply nested list", "max_attempts": 50,
                                              **extra}]}
        deadline = time.monotonic() + RETRY_BUDGET_SECONDS
        attempt = 0
        while time.monotonic() < deadline:
            call = self.send("push", "/jobs", body, raw=raw)
            if call.ok:
                return "dropped" if self.drop(call) else "acked"
            if not self.retryable(call):
                return "refused"  # recorded; nothing to retry
            attempt += 1
            self.backoff(attempt)
        return "gave up"


@dataclass(frozen=True, slots=True)
class Finish:
    """A complete or fail to send: its op, path, recorded args (with ``job``) and raw body, if any."""

    op: str
    path: str
    body: dict[str, Any]
    raw: bytes | None


class Worker(Client):
    """Claims (long poll), works, heartbeats, completes or fails; retries a
    complete or fail whose outcome is unknown until it gets a clear answer."""

    def __init__(self, index: int, *args: Any) -> None:
        super().__init__(f"worker-{index}", *args)

    def loop(self) -> None:
        attempt = 0
        while not self.stop_event.is_set():
            name = self.name
            if self.rng.random() < self.behaviour.odd_strings:
                name = self.name + "\ud800"
            body = {"worker": name, "queues": [QUEUE], "max_jobs": self.rng.choice((1, 1, 2, 3)),
                    "wait_seconds": CLAIM_WAIT_SECONDS, "lease_seconds": LEASE_SECONDS}
            # orjson refuses lone surrogates; the stdlib writes them as \ud800 escapes.
            raw = json.dumps(body).encode() if name != self.name else None
            args = {**body, "worker": repr(name)} if raw is not None else None
            call = self.send("claim", "/claim", body, args=args, raw=raw, wait=CLAIM_WAIT_SECONDS)
            if not call.ok:
                attempt += 1
                self.backoff(attempt)
                continue
            attempt = 0
            if self.drop(call):
                continue  # the leases were given to nobody: they expire and the jobs come back
            jobs = call.answer.get("jobs", [])
            batched = len(jobs) > 1 and self.rng.random() < self.behaviour.batch
            finished = [self.work(str(job["id"]), str(job["lease"]), defer=batched) for job in jobs]
            if batched:
                self.finish_batch([item for item in finished if item is not None])

    def work(self, job_id: str, lease: str, *, defer: bool = False) -> Finish | None:
        """Work on one job, then complete or fail it; with ``defer``, return the
        acknowledgement to send in a batch instead (unless it carries a lone
        surrogate, which only a single call sends)."""
        path = f"/jobs/{job_id}"
        if self.rng.random() < self.behaviour.peek:
            self.send("get", path, None, args={"job": job_id})
        if self.rng.random() < self.behaviour.stall:
            time.sleep(LEASE_SECONDS + self.rng.uniform(0.5, 2))  # a stalled worker: its lease expires
        elif self.rng.random() < self.behaviour.watch:
            self.watch(job_id, lease)
        else:
            seconds = self.rng.uniform(0, 0.3)
            time.sleep(seconds / 2)
            self.send("heartbeat", path + "/heartbeat", {"lease": lease}, args={"job": job_id, "lease": lease})
            time.sleep(seconds / 2)
        if self.rng.random() < self.behaviour.fail:
            error = "chaos says no"
            raw = None
            if self.rng.random() < self.behaviour.odd_strings * 10:
                error += "\ud800"
            body: dict[str, Any] = {"lease": lease, "error": error, "retry_in_seconds": 0}
            if self.rng.random() < self.behaviour.give_up:
                body["give_up"] = True
            if error.endswith("\ud800"):
                raw = json.dumps(body).encode()
                body = {**body, "error": repr(error)}
            finish = Finish("fail", f"{path}/fail", {**body, "job": job_id}, raw)
        else:
            finish = Finish("complete", f"{path}/complete", {"job": job_id, "lease": lease}, None)
        if defer and finish.raw is None:
            return finish
        self.finish(finish.op, finish.path, finish.body, finish.raw)
        return None

    def watch(self, job_id: str, lease: str) -> None:
        """Work a long job with a lease watch open (``POST /leases/watch``, as
        engine.Worker keeps between heartbeats), and no heartbeat. Told the
        lease is lost, this worker sends its result all the same, as a
        handler that never checks for cancellation would: the checker's
        ``watches`` says that result must be refused."""
        seconds = round(self.rng.uniform(*WATCH_SECONDS), 3)
        body = {"leases": [{"id": job_id, "lease": lease}], "wait_seconds": seconds}
        started = time.monotonic()
        self.send("watch", "/leases/watch", body, args={"job": job_id, "lease": lease, "wait_seconds": seconds},
                  wait=seconds)
        time.sleep(max(0.0, seconds - (time.monotonic() - started)))  # an error answered early: work on

    def finish_batch(self, items: list[Finish]) -> None:
        """Acknowledge ``items`` in one ``POST /ack``; each item is recorded as
        its own complete or fail with its own result. Items without a clear
        answer (the call failed, or its answer was dropped) are retried one by
        one, as single calls are."""
        if not items:
            return
        acks = [{"id": i.body["job"], "outcome": i.op, **{k: v for k, v in i.body.items() if k != "job"}}
                for i in items]
        call = self.send("ack", "/ack", {"acks": acks}, args={"jobs": [i.body["job"] for i in items]})
        results = call.answer.get("results") if call.ok and isinstance(call.answer, dict) else None
        dropped = results is not None and self.drop(call)
        for index, item in enumerate(items):
            result = results[index] if isinstance(results, list) and index < len(results) else None
            if isinstance(result, dict) and "error" in result:
                status: int | None = STATUS_BY_CODE.get(str(result["error"]), 400)
            elif isinstance(result, dict):
                status = 200
            else:  # no per-item answer: the outcome is unknown
                status = None if call.status is None or call.ok else call.status
                result = call.answer
            args = {**item.body, "dropped": True} if dropped and status == 200 else item.body
            # The batch call itself carries a timeout (and is checked for it); its items only point to it.
            error = None if status is not None else f"ack call {call.id}: {call.error or 'no result for this item'}"
            part = self.history.part_of(call, item.op, args, status=status, answer=result, error=error)
            if dropped or (not part.ok and self.retryable(part)):
                self.finish(item.op, item.path, item.body, item.raw)

    def finish(self, op: str, path: str, body: dict[str, Any], raw: bytes | None) -> None:
        deadline = time.monotonic() + RETRY_BUDGET_SECONDS
        attempt = 0
        send_body = {k: v for k, v in body.items() if k != "job"}
        while time.monotonic() < deadline:
            call = self.send(op, path, send_body, args=body, raw=raw)
            if call.ok and not self.drop(call):
                return
            if not call.ok and not self.retryable(call):
                return  # lease_lost, job_not_found, invalid: a clear answer
            attempt += 1
            self.backoff(attempt)
