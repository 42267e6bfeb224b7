"""The site under a path prefix (queueadmin.mount): where the prefix comes
from, the path below it, and websockets routed below a ``FORCE_SCRIPT_NAME``.
tests/e2e/test_served_under_a_prefix.py serves the whole site so."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from queueadmin.mount import MountedWebsockets, local_path, script_prefix

if TYPE_CHECKING:
    from pytest_django.fixtures import Settings as SettingsWrapper


def test_the_prefix_is_django_s_force_script_name_or_else_the_root_path(settings: SettingsWrapper) -> None:
    settings.FORCE_SCRIPT_NAME = None
    assert script_prefix(None) == script_prefix("") == ""
    assert script_prefix("/qa") == script_prefix("/qa/") == "/qa"
    settings.FORCE_SCRIPT_NAME = "/forced/"
    assert script_prefix("/qa") == script_prefix(None) == "/forced"


def test_the_path_below_the_prefix_as_django_finds_path_info() -> None:
    assert local_path("/qa/api/v1/jobs", "/qa") == "/api/v1/jobs"
    assert local_path("/qa", "/qa") == "/"
    assert local_path("/qa/", "/qa") == "/"
    # Not under it (a proxy that strips the prefix), or only sharing its first letters: as it is.
    assert local_path("/api/v1/jobs", "/qa") == "/api/v1/jobs"
    assert local_path("/qaz/api/v1/jobs", "/qa") == "/qaz/api/v1/jobs"
    assert local_path("/api/v1/jobs", "") == "/api/v1/jobs"


def test_a_websocket_under_a_forced_prefix_gets_it_as_its_root_path(settings: SettingsWrapper) -> None:
    seen: list[dict[str, Any]] = []

    async def inner(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope)

    app = MountedWebsockets(inner)

    def route(path: str, root_path: str = "") -> dict[str, Any]:
        seen.clear()
        asyncio.run(app({"type": "websocket", "path": path, "root_path": root_path}, None, None))
        return seen[0]

    settings.FORCE_SCRIPT_NAME = "/qa"
    assert route("/qa/ws/dashboard/")["root_path"] == "/qa"  # Channels' URLRouter takes it off
    assert route("/ws/dashboard/")["root_path"] == ""  # a proxy stripped it: routed as it is
    settings.FORCE_SCRIPT_NAME = None
    assert route("/qa/ws/dashboard/", "/qa")["root_path"] == "/qa"  # daphne's --root-path: unchanged
    assert route("/ws/dashboard/")["root_path"] == ""
