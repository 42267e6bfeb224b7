"""Fixtures for the dashboard tests: a leading broker on a fresh memory store,
and users with each level of access.

The broker's idle heartbeat is far beyond any test's length, so the stored
document changes only when a test changes it, and "nothing changed" can be
checked byte for byte.
"""

from __future__ import annotations

import html
import io
import re
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client

from engine import Broker, ObjectStore
from engine.ops import claim_op, fail_op, push_op
from queueadmin import runtime
from queueadmin.dashboard.source import source
from queueadmin.models import ApiToken
from tests.helpers import wait_for

if TYPE_CHECKING:
    from pytest_django.fixtures import Settings as SettingsWrapper

PASSWORD = "correct horse battery staple"


@pytest.fixture
def broker(settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch) -> Iterator[Broker]:
    """A started, leading broker that the dashboard reads and acts through."""
    settings.QUEUE_STORE_URL = f"memory://dashboard-{uuid.uuid4().hex}"
    settings.QUEUE_ADVERTISE_URL = "http://node-a.test:8000"
    settings.QUEUE_LEASE_SECONDS = 30.0
    settings.QUEUE_HEARTBEAT_SECONDS = 120.0
    settings.QUEUE_TAKEOVER_SECONDS = 600.0
    node = runtime.build_broker().start()
    try:
        wait_for(lambda: node.role == "leader")
        monkeypatch.setattr(runtime, "get_broker", lambda: node)
        source.reset()
        runtime.seen_workers.clear()
        yield node
    finally:
        node.stop()
        source.reset()


@pytest.fixture
def store(broker: Broker) -> ObjectStore:
    return broker.store




def make_user(name: str, *perms: str, staff: bool = False, superuser: bool = False) -> User:
    if superuser:
        return User.objects.create_superuser(name, f"{name}@example.com", PASSWORD)
    user = User.objects.create_user(name, f"{name}@example.com", PASSWORD, is_staff=staff)
    for perm in perms:
        user.user_permissions.add(Permission.objects.get(codename=perm, content_type__app_label="queueadmin"))
    return user


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def admin_client_(db: None) -> Client:
    """A superuser: every permission."""
    return client_for(make_user("root", superuser=True))


@pytest.fixture
def viewer(db: None) -> Client:
    """Read-only staff: ``view_dashboard`` and nothing else."""
    return client_for(make_user("viewer", "view_dashboard", staff=True))


@pytest.fixture
def operator(db: None) -> Client:
    """May view, submit, requeue, purge and pause."""
    return client_for(make_user("operator", "view_dashboard", "submit_job", "requeue_job", "purge_job",
                                "pause_queue"))


def kill(broker: Broker, queue: str = "q", payload: object = "x", *, error: str = "boom") -> str:
    """Push a job with one attempt and fail it: it is a dead letter now."""
    [job_id] = broker.execute(_push(broker, queue, [payload], max_attempts=1))
    [claimed] = broker.execute(claim_op("w-test", [queue], policy=broker.policy))
    broker.execute(fail_op(claimed.id, claimed.lease, error=error, retry_in_seconds=None, policy=broker.policy))
    return str(job_id)


def queue_counters(broker: Broker, queue: str = "q") -> dict[str, Any]:
    """``queues.<queue>`` of the stored document: counters and settings, as written."""
    blob = broker.store.get(broker.key)
    assert blob is not None
    return orjson.loads(blob.data)["queues"][queue]  # type: ignore[no-any-return]


def claim_ids(broker: Broker, n: int = 10, queue: str = "q", *, lease_seconds: float | None = None) -> list[str]:
    """The ids of up to ``n`` jobs of ``queue`` a claim leases now (for ``lease_seconds``, or the policy's)."""
    op = claim_op("w", [queue], policy=broker.policy, max_jobs=n, lease_seconds=lease_seconds)
    return [job.id for job in broker.execute(op)]


def queueaction(*args: str) -> str:
    """``manage.py queueaction`` with ``args``; its output."""
    out = io.StringIO()
    call_command("queueaction", *args, stdout=out)
    return out.getvalue()


def _push(broker: Broker, queue: str, payloads: list[object], **kwargs: Any) -> Any:
    return push_op(queue, payloads, policy=broker.policy, **kwargs)


def push(broker: Broker, queue: str, payloads: list[object], **kwargs: Any) -> list[str]:
    ids: list[str] = broker.execute(_push(broker, queue, payloads, **kwargs))
    return ids


def preview(client: Client, **fields: Any) -> Any:
    """Post an action's dry run (``step=preview``)."""
    return client.post("/actions/", {"step": "preview", "next": "/jobs/", **fields})


def confirm(client: Client, token: str, *, reason: str = "r", **fields: Any) -> Any:
    """Run the dry run whose token is ``token`` (``step=run``)."""
    return client.post("/actions/", {"step": "run", "plan": token, "reason": reason, "next": "/jobs/", **fields})


def act(client: Client, *, reason: str = "r", confirm_text: str = "", next: str = "/jobs/", **fields: Any) -> Any:
    """An action as an operator takes it: the dry run, then its confirmation.
    Returns the dry run's response when it offers nothing to confirm."""
    dry = preview(client, next=next, **fields)
    plan = dry.context.get("plan") if dry.context is not None else None
    if plan is None or not plan.token:
        return dry
    return confirm(client, plan.token, reason=reason, confirm_text=confirm_text, next=next)


def make_token(name: str, **scope: Any) -> tuple[ApiToken, str]:
    """A saved database API token named ``name`` (``scope``: its ``queues``,
    ``may_push``, ``may_work``), and its secret (shown once)."""
    row = ApiToken(name=name, **scope)
    token = row.issue()
    row.save()
    return row, token


@pytest.fixture
def fresh_token_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every API request re-reads the database tokens, as a node would after
    :data:`queueadmin.api.auth.TOKEN_CACHE_SECONDS`."""
    from queueadmin.api import auth

    monkeypatch.setattr(auth, "TOKEN_CACHE_SECONDS", 0.0)
    auth.digests.clear()
    yield


def clock_ahead(monkeypatch: pytest.MonkeyPatch, ahead: timedelta) -> None:
    """The dashboard's clock (its snapshots' ``taken_at``) and this node's
    record of the workers it has seen, ``ahead`` of real time; the source
    reads afresh. The broker keeps real time."""
    from queueadmin.dashboard import source as source_module

    class Later(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
            return datetime.now(tz) + ahead

    monkeypatch.setattr(source_module, "datetime", Later)
    monkeypatch.setattr(runtime, "datetime", Later)
    source_module.source.reset()


def forms_with(page: str, text: str) -> list[dict[str, str]]:
    """The hidden fields of each action form on ``page`` whose button says ``text``."""
    found = []
    for form in re.findall(r"<form .*?</form>", page, re.S):
        if text in html.unescape(form):
            found.append(
                {
                    html.unescape(k): html.unescape(v)
                    for k, v in re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', form)
                }
            )
    return found
