"""Template context for every page (a context processor in settings.TEMPLATES)."""

from __future__ import annotations

from dataclasses import dataclass

from django.http import HttpRequest

from queueadmin import config

__all__ = ["Environment", "color_for", "environment"]

# By the name's first letters, as teams name their deployments: what would do
# harm is red, what is about to go there amber, a sandbox green.
_COLORS = (("prod", "#c62828"), ("stag", "#b26a00"), ("dev", "#2e7d32"), ("test", "#2e7d32"), ("local", "#2e7d32"))
_OTHER = "#3f51b5"


@dataclass(frozen=True, slots=True)
class Environment:
    """The deployment the dashboard serves, as its badge shows it."""

    name: str
    color: str


def color_for(name: str) -> str:
    """The badge colour for an environment called ``name`` (see ``_COLORS``)."""
    lowered = name.lower()
    return next((color for start, color in _COLORS if lowered.startswith(start)), _OTHER)


def environment(request: HttpRequest) -> dict[str, Environment | None]:
    """``environment``: the ``QUEUE_ENVIRONMENT`` badge, or None when unset."""
    name = config.environment_name()
    if name is None:
        return {"environment": None}
    return {"environment": Environment(name, config.environment_color() or color_for(name))}
