"""The broker API's endpoints (docs/api.md). All are async: each awaits the
commit that carries its operation on the embedded broker, without holding a
thread, and answers only after that commit landed (I1). Bodies become
operations, and outcomes answers, through :mod:`engine.wire`.

Each view looks the broker up per request with :func:`runtime.get_broker`.
A view is ``async def view(request: Request, **parameters) -> Response``
(:mod:`queueadmin.api.http`), made an endpoint by :func:`endpoint` and
routed in :mod:`queueadmin.api.urls`. Two run something on a thread: the
operator endpoint its one database write (:func:`operator`), and the
document endpoint the encoding of a possibly large document (:func:`document`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from asgiref.sync import sync_to_async
from django import db
from django.core import signing
from django.db import close_old_connections

from engine import Broker, EngineError, GroupCommitter, JobNotFound, NotLeader, QueueError, ValidationError, wire
from engine.ops import Claim, Operation, get_job_op, scoped
from queueadmin import config, runtime
from queueadmin.api import forward, parsing
from queueadmin.api.endpoint import endpoint
from queueadmin.api.errors import ApiError, encode_json, encoded_json_response, json_response
from queueadmin.api.grants import Grant
from queueadmin.api.http import Request, Response
from queueadmin.probes import segment_problems

log = logging.getLogger(__name__)


async def _body(request: Request) -> Any:
    return await parsing.read_json(request, config.max_request_bytes())


def _grant(request: Request) -> Grant:
    """What the request's token may do; set by the endpoint wrapper before any view of a call that needs a token."""
    assert request.grant is not None, "a view that needs a token ran without one"
    return request.grant


@endpoint("POST", call="push")
async def push(request: Request) -> Response:
    """201 ``{"ids": [...]}``, in request order, once every job is committed."""
    broker = runtime.get_broker()
    op = wire.push_from(await _body(request), broker.policy)
    _grant(request).require_push(op.queue)
    ids: list[str] = await broker.aexecute(op)
    return json_response(wire.outcome_json(op, ids), status=201)


@endpoint("POST", call="work")
async def claim(request: Request) -> Response:
    """200 ``{"jobs": [...]}``, possibly empty after waiting ``wait_seconds``."""
    broker = runtime.get_broker()
    op, wait = wire.claim_from(await _body(request), broker.policy)
    _grant(request).require_work(op.queues)
    runtime.seen_workers.note(op.worker, op.queues)
    poll = runtime.long_poll_claim(broker, op, wait)
    # A worker that hangs up while it waits stops waiting (as Django's handler
    # cancelled a view on a disconnect), so no job is leased to a worker that is gone.
    jobs = await (request.unless_disconnected(poll) if wait > 0 else poll)
    return json_response(wire.outcome_json(op, jobs))


@endpoint("POST", call="work")
async def heartbeat(request: Request, job_id: str) -> Response:
    """200 ``{"lease_expires_at": ...}``; 409 lease_lost, 404 job_not_found."""
    op = scoped(wire.heartbeat_from(job_id, await _body(request)), _grant(request).scope)
    expires_at = await runtime.get_broker().aexecute(op)
    return json_response(wire.outcome_json(op, expires_at))


@endpoint("POST", call="work")
async def complete(request: Request, job_id: str) -> Response:
    """200 ``{"ok": true}``; 409 lease_lost, 404 job_not_found."""
    op = scoped(wire.complete_from(job_id, await _body(request)), _grant(request).scope)
    await runtime.get_broker().aexecute(op)
    return json_response(wire.outcome_json(op, None))


@endpoint("POST", call="work")
async def fail(request: Request, job_id: str) -> Response:
    """200 ``{"status": "pending" | "dead", "not_before": ... | null}``."""
    broker = runtime.get_broker()
    op = scoped(wire.fail_from(job_id, await _body(request), broker.policy), _grant(request).scope)
    outcome = await broker.aexecute(op)
    return json_response(wire.outcome_json(op, outcome))


