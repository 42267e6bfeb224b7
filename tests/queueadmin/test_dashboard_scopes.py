"""Queue scopes (queueadmin.dashboard.scopes): a user, or a group's members,
limited to queues matching a pattern may act only on those, from the
dashboard's dry run to its run, from the Submit page and from
``manage.py queueaction``; everyone else acts as before."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError
from django.test import Client

from engine import Broker, ObjectStore
from queueadmin.dashboard import scopes
from queueadmin.models import AuditEntry, QueueScope
from tests.queueadmin.dashboard_fixtures import (
    claim_ids,
    client_for,
    confirm,
    kill,
    make_user,
    preview,
    queue_counters,
    queueaction,
)

pytestmark = pytest.mark.django_db

PERMS = ("view_dashboard", "purge_job", "requeue_job", "pause_queue", "submit_job")


def billing_operator() -> User:
    """A user with every action's permission, in a group scoped to ``billing-*``."""
    user = make_user("billing-ops", *PERMS)
    team = Group.objects.create(name="billing team")
    QueueScope.objects.create(group=team, pattern="billing-*")
    user.groups.add(team)
    return user


def stored(store: ObjectStore) -> bytes:
    blob = store.get("queue.json")
    assert blob is not None
    return blob.data


def test_a_scoped_user_acts_on_their_queues_and_is_refused_the_others(broker: Broker, store: ObjectStore) -> None:
    ours = kill(broker, "billing-eu")
    theirs = kill(broker, "emails")
    client = client_for(billing_operator())

    dry = preview(client, action="requeue", ids=ours)
    assert dry.status_code == 200 and dry.context["plan"].queues == ["billing-eu"]
    confirm(client, dry.context["plan"].token, reason="ours")
    assert queue_counters(broker, "billing-eu")["pushed"] == 1 and claim_ids(broker, queue="billing-eu") == [ours]

    before = stored(store)
    refused = preview(client, action="purge", ids=theirs)
    assert refused.status_code == 403
    page = refused.content.decode()
    assert ("Your account acts only on queues matching billing-*; this action touches emails, so it is refused "
            "and nothing was changed.") in page and 'data-testid="refused"' in page
    # A selection reaching one queue outside the scope is refused whole, naming that queue only.
    both = preview(client, action="purge", ids=f"{ours},{theirs}")
    assert both.status_code == 403 and "this action touches emails," in both.content.decode()
    assert preview(client, action="pause", queue="emails").status_code == 403
    assert preview(client, action="rate_limit", queue="emails", rate_jobs=1, rate_seconds=1).status_code == 403
    assert preview(client, action="redrive", queue="emails").status_code == 403
    assert stored(store) == before
    assert not AuditEntry.objects.filter(queue="emails").exists()


def test_a_filter_across_queues_is_refused_when_one_of_them_is_out_of_scope(broker: Broker) -> None:
    kill(broker, "billing-eu", error="same error")
    kill(broker, "emails", error="same error")
    client = client_for(billing_operator())
    refused = preview(client, action="requeue", filter="status=dead")
    assert refused.status_code == 403 and "touches emails," in refused.content.decode()
    allowed = preview(client, action="requeue", filter="status=dead&queue=billing-eu")
    assert allowed.status_code == 200 and allowed.context["plan"].count == 1


def test_a_scope_narrowed_after_the_dry_run_refuses_the_run(broker: Broker, store: ObjectStore) -> None:
    user = billing_operator()
    QueueScope.objects.create(user=user, pattern="emails")
    job = kill(broker, "emails")
    client = client_for(user)
    dry = preview(client, action="purge", ids=job)
    assert dry.status_code == 200
    QueueScope.objects.filter(user=user).delete()  # an administrator takes the queue away meanwhile
    before = stored(store)

    run = confirm(client, dry.context["plan"].token, reason="too late")

    assert run.status_code == 403 and "touches emails," in run.content.decode()
    assert stored(store) == before and not AuditEntry.objects.exists()


