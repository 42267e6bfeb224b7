"""Operator actions and job submission: permissions, dry runs, typed
confirmation, the broker round trip and the audit log.

Each action goes through a real broker (memory store), as an operator takes
it: the dry run, then its confirmation (``act``). A refused or invalid
request must leave the stored document byte for byte as it was and, unless
the broker itself refused, write no audit entry. What a run does compared
with its dry run (I9) is tested in test_dashboard_plans.py.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client

from engine import Broker, NotLeader, ObjectStore
from engine.ops import claim_op, pause_op
from queueadmin import runtime
from queueadmin.dashboard.forms import ACTIONS, ActionForm
from queueadmin.dashboard.snapshot import error_signature, group_key
from queueadmin.dashboard.source import source
from queueadmin.models import AuditEntry, AuditJob
from tests.helpers import document, stored
from tests.queueadmin.dashboard_fixtures import (
    act,
    client_for,
    clock_ahead,
    confirm,
    forms_with,
    kill,
    make_user,
    preview,
    push,
)


def statuses(store: ObjectStore) -> dict[str, str]:
    doc = document(store)
    found = {j["id"]: j["status"] for j in doc["jobs"]}
    found.update({d["id"]: "dead" for d in doc["dead"]})
    return found


# -- permissions -----------------------------------------------------------------------------------


def test_every_action_names_a_declared_permission_and_form_scopes() -> None:
    declared = {codename for codename, _ in AuditEntry._meta.permissions}
    fields = set(ActionForm.base_fields)
    for action in AuditEntry.Action:
        # The stored choices (a label change is a migration): the value, in words.
        assert action.label == action.value.replace("_", " ")
        spec = action.spec
        assert spec.permission in declared | {""}, action
        assert all(set(scope) <= fields for scope in spec.scopes), action
        assert (spec.operation is not None) == bool(spec.scopes) == bool(spec.scope_error), action
    assert ACTIONS == ("requeue", "purge", "stop", "run_now", "redrive", "pause", "resume", "limit", "rate_limit",
                       "forget", "pause_schedule", "resume_schedule", "forget_schedule")



@pytest.mark.parametrize(
    ("action", "fields"),
    [
        ("requeue", {"ids": "DEAD"}),
        ("purge", {"ids": "DEAD"}),
        ("purge", {"queue": "q", "status": "dead"}),
        ("pause", {"queue": "q"}),
    ],
)
def test_read_only_staff_cannot_act_and_nothing_changes(broker: Broker, viewer: Client, store: ObjectStore,
                                                        action: str, fields: dict[str, str]) -> None:
    dead = kill(broker)
    fields = {k: v.replace("DEAD", dead) for k, v in fields.items()}
    before = stored(store)

    response = act(viewer, action=action, reason="because", **fields)

    assert response.status_code == 403
    assert stored(store) == before
    assert not AuditEntry.objects.exists()


def test_each_permission_allows_only_its_own_action(broker: Broker, store: ObjectStore, db: None) -> None:
    dead = kill(broker)
    requeuer = client_for(make_user("requeuer", "view_dashboard", "requeue_job"))
    assert act(requeuer, action="purge", ids=dead, reason="r").status_code == 403
    assert act(requeuer, action="pause", queue="q", reason="r").status_code == 403
    assert act(requeuer, action="requeue", ids=dead, reason="r").status_code == 302
    assert act(requeuer, action="redrive", group="0" * 16, reason="r").status_code == 200  # may plan it
    assert statuses(store)[dead] == "pending"


def test_anonymous_action_goes_to_login(broker: Broker, client: Client, store: ObjectStore) -> None:
    dead = kill(broker)
    before = stored(store)
    response = act(client, action="requeue", ids=dead, reason="r")
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert stored(store) == before


# -- requeue ------------------------------------------------------------------------------------------


def test_requeue_preview_shows_count_and_sample_and_changes_nothing(broker: Broker, operator: Client,
                                                                    store: ObjectStore) -> None:
    dead = kill(broker, payload={"order": 42})
    before = stored(store)

    response = preview(operator, action="requeue", ids=dead)

    assert response.status_code == 200
    plan = response.context["plan"]
    assert plan.count == 1 and [j["id"] for j in plan.sample] == [dead]
    assert b"would be moved back to pending" in response.content and b"order" in response.content
    assert stored(store) == before and not AuditEntry.objects.exists()


def test_requeue_needs_a_reason(broker: Broker, operator: Client, store: ObjectStore) -> None:
    dead = kill(broker)
    before = stored(store)
    response = act(operator, action="requeue", ids=dead, reason="   ")
    assert response.status_code == 422 and b"Write a reason" in response.content
    assert stored(store) == before and not AuditEntry.objects.exists()


def test_requeue_of_a_dead_job_commits_and_is_audited(broker: Broker, operator: Client,
                                                      store: ObjectStore) -> None:
    dead = kill(broker)

    response = act(operator, action="requeue", ids=dead, reason="upstream fixed")

    assert response.status_code == 302 and response["Location"] == "/jobs/"
    assert statuses(store)[dead] == "pending"
    entry = AuditEntry.objects.get()
    assert (entry.username, entry.action, entry.reason, entry.outcome, entry.count, entry.queue) == (
        "operator", "requeue", "upstream fixed", "ok", 1, "q")
    assert list(entry.jobs.values_list("job_id", flat=True)) == [dead]
    assert entry.seq == document(store)["seq"]
    timeline = operator.get(f"/jobs/{dead}/").content.decode()
    assert "requeued by operator" in timeline and "upstream fixed" in timeline


def test_requeue_of_a_running_job_revokes_its_lease(broker: Broker, operator: Client, store: ObjectStore) -> None:
    [job_id] = push(broker, "q", [1])
    broker.execute(claim_op("w1", ["q"], policy=broker.policy))
    assert act(operator, action="requeue", ids=job_id, reason="stuck").status_code == 302
    job = document(store)["jobs"][0]
    assert job["status"] == "pending" and job["history"][-1]["end"] == "requeued"


def test_requeue_of_a_pending_or_unknown_job_is_refused_at_the_dry_run(broker: Broker, operator: Client,
                                                                       store: ObjectStore) -> None:
    [pending] = push(broker, "q", [1])
    before = stored(store)
    for ids in (pending, "no-such-job"):
        response = preview(operator, action="requeue", ids=ids)
        assert response.status_code == 200 and not response.context["plan"].token  # nothing to confirm
        assert b"already pending" in response.content or b"not in the document" in response.content
        assert b"Nothing matches" in response.content and b'name="plan"' not in response.content
    assert stored(store) == before and not AuditEntry.objects.exists()


def test_a_selection_leaves_out_what_cannot_be_requeued_and_says_so(broker: Broker, operator: Client,
                                                                    store: ObjectStore) -> None:
    dead = kill(broker)
    [pending] = push(broker, "q", [1])

    dry = preview(operator, action="requeue", ids=f"{dead} {pending} gone")
    plan = dry.context["plan"]
    assert (plan.ids, plan.expect) == ([dead], ["dead"])
    assert b"already pending: it is left out" in dry.content and b"not in the document any more" in dry.content

    assert confirm(operator, plan.token).status_code == 302
    assert list(AuditEntry.objects.get().jobs.values_list("job_id", flat=True)) == [dead]


def test_a_refused_broker_answer_is_audited_as_failed(broker: Broker, operator: Client, store: ObjectStore,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    dead = kill(broker)
    before = stored(store)

    def not_leader(op: object) -> None:
        raise NotLeader(None)  # no leader known: nowhere to forward to

    monkeypatch.setattr(broker, "execute", not_leader)
    response = act(operator, action="requeue", ids=dead, reason="try it")

    assert response.status_code == 302
    entry = AuditEntry.objects.get()
    assert entry.outcome == "failed" and "NotLeader" in entry.detail and entry.count == 1
    assert stored(store) == before
    assert b"Requeue failed" in operator.get("/jobs/").content  # the message shows on the next page


# -- purge ----------------------------------------------------------------------------------------------


def test_purge_of_more_than_100_jobs_needs_the_typed_phrase(broker: Broker, operator: Client,
                                                            store: ObjectStore) -> None:
    push(broker, "bulk", list(range(150)))
    push(broker, "keep", [1])
    before = stored(store)

    dry = preview(operator, action="purge", queue="bulk", status="pending")
    assert dry.context["plan"].count == 150
    assert b"purge 150" in dry.content and len(dry.context["plan"].sample) == 10
    token = dry.context["plan"].token
    wrong = confirm(operator, token, reason="cleanup", confirm_text="yes")
    assert wrong.status_code == 422 and b"type" in wrong.content
    assert len(wrong.context["plan"].sample) == 10  # the panel is shown again, sample and all
    assert stored(store) == before and not AuditEntry.objects.exists()

    done = confirm(operator, token, reason="cleanup", confirm_text="purge 150")  # the same dry run

    assert done.status_code == 302
    assert {j["queue"] for j in document(store)["jobs"]} == {"keep"}
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.count, entry.target) == ("purge", 150, "queue=bulk status=pending")
    assert AuditJob.objects.filter(entry=entry).count() == 150


def test_purge_of_selected_jobs_needs_no_typing(broker: Broker, operator: Client, store: ObjectStore) -> None:
    [a, b, c] = push(broker, "q", [1, 2, 3])
    assert act(operator, action="purge", ids=f"{a} {c}", reason="duplicates").status_code == 302
    assert [j["id"] for j in document(store)["jobs"]] == [b]
    assert AuditEntry.objects.get().count == 2


# -- dead-letter groups -------------------------------------------------------------------------


def test_redrive_of_a_dead_letter_group_requeues_exactly_that_group(broker: Broker, operator: Client,
                                                                    store: ObjectStore) -> None:
    bad = [kill(broker, error=f"ValueError: bad row {n}") for n in range(3)]
    other = kill(broker, error="TimeoutError: slow")
    key = group_key("q", error_signature("ValueError: bad row 1"))

    dry = preview(operator, action="redrive", group=key)
    assert dry.context["plan"].count == 3
    assert act(operator, action="redrive", group=key, reason="parser fixed").status_code == 302

    found = statuses(store)
    assert [found[i] for i in bad] == ["pending"] * 3 and found[other] == "dead"
    entry = AuditEntry.objects.get()
    assert entry.action == "redrive" and sorted(entry.jobs.values_list("job_id", flat=True)) == sorted(bad)


def test_purge_of_a_dead_letter_group(broker: Broker, operator: Client, store: ObjectStore) -> None:
    bad = [kill(broker, error="KeyError: 'x'") for _ in range(2)]
    key = group_key("q", error_signature("KeyError: 'x'"))
    assert act(operator, action="purge", group=key, reason="obsolete").status_code == 302
    assert not set(bad) & set(statuses(store))


def test_a_group_that_vanished_is_reported_not_run(broker: Broker, operator: Client, store: ObjectStore) -> None:
    before = stored(store)
    response = act(operator, action="redrive", group="0123456789abcdef", reason="r")
    assert response.status_code == 200 and b"group is gone" in response.content
    assert not response.context["plan"].token and b'name="plan"' not in response.content
    assert stored(store) == before and not AuditEntry.objects.exists()


# -- pause and resume -------------------------------------------------------------------------------


def test_pause_and_resume_through_the_dashboard(broker: Broker, operator: Client, store: ObjectStore,
                                                 db: None) -> None:
    push(broker, "q", [1])
    assert act(operator, action="pause", queue="q", reason="deploying").status_code == 302
    assert document(store)["queues"]["q"]["paused"] is True
    assert broker.execute(claim_op("w", ["q"], policy=broker.policy)) == []

    again = act(operator, action="pause", queue="q", reason="again")
    assert b"already paused" in again.content and not again.context["plan"].token

    assert act(operator, action="resume", queue="q", reason="deployed").status_code == 302
    assert document(store)["queues"]["q"]["paused"] is False
    assert len(broker.execute(claim_op("w", ["q"], policy=broker.policy))) == 1
    assert list(AuditEntry.objects.order_by("id").values_list("action", flat=True)) == ["pause", "resume"]


def test_a_resume_dry_run_says_what_it_lets_go_and_that_no_worker_takes_it(
        broker: Broker, operator: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.ops import push_op

    push(broker, "billing", [1, 2])
    broker.execute(push_op("billing", [3], policy=broker.policy, delay_seconds=3600))
    broker.execute(pause_op("billing"))
    clock_ahead(monkeypatch, timedelta(minutes=2))  # no worker on it since
    dry = preview(operator, action="resume", queue="billing")
    assert effects(dry) == [
        "2 ready jobs may be claimed at once; 1 delayed wait for their time.",
        "No worker has been seen on queue billing: its jobs wait for one (manage.py queueworker --queue billing).",
    ]
    assert dry.context["plan"].runnable


def queue_page(client: Client) -> Any:
    """The queue page of ``q`` from the latest version (not the source's cached one)."""
    from queueadmin.dashboard.source import source

    source.reset()
    return client.get("/queues/q/")


def test_the_queue_page_says_who_paused_it_and_why_when_the_audit_log_knows(
        broker: Broker, operator: Client, viewer: Client, store: ObjectStore) -> None:
    push(broker, "q", [1])
    assert act(operator, action="pause", queue="q", reason="deploying the parser").status_code == 302
    page = queue_page(viewer)
    assert page.context["paused_by"] == AuditEntry.objects.get(action="pause")
    said = re.search(r'data-testid="paused-by">(.*?)</span>', page.content.decode(), re.S)
    assert said is not None and said.group(1).startswith("by operator at <time")
    assert said.group(1).endswith("“deploying the parser”")

    # Resumed from the dashboard, then paused by code: not audited, so no name is given.
    assert act(operator, action="resume", queue="q", reason="deployed").status_code == 302
    assert b'data-testid="paused-by"' not in queue_page(viewer).content
    broker.execute(pause_op("q"))
    page = queue_page(viewer)
    assert page.context["q"].paused and page.context["paused_by"] is None
    assert b"paused</span>" in page.content and b'data-testid="paused-by"' not in page.content
    # A pause of another queue names no one here.
    push(broker, "other", [1])
    assert act(operator, action="pause", queue="other", reason="x").status_code == 302
    assert queue_page(viewer).context["paused_by"] is None


def test_the_queue_page_pauses_and_resumes_it_and_counts_what_was_purged(
        broker: Broker, operator: Client, viewer: Client, store: ObjectStore) -> None:
    """The queue page offers the pause (or the resume) its overview row
    offers, to those who may, and its totals account for purged jobs, so
    that pushed = completed + dead + purged + what is left adds up."""
    ids = push(broker, "q", [1, 2, 3])
    assert act(operator, action="purge", ids=ids[0], reason="junk").status_code == 302
    page = queue_page(operator).content.decode()
    assert re.search(r'data-testid="totals">3 · 0 · 0 · 1<', page)
    assert 'href="/jobs/?queue=q&amp;status=dead">0</a>' in page
    assert 'href="/jobs/?queue=q&amp;status=running">0</a>' in page
    [pause] = forms_with(page, "Pause")
    assert (pause["action"], pause["queue"]) == ("pause", "q")
    assert not forms_with(queue_page(viewer).content.decode(), "Pause")  # read-only staff

    assert operator.post("/actions/", pause).context["plan"].action == "pause"
    assert act(operator, action="pause", queue="q", reason="deploying").status_code == 302
    page = queue_page(operator).content.decode()
    [resume] = forms_with(page, "Resume")
    assert (resume["action"], resume["queue"]) == ("resume", "q") and not forms_with(page, "Pause")


def test_the_audit_log_shows_no_job_count_for_pause_and_resume_and_plural_counts_for_jobs(
    broker: Broker, operator: Client, store: ObjectStore
) -> None:
    push(broker, "q", [1])
    act(operator, action="pause", queue="q", reason="deploying")
    act(operator, action="resume", queue="q", reason="deployed")
    one = kill(broker, "d")  # another queue: a claim on q would take q's pending job
    act(operator, action="requeue", ids=one, reason="one")
    two = [kill(broker, "d"), kill(broker, "d")]
    act(operator, action="purge", ids=" ".join(two), reason="two")

    page = operator.get("/audit/").content.decode()
    cells = {
        action: re.search(rf'<tr data-entry="{pk}">.*?data-testid="audit-jobs">(.*?)</td>', page, re.S)[1]  # type: ignore[index]
        for pk, action in AuditEntry.objects.values_list("pk", "action")
    }
    assert "0:" not in cells["pause"] and "—" in cells["pause"]
    assert "0:" not in cells["resume"] and "—" in cells["resume"]
    assert cells["requeue"].startswith("1 job: ")
    assert cells["purge"].startswith("2 jobs: ")


def test_the_paused_queue_notice_uses_proper_plurals(broker: Broker, operator: Client) -> None:
    push(broker, "one", [1])
    push(broker, "two", [1, 2])
    broker.execute(pause_op("one", paused=True))
    broker.execute(pause_op("two", paused=True))
    body = operator.get("/").content.decode()
    assert "1 pending job waits for a resume" in body and "2 pending jobs wait for a resume" in body
    assert "job(s)" not in body


# -- bad input ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"action": "explode", "ids": "x"},
        {"action": "requeue"},
        {"action": "purge", "queue": "q"},
        {"action": "pause", "queue": "bad name!"},
        {"action": "redrive"},
        # One scope only: a stray status beside ids once purged the whole queue.
        {"action": "purge", "ids": "x", "status": "dead"},
        {"action": "purge", "ids": "x", "queue": "q"},
        {"action": "purge", "group": "0123456789abcdef", "queue": "q", "status": "dead"},
        {"action": "requeue", "ids": "x", "status": "dead"},
        {"action": "pause", "queue": "q", "status": "dead"},
    ],
)
def test_malformed_actions_get_an_error_and_change_nothing(broker: Broker, operator: Client, store: ObjectStore,
                                                           fields: dict[str, str]) -> None:
    kill(broker)
    before = stored(store)
    response = preview(operator, **fields)
    assert response.status_code == 422
    assert stored(store) == before and not AuditEntry.objects.exists()


