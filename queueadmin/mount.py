"""Serving the site under a path prefix, behind a reverse proxy (say
``https://ops.example.com/queueadmin/``).

The prefix is found as Django finds its script prefix: ``FORCE_SCRIPT_NAME``
when set, else the ASGI ``root_path``, which daphne sets from
``--root-path`` or from a proxy's ``Daphne-Root-Path`` header. Django's
pages, forms and redirects follow it by themselves. What is routed before
Django (the API, ``/metrics``, the probes, daphne's early refusals in
:mod:`queueadmin.edge`) and the dashboard's websocket route by the path
below it, found here the way Django's ``ASGIRequest`` finds ``path_info``:
a path that is not under the prefix (a proxy that strips it) is taken as it
is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings

if TYPE_CHECKING:
    from queueadmin.api.http import Receive, Scope, Send

__all__ = ["MountedWebsockets", "local_path", "script_prefix"]


def script_prefix(root_path: str | None) -> str:
    """The prefix the site is served under, without its trailing slash; ""
    at the root. ``root_path``: the ASGI scope's (or daphne's) root path."""
    return (settings.FORCE_SCRIPT_NAME or root_path or "").rstrip("/")


def local_path(path: str, prefix: str) -> str:
    """``path`` below ``prefix`` (from :func:`script_prefix`): ``/qa/api/v1/jobs``
    under ``/qa`` is ``/api/v1/jobs``. Unchanged when ``path`` is not under it."""
    if prefix and (path.startswith(prefix + "/") or path == prefix):
        return path[len(prefix):] or "/"
    return path


class MountedWebsockets:
    """Gives a websocket's scope the ``root_path`` of the prefix it was sent
    under, so Channels' ``URLRouter`` (which takes only ``root_path`` off)
    routes it also when the prefix comes from ``FORCE_SCRIPT_NAME``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        prefix = script_prefix(scope.get("root_path"))
        under = prefix and local_path(scope["path"], prefix) != scope["path"]
        if under and scope.get("root_path", "").rstrip("/") != prefix:
            scope = {**scope, "root_path": prefix}
        await self.inner(scope, receive, send)
