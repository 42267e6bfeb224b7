"""Template tags and filters for the dashboard: action buttons, ages,
payload previews, lease colours, times and their zone, and strings with
their bidirectional control characters made visible."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import orjson
from django import template
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString, mark_safe

from queueadmin.dashboard import redaction
from queueadmin.dashboard.pages import age_text

register = template.Library()

PREVIEW_CHARS = 120


@register.filter
def age(seconds: float | None) -> str:
    """Seconds as a short age: "8.2 s", "4 min", "3.0 h"."""
    return age_text(seconds)


@register.filter
def count(value: Any) -> Any:
    """An integer with thousands separators, for counts an operator reads
    ("200,277"); anything else as it is (None, "—", a float)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return value


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
def rate_used_up(queue: Any, now: datetime) -> datetime | None:
    """When the rate window used up at ``now`` closes, for a queue summary
    (``QueueSummary``) with a rate limit; None when its jobs may start."""
    rate = getattr(queue, "rate", None)
    return rate.reopens(now) if rate is not None else None


@register.filter
def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    """The first ``limit`` characters, with an ellipsis when cut. Autoescaping
    still applies: this only bounds the size."""
    return text if len(text) <= limit else text[:limit] + "…"


# -- times: one format everywhere, zone labelled ------------------------------------------------


def _moment(value: datetime | str | None) -> datetime | None:
    """An aware datetime from a datetime or an ISO 8601 string (the document
    stores strings); None for None, "" or text that is not a time."""
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@register.filter
def iso(value: datetime | str | None) -> str:
    """The moment in UTC as ISO 8601 with milliseconds and a "Z": what
    ``<time datetime>`` carries, and what static/queueadmin/ui.js reads."""
    moment = _moment(value)
    if moment is None:
        return ""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@register.filter
def when_text(value: datetime | str | None, precision: str = "s") -> str:
    """The one time format: "2026-12-01 17:39:47 UTC", or with ``"ms"``
    "2026-12-01 17:39:47.123 UTC"; "—" for no time. ui.js shows the same
    format in the browser's zone ("… UTC+01:00") when the operator picks local."""
    moment = _moment(value)
    if moment is None:
        return "—"
    moment = moment.astimezone(UTC)
    text = moment.strftime("%Y-%m-%d %H:%M:%S")
    if precision == "ms":
        text += f".{moment.microsecond // 1000:03d}"
    return text + " UTC"


@register.filter
def when(value: datetime | str | None, precision: str = "s") -> SafeString:
    """A ``<time>`` element in the one format (see :func:`when_text`); ui.js
    re-renders it in the browser's zone when the operator chose local time."""
    moment = _moment(value)
    if moment is None:
        return mark_safe("—")  # a constant
    return format_html('<time datetime="{}" data-when="{}">{}</time>', iso(moment), precision,
                       when_text(moment, precision))


# -- bidirectional control characters -------------------------------------------------------------

#: The characters that reorder text as it is displayed (embeddings,
#: overrides, isolates, marks): a payload or an error holding U+202E can show
#: "evil" as "live". They are shown as their escapes instead.
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
_ESCAPES = {ord(c): f"\\u{ord(c):04x}" for c in BIDI_CONTROLS}
_BIDI = re.compile(f"[{''.join(sorted(BIDI_CONTROLS))}]")


@register.filter
def error_for(text: str | None, user: Any) -> str | None:
    """An error text as ``user`` may see it: with secret values hidden
    unless they may see secrets (:func:`.redaction.error_for`). Put it
    before any cut (``truncatechars``), so a cut cannot split a secret from its name."""
    return redaction.error_for(user, text)


@register.filter
def last_line(text: str | None) -> str:
    """The last line of an error that is not blank: where a traceback says
    what went wrong. Put it after ``error_for``, which hides secrets in the whole text."""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


@register.filter(needs_autoescape=True)
def visible(value: object, autoescape: bool = True) -> SafeString:
    """The text, escaped, with each bidirectional control character shown as
    ``\\u202e`` in a ``<span class="bidi">`` (marked, and named in its title).
    Use it wherever a user-provided string is shown as text; in an
    attribute use :func:`visible_text`."""
    text = "" if value is None else str(value)
    escaped = str(conditional_escape(text)) if autoescape else text
    return mark_safe(_BIDI.sub(_marked, escaped))  # escaped above; the spans are ours


