"""Broker API tokens kept in the database and managed in Django admin,
beside the QUEUE_API_TOKEN setting."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
import pytest

from engine import Broker, ObjectStore
from queueadmin.api import auth
from queueadmin.models import ApiToken
from tests.helpers import stored
from tests.queueadmin.api_client import Client
from tests.queueadmin.dashboard_fixtures import make_token

if TYPE_CHECKING:
    from django.test import Client as DjangoClient
    from pytest_django.fixtures import SettingsWrapper

ENV_TOKEN = "env-token-0123456789"


pytestmark = pytest.mark.usefixtures("fresh_token_cache")


def push_with(token: str) -> int:
    response = Client().post("/api/v1/jobs", orjson.dumps({"queue": "q", "payload": 1}),
                             content_type="application/json", headers={"Authorization": f"Bearer {token}"})
    return response.status_code



def test_a_database_token_works_beside_the_settings_token(broker: Broker, settings: SettingsWrapper,
                                                          db: None) -> None:
    settings.QUEUE_API_TOKEN = ENV_TOKEN
    _, token = make_token("billing workers")
    assert push_with(token) == 201
    assert push_with(ENV_TOKEN) == 201
    assert push_with(token + "x") == 401


def test_a_database_token_works_with_no_settings_token(broker: Broker, settings: SettingsWrapper, db: None) -> None:
    settings.QUEUE_API_TOKEN = None
    _, token = make_token("only db")
    assert push_with(token) == 201


def test_a_revoked_token_is_refused_and_changes_nothing(broker: Broker, store: ObjectStore,
                                                        settings: SettingsWrapper, db: None) -> None:
    settings.QUEUE_API_TOKEN = ENV_TOKEN
    row, token = make_token("leaked")
    assert push_with(token) == 201
    before = stored(store)
    row.revoked_at = row.created_at
    row.save()
    assert push_with(token) == 401
    assert stored(store) == before


def test_only_a_digest_is_stored(db: None) -> None:
    row, token = make_token("digest only")
    assert token.startswith("qa_") and len(token) > 40
    assert token not in (row.digest, row.hint) and row.digest == ApiToken.digest_of(token)
    assert token.startswith(row.hint)


def test_when_the_database_cannot_be_read_the_last_tokens_read_still_work(
    broker: Broker, settings: SettingsWrapper, db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.QUEUE_API_TOKEN = ENV_TOKEN
    _, token = make_token("fleet")
    assert push_with(token) == 201

    def down() -> frozenset[str]:
        raise RuntimeError("database is down")

    monkeypatch.setattr(auth, "_read_digests", down)
    assert push_with(token) == 201
    assert push_with(ENV_TOKEN) == 201


def test_admin_makes_a_token_shows_it_once_and_revokes_it(broker: Broker, admin_client_: DjangoClient,
                                                          settings: SettingsWrapper) -> None:
    settings.QUEUE_API_TOKEN = ENV_TOKEN
    response = admin_client_.post("/admin/queueadmin/apitoken/add/",
                                  {"name": "reports workers", "may_push": "on", "may_work": "on"}, follow=True)
    assert response.status_code == 200
    [message] = [str(m) for m in response.context["messages"] if "Copy it now" in str(m)]
    token = message.split(" is ")[1].split(" ")[0]
    row = ApiToken.objects.get(name="reports workers")
    assert row.digest == ApiToken.digest_of(token) and row.created_by is not None
    assert push_with(token) == 201
    page = admin_client_.get(f"/admin/queueadmin/apitoken/{row.pk}/change/").content.decode()
    assert token not in page  # never shown again

    admin_client_.post("/admin/queueadmin/apitoken/", {"action": "revoke", "_selected_action": [row.pk]})
    row.refresh_from_db()
    assert row.revoked_at is not None
    assert push_with(token) == 401
