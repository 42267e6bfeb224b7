"""``manage.py queueinit`` (I10): creates queue.json on a fresh store, refuses
over a document and, without --force, over a lost one; --force needs a
reason, starts above the lost seq and epoch, and every attempt is audited."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError

from engine import DocumentMissing, FileStore, GroupCommitter, read_marker
from queueadmin.models import AuditEntry
from tests.helpers import KEY, behind_fault_store, document

if TYPE_CHECKING:
    from pytest_django.fixtures import Settings as SettingsWrapper

pytestmark = pytest.mark.django_db


@pytest.fixture
def store(tmp_path: Path, settings: SettingsWrapper) -> FileStore:
    root = tmp_path / "store"
    settings.QUEUE_STORE_URL = root.as_uri()
    return FileStore(root)


def queueinit(*args: str) -> str:
    out = io.StringIO()
    call_command("queueinit", *args, stdout=out)
    return out.getvalue()



def lose_a_document(store: FileStore) -> int:
    """A document that a node used, then deleted under it; returns its last seq."""
    with GroupCommitter(store) as committer:
        for n in range(3):
            committer.push("q", [n])
        store.delete(KEY)
        with pytest.raises(DocumentMissing):
            committer.push("q", ["lost"])
        return committer.committed_seq


def test_a_fresh_store_is_initialised_without_force_and_audited(store: FileStore) -> None:
    out = queueinit()
    assert "fresh store" in out
    assert document(store)["seq"] == 1 and document(store)["jobs"] == []
    assert read_marker(store, KEY) is not None
    [entry] = AuditEntry.objects.all()
    assert entry.action == "init" and entry.outcome == "ok" and entry.seq == 1
    assert "manage.py queueinit" in entry.username


def test_an_existing_document_is_never_overwritten(store: FileStore) -> None:
    with GroupCommitter(store) as committer:
        committer.push("q", ["keep"])
    before = store.get(KEY)
    with pytest.raises(CommandError, match="exists"):
        queueinit("--force", "--reason", "oops")
    assert store.get(KEY) == before
    assert AuditEntry.objects.get().outcome == "failed"


def test_a_lost_document_needs_force_and_a_reason(store: FileStore) -> None:
    lose_a_document(store)
    with pytest.raises(CommandError, match="--force"):
        queueinit()
    with pytest.raises(CommandError, match="--reason"):
        queueinit("--force")
    assert store.get(KEY) is None
    assert [e.outcome for e in AuditEntry.objects.all()] == ["failed"]  # the refusal; the bad call never ran


def test_force_re_creates_above_the_lost_seq_and_records_who_and_why(store: FileStore) -> None:
    User.objects.create_user("ops", "ops@example.com", "pw")
    lost = lose_a_document(store)
    out = queueinit("--force", "--reason", "bucket lifecycle rule deleted it", "--user", "ops")
    assert "re-created" in out
    assert document(store)["seq"] > lost
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.outcome, entry.username) == ("init", "ok", "ops")
    assert entry.reason == "bucket lifecycle rule deleted it" and entry.target == "queue.json --force"
    assert "every job the lost document held is gone" in entry.detail
    # A committer resumes on the new document.
    with GroupCommitter(store) as committer:
        committer.push("q", ["again"])
    assert document(store)["seq"] > lost + 1


def test_queuestatus_reports_a_lost_document(store: FileStore) -> None:
    lose_a_document(store)
    with pytest.raises(CommandError, match="missing, but it existed"):
        call_command("queuestatus", stdout=io.StringIO())


def test_a_store_that_drops_its_conditions_is_refused_before_anything_is_written(
    tmp_path: Path, settings: SettingsWrapper,
) -> None:
    behind_fault_store(settings, tmp_path / "store", b'{"unconditional": true}')

    with pytest.raises(CommandError, match="replaced the first instead of being refused"):
        queueinit()

    assert FileStore(tmp_path / "store").list() == []  # no document, no marker, no probe
    [entry] = AuditEntry.objects.all()
    assert entry.outcome != "ok" and "conditional writes do not work" in entry.detail
