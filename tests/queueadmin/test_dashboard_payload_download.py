"""A job's whole payload as a download (``/jobs/<id>/payload.json``): its
page shows the first 256 KiB; the link gives all of it, from the document or
from a segment object, to signed-in viewers only."""

from __future__ import annotations

import orjson
import pytest
from django.test import Client

from engine import Broker
from queueadmin.dashboard.pages import RAW_LIMIT_BYTES
from tests.queueadmin.dashboard_fixtures import client_for, make_user, push
from tests.queueadmin.test_dashboard_segments import backlog, small_segments  # noqa: F401  (a fixture)


def test_a_large_payload_is_cut_on_its_page_and_downloads_whole(broker: Broker, viewer: Client) -> None:
    # Within the push limit (256 KiB), and more than the page shows of it
    # pretty-printed (256 KiB): the page indents it, the download too.
    payload = {"rows": [["r" * 20] * 8 for _ in range(1200)]}
    assert len(orjson.dumps(payload)) < RAW_LIMIT_BYTES < len(orjson.dumps(payload, option=orjson.OPT_INDENT_2))
    [job_id] = push(broker, "big", [payload])

    page = viewer.get(f"/jobs/{job_id}/")
    assert page.context["payload_truncated"]
    assert f'href="/jobs/{job_id}/payload.json" download data-testid="payload-download"'.encode() in page.content

    download = viewer.get(f"/jobs/{job_id}/payload.json")
    assert download.status_code == 200 and download["Content-Type"] == "application/json"
    assert download["Content-Disposition"] == f'attachment; filename="job-{job_id}-payload.json"'
    assert orjson.loads(download.content) == payload


@pytest.mark.usefixtures("small_segments")
def test_a_payload_in_a_segment_downloads_too(broker: Broker, viewer: Client) -> None:
    ids = backlog(broker, n=100)
    assert viewer.get(f"/jobs/{ids[75]}/").context["in_segment"]
    download = viewer.get(f"/jobs/{ids[75]}/payload.json")
    assert download.status_code == 200 and orjson.loads(download.content) == 75


def test_no_payload_for_a_job_not_in_the_queue_and_none_without_a_login(broker: Broker, viewer: Client,
                                                                        client: Client) -> None:
    missing = viewer.get("/jobs/no-such-job/payload.json")
    assert missing.status_code == 404 and missing["Content-Type"] == "text/plain; charset=utf-8"
    assert b"No payload to download for job no-such-job: it is not in the queue now" in missing.content
    [job_id] = push(broker, "q", [{"secret": 1}])
    anonymous = client.get(f"/jobs/{job_id}/payload.json")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")
    nobody = client_for(make_user("nobody"))
    assert nobody.get(f"/jobs/{job_id}/payload.json").status_code == 403
    assert viewer.post(f"/jobs/{job_id}/payload.json").status_code == 405