def test_a_run_without_a_dry_run_is_refused(broker: Broker, operator: Client, store: ObjectStore) -> None:
    dead = kill(broker)
    before = stored(store)
    response = operator.post("/actions/", {"step": "run", "action": "requeue", "ids": dead, "reason": "r"})
    assert response.status_code == 422 and b"no dry run" in response.content
    assert stored(store) == before and not AuditEntry.objects.exists()


def test_next_may_not_leave_the_site(broker: Broker, operator: Client) -> None:
    dead = kill(broker)
    response = act(operator, action="requeue", ids=dead, next="https://evil.example/")
    assert response["Location"] == "/"


# -- submit ------------------------------------------------------------------------------------------


def test_submit_pushes_a_job_and_shows_its_id(broker: Broker, operator: Client, store: ObjectStore) -> None:
    response = operator.post("/submit/", {"queue": "emails", "payload": '{"to": "ada@example.com"}',
                                          "max_attempts": "5", "delay_seconds": "0"})
    assert response.status_code == 200
    created = response.context["created"]
    [job] = document(store)["jobs"]
    assert (job["id"], job["queue"], job["payload"], job["max_attempts"]) == (
        created, "emails", {"to": "ada@example.com"}, 5)
    assert created in response.content.decode()
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.outcome, list(entry.jobs.values_list("job_id", flat=True))) == (
        "submit", "ok", [created])


