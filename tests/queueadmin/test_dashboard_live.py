"""The live socket (WebsocketCommunicator) and the snapshot machinery behind it."""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.middleware.csrf import _unmask_cipher_token
from django.test import Client

from engine import Broker, DocumentError
from engine.ops import claim_op
from queueadmin.dashboard import source as source_module
from queueadmin.dashboard.snapshot import decode_document, error_signature, sortable
from tests.queueadmin.dashboard_fixtures import client_for, kill, make_user, push

ORIGIN = (b"origin", b"http://127.0.0.1:8000")
HOST = (b"host", b"127.0.0.1:8000")  # the page's own origin: what a browser sends


def run_async(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test body on a fresh event loop (the suite has no async plugin)."""

    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return wrapper


def application() -> Any:
    from queueadmin.asgi import application as app

    return app


CSRF_SECRET = "s" * 32


def cookie_for(client: Client) -> tuple[bytes, bytes]:
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}; csrftoken={CSRF_SECRET}".encode())


async def connect(path: str, *headers: tuple[bytes, bytes]) -> tuple[WebsocketCommunicator, bool, Any]:
    """Open the socket; the Host is 127.0.0.1:8000 unless ``headers`` name one."""
    if not any(name == b"host" for name, _ in headers):
        headers = (*headers, HOST)
    communicator = WebsocketCommunicator(application(), f"/ws/dashboard/?path={path}", headers=list(headers))
    connected, code = await communicator.connect(timeout=5)
    return communicator, connected, code


async def next_update(communicator: WebsocketCommunicator, timeout: float = 5.0) -> dict[str, Any]:
    """The next "update" message (ticks are skipped). A timeout fails the test
    (and, as asgiref does, cancels the consumer)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        message = await communicator.receive_json_from(timeout=max(deadline - loop.time(), 0.01))
        if message["type"] == "update":
            return message  # type: ignore[no-any-return]


@pytest.mark.django_db(transaction=True)
@run_async
async def test_a_commit_reaches_an_open_overview_as_fragments(broker: Broker) -> None:
    viewer = await sync_to_async(lambda: client_for(make_user("viewer", "view_dashboard", staff=True)))()
    communicator, connected, _ = await connect("/", cookie_for(viewer), ORIGIN)
    assert connected
    try:
        first = await next_update(communicator)
        assert set(first["fragments"]) == {"live-alerts", "live-queues", "live-broker"}
        assert "No queues yet" in first["fragments"]["live-queues"]

        await asyncio.to_thread(push, broker, "emails", [1, 2])

        update = await next_update(communicator)
        assert update["seq"] > first["seq"]
        assert 'data-row="emails"' in update["fragments"]["live-queues"]
        assert "<html" not in update["fragments"]["live-queues"]  # a fragment, not a page
    finally:
        await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
@run_async
async def test_live_forms_carry_a_masked_csrf_token_never_the_secret(broker: Broker) -> None:
    operator = await sync_to_async(lambda: client_for(make_user("op", "view_dashboard", "pause_queue")))()
    await asyncio.to_thread(push, broker, "q", [1])
    communicator, connected, _ = await connect("/", cookie_for(operator), ORIGIN)
    assert connected
    try:
        fragment = (await next_update(communicator))["fragments"]["live-queues"]
    finally:
        await communicator.disconnect()
    tokens = re.findall(r'name="csrfmiddlewaretoken" value="([^"]+)"', fragment)
    assert tokens and all(len(t) == 64 and CSRF_SECRET not in t for t in tokens)
    assert _unmask_cipher_token(tokens[0]) == CSRF_SECRET


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@run_async
async def test_bursts_of_commits_are_coalesced(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    from queueadmin.dashboard import consumers

    monkeypatch.setattr(consumers, "MIN_INTERVAL_SECONDS", 0.5)
    viewer = await sync_to_async(lambda: client_for(make_user("viewer", "view_dashboard")))()
    communicator, connected, _ = await connect("/jobs/", cookie_for(viewer), ORIGIN)
    assert connected
    try:
        await next_update(communicator)

        async def burst() -> None:
            for n in range(40):
                await asyncio.to_thread(push, broker, "q", [n])
                await asyncio.sleep(0.04)  # 40 commits spread over ~1.6 s

        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.wait_for(burst(), 10)
        # Read until the update that shows all 40 jobs: a burst is coalesced,
        # its last commit is never dropped.
        updates: list[dict[str, Any]] = []
        while not updates or "40 jobs" not in updates[-1]["fragments"]["live-jobs"]:
            message = await communicator.receive_json_from(timeout=5)
            if message["type"] == "update":
                updates.append(message)
        elapsed = loop.time() - started
        # 40 commits, but at most one message per 0.5 s reaches the page.
        assert len(updates) <= elapsed / 0.5 + 1
    finally:
        await communicator.disconnect()


async def closed_within(communicator: WebsocketCommunicator, seconds: float) -> dict[str, Any]:
    """The close message, skipping ticks and updates; fails after ``seconds``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        message = await communicator.receive_output(timeout=max(deadline - loop.time(), 0.01))
        if message["type"] == "websocket.close":
            return message  # type: ignore[no-any-return]


@pytest.mark.django_db(transaction=True)
@run_async
async def test_signing_out_on_this_node_closes_the_sessions_sockets_within_a_second(broker: Broker) -> None:
    # The periodic re-check is 15 s away: only the sign-out message can be this fast.
    viewer = await sync_to_async(lambda: client_for(make_user("viewer", "view_dashboard")))()
    other = await sync_to_async(lambda: client_for(make_user("other", "view_dashboard")))()
    first, connected, _ = await connect("/", cookie_for(viewer), ORIGIN)
    second, connected_too, _ = await connect("/jobs/", cookie_for(viewer), ORIGIN)
    bystander, bystander_connected, _ = await connect("/", cookie_for(other), ORIGIN)
    assert connected and connected_too and bystander_connected
    try:
        for communicator in (first, second, bystander):
            await next_update(communicator)
        await sync_to_async(viewer.logout)()  # Django's logout: the "Sign out" view's signal

        assert await closed_within(first, 1.0) == {"type": "websocket.close", "code": 4401}
        assert await closed_within(second, 1.0) == {"type": "websocket.close", "code": 4401}
        # Another session's socket streams on.
        await asyncio.to_thread(push, broker, "q", [1])
        assert 'data-row="q"' in (await next_update(bystander))["fragments"]["live-queues"]
    finally:
        for communicator in (first, second, bystander):
            await communicator.disconnect()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@run_async
async def test_a_session_gone_from_the_store_closes_the_socket_at_the_next_recheck(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sign-out on another node: its signal never reaches this process, the
    # session just disappears from the shared store.
    from importlib import import_module

    from django.conf import settings

    from queueadmin.dashboard import consumers

    monkeypatch.setattr(consumers, "RECHECK_SECONDS", 0.2)
    viewer = await sync_to_async(lambda: client_for(make_user("viewer", "view_dashboard")))()
    communicator, connected, _ = await connect("/", cookie_for(viewer), ORIGIN)
    assert connected
    try:
        await next_update(communicator)
        store = import_module(settings.SESSION_ENGINE).SessionStore(viewer.cookies["sessionid"].value)
        await sync_to_async(store.delete)()

        assert await closed_within(communicator, 5.0) == {"type": "websocket.close", "code": 4401}
    finally:
        await communicator.disconnect()


def test_the_recheck_closes_a_socket_of_a_session_signed_out_elsewhere_within_30_seconds() -> None:
    from queueadmin.dashboard import consumers

    # Worst case: the check falls due just after one, then waits a full pause and poll.
    assert consumers.RECHECK_SECONDS + consumers.MIN_INTERVAL_SECONDS + consumers.POLL_SECONDS < 30


@pytest.mark.django_db(transaction=True)
@run_async
async def test_an_unauthenticated_socket_is_refused(broker: Broker) -> None:
    _, connected, code = await connect("/", ORIGIN)
    assert not connected and code == 4401


@pytest.mark.django_db(transaction=True)
@run_async
async def test_a_user_without_view_permission_is_refused(broker: Broker) -> None:
    nobody = await sync_to_async(lambda: client_for(make_user("nobody")))()
    _, connected, code = await connect("/", cookie_for(nobody), ORIGIN)
    assert not connected and code == 4403


@pytest.mark.django_db(transaction=True)
@run_async
async def test_a_foreign_origin_is_refused_even_when_signed_in(broker: Broker) -> None:
    viewer = await sync_to_async(lambda: client_for(make_user("viewer", "view_dashboard")))()
    _, connected, _ = await connect("/", cookie_for(viewer), (b"origin", b"http://evil.example"))
    assert not connected


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/submit/", "/admin/", "/nowhere/", "/api/v1/health"])
@run_async
async def test_a_socket_for_a_page_that_is_not_live_is_refused(broker: Broker, path: str) -> None:
    viewer = await sync_to_async(lambda: client_for(make_user("viewer", "view_dashboard")))()
    _, connected, code = await connect(path, cookie_for(viewer), ORIGIN)
    assert not connected and code == 4404


@pytest.mark.django_db(transaction=True)
@run_async
async def test_the_job_page_socket_follows_one_job(broker: Broker) -> None:
    viewer = await sync_to_async(lambda: client_for(make_user("viewer", "view_dashboard")))()
    [job_id] = await asyncio.to_thread(push, broker, "q", [1])
    communicator, connected, _ = await connect(f"/jobs/{job_id}/", cookie_for(viewer), ORIGIN)
    assert connected
    try:
        first = await next_update(communicator)
        assert 'data-testid="job-status">pending' in first["fragments"]["live-job"]
        await asyncio.to_thread(broker.execute, claim_op("w9", ["q"], policy=broker.policy))
        update = await next_update(communicator)
        assert 'data-testid="job-status">running' in update["fragments"]["live-job"]
        assert "claimed by w9" in update["fragments"]["live-job"]
    finally:
        await communicator.disconnect()


# -- snapshots ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"{broken", "not valid JSON"),
        (b'{"format": 4, "seq": 1}', "unsupported format version"),
        (b'{"format": 1, "seq": 1, "queues": {}, "dead": [], "jobs": [{"id": "a"}]}', "jobs[0]"),
        (b'{"hello": "world"}', "not a queueadmin document"),
    ],
)
def test_decode_refuses_what_the_engine_refuses_with_its_message(data: bytes, words: str) -> None:
    with pytest.raises(DocumentError, match=words.replace("[", r"\[").replace("]", r"\]")):
        decode_document(data, etag=None, taken_at=datetime.now(UTC))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Traceback (most recent call last):\n  File x\nValueError: bad row 17", "ValueError: bad row 9"),
        ("KeyError: 'user-123'", "KeyError: 'user-456'"),
        (
            "lease expired: worker 'w1' stopped heartbeating (last at 2026-01-01T00:00:00)",
            "lease expired: worker 'w2' stopped heartbeating (last at 2026-02-02T10:11:12)",
        ),
        ("job 9f86d081884c7d65 failed", "job 2c26b46b68ffc68f failed"),
    ],
)
def test_error_signatures_group_errors_that_differ_only_in_values(a: str, b: str) -> None:
    assert error_signature(a) == error_signature(b)


def test_error_signatures_keep_different_errors_apart() -> None:
    assert error_signature("ValueError: bad row 1") != error_signature("TypeError: bad row 1")


def test_rates_cover_the_last_minute(monkeypatch: pytest.MonkeyPatch) -> None:
    src = source_module.SnapshotSource()
    clock = [1000.0]
    monkeypatch.setattr(source_module.time, "monotonic", lambda: clock[0])

    class Snap:
        def __init__(self, pushed: int, completed: int) -> None:
            q = type("Q", (), {"pushed": pushed, "completed": completed})
            self.queues = {"q": q}

    src._sample(clock[0], Snap(0, 0))  # type: ignore[arg-type]
    assert src.rates() == {}
    for t, pushed, completed in [(1030.0, 60, 30), (1070.0, 180, 90), (1090.0, 240, 100)]:
        clock[0] = t
        src._sample(t, Snap(pushed, completed))  # type: ignore[arg-type]
    rate = src.rates()["q"]
    # From the newest sample at least 60 s old (t=1030) to t=1090.
    assert (rate.arrivals, rate.completions, rate.seconds) == (180.0, 70.0, 60.0)


def test_snapshot_json_payloads_survive_as_values() -> None:
    doc = decode_document(
        orjson.dumps({"format": 1, "seq": 3, "queues": {}, "dead": [], "jobs": []}),
        etag='"e"',
        taken_at=datetime.now(UTC),
    )
    assert doc.seq == 3 and doc.etag == '"e"' and doc.queues == {}


@pytest.mark.parametrize(
    ("earlier", "later"),
    [
        ("2026-11-29T12:00:00Z", "2026-11-29T12:00:00.000001Z"),
        ("2026-11-29T11:59:59.999999Z", "2026-11-29T12:00:00Z"),
        ("2026-11-29T13:30:00+02:00", "2026-11-29T12:00:00.5Z"),
        ("2026-11-29T12:00:00.250000Z", "2026-11-29T12:00:00.250001+00:00"),
    ],
)
def test_sortable_times_sort_as_the_instants_do(earlier: str, later: str) -> None:
    assert sortable(earlier) < sortable(later)
    assert datetime.fromisoformat(sortable(earlier)) == datetime.fromisoformat(earlier)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("origin", "host"),
    [
        (b"http://localhost:1", b"localhost:8000"),  # an allowed host on another port (issue 9, 10a)
        (b"http://127.0.0.1:1", b"127.0.0.1:8000"),
        (b"http://127.0.0.1", b"127.0.0.1:8000"),
        (b"https://127.0.0.1:8000", b"127.0.0.1:8000"),  # another scheme
        (b"http://localhost:8000", b"127.0.0.1:8000"),  # another (allowed) host
        (b"http://evil.example:8000", b"evil.example:8000"),  # the same, but a host not in ALLOWED_HOSTS
        (b"null", b"127.0.0.1:8000"),
    ],
)
@run_async
async def test_only_the_pages_own_origin_may_open_the_socket(broker: Broker, origin: bytes, host: bytes) -> None:
    viewer = await sync_to_async(lambda: client_for(make_user("viewer", "view_dashboard")))()
    _, connected, _ = await connect("/", cookie_for(viewer), (b"origin", origin), (b"host", host))
    assert not connected


@pytest.mark.django_db(transaction=True)
@run_async
async def test_the_same_origin_on_its_own_port_and_a_trusted_origin_may_connect(broker: Broker, settings: Any) -> None:
    viewer = await sync_to_async(lambda: client_for(make_user("viewer", "view_dashboard")))()
    for origin, host in [(b"http://localhost:8123", b"localhost:8123"), (b"HTTP://127.0.0.1:8000", b"127.0.0.1:8000")]:
        communicator, connected, _ = await connect("/", cookie_for(viewer), (b"origin", origin), (b"host", host))
        assert connected, origin
        await communicator.disconnect()
    # Behind a TLS-terminating proxy the page is https, the socket reaches daphne as ws.
    settings.CSRF_TRUSTED_ORIGINS = ["https://queue.example.com"]
    settings.ALLOWED_HOSTS = ["queue.example.com"]
    communicator, connected, _ = await connect(
        "/", cookie_for(viewer), (b"origin", b"https://queue.example.com"), (b"host", b"queue.example.com")
    )
    assert connected
    await communicator.disconnect()
    _, connected, _ = await connect(
        "/", cookie_for(viewer), (b"origin", b"https://queue.example.com:444"), (b"host", b"queue.example.com")
    )
    assert not connected


@pytest.mark.django_db(transaction=True)
@run_async
async def test_a_handshake_without_a_host_is_refused(broker: Broker) -> None:
    from channels.testing import WebsocketCommunicator

    viewer = await sync_to_async(lambda: client_for(make_user("viewer", "view_dashboard")))()
    communicator = WebsocketCommunicator(application(), "/ws/dashboard/?path=/", headers=[cookie_for(viewer), ORIGIN])
    connected, _ = await communicator.connect(timeout=5)
    assert not connected


@pytest.mark.django_db(transaction=True)
@run_async
async def test_an_unchanged_document_still_ages_on_an_open_page(broker: Broker, settings: Any) -> None:
    """A standby whose leader died reads the same version again and again: the
    page must show the last commit growing old and, past three heartbeats,
    warn that the leader may be down (it once froze at the age of the read)."""
    await asyncio.to_thread(push, broker, "emails", [1])
    settings.QUEUE_HEARTBEAT_SECONDS = 0.2  # the node's own broker will not commit again for 120 s
    viewer = await sync_to_async(lambda: client_for(make_user("viewer", "view_dashboard", staff=True)))()
    communicator, connected, _ = await connect("/", cookie_for(viewer), ORIGIN)
    assert connected
    try:
        first = await next_update(communicator)
        later = await next_update(communicator, timeout=5)  # no commit happened in between
        assert later["seq"] == first["seq"]
        assert "No commit for" in later["fragments"]["live-alerts"]
        assert 'class="bad"' in later["fragments"]["live-broker"]
    finally:
        await communicator.disconnect()


def test_the_source_stamps_an_unchanged_version_with_the_time_it_was_read(broker: Broker) -> None:
    push(broker, "emails", [1, 2])
    first = source_module.source.current(fresh_seconds=0)
    first.job(first.jobs[0]["id"])  # fills the by-id lookup
    again = source_module.source.current(fresh_seconds=0)
    assert again.etag == first.etag and again.seq == first.seq
    assert again.taken_at > first.taken_at
    assert again.job(first.jobs[0]["id"]) == first.job(first.jobs[0]["id"])
    assert again._by_id is first._by_id  # the lookups of an unchanged version are not rebuilt


async def viewer_and_trusted() -> list[tuple[Client, bool]]:
    """A viewer, who may not see secrets, and a user who may: each with whether it sees them."""
    viewer = await sync_to_async(lambda: client_for(make_user("viewer", "view_dashboard")))()
    trusted = await sync_to_async(lambda: client_for(make_user("trusted", "view_dashboard",
                                                               "view_payload_secrets")))()
    return [(viewer, False), (trusted, True)]


async def first_fragments(path: str, client: Client) -> str:
    """The first live update of ``path`` for ``client``, its fragments joined."""
    communicator, connected, _ = await connect(path, cookie_for(client), ORIGIN)
    assert connected
    try:
        return "".join((await next_update(communicator))["fragments"].values())
    finally:
        await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
@run_async
async def test_live_fragments_hide_secret_payload_values_from_a_viewer(broker: Broker) -> None:
    [job_id] = await asyncio.to_thread(push, broker, "q", [{"to": "ada", "token": "tokTOPSECRET"}])
    for client, shown in await viewer_and_trusted():
        # The jobs list's rows are live (the job page's payload is not in its live part).
        fragments = await first_fragments("/jobs/?queue=q", client)
        assert job_id in fragments and "ada" in fragments and ("tokTOPSECRET" in fragments) is shown, shown


@pytest.mark.django_db(transaction=True)
@run_async
async def test_live_fragments_hide_secret_values_of_error_texts_from_a_viewer(broker: Broker) -> None:
    job_id = await asyncio.to_thread(kill, broker, "q", error="HTTPError: 401 for ?api_key=keyTOPSECRET&n=1")
    for client, shown in await viewer_and_trusted():
        for path in (f"/jobs/{job_id}/", "/dead/"):
            fragments = await first_fragments(path, client)
            assert "HTTPError" in fragments and ("keyTOPSECRET" in fragments) is shown, (path, shown)
