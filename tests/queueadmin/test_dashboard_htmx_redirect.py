"""htmx requests that meet the sign-in page or a refusal move the whole page
(``HX-Redirect``), instead of swapping that page into a panel
(queueadmin/htmx_redirect.py)."""

from __future__ import annotations

import pytest
from django.test import Client

from engine import Broker, ObjectStore
from tests.helpers import stored
from tests.queueadmin.dashboard_fixtures import client_for, make_user

HTMX = {"HX-Request": "true", "HX-Current-URL": "http://testserver/jobs/?queue=q"}


@pytest.mark.django_db
def test_a_signed_out_htmx_action_sends_the_whole_page_to_sign_in(client: Client) -> None:
    response = client.post("/actions/", {"step": "preview", "action": "purge", "ids": "x"}, headers=HTMX)
    assert response.status_code == 200
    assert response["HX-Redirect"] == "/login/?next=/jobs/%3Fqueue%3Dq"
    assert b"Sign in" not in response.content


@pytest.mark.django_db
def test_without_htmx_the_sign_in_redirect_is_unchanged(client: Client) -> None:
    response = client.post("/actions/", {"step": "preview"})
    assert response.status_code == 302 and response["Location"].startswith("/login/?next=/actions/")
    assert "HX-Redirect" not in response


def test_a_viewer_forcing_submit_reloads_the_page_with_the_refusal(
    broker: Broker, viewer: Client, store: ObjectStore
) -> None:
    before = stored(store)
    headers = {**HTMX, "HX-Current-URL": "http://testserver/submit/"}
    response = viewer.post("/submit/", {"queue": "q", "payload": "1"}, headers=headers)
    assert response.status_code == 200
    assert response["HX-Redirect"] == "/submit/"
    assert b"<html" not in response.content
    assert stored(store) == before
    page = viewer.get("/submit/")
    assert b"Not allowed: your account may not do that" in page.content


def test_a_user_without_the_view_permission_is_redirected_not_nested(broker: Broker, db: None) -> None:
    nobody = client_for(make_user("nobody"))
    response = nobody.post("/actions/", {"step": "preview", "action": "purge", "ids": "x"}, headers=HTMX)
    assert response.status_code == 200 and response["HX-Redirect"] == "/jobs/?queue=q"


def test_a_refusal_fragment_is_still_swapped_in_place(broker: Broker, operator: Client) -> None:
    """A 403 that is a fragment (the action panel explaining an altered
    confirmation) is what the page asked for: it is left alone."""
    response = operator.post(
        "/actions/", {"step": "run", "plan": "forged", "reason": "r", "next": "/jobs/"}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 403
    assert "HX-Redirect" not in response
    assert b"not made by the dashboard" in response.content


@pytest.mark.django_db
def test_a_redirect_only_goes_to_a_page_of_this_site(client: Client) -> None:
    headers = {"HX-Request": "true", "HX-Current-URL": "https://evil.example/steal"}
    response = client.post("/actions/", {"step": "preview"}, headers=headers)
    assert response["HX-Redirect"] == "/login/?next=/"
