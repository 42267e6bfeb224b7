"""Reading the dashboard's pages as a browser would: the forms and buttons
on a page, what a dry run showed, and a deadline for a synchronous call.

The dashboard's action buttons are small forms of hidden inputs; a test that
posts exactly what a page's form holds finds what the template leaks into
it (defect 1), which posting hand-written fields never would.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from html import unescape
from html.parser import HTMLParser
from typing import Any

from tests.fuzz.asgi_driver import NoAnswer


@dataclass(slots=True)
class Form:
    """One ``<form>``: its action, its fields in order, and its submit buttons."""

    action: str
    method: str
    fields: list[tuple[str, str]] = field(default_factory=list)
    buttons: list[tuple[str, str]] = field(default_factory=list)
    selection: bool = False  # an ids field a script fills with the selected rows

    def submissions(self) -> list[dict[str, str]]:
        """What the form can post: one submission per named button (or one)."""
        base = dict(self.fields)
        named = [b for b in self.buttons if b[0]]
        if not named:
            return [base]
        return [{**base, name: value} for name, value in named]


class _FormParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.forms: list[Form] = []
        self._form: Form | None = None
        self._textarea: tuple[str, list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self._form = Form(action=a.get("action", ""), method=a.get("method", "get").lower())
            self.forms.append(self._form)
        elif self._form is None:
            return
        elif tag == "input" and a.get("name") and a.get("type", "text") not in ("submit", "checkbox", "radio"):
            self._form.fields.append((a["name"], a.get("value", "")))
            if "data-selection-ids" in a:
                self._form.selection = True
        elif tag == "button" and a.get("type", "submit") == "submit":
            self._form.buttons.append((a.get("name", ""), a.get("value", "")))
        elif tag == "textarea" and a.get("name"):
            self._textarea = (a["name"], [])

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self._textarea[1].append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea" and self._textarea is not None and self._form is not None:
            self._form.fields.append((self._textarea[0], "".join(self._textarea[1])))
            self._textarea = None
        elif tag == "form":
            self._form = None


def forms(html: str, action: str | None = None) -> list[Form]:
    """The page's forms (only those posting to ``action``, if given)."""
    parser = _FormParser()
    parser.feed(html)
    return [f for f in parser.forms if action is None or f.action == action]


_COUNT = re.compile(r'data-testid="plan-count"><strong>(\d+)</strong>')
_SAMPLE_ID = re.compile(r'<td class="id">([^<]*)</td>')


def planned(html: str) -> tuple[int, list[str]] | None:
    """What a dry-run page showed: the job count and the sampled ids (as
    shown, possibly shortened), or None when it showed no count (pause, resume)."""
    found = _COUNT.search(html)
    if found is None:
        return None
    return int(found.group(1)), [unescape(s) for s in _SAMPLE_ID.findall(html)]


@contextmanager
def within(seconds: float, what: str) -> Iterator[None]:
    """Fail with NoAnswer if the block (a synchronous call) takes longer than ``seconds``.

    Uses the real-time timer, as pytest-timeout does, so it saves that
    timer and handler and puts them back afterwards (minus the time spent).
    """

    def expired(signum: int, frame: Any) -> None:
        raise NoAnswer(f"{what}: no answer within {seconds:g} s")

    old_handler = signal.signal(signal.SIGALRM, expired)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        left, _ = signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay:
            signal.setitimer(signal.ITIMER_REAL, max(old_delay - (seconds - left), 0.001), old_interval)


# Links a crawl does not follow: they sign out, leave the dashboard, or are not pages.
CRAWL_SKIP = ("/logout", "/login", "/admin", "/static", "/ws/", "/api/", "/metrics", "/healthz", "/readyz")
CRAWL_PAGE_SECONDS = 10.0


def links(html: str) -> Iterator[str]:
    """The same-site links of a page a crawl follows, unescaped."""
    for href in re.findall(r'href="([^"#]+)"', html):
        target = unescape(href)
        if target.startswith("/") and not target.startswith(CRAWL_SKIP):
            yield target


def crawl(client: Any, starts: list[str], *, limit: int = 80) -> dict[str, str]:
    """Every page reachable from ``starts`` by same-site links (at most
    ``limit``), by path and query: what the Django test ``client`` was sent
    for each (a 200, a redirect or a 404; anything else fails)."""
    seen: dict[str, str] = {}
    todo = list(starts)
    while todo and len(seen) < limit:
        path = todo.pop(0)
        if path in seen:
            continue
        with within(CRAWL_PAGE_SECONDS, f"GET {path}"):
            response = client.get(path)
        body = b"".join(response.streaming_content) if response.streaming else response.content
        text = body.decode(errors="replace")
        assert response.status_code in (200, 302, 404), f"GET {path}: {response.status_code}"
        seen[path] = text
        if "html" in response.get("Content-Type", ""):
            todo.extend(link for link in links(text) if link not in seen)
    return seen
