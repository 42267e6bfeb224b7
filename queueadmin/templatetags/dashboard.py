"""Template tags and filters for the dashboard: action buttons, ages,
payload previews, lease colours."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
from django import template

from queueadmin.dashboard.pages import age_text

register = template.Library()

PREVIEW_CHARS = 120


@register.filter
def age(seconds: float | None) -> str:
    """Seconds as a short age: "8.2 s", "4 min", "3.0 h"."""
    return age_text(seconds)


@register.filter
def ago(moment: datetime | None, now: datetime | None = None) -> str:
    """How long before ``now`` (default: the current time) ``moment`` was."""
    if moment is None:
        return "—"
    return age_text(((now or datetime.now(UTC)) - moment).total_seconds())


@register.filter
def until(moment: datetime | None, now: datetime | None = None) -> str:
    """How long after ``now`` ``moment`` is; "now" when it has passed, "—" for None."""
    if moment is None:
        return "—"
    seconds = (moment - (now or datetime.now(UTC))).total_seconds()
    return "now" if seconds <= 0 else age_text(seconds)


@register.filter
def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    """The first ``limit`` characters, with an ellipsis when cut. Autoescaping
    still applies: this only bounds the size."""
    return text if len(text) <= limit else text[:limit] + "…"


@register.filter
def percent(fraction: float) -> int:
    return round(max(0.0, min(fraction, 1.0)) * 100)


@register.filter
def ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f} ms"


@register.filter
def as_json(value: object) -> str:
    """Compact JSON text of a decoded value (autoescaped by the template)."""
    return orjson.dumps(value).decode()


@register.inclusion_tag("queueadmin/dashboard/_action_button.html", takes_context=True)
def action_button(context: template.Context, act: str, *, label: str, ids: str = "", queue: str = "",
                  status: str = "", group: str = "", filter: str = "", cls: str = "small") -> dict[str, Any]:
    """One action button, posting a dry run: ``{% action_button "purge" ids=job.id label="Purge" %}``.

    The button's form gets exactly the scope given here and nothing from the
    page: an ``{% include %}`` sees every variable of its page, and a job
    page's ``status`` once turned "purge this job" into "purge every job of
    the queue with this status". From the page it takes only ``here`` (where
    to come back to); the CSRF token is passed on by Django."""
    return {"act": act, "label": label, "ids": ids, "queue": queue, "status": status, "group": group,
            "filter": filter, "cls": cls, "here": context.get("here", "")}


@register.simple_tag
def document_missing() -> str:
    """This node's DocumentMissing message while queue.json is known to be
    lost (I10), else "": base.html shows it as a banner on every page. No I/O."""
    from queueadmin import runtime  # here, not at import: template libraries load before apps are ready

    missing = runtime.get_broker().document_missing
    return "" if missing is None else str(missing)
