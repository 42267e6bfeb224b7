"""I9: an operator action does what its dry run showed.

For every action, the run acts on at most the jobs its dry run counted:
jobs that arrive later are not touched, jobs that left or changed status
since are left alone and the result says so, and the audit entry lists
exactly the ids acted on. The confirmation carries only a signed token of the
stored plan: an altered, forged, foreign, expired or reused token is refused
and changes nothing, and no other field of the run's form can widen it.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.core import signing
from django.test import Client

from engine import Broker, ObjectStore
from engine.ops import claim_op, complete_op, pause_op, purge_op, requeue_op
from queueadmin.api import forward
from queueadmin.dashboard import plans
from queueadmin.dashboard.snapshot import error_signature, group_key
from queueadmin.models import ActionPlan, AuditEntry
from tests.helpers import document, stored
from tests.queueadmin.dashboard_fixtures import client_for, confirm, kill, make_user, preview, push

GROUP = group_key("q", error_signature("boom"))


def statuses(store: ObjectStore) -> dict[str, str]:
    doc = document(store)
    found = {j["id"]: j["status"] for j in doc["jobs"]}
    found.update({d["id"]: "dead" for d in doc["dead"]})
    return found


def audited_ids(entry: AuditEntry) -> list[str]:
    return sorted(entry.jobs.values_list("job_id", flat=True))


def shown_message(client: Client, response: Any) -> str:
    """The message the run left for the page it redirects to."""
    assert response.status_code == 302, response.content
    page = client.get(response["Location"]).content.decode()
    found = re.findall(r'<li class="msg [a-z]+">(.*?)</li>', page)
    assert found, "no message shown"
    return html.unescape(" ".join(found))


@dataclass(frozen=True)
class Case:
    """One action on one scope: three jobs in ``before`` status, the form
    fields of its dry run, what a job becomes when acted on (None: gone),
    how another hand adds one more job to the scope, and how it changes one
    job's status."""

    name: str
    before: str
    fields: Callable[[list[str]], dict[str, str]]
    after: str | None
    scoped: bool  # a queue and status, or a group: newcomers are reported

    def setup(self, broker: Broker) -> list[str]:
        if self.before == "pending":
            return push(broker, "q", [1, 2, 3])
        return [kill(broker) for _ in range(3)]

    def add_one(self, broker: Broker) -> str:
        return push(broker, "q", [9])[0] if self.before == "pending" else kill(broker)

    def change(self, broker: Broker, job_id: str) -> str:
        """Change ``job_id``'s status behind the operator's back; return the new status."""
        if self.before == "pending":  # a worker claims it: the first pending job
            [claimed] = broker.execute(claim_op("w-other", ["q"], policy=broker.policy))
            assert claimed.id == job_id
            return "running"
        broker.execute(requeue_op([job_id]))  # another operator requeued it
        return "pending"