def test_the_submit_form_starts_with_the_queue_it_was_opened_for(broker: Broker, operator: Client) -> None:
    def queue_field(path: str) -> tuple[str, list[str]]:
        form = operator.get(path).context["form"]
        return form["queue"].value(), form.queue_names

    assert queue_field("/submit/") == ("default", [])  # no queue yet: the usual first name
    push(broker, "emails", [1])
    push(broker, "reports", [1])
    source.reset()
    # Queues, none named "default": none is chosen, rather than a new queue no worker asks for.
    assert queue_field("/submit/") == ("", ["emails", "reports"])
    assert 'list="queue-names"' in operator.get("/submit/").content.decode()
    assert queue_field("/submit/?queue=reports") == ("reports", ["emails", "reports"])
    assert queue_field("/submit/?queue=nonesuch") == ("", ["emails", "reports"])
    queue_page = operator.get("/queues/reports/").content.decode()
    assert 'href="/submit/?queue=reports" data-testid="submit-here"' in queue_page
    push(broker, "default", [1])
    source.reset()
    assert queue_field("/submit/") == ("default", ["default", "emails", "reports"])


def test_read_only_staff_get_no_submit_link_on_a_queue_page(broker: Broker, viewer: Client) -> None:
    push(broker, "emails", [1])
    assert 'data-testid="submit-here"' not in viewer.get("/queues/emails/").content.decode()


