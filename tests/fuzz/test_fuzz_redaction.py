"""Fuzzing what a read-only viewer can read of secret payload values
(queueadmin.dashboard.redaction): not only the pages we thought of.

Each example pushes jobs whose payloads hold a marked secret under a
secret-looking key (in any spelling: ``apiKey``, ``API-KEY``,
``db_password``), at a random depth, beside ordinary values; some jobs are
claimed, some failed (retrying, or into the dead letters) with an error
text that holds a marked secret as real errors do (a URL's password or
``api_key``, ``password=…``, a header), some are Django tasks. A viewer
with only ``view_dashboard`` then crawls the dashboard as a browser would:
every same-site link of every page it reaches (pages, filters, sorts, job
pages, downloads, clones), plus payload searches for pieces of the secret.
The mark must never appear in anything it is sent, while the superuser's
crawl of the same pages does show it (so the crawl reaches the payloads).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import Broker
from engine.ops import claim_op, fail_op, push_op
from queueadmin.tasks.payload import task_payload
from tests.e2e import sample_tasks
from tests.fuzz.nodes import Nodes
from tests.fuzz.pages import crawl
from tests.fuzz.profiles import scaled

MARK = "Zq9MARK"

secret_keys = st.sampled_from(["password", "apiKey", "API-KEY", "db_password", "client_secret", "accessToken",
                               "Authorization", "card_number", "sessionId"])
plain_keys = st.sampled_from(["to", "n", "author", "note", "items"])
plain_values = st.one_of(st.integers(-1000, 1000), st.text(alphabet="abcxyz ", max_size=8), st.none())


@st.composite
def payloads(draw: st.DrawFn) -> tuple[Any, str]:
    """A payload with a marked secret under a secret key, some levels down, and the secret."""
    secret = MARK + draw(st.text(alphabet="0123456789abcdef", min_size=1, max_size=6))
    value: Any = draw(st.sampled_from([secret, [secret], {"inner": secret}]))
    node: Any = {draw(secret_keys): value}
    for _ in range(draw(st.integers(0, 3))):
        node = {draw(plain_keys): node} if draw(st.booleans()) else [node]
    extra = draw(st.dictionaries(plain_keys, plain_values, max_size=2))
    return ({**extra, "job": node} if draw(st.booleans()) else node), secret


fates = st.sampled_from(["pending", "running", "retrying", "dead"])
#: Error texts as libraries write them, each with a secret (``{s}``) in it.
error_texts = st.sampled_from([
    "requests.exceptions.HTTPError: 401 Client Error for url: https://api.example.com/v1/charge?api_key={s}&n=2",
    'psycopg.OperationalError: connection to "postgres://app:{s}@db:5432/shop" failed',
    "KeyError: password={s}, user=ada",
    "ValueError: bad config {{'client_secret': '{s}', 'retries': 3}}",
    'Traceback (most recent call last):\n  File "/app/pay.py", line 3, in charge\n    post(url, headers)\n'
    "RuntimeError: refused with Authorization: Bearer {s}",
    # A frame without source (code run from a string, a C extension): the exception's line comes right after it.
    'Traceback (most recent call last):\n  File "<string>", line 1, in <module>\nRuntimeError: password={s}',
])


@pytest.fixture
def viewer(db: None) -> Client:
    user = User.objects.create_user("fuzz-viewer", "viewer@example.com", "pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(content_type__app_label="queueadmin", codename="view_dashboard"))
    client = Client()
    client.force_login(user)
    return client


def build(broker: Broker, jobs: list[tuple[tuple[Any, str], str, str]]) -> tuple[list[str], set[str]]:
    """The jobs' ids, and the secrets their error texts hold."""
    policy = broker.policy
    ids, secrets = [], set()
    for i, ((payload, _), fate, error) in enumerate(sorted(jobs, key=lambda j: j[1] == "pending")):
        job_id = f"j{i}"
        broker.execute(push_op("q", [payload], policy=policy, ids=[job_id], max_attempts=1 if fate == "dead" else 3))
        if fate != "pending":
            [claimed] = broker.execute(claim_op("w-fuzz", ["q"], policy=policy))
            if fate in ("dead", "retrying"):
                secret = f"{MARK}err{i}"
                secrets.add(secret)
                broker.execute(fail_op(job_id, claimed.lease, error=error.format(s=secret), retry_in_seconds=3600,
                                       policy=policy))
        ids.append(job_id)
    return ids, secrets


@settings(max_examples=scaled(12))
@given(jobs=st.lists(st.tuples(payloads(), fates, error_texts), min_size=1, max_size=4), task=st.booleans())
def test_a_viewer_never_reads_a_secret_value(nodes: Nodes, viewer: Client, operator_client: Client,
                                             jobs: list[tuple[tuple[Any, str], str, str]], task: bool) -> None:
    # The whole secrets are looked for, not the mark: a search for a piece of
    # one echoes the viewer's own words in the search box.
    secrets = {secret for (_, secret), _, _ in jobs}
    with nodes.fresh() as broker:
        ids, error_secrets = build(broker, jobs)
        secrets |= error_secrets
        if task:  # a Django task's job, its secret in a keyword argument
            secrets.add(MARK + "task")
            payload = task_payload(sample_tasks.echo, ["plain"], {"token": MARK + "task"}, backend="default")
            broker.execute(push_op("q", [payload], policy=broker.policy, ids=["task-job"]))
            ids.append("task-job")
        starts = ["/", "/jobs/", "/jobs/?queue=q", "/dead/", "/workers/", "/document/", "/audit/"]
        for job_id in ids:
            starts += [f"/jobs/{job_id}/", f"/jobs/{job_id}/payload.json", "/submit/?" + urlencode({"from": job_id})]
        starts += ["/jobs/?" + urlencode({"q": piece}) for piece in (MARK, MARK[:4], "MARK")]
        shown = crawl(viewer, starts)
        leaks = {path for path, text in shown.items() if any(secret in text for secret in secrets)}
        assert not leaks, f"the viewer read a secret on {sorted(leaks)}"
        assert {urlsplit(p).path for p in shown} >= {f"/jobs/{job_id}/" for job_id in ids}
        # The same crawl as the superuser shows the secrets: the pages do reach the payloads.
        seen = crawl(operator_client, starts[:8])
        assert any(secret in text for text in seen.values() for secret in secrets)
        assert all(any(secret in text for text in seen.values()) for secret in error_secrets)
