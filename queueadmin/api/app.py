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

from queueadmin.api.errors import ApiError
from queueadmin.api.hosts import refused_host
from queueadmin.api.http import ClientGone, Receive, Request, Response, Scope, Send
from queueadmin.api.urls import router

log = logging.getLogger(__name__)


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    """The ASGI entry point for ``http`` requests under ``/api/``."""
    try:
        request = Request(scope, receive)
    except Exception:  # a scope no server should send; still answered
        log.exception("cannot read the request scope for %r", scope.get("path"))
        response = _internal_error()
    else:
        try:
            response = await respond(request)
        except ClientGone:
            return  # nobody to answer; the server has dropped the connection
    await response.send(send)


async def respond(request: Request) -> Response:
    """The answer to ``request``. Raises only ClientGone."""
    try:
        refused = refused_host(request)
        if refused is not None:
            return refused.response()
        found = router.resolve(request.path)
        if found is None:
            return ApiError("not_found", f"no such API endpoint: {request.path}; see docs/api.md").response()
        route, parameters = found
        return await route.endpoint(request, **parameters)
    except ClientGone:
        raise
    except Exception:  # a bug outside the endpoints' own handling: still one JSON answer (I8)
        log.exception("%s %s failed", request.method, request.path)
        return _internal_error()


def _internal_error() -> Response:
    return ApiError("internal_error", "the broker failed unexpectedly; see its log").response()