def test_a_job_just_submitted_has_its_page_at_once(broker: Broker, operator: Client) -> None:
    """The submit form reads the queues it suggests before pushing: its job's
    page, opened right after, must not share that snapshot from before it."""
    push(broker, "emails", [1])
    created = operator.post("/submit/", {"queue": "emails", "payload": "1"}).context["created"]
    assert operator.get(f"/jobs/{created}/").status_code == 200


def submit_form(client: Client) -> dict[str, str]:
    """The Submit page's form as a browser would post it: its hidden fields included."""
    page = client.get("/submit/").content.decode()
    return dict(re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)"', page))


def test_the_same_submit_form_posted_twice_makes_one_job(broker: Broker, operator: Client,
                                                         store: ObjectStore) -> None:
    form = {**submit_form(operator), "queue": "q", "payload": '{"n": 1}'}
    assert form["push_id"]
    first = operator.post("/submit/", form)
    second = operator.post("/submit/", form)  # a second click, or a reload that re-posts

    assert [j["id"] for j in document(store)["jobs"]] == [first.context["created"]] == [form["push_id"]]
    assert second.status_code == 200 and second.context["created"] == form["push_id"]
    assert "was already submitted from this form" in second.content.decode()
    assert AuditEntry.objects.filter(action="submit").count() == 1


