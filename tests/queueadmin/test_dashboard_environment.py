"""The environment badge (``QUEUE_ENVIRONMENT``): on every page, the sign-in
page too, and in the tab's title, so that a production dashboard cannot pass
for a staging one (queueadmin/dashboard/context.py)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest
from django.test import Client

from engine import Broker
from queueadmin.dashboard.context import color_for

if TYPE_CHECKING:
    from pytest_django.fixtures import Settings as SettingsWrapper


def badge(html: str) -> tuple[str, str] | None:
    found = re.search(r'<span class="env-badge" data-testid="environment"[^>]*style="background: ([^"]+)">([^<]*)<',
                      html)
    return (found[2], found[1]) if found else None


@pytest.mark.parametrize("path", ["/", "/jobs/", "/audit/", "/queues/q/"])
def test_every_page_shows_the_environment_and_its_colour(broker: Broker, viewer: Client,
                                                        settings: SettingsWrapper, path: str) -> None:
    settings.QUEUE_ENVIRONMENT = "production"
    html = viewer.get(path).content.decode()
    assert badge(html) == ("production", "#c62828")
    assert re.search(r"<title>\[production\] ", html)
    assert 'data-environment="production" style="--env-color: #c62828"' in html


def test_the_sign_in_page_shows_it_and_a_colour_can_be_set(client: Client, settings: SettingsWrapper,
                                                           db: None) -> None:
    settings.QUEUE_ENVIRONMENT = "eu-west <blue>"
    settings.QUEUE_ENVIRONMENT_COLOR = "#123abc"
    html = client.get("/login/").content.decode()
    assert badge(html) == ("eu-west &lt;blue&gt;", "#123abc")  # escaped, as every name


def test_no_environment_no_badge(broker: Broker, viewer: Client, settings: SettingsWrapper) -> None:
    settings.QUEUE_ENVIRONMENT = None
    html = viewer.get("/").content.decode()
    assert badge(html) is None and "data-environment" not in html and "<title>[" not in html


def test_the_colour_follows_the_name() -> None:
    assert color_for("Production-EU") == color_for("prod") == "#c62828"
    assert color_for("staging") == "#b26a00"
    assert color_for("dev") == color_for("test-3") == color_for("localhost") == "#2e7d32"
    assert color_for("eu-west") == "#3f51b5"
