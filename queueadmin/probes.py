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

A leader that cannot read a queue's next segment object (format 2, I6)
stays ready: its other queues, and that queue's pushes and front, carry on,
and another node would find the same object. ``/readyz`` then adds
``segment_problems`` (see :func:`segment_problems`), and so do
``/api/v1/health`` and a banner on every dashboard page.

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


def segment_problems() -> list[dict[str, str]]:
    """This node's :attr:`Broker.segment_problems <engine.Broker.segment_problems>`
    as ``[{"queue", "object", "message"}]``, by queue: which queue stops at
    which segment object, and why. Empty unless this node leads and one of
    its queues cannot read its next segment. No I/O."""
    found = []
    for queue, message in sorted(runtime.get_broker().segment_problems.items()):
        # SegmentUnreadable's message: "segment <key>: <problem>; ..." (keys hold no ": ").
        head = message.removeprefix("segment ")
        found.append({"queue": queue, "object": head.split(": ", 1)[0] if head != message else "",
                      "message": message})
    return found


def readiness_json() -> tuple[int, dict[str, Any]]:
    """The status and body of ``/readyz`` for this node now."""
    readiness = runtime.get_broker().readiness()
    body: dict[str, Any] = {"ready": readiness.ready, "role": readiness.role}
    if readiness.store_age_seconds is not None:
        body["store_age_seconds"] = round(readiness.store_age_seconds, 3)
    if not readiness.ready:
        body["reason"] = readiness.reason
        body["message"] = readiness.message
    problems = segment_problems()
    if problems:
        body["segment_problems"] = problems
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