def _marked(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f'<span class="bidi" title="invisible control character U+{code:04X}">\\u{code:04x}</span>'


@register.filter
def visible_text(value: object) -> str:
    """The text with each bidirectional control character replaced by its
    ``\\u202e`` escape, for attributes such as ``title`` (then autoescaped)."""
    return "" if value is None else str(value).translate(_ESCAPES)


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
                  status: str = "", group: str = "", filter: str = "", schedule: str = "",
                  cls: str = "small", in_queue: str = "") -> dict[str, Any]:
    """One action button, posting a dry run: ``{% action_button "purge" ids=job.id label="Purge" %}``.

    The button's form gets exactly the scope given here and nothing from the
    page: an ``{% include %}`` sees every variable of its page, and a job
    page's ``status`` once turned "purge this job" into "purge every job of
    the queue with this status". From the page it takes only ``here`` (where
    to come back to); the CSRF token is passed on by Django. ``in_queue``
    (or ``queue``) names the queue it acts on for display only: outside the
    user's queue scopes the button is disabled, saying why (the server
    refuses such an action anyway)."""
    outside = queue_scope_refusal(context, in_queue or queue)
    return {"act": act, "label": label, "ids": ids, "queue": queue, "status": status, "group": group,
            "filter": filter, "schedule": schedule, "cls": cls, "here": context.get("here", ""),
            "outside": outside}


@register.simple_tag(takes_context=True)
def queue_scope_refusal(context: template.Context, queue: str) -> str:
    """Why the signed-in user (``user`` in the context, on a page as in a
    live fragment) may not act on ``queue`` (their queue scopes,
    :mod:`queueadmin.dashboard.scopes`), or "" when they may or no queue is
    named. One query per user object: a request's, or a live socket's for
    its life (the server checks the scope afresh on every action anyway)."""
    user = context.get("user")
    if not queue or user is None or not user.is_authenticated:
        return ""
    from queueadmin.dashboard import scopes  # here, not at import: template libraries load before apps are ready

    scope = scopes.patterns(user, cached=True)
    if scope is None or scopes.allows(scope, queue):
        return ""
    return f"Outside your queue scope ({', '.join(scope)}): ask an administrator to act on {queue}"


@register.simple_tag
def document_missing() -> str:
    """This node's DocumentMissing message while queue.json is known to be
    lost (I10), else "": base.html shows it as a banner on every page. No I/O."""
    from queueadmin import runtime  # here, not at import: template libraries load before apps are ready

    missing = runtime.get_broker().document_missing
    return "" if missing is None else str(missing)


@register.simple_tag
def store_unsafe() -> str:
    """Why this node will not write to its store, when its start-up check
    found that the store does not honour conditional writes
    (engine.storecheck), else "": base.html shows it as a banner on every
    page. No I/O."""
    from queueadmin import runtime  # here, not at import: template libraries load before apps are ready

    unsafe = runtime.get_broker().store_unsafe
    return "" if unsafe is None else str(unsafe)


@register.simple_tag
def segment_problems() -> list[dict[str, str]]:
    """The queues this node (leading) stops at an unreadable segment object
    (format 2, I6): ``[{"queue", "object", "message"}]``, empty when none.
    base.html shows them as a banner on every page. No I/O."""
    from queueadmin.probes import segment_problems as problems  # here: template libraries load before apps

    return problems()


@register.simple_tag(takes_context=True)
def can_use_admin(context: template.Context) -> bool:
    """Whether the signed-in user would find anything in Django admin: staff
    with at least one admin module permission. Read-only dashboard staff
    would only see an empty admin page. Reads the user's permissions."""
    from django.contrib import admin  # here, not at import: template libraries load before apps are ready

    request = context.get("request")
    user = getattr(request, "user", None)
    if request is None or user is None or not user.is_active or not user.is_staff:
        return False
    return bool(admin.site.get_app_list(request))
