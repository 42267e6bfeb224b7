"""I10 on the dashboard: once this node knows queue.json is lost, every page
says so (the live pages with the missing-document page, the others with a
banner) and none shows the empty queue a fresh store would have."""

from __future__ import annotations

import pytest
from django.test import Client

from engine import Broker, DocumentMissing, ObjectStore
from tests.helpers import KEY, wait_for
from tests.queueadmin.dashboard_fixtures import push


@pytest.fixture
def lost(broker: Broker, store: ObjectStore) -> Broker:
    """The leader's document deleted, and found missing by its next commit."""
    push(broker, "q", [1])
    store.delete(KEY)
    with pytest.raises(DocumentMissing):
        push(broker, "q", [2])
    wait_for(lambda: broker.document_missing is not None)
    return broker


@pytest.mark.parametrize("path", ["/", "/jobs/", "/workers/", "/dead/", "/document/"])
def test_the_live_pages_say_the_document_is_missing(lost: Broker, viewer: Client, store: ObjectStore,
                                                    path: str) -> None:
    response = viewer.get(path)
    assert response.status_code == 503
    assert b"The queue document is missing" in response.content
    assert b"queueinit --force" in response.content
    assert store.get(KEY) is None


@pytest.mark.parametrize("path", ["/submit/", "/audit/"])
def test_every_other_page_shows_a_banner(lost: Broker, operator: Client, path: str) -> None:
    response = operator.get(path)
    assert response.status_code == 200
    assert b'id="document-missing"' in response.content


def test_no_banner_while_the_document_is_there(broker: Broker, operator: Client) -> None:
    push(broker, "q", [1])
    assert b'id="document-missing"' not in operator.get("/audit/").content
