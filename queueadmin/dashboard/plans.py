"""Dry runs kept until they run: the bridge between an action's dry run and
its confirmation (I9).

A dry run is stored as an :class:`~queueadmin.models.ActionPlan` row: the
action, its scope, the seq it saw, and the exact job ids with the status each
was in. The confirmation form carries only a signed token naming that row and
its user; the run reads everything else from the row, so no form field can
widen what the run acts on.

Why a row and not the ids themselves in a signed form field: a dry run may
cover a whole queue. 100,000 job ids of 32 hex characters are about 1.7 MB
even compressed: they would travel to the browser and back in the form, close
to Django's 2.5 MB request limit, on every dry run. A row costs the page a
60-character token whatever the selection. The database is the one every node
shares (sessions and the audit log live there too), so a dry run made on one
node can be confirmed on another behind a load balancer, which a per-process
cache could not do.

A plan is good for :data:`PLAN_TTL_SECONDS` and for one run: running it
deletes the row first, so a double submit runs once. Expired rows are
deleted whenever a new dry run is saved.
"""

from __future__ import annotations

import secrets
import zlib
from datetime import timedelta
from typing import Any

import orjson
from django.contrib.auth.models import User
from django.core import signing
from django.utils import timezone

from queueadmin.dashboard.actions import Plan
from queueadmin.models import ActionPlan

SALT = "queueadmin.dashboard.plans"
#: Long enough to read a dry run and write a reason; short enough that the
#: operator does not confirm a picture of the queue from long ago.
PLAN_TTL_SECONDS = 30 * 60
#: The stored fields of a Plan (its sample and effects are drawn again for a
#: confirmation shown again; its notes, which the planning alone can say, are kept).
STORED = ("action", "queue", "schedule", "max_running", "rate_jobs", "rate_seconds", "pace_jobs", "pace_seconds",
          "target", "status", "group", "filter", "redacted", "seq", "ids", "expect", "queues", "before_pos",
          "segment_jobs", "segment_objects", "notes")


class PlanRefused(Exception):
    """The confirmation names no plan this user may run. Nothing was changed:
    the operator starts the action again from its page. ``status`` is 422
    without a token, 403 for an altered, forged or foreign one, 409 for an
    expired or used one (statuses the page's htmx shows in place)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def save(plan: Plan, user: User) -> str:
    """Store ``plan`` for ``user``; set and return its token (for the
    confirmation form). Also deletes every expired plan. Writes the database."""
    ActionPlan.objects.filter(created_at__lt=timezone.now() - timedelta(seconds=PLAN_TTL_SECONDS)).delete()
    key = secrets.token_urlsafe(24)
    body = zlib.compress(orjson.dumps({name: getattr(plan, name) for name in STORED}))
    ActionPlan.objects.create(key=key, user_id=user.pk, body=body)
    plan.key = key
    plan.token = signing.dumps({"k": key, "u": user.pk}, salt=SALT, compress=True)
    return plan.token


def load(token: str, user: User) -> Plan:
    """The plan ``token`` names, for ``user``. Raises :class:`PlanRefused`
    for a missing, altered, expired, used or someone else's token. Reads the
    database, changes nothing."""
    if not token:
        raise PlanRefused("This confirmation has no dry run: start the action again from its page. "
                          "Nothing was changed.", 422)
    try:
        data: Any = signing.loads(token, salt=SALT, max_age=PLAN_TTL_SECONDS)
    except signing.SignatureExpired:
        raise PlanRefused(f"This dry run is more than {PLAN_TTL_SECONDS // 60} minutes old: run it again. "
                          "Nothing was changed.", 409) from None
    except signing.BadSignature:
        raise PlanRefused("This confirmation was not made by the dashboard (its signature does not match): "
                          "start the action again from its page. Nothing was changed.", 403) from None
    if not isinstance(data, dict) or data.get("u") != user.pk or not isinstance(data.get("k"), str):
        raise PlanRefused("This dry run belongs to another user: start the action again from its page. "
                          "Nothing was changed.", 403)
    row = ActionPlan.objects.filter(key=data["k"], user_id=user.pk).only("key", "body").first()
    if row is None:
        raise PlanRefused("This dry run has already been run (or has expired): run it again to act on the "
                          "queue as it is now. Nothing was changed.", 409)
    fields = orjson.loads(zlib.decompress(row.body))
    # A plan saved before a field existed (within PLAN_TTL_SECONDS of an upgrade) gets its default.
    return Plan(**{name: fields[name] for name in STORED if name in fields}, key=row.key, token=token)


def consume(plan: Plan) -> bool:
    """Delete the stored plan; False if it was already gone (run by a
    concurrent request). Only the caller that gets True may run it."""
    deleted, _ = ActionPlan.objects.filter(key=plan.key).delete()
    return deleted > 0