def test_the_broker_dedups_a_form_posted_again_while_the_first_post_is_in_flight(
    broker: Broker, operator: Client, store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from queueadmin.dashboard import actions

    # The second post arrives before the first one is audited: it reaches the broker, which dedups it.
    monkeypatch.setattr(actions, "already_submitted", lambda job_id: False)
    form = {**submit_form(operator), "queue": "q", "payload": "1"}
    operator.post("/submit/", form)
    operator.post("/submit/", form)
    assert [j["id"] for j in document(store)["jobs"]] == [form["push_id"]]


def test_after_a_submit_the_form_is_fresh(broker: Broker, operator: Client, store: ObjectStore) -> None:
    form = {**submit_form(operator), "queue": "emails", "payload": '{"secret": "pasted"}'}
    response = operator.post("/submit/", form, headers={"HX-Request": "true"})
    body = response.content.decode()
    assert response.context["created"] in body
    assert "pasted" not in body  # the payload is cleared
    fresh = response.context["form"]
    assert fresh["push_id"].value() != form["push_id"] and fresh["push_id"].value() in body
    assert fresh["queue"].value() == "emails"
    # Every page render gets its own id.
    assert submit_form(operator)["push_id"] not in (form["push_id"], fresh["push_id"].value())


def test_an_altered_submit_id_is_refused(broker: Broker, operator: Client, store: ObjectStore) -> None:
    before = stored(store)
    response = operator.post("/submit/", {"queue": "q", "payload": "1", "push_id": "../x y"})
    assert response.status_code == 422 and b"altered" in response.content
    assert stored(store) == before


def test_submit_with_a_delay_sets_not_before(broker: Broker, operator: Client, store: ObjectStore) -> None:
    operator.post("/submit/", {"queue": "q", "payload": "1", "delay_seconds": "600"})
    assert document(store)["jobs"][0]["not_before"] is not None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"payload": "{not json"}, b"Not valid JSON"),
        ({"payload": "NaN"}, b"Not valid JSON"),
        ({"queue": "no spaces allowed"}, b"letters, digits"),
        ({"max_attempts": "0"}, b"greater than or equal to 1"),
        ({"payload": '"' + "x" * 300_000 + '"'}, b"bytes"),
    ],
)
def test_submit_with_bad_input_shows_an_inline_error_and_pushes_nothing(
    broker: Broker, operator: Client, store: ObjectStore, fields: dict[str, str], message: bytes
) -> None:
    push(broker, "q", [0])
    before = stored(store)
    data = {"queue": "q", "payload": "{}", **fields}
    response = operator.post("/submit/", data, headers={"HX-Request": "true"})
    assert response.status_code == 422
    assert message in response.content
    assert b"<html" not in response.content  # htmx gets the form partial only
    assert stored(store) == before and not AuditEntry.objects.exists()


