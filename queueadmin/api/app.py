"""The broker API as its own ASGI application, served before Django.

:mod:`queueadmin.asgi` sends every HTTP request whose path is under
``/api/`` here, and everything else (the dashboard, the admin, static files)
to Django's full stack. This application does, per request, only what the
API needs, all on the event loop:

1. the ``Host`` check Django would make (:mod:`queueadmin.api.hosts`):
   ``400 disallowed_host`` for a host not in ``ALLOWED_HOSTS``;
2. the route (:mod:`queueadmin.api.urls`): ``404 not_found`` for an unknown path;
3. the endpoint (:mod:`queueadmin.api.endpoint`): its method (``405``), its
   token (``401``), then the view, which reads the body within the limit
   (``413``) and answers once its commit has landed (I1).

Every answer is JSON with a ``Content-Length``; a bug anywhere is a logged
``500 internal_error``. Nothing here uses Django's middleware or its request
signals, and nothing hops to a thread per request: only the token cache's
database read (at most once per cache window), the operator endpoint's
nonce and the document endpoint's encoding run on one, and the two database
calls close their connection themselves (:mod:`queueadmin.api.auth`,
:mod:`queueadmin.api.views`).
"""

from __future__ import annotations

import logging
import time

from queueadmin.api.errors import ApiError
from queueadmin.api.hosts import refused_host
from queueadmin.api.http import ClientGone, Receive, Request, Response, Scope, Send
from queueadmin.api.urls import router
from queueadmin.metrics import requests as metered

log = logging.getLogger(__name__)


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    """The ASGI entry point for ``http`` requests under ``/api/``. Each answer
    is counted in ``/metrics`` by route name and status (:mod:`queueadmin.metrics.requests`)."""
    started = time.perf_counter()
    try:
        request = Request(scope, receive)
    except Exception:  # a scope no server should send; still answered
        log.exception("cannot read the request scope for %r", scope.get("path"))
        name, response = "invalid", _internal_error()
    else:
        try:
            name, response = await _respond(request)
        except ClientGone:
            return  # nobody to answer; the server has dropped the connection
    await response.send(send)
    metered.observe(name, response.status_code, time.perf_counter() - started)


async def respond(request: Request) -> Response:
    """The answer to ``request``. Raises only ClientGone."""
    return (await _respond(request))[1]


async def _respond(request: Request) -> tuple[str, Response]:
    """The route's name (a bounded label for /metrics) and the answer to ``request``."""
    name = "not_found"
    try:
        refused = refused_host(request)
        if refused is not None:
            return "disallowed_host", refused.response()
        found = router.resolve(request.path)
        if found is None:
            return name, ApiError("not_found", f"no such API endpoint: {request.path}; see docs/api.md").response()
        route, parameters = found
        name = route.name
        return name, await route.endpoint(request, **parameters)
    except ClientGone:
        raise
    except Exception:  # a bug outside the endpoints' own handling: still one JSON answer (I8)
        log.exception("%s %s failed", request.method, request.path)
        return name, _internal_error()


def _internal_error() -> Response:
    return ApiError("internal_error", "the broker failed unexpectedly; see its log").response()
