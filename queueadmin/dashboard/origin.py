"""Which pages may open the dashboard's live socket: only this site's own.

Browsers send cookies with a websocket handshake whatever page opens it, so
a page on another origin could otherwise read a signed-in operator's live
dashboard. Channels' ``AllowedHostsOriginValidator`` compares only the
origin's host name with ``ALLOWED_HOSTS``, so a page on any port of an
allowed host (``http://localhost:1``) passed.

:class:`SameOriginValidator` applies the rule Django's CSRF check applies to
forms instead: the ``Origin`` must be exactly this request's own origin
(scheme, host and port, taken from the handshake's ``Host`` header, which
must itself be in ``ALLOWED_HOSTS``), or one listed in
``CSRF_TRUSTED_ORIGINS`` (for a site reached through a TLS-terminating proxy,
say; ``https://*.example.com`` allows subdomains, on the port given).
A handshake with no ``Origin`` or no ``Host`` is refused.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

Scope = dict[str, Any]


def _header(scope: Scope, name: bytes) -> str | None:
    """The one value of header ``name``; None if absent, sent twice or not latin-1."""
    values = [value for key, value in scope.get("headers", ()) if key.lower() == name]
    if len(values) != 1:
        return None
    try:
        return bytes(values[0]).decode("latin-1").strip()
    except (TypeError, ValueError):
        return None


def _allowed_hosts() -> list[str]:
    hosts = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not hosts:  # what Django itself allows then
        hosts = [".localhost", "127.0.0.1", "[::1]"]
    return hosts


def _trusted(origin: str) -> bool:
    """Whether ``origin`` is listed in CSRF_TRUSTED_ORIGINS (exactly, or by a ``*.`` wildcard)."""
    parts = urlsplit(origin)
    for trusted in settings.CSRF_TRUSTED_ORIGINS:
        trusted = trusted.lower()
        if origin == trusted:
            return True
        allowed = urlsplit(trusted)
        if allowed.netloc.startswith("*.") and parts.scheme == allowed.scheme and \
                is_same_domain(parts.netloc, allowed.netloc[1:]):
            return True
    return False


def origin_allowed(scope: Scope) -> bool:
    """Whether the websocket handshake in ``scope`` comes from a page of this site. No I/O."""
    origin = _header(scope, b"origin")
    host = _header(scope, b"host")
    if not origin or not host:
        return False
    origin, host = origin.lower(), host.lower()
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, _allowed_hosts()):
        return False
    scheme = "https" if scope.get("scheme") in ("wss", "https") else "http"
    return origin == f"{scheme}://{host}" or _trusted(origin)


class SameOriginValidator:
    """ASGI middleware: refuse (close before accepting) every websocket whose
    handshake fails :func:`origin_allowed`; pass everything else on."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and not origin_allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
