"""Fuzzing the live dashboard socket's Origin check (defect 10a).

A signed-in operator's browser opens ``/ws/dashboard/`` from the page it is
on; any other page (another site, another port on the same host, another
scheme) must be refused, since the socket carries the operator's session.
Property: the handshake is accepted when ``Origin`` is the page's own origin,
``http://`` plus the ``Host`` the browser sent, and refused for any other.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fuzz.nodes import Nodes
from tests.fuzz.profiles import scaled

HOST = "127.0.0.1:8000"
OWN = f"http://{HOST}"

origins = st.one_of(
    st.just(OWN),
    st.builds(lambda scheme, host, port: f"{scheme}://{host}{port}",
              st.sampled_from(["http", "https", "ws", "file", "HTTP"]),
              st.sampled_from(["127.0.0.1", "localhost", "evil.example", "127.0.0.1.evil.example", "[::1]", ""]),
              st.sampled_from([":8000", ":1", "", ":80", ":443", ":08000", ":8000/"])),
    st.sampled_from(["null", "", " ", "http://127.0.0.1:8000 http://evil.example", "http://user@127.0.0.1:8000"]),
)


async def _handshake(origin: str, cookie: bytes) -> bool:
    from queueadmin.asgi import application

    headers = [(b"host", HOST.encode()), (b"cookie", cookie), (b"origin", origin.encode("latin-1"))]
    communicator = WebsocketCommunicator(application, "/ws/dashboard/?path=/", headers=headers)
    try:
        connected, _ = await communicator.connect(timeout=5)
    finally:
        await communicator.disconnect()
    return bool(connected)


@pytest.mark.django_db(transaction=True)
@settings(max_examples=scaled(30))
@given(origin=origins)
def test_only_the_pages_own_origin_opens_the_socket(nodes: Nodes, origin: str) -> None:
    user, _ = User.objects.get_or_create(username="fuzz-ws", defaults={"is_superuser": True, "is_staff": True})
    client = Client()
    client.force_login(user)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    with nodes.fresh():
        connected = asyncio.run(_handshake(origin, cookie))
    if origin == OWN:
        assert connected, f"the page's own origin {origin!r} was refused"
    elif not _same_origin(origin):
        assert not connected, f"Origin {origin!r} with Host {HOST!r}: a foreign page's socket was accepted"


def _same_origin(origin: str) -> bool:
    """The page's origin, spelled some other way a browser would not (``HTTP://``, ``:08000``): either answer goes."""
    try:
        parts = urlsplit(origin)
        return parts.scheme.lower() == "http" and parts.hostname == "127.0.0.1" and parts.port == 8000
    except ValueError:
        return False
