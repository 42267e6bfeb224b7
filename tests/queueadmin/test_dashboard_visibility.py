"""Queue scopes that hide the other queues (``QueueScope.hide_others``):
the dashboard shows a confined user only the queues their patterns match,
as if the others did not exist, page by page and in the live fragments; a
scope without it, and a superuser, see every queue as before. The crawl of
every link is in tests/fuzz/test_fuzz_visibility.py."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Group, User
from django.test import Client

from engine import Broker
from queueadmin.dashboard.scopes import visibility
from queueadmin.dashboard.source import source
from queueadmin.history.records import FinishedJob
from queueadmin.models import QueueScope
from tests.queueadmin.dashboard_fixtures import client_for, kill, make_user, push
from tests.queueadmin.test_dashboard_live import ORIGIN, closed_within, connect, cookie_for, next_update, run_async

pytestmark = pytest.mark.django_db

HIDDEN = "hrpayroll"


def confined(name: str = "billing-ops", *, hide: bool = True) -> User:
    """An operator in a group whose scope is ``billing-*``, hiding the others unless ``hide`` is false."""
    user = make_user(name, "view_dashboard", "requeue_job", "purge_job", "submit_job")
    team, _ = Group.objects.get_or_create(name=f"billing team {hide}")
    QueueScope.objects.get_or_create(group=team, pattern="billing-*", hide_others=hide)
    user.groups.add(team)
    return user


@pytest.fixture
def jobs(broker: Broker) -> dict[str, str]:
    """A pending job in billing-eu and in the hidden queue, and a dead one in the hidden queue."""
    [ours] = push(broker, "billing-eu", [{"n": 1}])
    [theirs] = push(broker, HIDDEN, [{"salary": 1}])
    dead = kill(broker, HIDDEN, error="boom in payroll")
    source.reset()
    return {"ours": ours, "theirs": theirs, "dead": dead}


def test_the_submit_form_suggests_a_confined_user_their_queues_only(jobs: dict[str, str]) -> None:
    page = client_for(confined()).get("/submit/")
    assert page.context["form"].queue_names == ["billing-eu"]
    assert '<option value="billing-eu">' in page.content.decode() and HIDDEN not in page.content.decode()
    # The one queue they see is not named "default": the form names none rather than make a queue.
    assert page.context["form"]["queue"].value() == ""


def test_a_confined_user_sees_only_their_queues(jobs: dict[str, str]) -> None:
    client = client_for(confined())
    for path in ("/", "/jobs/", "/dead/", "/workers/", "/audit/"):
        page = client.get(path)
        assert page.status_code == 200 and HIDDEN not in page.content.decode(), path
    assert "billing-eu" in client.get("/").content.decode()
    listing = client.get("/jobs/")
    assert [row["job"]["id"] for row in listing.context["rows"]] == [jobs["ours"]]
    assert client.get("/jobs/", {"queue": HIDDEN}).context["total"] == 0
    assert client.get(f"/queues/{HIDDEN}/").status_code == 404
    assert client.get("/document/").status_code == 404  # it prints every queue
    assert client.get("/document/queue.json").status_code == 404  # and so does its download
    assert client.get(f"/jobs/{jobs['theirs']}/payload.json").status_code == 404
    page = client.get(f"/jobs/{jobs['dead']}/")
    assert page.context["found"] is False and "salary" not in page.content.decode()
    clone = client.get("/submit/", {"from": jobs["theirs"]}).content.decode()
    assert "cannot be cloned" in clone and "salary" not in clone


def test_a_scope_that_does_not_hide_and_a_superuser_see_every_queue(jobs: dict[str, str],
                                                                    admin_client_: Client) -> None:
    for client in (client_for(confined("acting-only", hide=False)), admin_client_):
        assert HIDDEN in client.get("/").content.decode()
        assert client.get(f"/queues/{HIDDEN}/").status_code == 200
        assert client.get(f"/jobs/{jobs['theirs']}/").context["found"] is True


def test_the_hidden_queues_audit_entries_and_finished_jobs_are_left_out(jobs: dict[str, str],
                                                                         admin_client_: Client) -> None:
    dry = admin_client_.post("/actions/", {"step": "preview", "action": "purge", "ids": jobs["dead"], "next": "/"})
    admin_client_.post("/actions/", {"step": "run", "plan": dry.context["plan"].token, "reason": "payroll reset",
                                     "next": "/"})
    now = datetime.now(UTC)
    FinishedJob.objects.create(job_id="done-hr", queue=HIDDEN, payload='{"salary": 2}', payload_bytes=13,
                               how="completed", finished_at=now, was="running",
                               enqueued_at=now - timedelta(seconds=5), attempts=1, max_attempts=3)
    assert "payroll reset" in admin_client_.get("/audit/").content.decode()
    client = client_for(confined())
    assert "payroll reset" not in client.get("/audit/").content.decode()
    exported = orjson.loads(b"".join(client.get("/audit/export/", {"format": "json"}).streaming_content))
    assert exported == []
    page = client.get("/jobs/done-hr/")
    assert page.context["finished"] is None and "salary" not in page.content.decode()
    assert admin_client_.get("/jobs/done-hr/").context["finished"] is not None


def test_visibility_is_one_query_per_user_object(django_assert_num_queries: Any) -> None:
    user = User.objects.get(pk=confined().pk)
    with django_assert_num_queries(1):
        sees = visibility(user)
        assert visibility(user) is sees
    assert sees is not None and sees("billing-eu") and sees("billing-us") and not sees(HIDDEN)
    assert visibility(make_user("no-scope", "view_dashboard")) is None


@pytest.mark.django_db(transaction=True)
@run_async
async def test_live_sockets_draw_only_the_visible_queues(broker: Broker) -> None:
    await asyncio.to_thread(push, broker, "billing-eu", [{"n": 1}])
    await asyncio.to_thread(push, broker, HIDDEN, [{"salary": 1}])
    client = await sync_to_async(lambda: client_for(confined()))()
    _, connected, code = await connect(f"/queues/{HIDDEN}/", cookie_for(client), ORIGIN)
    assert not connected and code == 4404
    communicator, connected, _ = await connect("/jobs/", cookie_for(client), ORIGIN)
    assert connected
    try:
        fragments = "".join((await next_update(communicator))["fragments"].values())
    finally:
        await communicator.disconnect()
    assert "billing-eu" in fragments and HIDDEN not in fragments and "salary" not in fragments


@pytest.mark.django_db(transaction=True)
@run_async
async def test_an_open_socket_on_a_queue_a_narrowed_scope_hides_is_closed_at_the_recheck(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """The queue page's charts come from the history by the queue's name, not
    from the document: a socket left open on it after its user's scope came
    to hide the queue must close, not keep drawing them."""
    from queueadmin.dashboard import consumers

    monkeypatch.setattr(consumers, "RECHECK_SECONDS", 0.2)
    await asyncio.to_thread(push, broker, HIDDEN, [{"salary": 1}])
    client = await sync_to_async(lambda: client_for(confined(hide=False)))()
    communicator, connected, _ = await connect(f"/queues/{HIDDEN}/", cookie_for(client), ORIGIN)
    assert connected
    try:
        await next_update(communicator)
        await sync_to_async(QueueScope.objects.update)(hide_others=True)
        assert await closed_within(communicator, 5.0) == {"type": "websocket.close", "code": 4404}
    finally:
        await communicator.disconnect()
