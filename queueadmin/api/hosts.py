"""The ``Host`` check for the API, as Django makes it, without Django's request.

Django validates the host when something asks for it
(``HttpRequest.get_host``); the API is served without Django's request
handling (:mod:`queueadmin.api.app`), so it asks here, with Django's own
functions and settings: ``ALLOWED_HOSTS`` (with ``DEBUG`` and an empty list,
Django's local defaults), ``USE_X_FORWARDED_HOST`` and
``USE_X_FORWARDED_PORT``. A request without a ``Host`` header is checked
against the server's own address, as Django does. (``SECURE_PROXY_SSL_HEADER``,
which Django would consult for that default port, is not set by this
project; the scope's scheme decides.) Pure: reads settings, no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.http.request import split_domain_port, validate_host

from queueadmin.api.errors import ApiError

if TYPE_CHECKING:
    from queueadmin.api.http import Request

# What Django allows with DEBUG on and ALLOWED_HOSTS empty.
_DEBUG_HOSTS = [".localhost", "127.0.0.1", "[::1]"]


def raw_host(request: Request) -> str:
    """The host the client named, unchecked (Django's ``_get_raw_host``)."""
    headers = request.headers
    if settings.USE_X_FORWARDED_HOST and "x-forwarded-host" in headers:
        return headers["x-forwarded-host"]
    if "host" in headers:
        return headers["host"]
    name, port = request.server
    if settings.USE_X_FORWARDED_PORT and "x-forwarded-port" in headers:
        port = headers["x-forwarded-port"]
    return name if port == ("443" if request.scheme == "https" else "80") else f"{name}:{port}"


def refused_host(request: Request) -> ApiError | None:
    """``400 disallowed_host`` if ``request`` names a host this node does not
    serve (Django's message, so the two stacks read alike); else None."""
    host = raw_host(request)
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = _DEBUG_HOSTS
    domain, _ = split_domain_port(host)
    if domain and validate_host(domain, allowed):
        return None
    message = f"Invalid HTTP_HOST header: {host!r}."
    if domain:
        message += f" You may need to add {domain!r} to ALLOWED_HOSTS."
    else:
        message += " The domain name provided is not valid according to RFC 1034/1035."
    return ApiError("disallowed_host", f"{message}; this node serves only the hosts in ALLOWED_HOSTS")
