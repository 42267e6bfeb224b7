"""Secret payload values in Chromium: a read-only viewer sees a job's
``apiKey`` as stars on its page, in the list and in the downloaded payload,
and cannot find it by searching, and a dead letter's ``api_key`` in its
error text as stars on the Dead letters page; the superuser sees both."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable

import pytest
from playwright.sync_api import Browser, expect

from tests.e2e.browser import PASSWORD, kill, push, signed_in, with_operator
from tests.e2e.harness import Cluster

pytestmark = pytest.mark.e2e

STARS = "********************"
VIEWER = textwrap.dedent(f'''
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user("viewer", "v@example.com", {PASSWORD!r}, is_staff=True)
    user.user_permissions.add(Permission.objects.get(content_type__app_label="queueadmin",
                                                     codename="view_dashboard"))
''')


def test_a_viewer_sees_secret_payload_values_as_stars(browser: Browser,
                                                      cluster_factory: Callable[..., Cluster]) -> None:
    cluster, server = with_operator(cluster_factory())
    made = cluster.manage("shell", "-c", VIEWER)
    assert made.returncode == 0, made.stderr.decode()
    push(server, "mail", [{"to": "ada@example.com", "apiKey": "sk_live_TOPSECRET"}])
    [job] = cluster.document()["jobs"]
    kill(server, "charges", "HTTPError: 401 for url: https://pay.example.com/v1?api_key=sk_live_ERRSECRET&n=1")

    with signed_in(browser, server, user="viewer") as page:
        page.goto(f"{server.url}/jobs/?queue=mail")
        row = page.locator("tbody tr", has_text="ada@example.com")
        expect(row).to_contain_text(STARS)
        expect(row).not_to_contain_text("TOPSECRET")
        page.goto(f"{server.url}/jobs/?q=sk_live")
        expect(page.get_by_test_id("jobs-total")).to_have_text("0 jobs")

        page.goto(f"{server.url}/jobs/{job['id']}/")
        viewer = page.locator("pre.viewer")
        expect(viewer).to_contain_text(f'"apiKey": "{STARS}"')
        expect(viewer).to_contain_text("ada@example.com")
        with page.expect_download() as download:
            page.get_by_test_id("payload-download").click()
        path = download.value.path()
        with open(path, encoding="utf-8") as f:
            assert json.load(f) == {"to": "ada@example.com", "apiKey": STARS}
        assert "TOPSECRET" not in page.content()

        page.goto(f"{server.url}/dead/")
        group = page.locator("details", has_text="Latest error")
        group.locator("summary").first.click()
        expect(group.locator("pre")).to_contain_text(f"api_key={STARS}&n=1")
        assert "ERRSECRET" not in page.content()

    with signed_in(browser, server) as page:  # the superuser
        page.goto(f"{server.url}/jobs/{job['id']}/")
        expect(page.locator("pre.viewer")).to_contain_text('"apiKey": "sk_live_TOPSECRET"')
        page.goto(f"{server.url}/dead/")
        assert "api_key=sk_live_ERRSECRET&amp;n=1" in page.content()
    assert cluster.document()["jobs"][0]["payload"]["apiKey"] == "sk_live_TOPSECRET"