@endpoint("POST", call="work")
async def ack(request: Request) -> Response:
    """200 ``{"results": [...]}``, one per item of ``acks`` in order, once every
    valid item's commit landed: ``{"id", "ok": true}`` for a complete,
    ``{"id", "status", "not_before"}`` for a fail, ``{"id", "error",
    "message"}`` for an item refused alone (it changed nothing). With a
    ``claim``, also ``"claim": {"jobs": [...]}`` (or ``{"error", "message"}``):
    the claim is submitted with the acks, so it rides their commit, applied
    after them; it never waits."""
    broker = runtime.get_broker()
    items, claim = wire.ack_claim_from(await _body(request), broker.policy)
    if claim is not None:
        # Out of scope, the whole request is refused, acks included, as for an invalid claim.
        _grant(request).require_work(claim.queues)
        runtime.seen_workers.note(claim.worker, claim.queues)
    return json_response(await _batch(broker, _scoped(items, _grant(request)), claim))


@endpoint("POST", call="work")
async def watch_leases(request: Request) -> Response:
    """200 ``{"lost": [{"id", "error", "message"}, ...]}``: as soon as a
    landed commit shows a lease of ``leases`` no longer current (requeued,
    purged, run out, or a job of a queue outside the token's scope), or
    ``{"lost": []}`` after ``wait_seconds``. Writes nothing
    (:mod:`engine.leasewatch`)."""
    broker = runtime.get_broker()
    leases, wait = wire.watch_from(await _body(request))
    watch = broker.awatch_leases(leases, wait, scope=_grant(request).scope)
    # A worker that hangs up stops watching, as a waiting claim does.
    return json_response(wire.watch_json(await (request.unless_disconnected(watch) if wait > 0 else watch)))


@endpoint("POST", call="work")
async def heartbeats(request: Request) -> Response:
    """200 ``{"results": [...]}``, one per item of ``leases`` in order:
    ``{"id", "lease_expires_at"}``, or ``{"id", "error", "message"}``."""
    broker = runtime.get_broker()
    return json_response(await _batch(broker, _scoped(wire.heartbeats_from(await _body(request)), _grant(request))))


def _scoped(items: list[Operation | ValidationError], grant: Grant) -> list[Operation | ValidationError]:
    """A batch's lease calls confined to ``grant``'s queues (:func:`engine.ops.scoped`):
    an item whose job is of another queue is answered job_not_found, alone."""
    scope = grant.scope
    if scope is None:
        return items
    return [item if isinstance(item, ValidationError) else scoped(item, scope) for item in items]


async def _batch(
    broker: Broker, items: list[Operation | ValidationError], claim: Claim | None = None
) -> dict[str, Any]:
    """Submit every valid item at once, then ``claim`` if given (they ride the
    same commit, the claim applied last) and answer each after its commit
    landed (I1); an invalid item is its own answer and is never submitted.
    If every submitted operation failed for a reason of the whole node (not
    leading, store down), that is the answer to the request."""
    ops: list[Operation] = [item for item in items if not isinstance(item, ValidationError)]
    if claim is not None:
        ops.append(claim)
    outcomes = await broker.aexecute_many(ops) if ops else []
    failed = [o for o in outcomes if isinstance(o, EngineError) and not isinstance(o, QueueError)]
    if ops and len(failed) == len(ops):
        raise failed[0]
    done = iter(outcomes)
    answer = wire.batch_results_json(items, [item if isinstance(item, ValidationError) else next(done)
                                             for item in items])
    if claim is not None:
        answer["claim"] = wire.claim_json(claim, next(done))
    return answer


@endpoint("GET")
async def job(request: Request, job_id: str) -> Response:
    """200 the job as in the document (status pending, running or dead), no
    lease token; in format 2 also a pending job in a segment object, while
    its id is in the document's ``sealed`` window (``Broker.aget_job``).
    A job of a queue outside the token's scope is not found, as a job that
    does not exist: a narrowed token learns nothing of other queues."""
    view = await runtime.get_broker().aget_job(job_id)
    if not _grant(request).covers(view["queue"]):
        raise JobNotFound(job_id)
    # The token hidden again: never rely on one layer alone.
    return json_response(wire.outcome_json(get_job_op(job_id), view))


@endpoint("GET")
async def document(request: Request) -> Response:
    """200 the committed ``queue.json``, lease tokens replaced; 503 on a
    standby; 403 for a token limited to some queues or calls."""
    _grant(request).require_full("the whole document")
    broker = runtime.get_broker()
    committer = broker.committer
    if committer is None:
        raise NotLeader(broker.leader_url)
    # Parsing and re-encoding a large document takes a while (tens of ms for
    # 100,000 jobs): do it on a worker thread, never on the event loop.
    return encoded_json_response(await asyncio.to_thread(_redacted_document, committer))