def test_read_only_staff_cannot_submit(broker: Broker, viewer: Client, store: ObjectStore) -> None:
    push(broker, "q", [0])
    before = stored(store)
    assert viewer.post("/submit/", {"queue": "q", "payload": "1"}).status_code == 403
    assert stored(store) == before


# -- Django admin --------------------------------------------------------------------------------------


def test_admin_shows_audit_entries_read_only(broker: Broker, operator: Client, admin_client_: Client) -> None:
    dead = kill(broker)
    act(operator, action="requeue", ids=dead, reason="visible in admin")
    entry = AuditEntry.objects.get()

    listing = admin_client_.get("/admin/queueadmin/auditentry/", {"action__exact": "requeue"})
    assert listing.status_code == 200 and b"visible in admin" in listing.content
    detail = admin_client_.get(f"/admin/queueadmin/auditentry/{entry.pk}/change/")
    assert detail.status_code == 200 and f'href="/jobs/{dead}/"'.encode() in detail.content
    assert b'type="submit"' not in detail.content.split(b'id="content-main"')[1]  # nothing to save
    assert admin_client_.get("/admin/queueadmin/auditentry/add/").status_code == 403
    assert admin_client_.post(f"/admin/queueadmin/auditentry/{entry.pk}/delete/", {"post": "yes"}).status_code == 403
    assert AuditEntry.objects.filter(pk=entry.pk).exists()


