"""``GET /livez`` and ``GET /readyz``: health probes for orchestrators and
load balancers, served before Django (like the API, see
:mod:`queueadmin.asgi`), with no token and no ``Host`` check, since a
probe comes from the platform (a kubelet asks by pod IP), not from users.

* ``/livez`` — 200 ``{"status": "ok"}`` while the process serves requests:
  its event loop answers. Restart the node when it fails.
* ``/readyz`` — 200 when the node leads, or stands by and reached the store
  within the takeover interval; 503 otherwise, with the reason
  (``stopped``, ``starting``, ``document_missing``, ``document_unreadable``,
  ``store_unreachable``; see :mod:`engine.readiness`). Send traffic only to
  ready nodes. A ready standby answers API calls ``503 not_leader`` with the
  leader's URL, which clients follow, and forwards operator actions, so
  every ready node can take traffic.

Both answer ``GET`` and ``HEAD`` (no body), and ``405`` to anything else.
Neither does I/O: readiness is what the broker's control loop last saw.
"""

from __future__ import annotations

from typing import Any

from queueadmin import runtime
from queueadmin.api.errors import ApiError, json_response
from queueadmin.api.http import Receive, Scope, Send

LIVEZ = "/livez"
READYZ = "/readyz"
PATHS = frozenset({LIVEZ, READYZ})
METHODS = ("GET", "HEAD")


def readiness_json() -> tuple[int, dict[str, Any]]:
    """The status and body of ``/readyz`` for this node now."""
    readiness = runtime.get_broker().readiness()
    body: dict[str, Any] = {"ready": readiness.ready, "role": readiness.role}
    if readiness.store_age_seconds is not None:
        body["store_age_seconds"] = round(readiness.store_age_seconds, 3)
    if not readiness.ready:
        body["reason"] = readiness.reason
        body["message"] = readiness.message
    return (200 if readiness.ready else 503), body


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    """The ASGI entry point for ``http`` requests to a path in :data:`PATHS`."""
    method = scope["method"]
    if method not in METHODS:
        response = ApiError("method_not_allowed", f"{scope['path']} answers GET and HEAD, not {method}",
                            headers={"Allow": ", ".join(METHODS)}).response()
    elif scope["path"] == LIVEZ:
        response = json_response({"status": "ok"})
    else:
        status, body = readiness_json()
        response = json_response(body, status=status)
    if method == "HEAD":
        # The GET answer's headers (its Content-Length included), no body.
        await send({"type": "http.response.start", "status": response.status_code,
                    "headers": response.raw_headers()})
        await send({"type": "http.response.body", "body": b""})
        return
    await response.send(send)