CASES = [
    Case("requeue selected", "dead", lambda ids: {"action": "requeue", "ids": " ".join(ids)}, "pending", False),
    Case("purge selected", "dead", lambda ids: {"action": "purge", "ids": " ".join(ids)}, None, False),
    Case("purge queue and status dead", "dead", lambda ids: {"action": "purge", "queue": "q", "status": "dead"},
         None, True),
    Case("purge queue and status pending", "pending",
         lambda ids: {"action": "purge", "queue": "q", "status": "pending"}, None, True),
    Case("redrive group", "dead", lambda ids: {"action": "redrive", "group": GROUP}, "pending", True),
    Case("purge group", "dead", lambda ids: {"action": "purge", "group": GROUP}, None, True),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_jobs_that_arrive_after_the_dry_run_are_not_touched(case: Case, broker: Broker, operator: Client,
                                                            store: ObjectStore) -> None:
    planned = case.setup(broker)
    dry = preview(operator, **case.fields(planned))
    plan = dry.context["plan"]
    assert sorted(plan.ids) == sorted(planned) and plan.expect == [case.before] * 3

    newcomer = case.add_one(broker)  # same queue, same status (and same group)
    response = confirm(operator, plan.token, reason="cleanup")

    now = statuses(store)
    assert [now.get(i) for i in planned] == [case.after] * 3
    assert now[newcomer] == case.before
    entry = AuditEntry.objects.get()
    assert (entry.outcome, entry.count, audited_ids(entry)) == ("ok", 3, sorted(planned))
    message = shown_message(operator, response)
    assert "3 jobs" in message or "3 dead letters" in message
    if case.scoped:
        assert "1 more" in message and "arrived after the dry run and was not touched" in message
    else:
        assert "arrived" not in message


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_jobs_that_left_or_changed_after_the_dry_run_are_left_alone_and_the_result_says_so(
    case: Case, broker: Broker, operator: Client, store: ObjectStore
) -> None:
    first, second, third = planned = case.setup(broker)
    plan = preview(operator, **case.fields(planned)).context["plan"]
    assert plan.count == 3

    changed_to = case.change(broker, first)
    broker.execute(purge_op([second]))  # another operator purged it
    response = confirm(operator, plan.token, reason="cleanup")

    now = statuses(store)
    assert (now.get(first), now.get(second), now.get(third)) == (changed_to, None, case.after)
    entry = AuditEntry.objects.get()
    assert (entry.count, audited_ids(entry)) == (1, [third])
    assert f"2 of 3 jobs were no longer {case.before} and were left alone" in entry.detail
    message = shown_message(operator, response)
    assert f"2 of 3 jobs were no longer {case.before} and were left alone" in message
    assert message.startswith(("Purged 1 job;", "Requeued 1 job;", "Redrove 1 dead letter back to pending;"))


def test_a_run_whose_jobs_all_changed_changes_nothing_and_says_so(broker: Broker, operator: Client,
                                                                  store: ObjectStore) -> None:
    dead = kill(broker)
    plan = preview(operator, action="purge", ids=dead).context["plan"]
    broker.execute(requeue_op([dead]))

    response = confirm(operator, plan.token)

    assert statuses(store)[dead] == "pending"
    assert "Purge refused, nothing changed: the job is no longer dead" in shown_message(operator, response)
    # Audited as failed, with why, on the job's timeline.
    entry = AuditEntry.objects.get()
    assert (entry.outcome, audited_ids(entry)) == ("failed", [dead])
    assert "the job is no longer dead" in entry.detail


@pytest.mark.parametrize("action", ["requeue", "purge"])
def test_an_action_on_a_job_a_worker_completed_meanwhile_is_audited_as_failed(
    broker: Broker, operator: Client, store: ObjectStore, action: str
) -> None:
    [job_id] = push(broker, "q", [1])
    [claimed] = broker.execute(claim_op("w1", ["q"], policy=broker.policy))
    plan = preview(operator, action=action, ids=job_id).context["plan"]
    assert plan.expect == ["running"]
    broker.execute(complete_op(claimed.id, claimed.lease))  # the job leaves the document

    response = confirm(operator, plan.token, reason="stuck?")

    message = shown_message(operator, response)
    assert f"{action.title()} refused, nothing changed: the job is no longer running" in message
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.outcome, entry.reason, audited_ids(entry)) == (action, "failed", "stuck?", [job_id])
    assert "no longer running" in entry.detail
    page = operator.get("/audit/", {"outcome": "failed"}).content.decode()
    assert "no longer running" in page and job_id[:8] in page


def test_a_selection_whose_jobs_all_left_is_audited_as_failed_with_a_plural(broker: Broker, operator: Client,
                                                                           store: ObjectStore) -> None:
    planned = [kill(broker) for _ in range(2)]
    plan = preview(operator, action="purge", ids=" ".join(planned)).context["plan"]
    broker.execute(purge_op(planned))

    message = shown_message(operator, confirm(operator, plan.token))

    assert "none of the 2 jobs is still dead" in message
    assert AuditEntry.objects.get().outcome == "failed"


@pytest.mark.parametrize(("action", "other"), [("pause", "resume"), ("resume", "pause")])
def test_a_pause_or_resume_that_someone_else_did_first_says_so(broker: Broker, operator: Client,
                                                               store: ObjectStore, action: str, other: str) -> None:
    push(broker, "q", [1])
    if action == "resume":
        broker.execute(pause_op("q", paused=True))
    plan = preview(operator, action=action, queue="q").context["plan"]
    broker.execute(pause_op("q", paused=action == "pause"))  # someone else got there first

    message = shown_message(operator, confirm(operator, plan.token))

    assert "since the dry run): nothing changed" in message
    assert document(store)["queues"]["q"]["paused"] is (action == "pause")


