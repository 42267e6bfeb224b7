"""Fuzzing what a user whose queue scope hides the other queues can read
(``QueueScope.hide_others``, queueadmin.dashboard.scopes.visibility).

Each example makes jobs in a queue the user sees (``billing-eu``) and in one
hidden from them (``hrpayroll``), in random fates: pending, running, dead,
finished (a record of the finished jobs), purged by an operator (an audit
entry); and a schedule pushing to each queue. The user then crawls the
dashboard as a browser would: every same-site link of every page it
reaches, plus every hidden job's page, download and clone, the hidden
queue's page, and searches and filters naming it. Nothing it is sent may
name the hidden queue, its jobs or its schedule; the superuser's crawl of
the same pages does.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import Broker, Policy, schedule
from engine.ops import claim_op, fail_op, push_op
from queueadmin.history.records import FinishedJob
from queueadmin.models import AuditEntry, QueueScope
from tests.fuzz.nodes import Nodes
from tests.fuzz.pages import crawl
from tests.fuzz.profiles import scaled

SEEN, HIDDEN = "billing-eu", "hrpayroll"
SCHEDULES = [schedule("billing-hourly", queue=SEEN, payload={"n": 1}, policy=Policy(), every_seconds=3600),
             schedule("hrpayrollmonthly", queue=HIDDEN, payload={"n": 1}, policy=Policy(), every_seconds=3600)]

#: What only the hidden queue's jobs, errors and audit entries carry: a page
#: may echo the hidden queue's name from the user's own query, never this.
MARK = "Hx7SECRETQUEUE"


def mark(queue: str) -> str:
    return MARK if queue == HIDDEN else "plain"


def echoes(path: str) -> list[str]:
    """What the page at ``path`` may show because the user typed it: the
    parts of its path (a job's id) and its query's values."""
    parts = urlsplit(path)
    return [*(p for p in parts.path.split("/") if p), *(v for vs in parse_qs(parts.query).values() for v in vs)]


fates = st.sampled_from(["pending", "running", "dead", "finished", "purged"])


@pytest.fixture
def confined(db: None) -> Client:
    """An operator with every permission whose scope hides every queue but ``billing-*``."""
    user = User.objects.create_user("fuzz-confined", "confined@example.com", "pw")
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="queueadmin"))
    QueueScope.objects.create(user=user, pattern="billing-*", hide_others=True)
    client = Client()
    client.force_login(user)
    return client


def build(broker: Broker, jobs: list[tuple[str, str]]) -> dict[str, str]:
    """Make ``jobs`` (queue, fate); their queues, by id."""
    policy = broker.policy
    ids: dict[str, str] = {}
    now = datetime.now(UTC)
    FinishedJob.objects.all().delete()  # the database outlives the example: start each afresh
    AuditEntry.objects.all().delete()
    for i, (queue, fate) in enumerate(sorted(jobs, key=lambda j: j[1] == "pending")):
        job_id = f"job{i:03d}x"  # no id is a part of another
        ids[job_id] = queue
        if fate in ("finished", "purged"):
            FinishedJob.objects.create(job_id=job_id, queue=queue, payload=f'{{"m": "{mark(queue)}"}}', payload_bytes=8,
                                       how="completed" if fate == "finished" else "purged", finished_at=now,
                                       was="running", enqueued_at=now - timedelta(seconds=5), attempts=1,
                                       max_attempts=1)
            if fate == "purged":
                entry = AuditEntry.objects.create(username="root", action="purge", reason=f"purge {mark(queue)}",
                                                  queue=queue, target="selected jobs", outcome="ok")
                entry.jobs.create(job_id=job_id)
            continue
        broker.execute(push_op(queue, [{"n": i, "m": mark(queue)}], policy=policy, ids=[job_id], max_attempts=1))
        if fate != "pending":
            [claimed] = broker.execute(claim_op(f"w-{queue}", [queue], policy=policy))
            if fate == "dead":
                broker.execute(fail_op(job_id, claimed.lease, error=f"boom {mark(queue)}", retry_in_seconds=None,
                                       policy=policy))
    return ids


@settings(max_examples=scaled(12))
@given(jobs=st.lists(st.tuples(st.sampled_from([SEEN, HIDDEN]), fates), min_size=1, max_size=6))
def test_a_confined_user_never_reads_a_hidden_queue(nodes: Nodes, confined: Client, operator_client: Client,
                                                    jobs: list[tuple[str, str]], monkeypatch: Any) -> None:
    with nodes.fresh() as broker:
        monkeypatch.setattr(broker, "schedules", SCHEDULES)
        ids = build(broker, jobs)
        starts = ["/", "/jobs/", "/dead/", "/workers/", "/schedules/", "/audit/", "/audit/export/?format=json",
                  "/document/", f"/queues/{SEEN}/", f"/queues/{HIDDEN}/", "/jobs/?" + urlencode({"queue": HIDDEN}),
                  "/jobs/?" + urlencode({"q": "n"}), "/audit/?" + urlencode({"job": "job000x"}),
                  "/submit/?" + urlencode({"schedule": SCHEDULES[1].name})]
        for job_id in ids:
            starts += [f"/jobs/{job_id}/", f"/jobs/{job_id}/payload.json", "/submit/?" + urlencode({"from": job_id})]
        shown = crawl(confined, starts, limit=100)
        # A page may repeat what the user asked for (its URL, a filter's
        # value); nothing else may name the queue or one of its jobs.
        hidden = [HIDDEN, *(job_id for job_id, queue in ids.items() if queue == HIDDEN)]
        leaks = {path for path, text in shown.items()
                 if MARK in text or any(name in functools.reduce(lambda t, e: t.replace(e, ""),
                                                                 [path, *echoes(path)], text) for name in hidden)}
        assert not leaks, f"the confined user read of {HIDDEN} on {sorted(leaks)}"
        if any(queue == SEEN for queue, _ in jobs):
            assert any(SEEN in text for text in shown.values())
        # The superuser sees the hidden queue on the same pages: they do show it.
        assert any(HIDDEN in text for text in crawl(operator_client, starts[:7]).values())
