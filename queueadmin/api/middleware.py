"""Keep every answer under ``/api/`` JSON, whatever layer refuses the request.

The API's views answer JSON themselves (:mod:`~queueadmin.api.endpoint`),
but some refusals happen before a view runs, in Django's own request
handling, and those answer with Django's HTML error pages:

* a ``Host`` header not in ``ALLOWED_HOSTS`` (``DisallowedHost``, a 400 page,
  raised by the first middleware that asks for the host);
* anything another middleware refuses, and a bug outside a view (a 500 page,
  or with ``DEBUG`` on the technical 500 page).

:class:`ApiJsonMiddleware` comes first in ``MIDDLEWARE``. For a path under
``/api/`` it checks the host itself, answering ``400 disallowed_host``, and
turns any other error response that is not JSON into the JSON error of the
same status (docs/api.md, "Errors"). Other paths are passed through untouched.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest
from django.http.response import HttpResponseBase

from queueadmin.api.errors import ApiError

log = logging.getLogger(__name__)

PREFIX = "/api/"

# An error status Django (or another middleware) answered with, and the API
# code it is reported as when its body was not JSON; any other becomes a 500.
_CODE_BY_STATUS = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    413: "payload_too_large",
}

_MESSAGES = {
    400: "the request was refused before it reached the API; check its headers",
    403: "the request was refused before it reached the API",
    404: "no such API endpoint; see docs/api.md",
    500: "the broker failed unexpectedly; see its log",
}


def _is_json(response: HttpResponseBase) -> bool:
    return str(response.get("Content-Type", "")).startswith("application/json")


def refused_host(request: HttpRequest) -> HttpResponseBase | None:
    """The 400 disallowed_host answer if ``request``'s Host is not allowed; else None."""
    try:
        request.get_host()
    except DisallowedHost as exc:
        return ApiError("disallowed_host", f"{exc}; this node serves only the hosts in ALLOWED_HOSTS").response()
    return None


def as_json(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    """``response`` itself if it is a success or already JSON; else the JSON
    error of its status (an unexpected status becomes ``internal_error``, 500)."""
    if response.status_code < 400 or _is_json(response):
        return response
    code = _CODE_BY_STATUS.get(response.status_code, "internal_error")
    log.warning("%s %s: a non-JSON %s answer was replaced by a JSON %s error",
                request.method, request.path, response.status_code, code)
    message = _MESSAGES.get(response.status_code, f"the request was refused ({response.status_code})")
    return ApiError(code, message).response()


class ApiJsonMiddleware:
    """Answers JSON for every error under ``/api/`` (see the module docstring).

    Sync and async capable, like the rest of the stack, so the async views
    stay on the event loop.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.async_mode = iscoroutinefunction(get_response)
        if self.async_mode:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        if self.async_mode:
            return self.__acall__(request)
        if not request.path_info.startswith(PREFIX):
            response: HttpResponseBase = self.get_response(request)
            return response
        return refused_host(request) or as_json(request, self.get_response(request))

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        if not request.path_info.startswith(PREFIX):
            response: HttpResponseBase = await self.get_response(request)
            return response
        return refused_host(request) or as_json(request, await self.get_response(request))
