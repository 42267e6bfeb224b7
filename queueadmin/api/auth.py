"""Bearer-token authentication for the broker API.

Producers and workers send ``Authorization: Bearer <QUEUE_API_TOKEN>``. A node
with no token configured refuses every authenticated call: an open queue is
never the default.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest

from queueadmin.api.errors import ApiError

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="queueadmin"'}


def check_token(request: HttpRequest) -> None:
    """Return if ``request`` carries the configured token; else raise ApiError 401.

    Compares in constant time, so the answer's timing does not reveal how
    much of a guessed token was right. No I/O.
    """
    expected: str | None = settings.QUEUE_API_TOKEN
    if not expected:
        raise ApiError(
            "unauthorized",
            "QUEUE_API_TOKEN is not set on this node, so the broker API refuses every request; "
            "set it in the environment of every node, producer and worker",
            headers=_CHALLENGE,
        )
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError("unauthorized", "send the header 'Authorization: Bearer <token>'", headers=_CHALLENGE)
    if not hmac.compare_digest(token.strip().encode(), expected.encode()):
        raise ApiError("unauthorized", "wrong token", headers=_CHALLENGE)
