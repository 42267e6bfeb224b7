"""The live socket: pushes redrawn page fragments to open dashboard pages.

A page connects to ``/ws/dashboard/?path=<its own path and query>``. The
consumer checks the session user (login and ``view_dashboard``; the origin
was already checked, scheme, host and port, by
:class:`~queueadmin.dashboard.origin.SameOriginValidator` in ``asgi.py``),
resolves the path to one of :data:`~.views.LIVE_PAGES`, and from then on:

* wakes on every commit of the embedded broker (and at least every
  :data:`POLL_SECONDS`, which is how a standby node, whose commits happen
  elsewhere, notices changes: by the store's ETag);
* redraws the page's live partials from the latest snapshot when the
  document changed, and sends them as one JSON message; and once a second
  while the document has not changed for longer than a heartbeat (the
  leader should have written by then), so that ages and the late-commit
  warning keep moving on a standby whose leader died;
* waits :data:`MIN_INTERVAL_SECONDS` between messages, so however fast the
  broker commits, a page gets at most a few updates a second;
* closes (4401) at once when its session signs out on this node (it joins
  the session's group, :mod:`.sessions`);
* re-reads the session user every :data:`RECHECK_SECONDS` and closes the
  socket (4401) once the user signed out (on any node) or lost ``view_dashboard``.

Messages: ``{"type": "update", "seq", "as_of", "fragments": {id: html}}``,
``{"type": "tick", "as_of"}`` when nothing changed, and ``{"type": "error",
"error"}`` when the document cannot be read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime
from importlib import import_module
from typing import Any
from urllib.parse import parse_qs, urlsplit

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.contrib import auth
from django.contrib.auth.context_processors import PermWrapper
from django.http import HttpRequest, QueryDict
from django.middleware.csrf import get_token
from django.template.loader import render_to_string
from django.urls import Resolver404, resolve, set_script_prefix

from engine import EngineError
from queueadmin import config, mount, runtime
from queueadmin.dashboard import scopes, sessions
from queueadmin.dashboard.snapshot import Snapshot
from queueadmin.dashboard.source import source
from queueadmin.dashboard.views import LIVE_PAGES, VIEW, LivePage, hidden_page

log = logging.getLogger(__name__)

MIN_INTERVAL_SECONDS = 0.4
POLL_SECONDS = 1.0
# While the document stays unchanged past a heartbeat, redraw this often anyway.
STALE_REDRAW_SECONDS = 1.0
# How often an open socket re-reads its session user and permission: a
# sign-out on another node (whose message does not cross processes) closes
# it within this plus one poll, well inside the promised 30 s.
RECHECK_SECONDS = 15.0
# Close codes (4000-4999 are the application's): the page shows why.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_BAD_PAGE = 4404


class _Params:
    """What the page builders read from a request: its query parameters and
    its user (what the user may see of payloads, :mod:`.redaction`)."""

    def __init__(self, query: str, user: Any) -> None:
        self.GET = QueryDict(query)
        self.user = user


class DashboardConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    page: LivePage
    page_name: str
    kwargs: dict[str, Any]

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if not await database_sync_to_async(user.has_perm)(VIEW):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        query = parse_qs(self.scope.get("query_string", b"").decode())
        target = urlsplit((query.get("path") or [""])[0])
        # The page's path as the browser has it, under the site's prefix if
        # it is served under one (queueadmin.mount): resolved below it, and
        # links in the fragments rendered under it.
        self.script_prefix = mount.script_prefix(self.scope.get("root_path"))
        try:
            match = resolve(mount.local_path(target.path, self.script_prefix))
        except Resolver404:
            match = None
        if match is None or match.namespace != "dashboard" or match.url_name not in LIVE_PAGES:
            await self.close(code=CLOSE_BAD_PAGE)
            return
        if await database_sync_to_async(hidden_page)(user, match.url_name, dict(match.kwargs)):
            await self.close(code=CLOSE_BAD_PAGE)  # as for a page that does not exist
            return
        self.page_name = match.url_name
        self.page = LIVE_PAGES[match.url_name]
        self.kwargs = dict(match.kwargs)
        self.params = _Params(target.query, user)
        self.here = target.path + (f"?{target.query}" if target.query else "")
        self.user = user
        self.csrf_token = _masked_csrf_token(self.scope.get("cookies", {}).get(settings.CSRF_COOKIE_NAME, ""))
        session = self.scope.get("session")
        key = getattr(session, "session_key", None)
        self.session_group = sessions.group_for(key) if key and self.channel_layer is not None else None
        if self.session_group is not None:
            await self.channel_layer.group_add(self.session_group, self.channel_name)
        await self.accept()
        self.pump = asyncio.create_task(self._pump())

    async def disconnect(self, code: int) -> None:
        await self._stop_pump()
        group = getattr(self, "session_group", None)
        if group is not None:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def session_signed_out(self, event: dict[str, Any]) -> None:
        """The session signed out on this node (:mod:`.sessions`): stop now."""
        await self._stop_pump()
        await self.close(code=CLOSE_UNAUTHENTICATED)

    async def _stop_pump(self) -> None:
        pump = getattr(self, "pump", None)
        if pump is not None and pump is not asyncio.current_task():
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """Pages send nothing; anything received is ignored."""

    async def _pump(self) -> None:
        last: tuple[int, str | None] | None = None
        loop = asyncio.get_running_loop()
        checked = changed_at = drawn_at = loop.time()
        with runtime.commits.listen() as committed:
            while True:
                committed.clear()
                started = loop.time()
                if started - checked >= RECHECK_SECONDS:
                    # A socket outlives the page's request: sign-out, a
                    # revoked permission or a deactivated account ends it.
                    checked = started
                    refused = await self._recheck()
                    if refused is not None:
                        await self.close(code=refused)
                        return
                try:
                    snapshot = await asyncio.to_thread(source.current)
                except EngineError as exc:
                    await self.send_json({"type": "error", "error": f"{type(exc).__name__}: {exc}",
                                          "as_of": _now()})
                else:
                    version = (snapshot.seq, snapshot.etag)
                    now = loop.time()
                    if version != last:
                        changed_at = now
                    stale = (now - changed_at > config.heartbeat_seconds()
                             and now - drawn_at >= STALE_REDRAW_SECONDS)
                    if version != last or stale:
                        fragments = await self._render(snapshot)
                        await self.send_json({"type": "update", "seq": snapshot.seq, "as_of": _now(),
                                              "fragments": fragments})
                        last, drawn_at = version, now
                    else:
                        await self.send_json({"type": "tick", "seq": snapshot.seq, "as_of": _now()})
                # Coalesce: commits during this pause are picked up together.
                await asyncio.sleep(max(MIN_INTERVAL_SECONDS - (loop.time() - started), 0))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(committed.wait(), timeout=POLL_SECONDS)

    @database_sync_to_async  # type: ignore[untyped-decorator]  # channels ships no types
    def _recheck(self) -> int | None:
        """None while the socket's session still signs in a user with
        ``view_dashboard`` who may see this page; else the close code.

        The session is read afresh from its store (the scope's copy was
        loaded at connect), and Django's own ``get_user`` checks it, so a
        sign-out, a password change or a deactivated account all count; so
        does a queue scope narrowed since, that now hides this queue's page.
        """
        session = self.scope.get("session")
        if session is None or session.session_key is None:
            return CLOSE_UNAUTHENTICATED
        request = HttpRequest()
        request.session = import_module(settings.SESSION_ENGINE).SessionStore(session.session_key)
        user = auth.get_user(request)
        if not (user.is_authenticated and user.has_perm(VIEW)):
            return CLOSE_UNAUTHENTICATED
        if hidden_page(user, self.page_name, self.kwargs):
            return CLOSE_BAD_PAGE
        # Draw with the user as they are now: permissions and queue scopes
        # changed since the socket opened apply from here on.
        self.user = self.params.user = user
        return None

    @database_sync_to_async  # type: ignore[untyped-decorator]  # channels ships no types
    def _render(self, snapshot: Snapshot) -> dict[str, str]:
        # Django sets the script prefix per request, for the request's thread;
        # this is a database thread, rendering for this socket.
        set_script_prefix(self.script_prefix + "/")
        sees = scopes.visibility(self.user)
        if sees is not None:
            snapshot = snapshot.visible(sees)
        context = self.page.build(snapshot, self.params, **self.kwargs)
        context.update(user=self.user, perms=PermWrapper(self.user), csrf_token=self.csrf_token, here=self.here)
        return {name: render_to_string(f"{self.page.template}#{name}", context) for name in self.page.partials}


def _masked_csrf_token(secret: str) -> str:
    """A form token for the session's CSRF cookie, masked afresh as Django
    masks every page's token (so the secret itself never appears in HTML).
    Empty when the page has no cookie; its forms then post through htmx,
    which sends the page's own token in a header."""
    if not secret:
        return ""
    request = HttpRequest()
    request.META["CSRF_COOKIE"] = secret
    return get_token(request)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