def test_purge_from_a_job_page_removes_only_that_job(broker: Broker, operator: Client, store: ObjectStore) -> None:
    """Defect 1 through the page's own form: the job page's ``status``
    leaked into its Purge button, and the run purged every dead job of the queue."""
    dead = [kill(broker) for _ in range(3)]
    page = operator.get(f"/jobs/{dead[0]}/").content.decode()
    [button] = [f for f in re.findall(r"<form .*?</form>", page, re.S) if ">Purge</button>" in f]
    fields = {html.unescape(k): html.unescape(v)
              for k, v in re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', button)}
    assert fields.keys() == {"csrfmiddlewaretoken", "action", "step", "next", "ids"}, fields

    dry = operator.post("/actions/", fields)
    assert dry.context["plan"].count == 1 and b"<strong>1</strong> job would be removed" in dry.content
    response = confirm(operator, dry.context["plan"].token, reason="one bad job")

    assert "Purged 1 job." in shown_message(operator, response)
    now = statuses(store)
    assert dead[0] not in now and now[dead[1]] == now[dead[2]] == "dead"
    assert audited_ids(AuditEntry.objects.get()) == [dead[0]]


# -- the token ---------------------------------------------------------------------------------------


def test_fields_posted_with_the_run_cannot_widen_it(broker: Broker, operator: Client, store: ObjectStore) -> None:
    a, b = kill(broker), kill(broker)
    plan = preview(operator, action="purge", ids=a).context["plan"]

    response = confirm(operator, plan.token, action="purge", ids=f"{a} {b}", queue="q", status="dead", group=GROUP)

    assert response.status_code == 302
    assert statuses(store) == {b: "dead"}
    assert audited_ids(AuditEntry.objects.get()) == [a]


def _tampered(token: str) -> str:
    i = len(token) - 5  # inside the signature
    return token[:i] + ("A" if token[i] != "A" else "B") + token[i + 1:]


@pytest.mark.parametrize(
    ("token", "status", "text"),
    [
        (_tampered, 403, b"not made by the dashboard"),
        (lambda t: t.split(":")[0], 403, b"not made by the dashboard"),
        (lambda t: "", 422, b"no dry run"),
    ],
    ids=["altered", "cut", "missing"],
)
def test_an_altered_token_is_refused_and_changes_nothing(broker: Broker, operator: Client, store: ObjectStore,
                                                         token: Callable[[str], str], status: int,
                                                         text: bytes) -> None:
    kill(broker)
    plan = preview(operator, action="purge", queue="q", status="dead").context["plan"]
    before = stored(store)

    response = confirm(operator, token(plan.token))

    assert response.status_code == status and text in response.content
    assert stored(store) == before and not AuditEntry.objects.exists()
    assert confirm(operator, plan.token).status_code == 302  # the real one still works


def test_a_forged_token_is_refused(broker: Broker, operator: Client, store: ObjectStore) -> None:
    kill(broker)
    plan = preview(operator, action="purge", queue="q", status="dead").context["plan"]
    user = AuditEntry._meta.get_field("user").related_model.objects.get(username="operator")
    forged = signing.dumps({"k": plan.key, "u": user.pk}, salt=plans.SALT, key="not the secret key")
    before = stored(store)

    response = confirm(operator, forged)

    assert response.status_code == 403 and stored(store) == before and not AuditEntry.objects.exists()


def test_another_users_token_is_refused(broker: Broker, operator: Client, store: ObjectStore) -> None:
    kill(broker)
    plan = preview(operator, action="purge", queue="q", status="dead").context["plan"]
    other = client_for(make_user("other", "view_dashboard", "purge_job"))
    before = stored(store)

    response = confirm(other, plan.token)

    assert response.status_code == 403 and b"another user" in response.content
    assert stored(store) == before and not AuditEntry.objects.exists()


def test_a_token_runs_once(broker: Broker, operator: Client, store: ObjectStore) -> None:
    kill(broker)
    plan = preview(operator, action="purge", queue="q", status="dead").context["plan"]
    assert confirm(operator, plan.token).status_code == 302
    kill(broker)  # a new dead job: a replayed confirmation must not reach it
    before = stored(store)

    again = confirm(operator, plan.token)

    assert again.status_code == 409 and b"already been run" in again.content
    assert stored(store) == before and AuditEntry.objects.count() == 1


def test_an_expired_token_is_refused(broker: Broker, operator: Client, store: ObjectStore,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    kill(broker)
    plan = preview(operator, action="purge", queue="q", status="dead").context["plan"]
    monkeypatch.setattr(plans, "PLAN_TTL_SECONDS", -1)
    before = stored(store)

    response = confirm(operator, plan.token)

    assert response.status_code == 409 and b"run it again" in response.content
    assert stored(store) == before and not AuditEntry.objects.exists()


def test_expired_plans_are_deleted_by_the_next_dry_run(broker: Broker, operator: Client,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    kill(broker)
    preview(operator, action="purge", queue="q", status="dead")
    monkeypatch.setattr(plans, "PLAN_TTL_SECONDS", -1)
    preview(operator, action="purge", queue="q", status="dead")
    assert ActionPlan.objects.count() == 1


def test_a_big_selection_keeps_a_small_token(broker: Broker, operator: Client, store: ObjectStore) -> None:
    ids = push(broker, "bulk", list(range(3000)))
    dry = preview(operator, action="purge", queue="bulk", status="pending")
    plan = dry.context["plan"]
    assert plan.count == 3000 and len(plan.token) < 200 and len(dry.content) < 50_000
    push(broker, "bulk", [1])  # one more arrives

    response = confirm(operator, plan.token, confirm_text="purge 3000")

    assert "Purged 3000 jobs" in shown_message(operator, response)
    assert not set(ids) & set(statuses(store)) and len(document(store)["jobs"]) == 1


def test_a_conditional_operation_survives_forwarding() -> None:
    for op in (requeue_op(["a", "b"], expect=["dead", "running"]), purge_op(["a"], expect=["pending"])):
        assert forward.decode(forward.encode(op), policy=None) == op  # type: ignore[arg-type]
