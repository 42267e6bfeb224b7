"""Middleware: an htmx request that meets the sign-in page or a refusal
moves the whole page, instead of swapping that page into a panel.

htmx follows a redirect inside its request and swaps what it gets, so a
sign-out in another tab once put the sign-in page inside the action panel,
and a forced Submit button of a read-only user put the whole "Not allowed"
page inside the form. For a request with the ``HX-Request`` header this
middleware turns

* a redirect to ``LOGIN_URL``, or a 401, into a 200 with ``HX-Redirect`` to
  the sign-in page, coming back to the page the browser shows (not to the
  POST-only URL the panel called);
* a 403 whose body is a whole HTML page (Django's, or forbidden.html) into a
  200 with ``HX-Redirect`` to the page the browser shows, with the refusal
  as a message on it. A 403 *fragment* (an action panel explaining itself)
  is left alone: htmx swaps it in place, as the page asks.

It does no I/O beyond Django's message storage, and works in sync and
async stacks alike.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import urlencode, urlsplit

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.shortcuts import resolve_url
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django_htmx.http import HttpResponseClientRedirect

REDIRECTS = frozenset({301, 302, 303, 307, 308})
REFUSED = (
    "Not allowed: your account may not do that, or the page was out of date. Ask an administrator "
    "for the permission if you need it."
)


class HtmxPageRedirectMiddleware:
    """See the module docstring. Put it after the auth and message middleware."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase | Awaitable[HttpResponseBase]]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        if self.is_async:
            return self.__acall__(request)
        response = self.get_response(request)
        assert isinstance(response, HttpResponseBase)
        return whole_page_redirect(request, response)

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        assert not isinstance(response, HttpResponseBase)
        return whole_page_redirect(request, await response)


def whole_page_redirect(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    """``response``, or a client redirect for it when ``request`` came from htmx."""
    if request.headers.get("HX-Request") != "true" or response.streaming:
        return response
    login = resolve_url(settings.LOGIN_URL)
    status = response.status_code
    if status in REDIRECTS and urlsplit(response.get("Location", "")).path == login:
        return _to_login(request, login)
    if status not in (401, 403) or not _is_whole_page(response):
        return response
    user = getattr(request, "user", None)
    if status == 401 or user is None or not user.is_authenticated:
        return _to_login(request, login)
    messages.error(request, REFUSED)
    return HttpResponseClientRedirect(_current_page(request))


def _to_login(request: HttpRequest, login: str) -> HttpResponseClientRedirect:
    # Quoted as Django's own sign-in redirect quotes it (slashes kept).
    return HttpResponseClientRedirect(f"{login}?{urlencode({'next': _current_page(request)}, safe='/')}")


def _current_page(request: HttpRequest) -> str:
    """The path and query of the page the browser shows (htmx's
    ``HX-Current-URL``) when it is on this site, else the overview."""
    parts = urlsplit(request.headers.get("HX-Current-URL", ""))
    if parts.netloc == request.get_host() and url_has_allowed_host_and_scheme(
        parts.geturl(), allowed_hosts={request.get_host()}
    ):
        return parts.path + (f"?{parts.query}" if parts.query else "")
    return reverse("dashboard:overview")


def _is_whole_page(response: HttpResponseBase) -> bool:
    if not response.get("Content-Type", "").startswith("text/html"):
        return False
    head = bytes(getattr(response, "content", b"")[:512]).lstrip().lower()
    return head.startswith((b"<!doctype", b"<html"))
