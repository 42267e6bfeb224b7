"""``manage.py queueaction``: the dashboard's operator actions from a shell.

Run with ``call_command`` against a real, leading broker (memory store) that
this process runs; tests/e2e/test_queueaction_cli.py runs the command as its
own process beside a daphne node, where the run is forwarded to the leader.
Every refusal must leave the stored document byte for byte as it was and
write no audit entry.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from engine import Broker, ObjectStore
from engine.ops import claim_op
from queueadmin.models import AuditEntry
from tests.helpers import document, stored
from tests.queueadmin.dashboard_fixtures import kill, make_user, push


def run(*args: str, stdin: str | None = None, tty: bool = False, monkeypatch: pytest.MonkeyPatch | None = None,
        **options: Any) -> str:
    if stdin is not None:
        assert monkeypatch is not None
        fake = io.StringIO(stdin)
        fake.isatty = lambda: tty  # type: ignore[method-assign]
        monkeypatch.setattr("sys.stdin", fake)
    out = io.StringIO()
    call_command("queueaction", *args, stdout=out, **options)
    return out.getvalue()


@pytest.fixture
def ops(db: None) -> str:
    make_user("ops", "view_dashboard", "requeue_job", "purge_job", "pause_queue")
    return "ops"


def statuses(store: ObjectStore) -> dict[str, str]:
    doc = document(store)
    found = {j["id"]: j["status"] for j in doc["jobs"]}
    found.update({d["id"]: "dead" for d in doc["dead"]})
    return found


def test_a_requeue_shows_its_dry_run_runs_with_yes_and_is_audited(broker: Broker, store: ObjectStore,
                                                                  ops: str) -> None:
    dead = [kill(broker, "orders", payload={"order": n}) for n in range(3)]

    out = run("requeue", "--ids", *dead, "--user", ops, "--reason", "orders service fixed", "--yes")

    lines = out.splitlines()
    assert lines[0].startswith("Requeue · orders: dry run against seq ")
    assert lines[1] == "3 jobs would be moved back to pending."
    assert [line.split()[0] for line in lines[2:5]] == dead and '{"order":0}' in lines[2]
    assert lines[-1] == "Requeued 3 jobs."
    assert [statuses(store)[i] for i in dead] == ["pending"] * 3
    entry = AuditEntry.objects.get()
    assert (entry.username, entry.action, entry.reason, entry.outcome, entry.count) == (
        "ops", "requeue", "orders service fixed", "ok", 3)
    assert sorted(entry.jobs.values_list("job_id", flat=True)) == sorted(dead)


def test_a_dry_run_changes_nothing(broker: Broker, store: ObjectStore, ops: str) -> None:
    dead = kill(broker, "orders")
    before = stored(store)
    out = run("purge", "--queue", "orders", "--status", "dead", "--user", ops, "--reason", "r", "--dry-run")
    assert "1 job would be removed for good." in out
    assert out.endswith("Dry run only (--dry-run): nothing was changed.\n")
    assert stored(store) == before and statuses(store)[dead] == "dead" and not AuditEntry.objects.exists()


def test_without_yes_it_asks_on_a_terminal_and_refuses_elsewhere(broker: Broker, store: ObjectStore, ops: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    dead = [kill(broker, "orders") for _ in range(101)]
    before = stored(store)
    args = ("purge", "--filter", "queue=orders&status=dead", "--user", ops, "--reason", "obsolete")

    # Not a terminal (a script without --yes): refused.
    with pytest.raises(CommandError, match="Run it again with --yes"):
        run(*args, stdin="", monkeypatch=monkeypatch)
    # A terminal, the wrong phrase: more than 100 jobs need the dashboard's typed confirmation.
    with pytest.raises(CommandError, match="Not confirmed"):
        run(*args, stdin="yes\n", tty=True, monkeypatch=monkeypatch)
    assert stored(store) == before and not AuditEntry.objects.exists()

    out = run(*args, stdin="purge 101\n", tty=True, monkeypatch=monkeypatch)
    assert "Type 'purge 101' to run it: " in out and out.endswith("Purged 101 jobs.\n")
    assert not set(dead) & set(statuses(store))


def test_the_user_needs_the_dashboards_permissions(broker: Broker, store: ObjectStore, db: None) -> None:
    make_user("viewer", "view_dashboard")
    make_user("blind", "pause_queue")
    push(broker, "q", [1])
    before = stored(store)
    with pytest.raises(CommandError, match=r"User 'viewer' lacks queueadmin.pause_queue: pause is refused"):
        run("pause", "--queue", "q", "--user", "viewer", "--reason", "r", "--yes")
    with pytest.raises(CommandError, match=r"User 'blind' lacks queueadmin.view_dashboard"):
        run("pause", "--queue", "q", "--user", "blind", "--reason", "r", "--yes")
    with pytest.raises(CommandError, match=r"No user named 'ghost'"):
        run("pause", "--queue", "q", "--user", "ghost", "--reason", "r", "--yes")
    assert stored(store) == before and not AuditEntry.objects.exists()


def test_bad_requests_are_refused_with_the_dashboards_words(broker: Broker, store: ObjectStore, ops: str) -> None:
    dead = kill(broker, "q")
    before = stored(store)
    with pytest.raises(CommandError, match="Requeue takes selected running or dead jobs, or the jobs a filter"):
        run("requeue", "--ids", dead, "--queue", "q", "--user", ops, "--reason", "r", "--yes")
    with pytest.raises(CommandError, match="--queue: Not a valid queue name"):
        run("pause", "--queue", "no spaces", "--user", ops, "--reason", "r", "--yes")
    with pytest.raises(CommandError, match=r"Write a reason"):
        run("requeue", "--ids", dead, "--user", ops, "--reason", "  ", "--yes")
    with pytest.raises(CommandError, match="Nothing to run"):
        run("requeue", "--ids", "no-such-job", "--user", ops, "--reason", "r", "--yes")
    assert stored(store) == before and not AuditEntry.objects.exists()


def test_pause_twice_is_not_an_error_and_resume_runs(broker: Broker, store: ObjectStore, ops: str) -> None:
    push(broker, "q", [1])
    assert run("pause", "--queue", "q", "--user", ops, "--reason", "deploy", "--yes").endswith("Paused q.\n")
    again = run("pause", "--queue", "q", "--user", ops, "--reason", "deploy", "--yes")
    assert "! Queue q is already paused." in again
    assert document(store)["queues"]["q"]["paused"] is True
    assert broker.execute(claim_op("w", ["q"], policy=broker.policy)) == []
    assert run("resume", "--queue", "q", "--user", ops, "--reason", "deployed", "--yes").endswith("Resumed q.\n")
    assert list(AuditEntry.objects.order_by("id").values_list("action", flat=True)) == ["pause", "resume"]


def test_the_dry_run_says_where_requeued_jobs_would_wait(broker: Broker, ops: str) -> None:
    dead = kill(broker, "emails")
    run("pause", "--queue", "emails", "--user", ops, "--reason", "smtp down", "--yes")
    out = run("requeue", "--ids", dead, "--user", ops, "--reason", "r", "--dry-run")
    assert "! Queue emails is paused: the 1 job goes back to it and waits there until it is resumed." in out


def test_an_unreadable_document_plans_nothing_and_is_never_overwritten(
        broker: Broker, store: ObjectStore, ops: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """I6: a queue.json that does not parse stops the command with the reason; it writes nothing and audits
    nothing. As the command runs: in a process whose broker never started, which reads the store."""
    from queueadmin import runtime
    from queueadmin.dashboard.source import source

    push(broker, "q", [1])
    store.put("queue.json", b'{"format": 2, "seq": ')
    stopped = runtime.build_broker()  # the same memory store, by its name in the settings
    assert stopped.role == "stopped" and stopped.store.get("queue.json") is not None
    monkeypatch.setattr(runtime, "get_broker", lambda: stopped)
    source.reset()
    with pytest.raises(CommandError, match="The document cannot be read, so nothing was planned"):
        run("pause", "--queue", "q", "--user", ops, "--reason", "r", "--yes")
    assert stored(store) == b'{"format": 2, "seq": ' and not AuditEntry.objects.exists()
