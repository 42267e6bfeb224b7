"""Operator actions taken on a standby node, run by the leader.

Every node serves the dashboard, but only the leader commits. When an
operator acts on a standby (behind a load balancer, say), the node signs the
operation with Django's signing (the nodes share ``DJANGO_SECRET_KEY``, as
they must for sessions) and posts it to the leader's ``/api/v1/operator``.
The leader checks the signature and its age, runs the operation like any
other, and answers with the outcome; the standby then writes the audit entry
in the shared database. Workers' API tokens cannot make such a request: only
a node holding the secret key can.

Each signed request is usable once: it carries a random nonce, and the
leader records the nonce in the shared database
(:class:`~queueadmin.models.ForwardNonce`) before it runs the operation, so
a captured request replayed within its age limit, to this leader or to a
later one, is refused. With the public development secret key
(``django-insecure-…``, used when ``DJANGO_SECRET_KEY`` is unset) anyone can
sign, so no node forwards or accepts forwarded operations at all, whatever
address the request comes from: set ``DJANGO_SECRET_KEY`` on every node.

Only operator operations travel this way: requeue, purge, pause and resume,
forgetting an empty queue, and a push from the Submit page.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import orjson
from django.conf import settings
from django.core import signing
from django.db import IntegrityError, transaction
from django.utils import timezone

from engine import API_PREFIX, EngineError, NotLeader, Policy
from engine.ops import Operation
from engine.wire import lone_surrogate_at
from engine.wire import operator_from_json as decode  # what is signed, and read back (engine.wire)
from engine.wire import operator_json as encode

# The signing namespace, not this module's path (it was queueadmin.dashboard.forward):
# changing it would make nodes of two versions refuse each other's requests.
SALT = "queueadmin.dashboard.forward"
# A signed operation is good for this long: enough for a slow network.
MAX_AGE_SECONDS = 60
# How long a used nonce is kept: its signature's age limit twice over, so
# that a node whose clock runs behind the one that recorded it still finds it.
NONCE_KEEP_SECONDS = 2 * MAX_AGE_SECONDS
TIMEOUT_SECONDS = 30.0
# Expired nonces deleted by one call at most: a backlog (after a node's long
# stop) is worked off over the calls that follow, none of them slowed by it.
EXPIRED_PER_CALL = 500


class ForwardRefused(EngineError):
    """The leader refused a forwarded operation, or could not be reached."""

    code = "forward_refused"


@dataclass(frozen=True, slots=True, kw_only=True)
class SignedOperation:
    """An operation from a verified signature, and the nonce that makes it usable once."""

    op: Operation
    nonce: str


def insecure_key() -> bool:
    """Whether this node signs with a public key (Django's development keys)."""
    return str(settings.SECRET_KEY).startswith("django-insecure-")


def sign(op: Operation, *, key: str | None = None) -> str:
    """``op`` signed with the secret key (``key``, without Django's settings:
    the chaos harness signs as the nodes do), with a fresh random nonce."""
    signer = signing.TimestampSigner(key=key, salt=SALT, fallback_keys=[] if key is not None else None)
    return signer.sign_object({**encode(op), "nonce": secrets.token_urlsafe(24)}, compress=True)


def unsign(text: str, *, policy: Policy) -> SignedOperation:
    """The signed operation and its nonce. Raises signing.BadSignature (or
    SignatureExpired) for a forged, altered or stale one, ValueError/
    ValidationError for a bad one. Whether the nonce was used already is
    :func:`use_nonce`'s to say."""
    data = signing.loads(text, salt=SALT, max_age=MAX_AGE_SECONDS)
    where = lone_surrogate_at(data)
    if where is not None:
        raise ValueError(f"{where} holds a lone UTF-16 surrogate")
    op = decode(data, policy=policy)
    nonce = data.get("nonce")
    if not isinstance(nonce, str) or not 16 <= len(nonce) <= 64:
        raise signing.BadSignature("the request carries no nonce (was it signed by an older version?)")
    return SignedOperation(op=op, nonce=nonce)


def use_nonce(nonce: str) -> bool:
    """Record ``nonce`` as used; False if it was used already (a replay).

    Database I/O (the shared ``ForwardNonce`` table): call it from a thread,
    never on an event loop. The unique index decides between two nodes that
    race to record the same nonce. Expired nonces are deleted on the way,
    except those another connection holds locked, which are never waited for.
    """
    from queueadmin.models import ForwardNonce  # models load after the app registry

    now = timezone.now()
    with transaction.atomic():
        # Rows another node is deleting (or holds: a node stopped in the
        # middle of this delete keeps its row locks on PostgreSQL until its
        # connection ends) are skipped, not waited for: any later call
        # deletes them. SQLite has no row locks and ignores this.
        expired = ForwardNonce.objects.select_for_update(skip_locked=True).filter(expires_at__lt=now)
        ForwardNonce.objects.filter(pk__in=list(expired.values_list("pk", flat=True)[:EXPIRED_PER_CALL])).delete()
    try:
        with transaction.atomic():
            ForwardNonce.objects.create(nonce=nonce, expires_at=now + timedelta(seconds=NONCE_KEEP_SECONDS))
    except IntegrityError:
        return False
    return True


def forward(op: Operation, leader_url: str) -> tuple[Any, int | None]:
    """Run ``op`` on the leader at ``leader_url``; return its outcome and the
    seq after it. Raises ForwardRefused (or NotLeader, if the leader moved)."""
    if insecure_key():
        raise ForwardRefused("this node runs with the public development secret key, so it cannot forward operator "
                             f"actions to the leader at {leader_url}: set DJANGO_SECRET_KEY on every node")
    try:
        response = httpx.post(f"{leader_url}{API_PREFIX}/operator", content=sign(op).encode(),
                              headers={"Content-Type": "text/plain"}, timeout=TIMEOUT_SECONDS)
    except httpx.HTTPError as exc:
        raise ForwardRefused(f"the leader at {leader_url} could not be reached: {exc}") from exc
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        body = {}
    if response.is_success and isinstance(body, dict) and "result" in body:
        return body["result"], body.get("seq")
    code = body.get("error") if isinstance(body, dict) else None
    message = body.get("message") if isinstance(body, dict) else None
    if code == "not_leader":
        raise NotLeader(body.get("leader_url"), f"{leader_url} is no longer the leader: {message}")
    raise ForwardRefused(f"the leader at {leader_url} answered {response.status_code} {code or ''}: "
                         f"{message or response.reason_phrase}")

