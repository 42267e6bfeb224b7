"""The wrapper every API view shares: method check, token, errors as JSON.

Whatever goes wrong inside an endpoint, the client gets JSON with a stable
``error`` code, never one of Django's HTML error pages: refused requests as
:class:`~queueadmin.api.errors.ApiError`, engine errors mapped by their code,
and bugs as ``500 internal_error`` (logged with their traceback).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from engine import EngineError
from queueadmin import runtime
from queueadmin.api.auth import check_token
from queueadmin.api.errors import ApiError, from_engine

log = logging.getLogger(__name__)

# Coroutine, not Awaitable: django-stubs' path() accepts an async view only as
# a function that returns a coroutine.
View = Callable[..., Coroutine[Any, Any, HttpResponse]]


def endpoint(*methods: str, token: bool = True) -> Callable[[View], View]:
    """Make an async view an API endpoint that answers only ``methods``.

    With ``token`` (the default) the request must carry the bearer token
    (checked after the method, before the view runs). CSRF checks are off:
    the API authenticates with a header, never with cookies. The view gets
    the attributes ``api_methods`` and ``api_token``, so that the server can
    refuse a request for it before reading the body (:mod:`queueadmin.edge`).
    """
    allowed = ", ".join(methods)

    def decorate(view: View) -> View:
        @functools.wraps(view)
        async def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                if request.method not in methods:
                    raise ApiError(
                        "method_not_allowed",
                        f"{request.method} is not allowed on {request.path}; use {allowed}",
                        headers={"Allow": allowed},
                    )
                if token:
                    await check_token(request)
                return await view(request, *args, **kwargs)
            except ApiError as exc:
                return exc.response()
            except EngineError as exc:
                error = from_engine(exc, leader_url=_leader_url())
                if error.status >= 500:
                    log.warning("%s %s: %s", request.method, request.path, exc)
                return error.response()
            except Exception:
                log.exception("%s %s failed", request.method, request.path)
                return ApiError("internal_error", "the broker failed unexpectedly; see its log").response()

        # What queueadmin.edge reads to refuse a request before its body is read.
        wrapper.api_methods = methods  # type: ignore[attr-defined]
        wrapper.api_token = token  # type: ignore[attr-defined]
        return csrf_exempt(wrapper)

    return decorate


def _leader_url() -> str | None:
    try:
        return runtime.get_broker().leader_url
    except Exception:  # only used to enrich an error; never fail the error itself
        return None
