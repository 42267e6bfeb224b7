"""The API's route table: Django-style route strings, matched without Django.

``path("v1/jobs/<str:job_id>/complete", views.complete, name="complete")``
reads as it would in a Django ``urls.py`` (only the ``str`` converter: one
path segment, no ``/``), but matches in :class:`Router`, which
:mod:`queueadmin.api.app` and daphne's early refusals
(:mod:`queueadmin.edge`) both use: one table, so the two can never disagree
on what a path is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from queueadmin.api.endpoint import Endpoint

#: Every route lives under this path; queueadmin.asgi sends everything under it here.
PREFIX = "/api/"

_PARAMETER = re.compile(r"<(?:(?P<converter>[a-z]+):)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)>")
_CONVERTERS = {"str": "[^/]+"}


@dataclass(frozen=True, slots=True)
class Route:
    """One endpoint at one route (relative to :data:`PREFIX`)."""

    route: str
    endpoint: Endpoint
    name: str
    pattern: re.Pattern[str] | None  # None: no parameters, matched exactly


def path(route: str, endpoint: Endpoint, *, name: str) -> Route:
    """``endpoint`` at ``route``, a path below :data:`PREFIX` in Django's
    syntax (``"v1/jobs/<str:job_id>"``; the parameter is passed to the
    endpoint as a keyword argument). Raises ValueError for a converter other
    than ``str``."""
    parts: list[str] = []
    position = 0
    for match in _PARAMETER.finditer(route):
        converter = match["converter"] or "str"
        if converter not in _CONVERTERS:
            raise ValueError(f"{route!r}: only the str converter is supported, not {converter!r}")
        parts += [re.escape(route[position:match.start()]), f"(?P<{match['name']}>{_CONVERTERS[converter]})"]
        position = match.end()
    if not parts:
        return Route(route, endpoint, name, None)
    parts.append(re.escape(route[position:]))
    return Route(route, endpoint, name, re.compile(re.escape(PREFIX) + "".join(parts) + r"\Z"))


class Router:
    """Finds the endpoint for a path. Pure, no I/O: safe on any event loop."""

    def __init__(self, routes: Iterable[Route]) -> None:
        self.routes = tuple(routes)
        # Most requests name a fixed path: one dict lookup, no regex.
        self._exact = {PREFIX + r.route: r for r in self.routes if r.pattern is None}
        self._patterns = [r for r in self.routes if r.pattern is not None]
        names = [r.name for r in self.routes]
        if len(set(names)) != len(names):
            raise ValueError(f"route names must be unique: {names}")

    def resolve(self, path: str) -> tuple[Route, dict[str, str]] | None:
        """The route ``path`` names and its parameters, or None (an unknown path)."""
        route = self._exact.get(path)
        if route is not None:
            return route, {}
        for route in self._patterns:
            assert route.pattern is not None
            match = route.pattern.match(path)
            if match is not None:
                return route, match.groupdict()
        return None
