"""The wrapper every API endpoint shares: method check, token, errors as JSON.

Whatever goes wrong inside an endpoint, the client gets JSON with a stable
``error`` code: refused requests as
:class:`~queueadmin.api.errors.ApiError`, engine errors mapped by their code,
and bugs as ``500 internal_error`` (logged with their traceback).

An endpoint is an async function ``view(request, **parameters) ->
Response`` (:mod:`queueadmin.api.http`), decorated with :func:`endpoint`;
the route table (:mod:`queueadmin.api.urls`) maps paths to endpoints.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from engine import EngineError
from queueadmin import runtime
from queueadmin.api.auth import check_token
from queueadmin.api.errors import ApiError, from_engine
from queueadmin.api.grants import Call
from queueadmin.api.http import ClientGone, Request, Response

log = logging.getLogger(__name__)

View = Callable[..., Awaitable[Response]]


class Endpoint:
    """An API view with the methods it answers, whether it needs the token,
    and the call it makes as a token's scope counts it (``call``: pushing
    or working, checked with the token, before the view reads the body;
    the view checks the queues the body names, :mod:`queueadmin.api.grants`).

    Call it like the view (``await endpoint(request, **parameters)``); it
    never raises, except ClientGone when the client hung up (there is no one
    to answer). ``methods`` and ``token`` are also what the server reads to
    refuse a request before reading its body (:mod:`queueadmin.edge`).
    """

    def __init__(self, view: View, methods: tuple[str, ...], token: bool, call: Call | None = None) -> None:
        self.view = view
        self.methods = methods
        self.token = token
        self.call = call
        self.allow = ", ".join(methods)
        self.__name__ = view.__name__
        self.__doc__ = view.__doc__

    async def __call__(self, request: Request, **parameters: str) -> Response:
        try:
            if request.method not in self.methods:
                raise ApiError(
                    "method_not_allowed",
                    f"{request.method} is not allowed on {request.path}; use {self.allow}",
                    headers={"Allow": self.allow},
                )
            if self.token:
                request.grant = await check_token(request)
                request.grant.require(self.call)
            return await self.view(request, **parameters)
        except ClientGone:
            raise
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

    def __repr__(self) -> str:
        return f"<Endpoint {self.__name__} {self.allow}{'' if self.token else ', no token'}>"


def endpoint(*methods: str, token: bool = True, call: Call | None = None) -> Callable[[View], Endpoint]:
    """Make an async view an API endpoint that answers only ``methods``.

    With ``token`` (the default) the request must carry the bearer token,
    checked after the method and before the view runs (so before the body
    is read). The API authenticates with a header, never with cookies, so
    there is no CSRF check. ``call`` (``"push"`` or ``"work"``): the token
    must also be allowed that call (:meth:`.grants.Grant.require`).
    """

    def decorate(view: View) -> Endpoint:
        return Endpoint(view, methods, token, call)

    return decorate


def _leader_url() -> str | None:
    try:
        return runtime.get_broker().leader_url
    except Exception:  # only used to enrich an error; never fail the error itself
        return None
