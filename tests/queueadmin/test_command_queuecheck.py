"""``manage.py queuecheck``: a store that honours conditional writes passes
(the local folder, S3 over HTTP); one that ignores them, one that does not
answer and one without credentials each fail with their reason; the document
is never touched."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from engine import DOCUMENT_KEY, FileStore, open_store
from tests.helpers import behind_fault_store

if TYPE_CHECKING:
    from pytest_django.fixtures import SettingsWrapper


def queuecheck() -> str:
    out = io.StringIO()
    call_command("queuecheck", stdout=out)
    return out.getvalue()


def test_a_folder_store_passes_and_its_document_is_untouched(tmp_path: Path, settings: SettingsWrapper) -> None:
    store = FileStore(tmp_path / "store")
    store.put(DOCUMENT_KEY, b'{"format": 1}', if_none_match=True)
    settings.QUEUE_STORE_URL = (tmp_path / "store").as_uri()

    out = queuecheck()

    assert "reachable, and it refuses a second create (If-None-Match: *) and a stale If-Match" in out
    assert store.list() == [DOCUMENT_KEY]
    blob = store.get(DOCUMENT_KEY)
    assert blob is not None and blob.data == b'{"format": 1}'


def test_s3_over_http_passes(s3_url: str, settings: SettingsWrapper) -> None:
    settings.QUEUE_STORE_URL = s3_url

    assert "reachable" in queuecheck()

    store = open_store(s3_url)
    try:
        assert store.list() == []
    finally:
        store.close()


def test_a_store_that_drops_the_conditions_fails_and_says_so(tmp_path: Path, settings: SettingsWrapper) -> None:
    behind_fault_store(settings, tmp_path / "store", b'{"unconditional": true}')

    with pytest.raises(CommandError, match=r"second create .* replaced the first instead of being refused"):
        queuecheck()

    assert FileStore(tmp_path / "store").list() == []


def test_a_store_that_does_not_answer_fails_without_deciding(tmp_path: Path, settings: SettingsWrapper) -> None:
    behind_fault_store(settings, tmp_path / "store", b'{"error": 1.0}')

    with pytest.raises(CommandError, match="nothing was decided: try again"):
        queuecheck()


def test_s3_without_credentials_fails_naming_them(
    moto_server: str, settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "missing-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "missing-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    settings.QUEUE_STORE_URL = f"s3://bucket/q?endpoint_url={moto_server}&region=us-east-1"

    with pytest.raises(CommandError, match="credentials"):
        queuecheck()