def test_a_submit_the_broker_refuses_is_shown_inline_and_audited_as_failed(
    broker: Broker, operator: Client, store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = stored(store)

    def not_leader(op: object) -> None:
        raise NotLeader(None)  # no leader known: nowhere to forward to

    monkeypatch.setattr(broker, "execute", not_leader)
    response = operator.post("/submit/", {"queue": "q", "payload": "1"})

    assert response.status_code == 422 and b"The broker refused: NotLeader" in response.content
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.outcome, entry.count) == ("submit", "failed", 1)
    assert stored(store) == before


# -- where requeued jobs go ---------------------------------------------------------------------------


def effects(response: Any) -> list[str]:
    return [re.sub(r"\s+", " ", e) for e in re.findall(r'data-testid="plan-effect">([^<]*)<',
                                                         response.content.decode())]


def test_a_redrive_dry_run_says_the_queue_it_goes_back_to_is_paused_and_has_no_worker(
        broker: Broker, operator: Client, store: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """An operator redriving dead letters into a paused queue that no worker
    has drained for two minutes is told both before confirming; the action
    still runs, and the jobs wait in the queue as the dry run said."""
    bad = [kill(broker, "emails", error=f"SMTPError: refused {n}") for n in range(3)]
    broker.execute(pause_op("emails"))
    key = group_key("emails", error_signature("SMTPError: refused 0"))

    # Just failed: a worker was on the queue a moment ago, so only the pause is said.
    dry = preview(operator, action="redrive", group=key)
    assert effects(dry) == ["Queue emails is paused: the 3 jobs go back to it and wait there until it is resumed."]

    clock_ahead(monkeypatch, timedelta(minutes=2))
    dry = preview(operator, action="redrive", group=key)
    assert effects(dry) == [
        "Queue emails is paused: the 3 jobs go back to it and wait there until it is resumed.",
        "No worker has been seen on queue emails for 120 s: the 3 jobs go back to it and wait for one "
        "(manage.py queueworker --queue emails).",
    ]
    assert dry.context["plan"].runnable
    assert confirm(operator, dry.context["plan"].token, reason="smtp fixed").status_code == 302
    found = statuses(store)
    assert [found[i] for i in bad] == ["pending"] * 3
    assert broker.execute(claim_op("w", ["emails"], policy=broker.policy)) == []  # still paused


def test_a_requeue_across_queues_names_only_the_queue_that_would_not_run_its_job(
        broker: Broker, operator: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    quiet = kill(broker, "reports")
    busy = kill(broker, "emails")
    clock_ahead(monkeypatch, timedelta(minutes=5))
    runtime.seen_workers.note("w-emails", ["emails"])  # five minutes on: emails has a worker, reports none

    dry = preview(operator, action="requeue", ids=f"{quiet}\n{busy}")
    assert dry.context["plan"].count == 2
    assert effects(dry) == [
        "No worker has been seen on queue reports for 300 s: the 1 job goes back to it and waits for one "
        "(manage.py queueworker --queue reports).",
    ]


def test_a_purge_dry_run_names_no_destination(broker: Broker, operator: Client,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    dead = kill(broker, "emails")
    broker.execute(pause_op("emails"))
    clock_ahead(monkeypatch, timedelta(minutes=2))
    dry = preview(operator, action="purge", ids=dead)
    assert dry.context["plan"].count == 1 and effects(dry) == [] and dry.context["plan"].effects == []
