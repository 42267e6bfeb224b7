"""How the dashboard shows what it did not write: times in one format with
their zone, bidirectional control characters made visible, and the Admin
link only for those who can use the admin."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import Permission
from django.template import Context, Template
from django.test import Client

from engine import Broker
from queueadmin.templatetags.dashboard import visible, visible_text, when_text
from tests.queueadmin.dashboard_fixtures import act, client_for, kill, make_user, push

# -- times ----------------------------------------------------------------------------------------

TIME = re.compile(r'<time datetime="(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)" data-when="(s|ms)">([^<]*)</time>')


def test_the_job_timeline_shows_milliseconds_and_the_zone(broker: Broker, viewer: Client) -> None:
    job_id = kill(broker)
    body = viewer.get(f"/jobs/{job_id}/").content.decode()
    timeline = body[body.index('class="timeline"') :]
    times = TIME.findall(timeline)
    assert len(times) >= 3  # enqueued, claimed, failed
    for iso, precision, text in times:
        assert precision == "ms"
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC", text), text
        assert text[:10] == iso[:10] and text[11:23] == iso[11:23]
    assert ".v<" not in body and ".v " not in body


@pytest.mark.parametrize("path", ["/jobs/{id}/", "/audit/", "/document/"])
def test_every_page_shows_times_in_the_one_format(broker: Broker, admin_client_: Client, path: str) -> None:
    job_id = kill(broker)
    act(admin_client_, action="purge", ids=kill(broker))  # an audit entry
    body = admin_client_.get(path.format(id=job_id)).content.decode()
    times = TIME.findall(body)
    assert times, path
    for _, _, text in times:
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{3})? UTC", text), text


def test_when_text_takes_datetimes_and_document_strings() -> None:
    moment = datetime(2026, 12, 1, 17, 39, 47, 123456, tzinfo=UTC)
    assert when_text(moment) == "2026-12-01 17:39:47 UTC"
    assert when_text(moment, "ms") == "2026-12-01 17:39:47.123 UTC"
    assert when_text("2026-12-01T18:39:47.5+01:00", "ms") == "2026-12-01 17:39:47.500 UTC"
    assert when_text(None) == when_text("not a time") == "—"


# -- counts ----------------------------------------------------------------------------------------------


def test_counts_in_the_thousands_are_grouped_where_an_operator_reads_them(broker: Broker,
                                                                          admin_client_: Client) -> None:
    push(broker, "q", list(range(1234)))
    text = re.sub(r"\s+", " ", admin_client_.get("/").content.decode())
    assert ">1,234</a>" in text and "1234" not in text  # pending, in the queues table
    assert "1,234 pending" in text  # the document line
    page = re.sub(r"\s+", " ", admin_client_.get("/queues/q/").content.decode())
    assert 'data-testid="pending"><a href="/jobs/?queue=q&amp;status=pending">1,234</a>' in page
    assert "1,234 · 0 · 0 · 0" in page  # pushed · completed · failed · purged
    jobs = admin_client_.get("/jobs/", {"queue": "q"}).content.decode()
    assert "1,234 jobs · page 1 of 25" in jobs and "Purge all 1,234 matching" in jobs
    assert "page=25\">last" in jobs  # a link's page number stays a number
    assert template_count(1234567) == "1,234,567" and template_count(None) == "None" and template_count(7) == "7"


def template_count(value: object) -> str:
    return Template("{% load dashboard %}{{ value|count }}").render(Context({"value": value}))


# -- bidirectional control characters ---------------------------------------------------------------

EVIL = '"\u202eevil"'  # shows as "live" where the override is honoured


def test_visible_marks_each_control_character_and_still_escapes() -> None:
    for char in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c":
        shown = visible(f"a{char}b")
        assert char not in shown
        title = f"invisible control character U+{ord(char):04X}"
        assert f'<span class="bidi" title="{title}">\\u{ord(char):04x}</span>' in shown
    assert visible("<b>\u202e</b>").startswith("&lt;b&gt;<span")
    assert visible_text("x\u2067y") == "x\\u2067y"
    rendered = Template('{% load dashboard %}<a title="{{ s|visible_text }}">{{ s|visible }}</a>').render(
        Context({"s": '<i>"\u202e'})
    )
    assert "\u202e" not in rendered and "<i>" not in rendered


def test_payloads_and_errors_show_control_characters_visibly_on_every_page(broker: Broker, viewer: Client) -> None:
    job_id = kill(broker, payload=EVIL, error=f"failed on {EVIL}")
    push(broker, "q", [EVIL])
    for path in ("/jobs/", f"/jobs/{job_id}/", "/dead/", "/document/"):
        body = viewer.get(path).content.decode()
        assert "\u202e" not in body, path
        assert '<span class="bidi"' in body, path


# -- the Admin link ------------------------------------------------------------------------------------


def test_the_admin_link_is_shown_only_to_those_who_can_use_the_admin(broker: Broker, db: None) -> None:
    viewer = make_user("viewer", "view_dashboard", staff=True)
    assert b'href="/admin/"' not in client_for(viewer).get("/").content
    # Staff with a permission the admin shows (read the audit log) get the link.
    viewer.user_permissions.add(Permission.objects.get(codename="view_auditentry"))
    assert b'href="/admin/"' in client_for(viewer).get("/").content
    assert b'href="/admin/"' in client_for(make_user("root", superuser=True)).get("/").content
    # Not staff: no admin at all, whatever the permissions.
    other = make_user("other", "view_dashboard", "view_auditentry")
    assert b'href="/admin/"' not in client_for(other).get("/").content