def test_submit_to_a_queue_out_of_scope_is_refused(broker: Broker, store: ObjectStore) -> None:
    client = client_for(billing_operator())
    refused = client.post("/submit/", {"queue": "emails", "payload": "{}", "max_attempts": "", "delay_seconds": "0"})
    assert refused.status_code == 403 and "touches emails," in refused.content.decode()
    assert b'"jobs":[]' in stored(store).replace(b" ", b"")
    ok = client.post("/submit/", {"queue": "billing-us", "payload": "{}", "max_attempts": "", "delay_seconds": "0"})
    assert ok.status_code == 200 and ok.context["created"]


def test_queueaction_applies_the_users_scope(broker: Broker) -> None:
    billing_operator()
    job = kill(broker, "emails")
    with pytest.raises(CommandError, match="'billing-ops': Your account acts only on queues matching billing-\\*; "
                                           "this action touches emails"):
        queueaction("purge", "--ids", job, "--user", "billing-ops", "--reason", "r", "--yes")
    assert queue_counters(broker, "emails")["purged"] == 0


def test_no_scope_or_a_superuser_acts_on_every_queue(db: None) -> None:
    plain = make_user("plain", *PERMS)
    boss = make_user("boss", superuser=True)
    QueueScope.objects.create(user=boss, pattern="billing-*")
    assert scopes.patterns(plain) is None and scopes.patterns(boss) is None
    assert scopes.refusal(plain, ["emails", "billing-eu"]) is None and scopes.refusal(boss, ["emails"]) is None
    scoped = billing_operator()
    QueueScope.objects.create(user=scoped, pattern="reports")
    assert scopes.patterns(scoped) == ["billing-*", "reports"]
    assert scopes.allows(["billing-*"], "billing-eu") and not scopes.allows(["billing-*"], "Billing-eu")
    assert scopes.refusal(scoped, ["reports", "billing-x"]) is None
    # An action naming no queue (a schedule this node does not define): only the unscoped may take it.
    assert "touches no queue (a schedule this node does not define)," in (scopes.refusal(scoped, [""]) or "")


def test_the_operators_own_group_scopes_do_not_reach_other_users(broker: Broker, operator: Client) -> None:
    billing_operator()  # another user's scope
    job = kill(broker, "emails")
    assert preview(operator, action="purge", ids=job).status_code == 200


def test_a_scope_names_a_user_or_a_group_not_both_nor_neither(db: None) -> None:
    from django.db import IntegrityError, transaction

    user = make_user("someone")
    group = Group.objects.create(name="some group")
    for fields in ({}, {"user": user, "group": group}):
        with pytest.raises(IntegrityError), transaction.atomic():
            QueueScope.objects.create(pattern="x", **fields)
    assert str(QueueScope.objects.create(pattern="x-*", group=group)) == "some group: x-*"


def test_buttons_for_queues_out_of_scope_are_disabled_and_say_why(broker: Broker) -> None:
    ours, theirs = kill(broker, "billing-eu"), kill(broker, "emails")
    client = client_for(billing_operator())
    why = 'disabled title="Outside your queue scope (billing-*): ask an administrator to act on emails"'
    assert why in client.get(f"/jobs/{theirs}/").content.decode()
    assert "disabled" not in client.get(f"/jobs/{ours}/").content.decode().split('data-testid="job-status"')[1]
    overview = client.get("/").content.decode()
    assert overview.count(why) == 1 and "act on billing-eu" not in overview  # emails' Pause only
    assert why in client.get("/queues/emails/").content.decode()  # its limit and rate forms
    assert 'data-testid="out-of-scope"' not in client.get("/queues/billing-eu/").content.decode()
    dead = client.get("/dead/").content.decode()
    assert dead.count(why) >= 2 and "act on billing-eu" not in dead  # emails' redrive and purge buttons
