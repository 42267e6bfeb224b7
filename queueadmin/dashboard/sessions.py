"""Sign-out reaches the live sockets a session opened on this node.

Each dashboard socket joins :func:`group_for` its session. Django's
``user_logged_out`` signal (sent by the "Sign out" view, in the node that
serves it) sends that group a ``session.signed_out`` message, and every
socket in it closes at once with 4401. The channel layer is in-memory, one
per process, so sockets on other nodes do not hear it: they notice when
their periodic session re-check (``consumers.RECHECK_SECONDS``) finds the
session gone.
"""

from __future__ import annotations

import hashlib
from typing import Any

from channels.layers import get_channel_layer
from django.contrib.auth.signals import user_logged_out
from django.dispatch import receiver
from django.http import HttpRequest

#: The message type; the consumer handles it in ``session_signed_out``.
SIGNED_OUT = "session.signed_out"


def group_for(session_key: str) -> str:
    """The channel-layer group of one session's sockets. A digest, so the
    session key itself never sits in the layer (a shared layer would expose it)."""
    return "session-" + hashlib.sha256(session_key.encode()).hexdigest()[:32]


@receiver(user_logged_out, dispatch_uid="queueadmin.dashboard.sessions.close_sockets")
async def close_sockets(sender: Any, request: HttpRequest | None, **kwargs: Any) -> None:
    """Tell the signed-out session's sockets on this node to close.

    Async, so Django awaits it from ``alogout`` and runs it on the server's
    event loop (through ``async_to_sync``) from the sync ``logout``. The
    session key is still set here: Django flushes the session after the signal.
    """
    session = getattr(request, "session", None)
    key = getattr(session, "session_key", None)
    layer = get_channel_layer()
    if key and layer is not None:
        await layer.group_send(group_for(key), {"type": SIGNED_OUT})