def _redacted_document(committer: GroupCommitter) -> bytes:
    """The committer's last committed document, encoded, lease tokens hidden. No I/O."""
    doc = committer.document()
    wire.hide_tokens(doc)
    return encode_json(doc)


@endpoint("GET", token=False)
async def health(request: Request) -> Response:
    """200 this node's role, the leader as it knows it, itself, the last seq it
    saw, and the state of the document: ``ok``, ``missing`` (it existed and is
    gone: nothing is written until an operator runs ``queueinit``, I10) or
    ``unreadable`` (it does not parse, I6), with the engine's message; and,
    in format 2, ``segments``: ``ok``, or ``unreadable`` with the queues
    stopped at a segment object this leader cannot read (I6) and which
    object (:func:`queueadmin.probes.segment_problems`). No I/O."""
    broker = runtime.get_broker()
    leader = broker.leader
    problem = broker.document_problem
    if problem is None:
        document: dict[str, Any] = {"state": "ok"}
    else:
        state = "missing" if problem.code == "document_missing" else "unreadable"
        document = {"state": state, "error": problem.code, "message": str(problem)}
    return json_response(
        {
            "role": broker.role,
            "broker": {"id": leader.id, "url": leader.url, "epoch": leader.epoch},
            "node": {"id": broker.id, "url": broker.url},
            "seq": broker.seq,
            "document": document,
            "segments": {"state": "unreadable", "problems": problems} if (problems := segment_problems())
            else {"state": "ok"},
        }
    )


@endpoint("POST", token=False)
async def operator(request: Request) -> Response:
    """An operator action a standby node forwards to the leader (see
    :mod:`queueadmin.api.forward`): authenticated by its signature, made
    with the nodes' shared secret key, not by an API token. 200
    ``{"result": ..., "seq": n}``; 403 forbidden for a bad, stale or replayed
    signature, and for any request while this node has the public development key."""
    if forward.insecure_key():
        # The development key is public: anyone could sign with it, from anywhere
        # (behind a local reverse proxy every client comes from loopback).
        raise ApiError("forbidden", "this node runs with the public development secret key, so it accepts no "
                                    "forwarded operator actions; set DJANGO_SECRET_KEY on every node")
    broker = runtime.get_broker()
    body = await parsing.read_body(request, config.max_request_bytes())
    try:
        signed = forward.unsign(body.decode("ascii", "replace"), policy=broker.policy)
    except signing.BadSignature as exc:  # SignatureExpired included
        raise ApiError("forbidden", f"not a valid operator request from a node of this cluster: {exc}") from None
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ApiError("invalid", f"malformed operator request: {exc}") from None
    # A standby runs nothing: it says where the leader is without writing the
    # shared database (after a takeover under way, as every call). Recording
    # the nonce first, a standby whose SQLite database was locked by a stopped
    # node held the request for the database's busy timeout (5 s) and refused
    # it (chaos seed 64); unlocked, it spent a nonce on nothing.
    await broker.arequire_leading()
    # Recorded before it runs, in the database every node shares: a replay of
    # this request, here or on a later leader, is refused (even if this run fails).
    # The API's one hop to a thread: operator actions are rare, and the
    # database has no async driver here.
    try:
        fresh = await sync_to_async(_use_nonce)(signed.nonce)
    except db.Error as exc:  # OperationalError, InterfaceError, ...
        # Without its nonce recorded, the request could be replayed: refuse it, run nothing.
        log.warning("an operator request was refused: its nonce could not be recorded: %s", exc)
        raise ApiError("database_unavailable", "the shared database could not record this operator request, so it "
                                               f"was not run ({type(exc).__name__}: {exc}); is it up, and migrated "
                                               "(manage.py migrate)?") from None
    if not fresh:
        raise ApiError("forbidden", "this signed operator request was already used; a replayed request is never "
                                    "run twice (the standby signs a new one for each action)")
    result = await broker.aexecute(signed.op)
    return json_response({"result": result, "seq": broker.seq})


def _use_nonce(nonce: str) -> bool:
    """:func:`forward.use_nonce`, closing the thread's database connection as
    Django's request signals would (they do not fire on the API's path)."""
    close_old_connections()
    try:
        return forward.use_nonce(nonce)
    finally:
        close_old_connections()
