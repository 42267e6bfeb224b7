"""The API's edge in its own application (queueadmin.api.app): what no view
should ever see, and answers that stay JSON whatever refuses the request
(issue 9, defects 3 and 10b).

A lone UTF-16 surrogate escape (``"\\ud800"``) is valid JSON syntax that the
standard parser accepts but no UTF-8 encoder can write: it must be refused
with a 400 before it reaches the engine, wherever it is in the body.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import orjson
import pytest

from engine import Broker, ObjectStore
from tests.helpers import stored
from tests.queueadmin.api_client import Client
from tests.queueadmin.test_api import error_of, raw_post

if TYPE_CHECKING:
    from pytest_django.fixtures import Settings as SettingsWrapper

TOKEN = "edge-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def api(broker: Broker, settings: SettingsWrapper) -> Client:
    settings.QUEUE_API_TOKEN = TOKEN
    return Client(headers=AUTH)




# -- lone surrogates (defect 3, the edge half) -----------------------------------

LONG = b"1234567890123456789012345"  # 19+ digits: the exact (standard) parser reads these bodies from the start

SURROGATE_BODIES = [
    ("/api/v1/claim", rb'{"worker": "\ud800", "queues": ["q"]}', "body.worker"),
    ("/api/v1/claim", rb'{"worker": "w", "queues": ["q\udfff"]}', "body.queues[0]"),
    ("/api/v1/jobs", rb'{"queue": "\udc00", "payload": 1}', "body.queue"),
    ("/api/v1/jobs", rb'{"queue": "q", "payload": {"a": [1, {"b": "x\ud800y"}]}}', "body.payload.a[1].b"),
    ("/api/v1/jobs", rb'{"queue": "q", "payload": {"\ud800": 1}}', "a key of body.payload"),
    ("/api/v1/jobs", rb'{"queue": "q", "jobs": [{"payload": 1}, {"payload": 2, "id": "\ud800"}]}',
     "body.jobs[1].id"),
    ("/api/v1/jobs", rb'{"queue": "q", "payload": [' + LONG + rb', "\ud800"]}', "body.payload[1]"),
    ("/api/v1/jobs", rb'{"queue": "q", "payload": 1, "\udfff": 2}', "a key of body"),
]


@pytest.mark.parametrize(("path", "body", "where"), SURROGATE_BODIES)
def test_a_lone_surrogate_anywhere_is_refused_and_changes_nothing(
    api: Client, store: ObjectStore, path: str, body: bytes, where: str
) -> None:
    before = stored(store)

    error = error_of(raw_post(api, path, body), 400)

    assert error["error"] == "malformed_json"
    assert where in error["message"] and "surrogate" in error["message"]
    assert stored(store) == before


@pytest.mark.parametrize(("action", "fields"), [("fail", {"error": "\ud800"}), ("heartbeat", {}),
                                                ("complete", {})])
def test_a_lone_surrogate_in_a_running_jobs_call_is_refused(
    api: Client, store: ObjectStore, action: str, fields: dict[str, str]
) -> None:
    raw_post(api, "/api/v1/jobs", b'{"queue": "q", "payload": 1, "id": "j1"}')
    [job] = raw_post(api, "/api/v1/claim", b'{"worker": "w", "queues": ["q"]}').json()["jobs"]
    before = stored(store)
    # The lease itself is fine; the surrogate is in the error, or replaces the lease.
    body = {"lease": job["lease"] if fields else "\ud800", **fields}
    encoded = json.dumps(body, ensure_ascii=True).encode()  # "\ud800" escaped, as a hostile client sends it

    error = error_of(raw_post(api, f"/api/v1/jobs/j1/{action}", encoded), 400)

    assert error["error"] == "malformed_json"
    assert stored(store) == before
    # The job is still running, and its real lease still completes it.
    assert raw_post(api, "/api/v1/jobs/j1/complete", orjson.dumps({"lease": job["lease"]})).status_code == 200


def test_a_well_formed_surrogate_pair_is_text_and_accepted(api: Client) -> None:
    response = raw_post(api, "/api/v1/jobs", rb'{"queue": "q", "payload": "\ud83d\ude00", "id": "smile"}')
    assert response.status_code == 201, response.content
    assert api.get("/api/v1/jobs/smile").json()["payload"] == "\U0001f600"


# -- every answer under /api/ is JSON (defect 10b) ---------------------------------


@pytest.mark.parametrize("path", ["/api/v1/jobs", "/api/v1/health", "/api/v1/nope", "/api/v1/operator"])
def test_a_disallowed_host_gets_a_json_400(api: Client, path: str) -> None:
    for response in (api.get(path, headers={"Host": "evil.example"}),
                     api.post(path, b"{}", content_type="application/json", headers={"Host": "evil.example:8000"})):
        error = error_of(response, 400)
        assert error["error"] == "disallowed_host" and "evil.example" in error["message"]
        # Answered before the rest of the middleware: its length must still be
        # declared, or daphne sends it chunked (found by tests/fuzz/test_fuzz_daphne.py).
        assert response["Content-Length"] == str(len(response.content))


def test_the_dashboard_keeps_djangos_own_answer_for_a_disallowed_host(db: None) -> None:
    response = Client().get("/login/", headers={"Host": "evil.example"})
    assert response.status_code == 400
    assert not response["Content-Type"].startswith("application/json")


@pytest.mark.parametrize(("method", "path", "status", "code"), [
    ("get", "/api/v1/nope", 404, "not_found"),
    ("delete", "/api/v1/jobs", 405, "method_not_allowed"),
    ("put", "/api/v1/health", 405, "method_not_allowed"),
])
def test_unknown_paths_and_wrong_methods_are_json(api: Client, method: str, path: str, status: int,
                                                  code: str) -> None:
    assert error_of(getattr(api, method)(path), status)["error"] == code


@pytest.mark.parametrize("debug", [False, True])
def test_a_bug_outside_the_endpoints_is_a_logged_json_500(api: Client, monkeypatch: pytest.MonkeyPatch,
                                                          settings: SettingsWrapper, debug: bool,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    # A bug before any endpoint runs (in the Host check, say): never Django's
    # HTML 500 or technical page, whatever DEBUG says.
    from queueadmin.api import app

    def broken(request: object) -> None:
        raise RuntimeError("a bug outside any endpoint")

    settings.DEBUG = debug
    monkeypatch.setattr(app, "refused_host", broken)
    assert error_of(api.get("/api/v1/health"), 500)["error"] == "internal_error"
    assert "a bug outside any endpoint" in caplog.text
