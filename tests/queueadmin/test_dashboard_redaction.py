"""Secret payload values on the dashboard (queueadmin.dashboard.redaction):
hidden on every page that shows a payload, in its search, its download, an
action's dry run, a clone and a finished job's record, from users without
``view_payload_secrets``; shown whole to those with it and to superusers.
The queue keeps the payload as pushed."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from django.test import Client

from engine import Broker, ObjectStore
from engine.ops import claim_op, fail_op
from queueadmin.dashboard.redaction import SUBSTITUTE
from queueadmin.history.records import FinishedJob
from tests.helpers import document
from tests.queueadmin.dashboard_fixtures import client_for, kill, make_user, preview, push

pytestmark = pytest.mark.django_db

SECRETS = ("sk_live_TOPSECRET", "hunter2TOPSECRET", "tokTOPSECRET")
PAYLOAD = {"to": "ada@example.com", "apiKey": SECRETS[0], "nested": {"password": SECRETS[1], "n": 3},
           "items": [{"token": SECRETS[2]}]}


def shows_no_secret(text: str) -> bool:
    return "TOPSECRET" not in text


@pytest.fixture
def job(broker: Broker) -> str:
    [job_id] = push(broker, "mail", [PAYLOAD])
    return job_id


@pytest.fixture
def trusted(db: None) -> Client:
    """An operator who may see secrets."""
    return client_for(make_user("trusted", "view_dashboard", "submit_job", "requeue_job", "view_payload_secrets"))


def test_the_job_page_and_list_hide_secret_values_from_a_viewer(job: str, viewer: Client,
                                                                store: ObjectStore) -> None:
    page = viewer.get(f"/jobs/{job}/").content.decode()
    assert shows_no_secret(page) and SUBSTITUTE in page and "ada@example.com" in page
    listing = viewer.get("/jobs/", {"queue": "mail"}).content.decode()
    assert job in listing and shows_no_secret(listing) and "ada@example.com" in listing
    raw = viewer.get("/document/").content.decode()  # the raw document page prints jobs whole
    assert job in raw and shows_no_secret(raw) and "ada@example.com" in raw
    whole = viewer.get("/document/queue.json").content.decode()  # and its download, all of it
    assert job in whole and shows_no_secret(whole) and "ada@example.com" in whole
    download = viewer.get(f"/jobs/{job}/payload.json")
    assert orjson.loads(download.content) == {"to": "ada@example.com", "apiKey": SUBSTITUTE,
                                              "nested": {"password": SUBSTITUTE, "n": 3},
                                              "items": [{"token": SUBSTITUTE}]}
    [stored] = document(store)["jobs"]
    assert stored["payload"] == PAYLOAD  # only what the page shows changes


def test_users_with_the_permission_and_superusers_see_everything(job: str, trusted: Client,
                                                                 admin_client_: Client) -> None:
    for client in (trusted, admin_client_):
        page = client.get(f"/jobs/{job}/").content.decode()
        assert all(secret in page for secret in SECRETS)
        assert SECRETS[0] in client.get("/document/").content.decode()
        assert SECRETS[0] in client.get("/document/queue.json").content.decode()
        assert orjson.loads(client.get(f"/jobs/{job}/payload.json").content) == PAYLOAD


def test_a_search_never_finds_what_the_viewer_cannot_see(job: str, viewer: Client, trusted: Client) -> None:
    # Else a viewer could read a secret out one guessed character at a time.
    assert viewer.get("/jobs/", {"q": "sk_live_TOP"}).context["total"] == 0
    assert viewer.get("/jobs/", {"q": "ada@example"}).context["total"] == 1
    assert trusted.get("/jobs/", {"q": "sk_live_TOP"}).context["total"] == 1


def test_an_action_on_a_search_matches_what_the_list_showed_and_its_sample_hides_secrets(
        job: str, operator: Client, trusted: Client) -> None:
    guessed = preview(operator, action="purge", filter="q=sk_live_TOP")
    assert guessed.context["plan"].ids == []
    dry = preview(operator, action="purge", filter="q=ada%40example")
    assert dry.context["plan"].ids == [job]
    assert shows_no_secret(dry.content.decode()) and "ada@example.com" in dry.content.decode()
    assert preview(trusted, action="requeue", filter="q=sk_live_TOP").context["plan"].count == 0  # pending: left out
    assert preview(trusted, action="purge", filter="q=sk_live_TOP").status_code == 403  # no purge permission


def test_a_job_with_hidden_values_is_not_cloned_by_who_cannot_see_them(job: str, operator: Client,
                                                                        trusted: Client) -> None:
    refused = operator.get(f"/submit/?from={job}").content.decode()
    assert "cannot be cloned" in refused and "view_payload_secrets" in refused and shows_no_secret(refused)
    # No form under the refusal: a default one would read as the job's copy.
    assert 'name="payload"' not in refused and 'data-testid="blank-form"' in refused
    filled = trusted.get(f"/submit/?from={job}").content.decode()
    assert "A copy of job" in filled and SECRETS[0] in filled
    # The job page's button is off for who cannot clone it, and says why; a link for who can.
    button = re.search(r'<button type="button" disabled title="([^"]*)" data-testid="clone-job">',
                       operator.get(f"/jobs/{job}/").content.decode())
    assert button is not None and "view_payload_secrets" in button.group(1)
    assert f'href="/submit/?from={job}" data-testid="clone-job"' in trusted.get(f"/jobs/{job}/").content.decode()


def test_a_job_with_nothing_hidden_is_cloned_as_before(broker: Broker, operator: Client) -> None:
    [plain] = push(broker, "mail", [{"to": "ada@example.com"}])
    assert "A copy of job" in operator.get(f"/submit/?from={plain}").content.decode()


def test_a_finished_job_s_record_hides_secrets_whole_or_cut(broker: Broker, viewer: Client, trusted: Client) -> None:
    now = datetime.now(UTC)
    common = {"queue": "mail", "how": "completed", "finished_at": now, "was": "running",
              "enqueued_at": now - timedelta(seconds=5), "attempts": 1, "max_attempts": 3}
    whole = orjson.dumps(PAYLOAD).decode()
    FinishedJob.objects.create(job_id="done-whole", payload=whole, payload_bytes=len(whole), **common)
    FinishedJob.objects.create(job_id="done-cut", payload='{"to": "a", "password": "hunter2TOPSEC',
                               payload_bytes=90_000, **common)  # shorter than its bytes: cut
    for job_id in ("done-whole", "done-cut"):
        page = viewer.get(f"/jobs/{job_id}/").content.decode()
        assert "finished-payload" in page and shows_no_secret(page) and SUBSTITUTE in page, job_id
    assert SECRETS[0] in trusted.get("/jobs/done-whole/").content.decode()
    assert "hunter2TOPSEC" in trusted.get("/jobs/done-cut/").content.decode()


ERROR = (f"requests.exceptions.HTTPError: 401 for url: https://api.example.com/v1?api_key={SECRETS[0]}&n=2 "
         f"(password={SECRETS[1]})")


def test_error_texts_hide_secret_values_from_a_viewer_on_every_page(broker: Broker, viewer: Client,
                                                                    trusted: Client) -> None:
    dead = kill(broker, "mail", {"to": "ada@example.com"}, error=ERROR)
    [retrying] = push(broker, "mail", [{"n": 2}], max_attempts=3)
    [claimed] = broker.execute(claim_op("w-test", ["mail"], policy=broker.policy))
    broker.execute(fail_op(retrying, claimed.lease, error="Traceback (most recent call last):\n" + ERROR,
                           retry_in_seconds=3600, policy=broker.policy))
    now = datetime.now(UTC)
    FinishedJob.objects.create(job_id="done", queue="mail", how="completed", finished_at=now, was="running",
                               enqueued_at=now, attempts=2, max_attempts=3, last_error=ERROR,
                               history=[{"worker": "w", "claimed_at": now.isoformat(), "heartbeat_at": now.isoformat(),
                                         "ended_at": now.isoformat(), "end": "failed", "error": ERROR}])
    pages = [f"/jobs/{dead}/", f"/jobs/{retrying}/", "/jobs/done/", "/dead/", "/document/", "/document/queue.json"]
    for path in pages:
        page = viewer.get(path).content.decode()
        assert "api.example.com" in page and shows_no_secret(page) and SUBSTITUTE in page, path
        assert SECRETS[0] in trusted.get(path).content.decode(), path
    # The error signatures, hidden for everyone, still find their jobs.
    listing = viewer.get("/jobs/", {"queue": "mail", "status": "dead",
                                    "error": f"requests.exceptions.HTTPError: N for url: https://api.example.com/v"
                                             f"N?api_key={SUBSTITUTE}&n=N (password={SUBSTITUTE})"})
    assert dead in listing.content.decode()


def test_the_nodes_own_last_error_hides_a_signed_urls_signature_from_a_viewer(broker: Broker, viewer: Client,
                                                                              trusted: Client) -> None:
    """A store error can quote a pre-signed URL (an Azure SAS ``sig``)."""
    broker.last_error = f"StoreUnavailable: GET https://acct.blob.core.windows.net/q/queue.json?sig={SECRETS[0]}&se=1"
    page = viewer.get("/").content.decode()
    assert "acct.blob.core.windows.net" in page and shows_no_secret(page) and SUBSTITUTE in page
    assert SECRETS[0] in trusted.get("/").content.decode()


def test_the_error_filter_finds_no_secret_value_for_who_cannot_see_it(broker: Broker, viewer: Client,
                                                                     trusted: Client) -> None:
    """A part of an error is looked for as the user is shown the error: guessing a hidden value, a
    character at a time, finds nothing (as a payload search)."""
    dead = kill(broker, "mail", {"to": "ada@example.com"}, error=ERROR)
    for guess in (SECRETS[0][:6], SECRETS[1]):
        assert dead not in viewer.get("/jobs/", {"error": guess}).content.decode(), guess
        assert dead in trusted.get("/jobs/", {"error": guess}).content.decode(), guess
    assert dead in viewer.get("/jobs/", {"error": "api.example.com"}).content.decode()  # what they see, found
