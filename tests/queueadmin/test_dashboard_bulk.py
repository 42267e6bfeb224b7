"""Bulk triage (issue 12, section 4): the jobs list's filters by worker and
error signature, its sorting, "all N matching this filter", the dead
letters' per-queue redrive and group links, and forgetting an empty queue.

Everything goes through a real broker (memory store) and the dashboard's own
forms, as an operator takes it. What a run does compared with its dry run
for each of these scopes (I9) is also in test_dashboard_plans.py's cases.
"""

from __future__ import annotations

import html
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.test import Client

from engine import Broker, NotLeader, ObjectStore
from engine.ops import claim_op, complete_op, fail_op, forget_op
from queueadmin.dashboard import actions
from queueadmin.dashboard.snapshot import error_signature
from queueadmin.dashboard.source import source
from queueadmin.models import AuditEntry
from tests.helpers import document, stored
from tests.queueadmin.api_client import Client as ApiClient
from tests.queueadmin.dashboard_fixtures import act, confirm, forms_with, kill, preview, push


def statuses(store: ObjectStore) -> dict[str, str]:
    doc = document(store)
    found = {j["id"]: j["status"] for j in doc["jobs"]}
    found.update({d["id"]: "dead" for d in doc["dead"]})
    return found


def shown_ids(response: Any) -> list[str]:
    return re.findall(r'<tr data-job-id="([^"]+)"', response.content.decode())


_queues = 0


def fail_by(broker: Broker, worker: str, queue: str = "", *, error: str = "boom", attempts: int = 1) -> str:
    """Push a job and fail it once as ``worker`` (dead with one attempt, else
    pending again), on a queue of its own unless ``queue`` is given."""
    global _queues
    _queues += 1
    queue = queue or f"f{_queues}"
    [job_id] = push(broker, queue, ["x"], max_attempts=attempts)
    [claimed] = broker.execute(claim_op(worker, [queue], policy=broker.policy))
    assert claimed.id == job_id
    broker.execute(fail_op(job_id, claimed.lease, error=error, retry_in_seconds=0, policy=broker.policy))
    return job_id


# -- filters and sorting ------------------------------------------------------------------------------


def test_jobs_filter_by_the_worker_holding_or_last_running_them(broker: Broker, viewer: Client) -> None:
    by_a = fail_by(broker, "worker-a")  # dead, last run by worker-a
    retried = fail_by(broker, "worker-b", attempts=3)  # pending again, last run by worker-b
    [held, _waiting] = push(broker, "q", [1, 2])
    [claimed] = broker.execute(claim_op("worker-a", ["q"], policy=broker.policy))  # running, held by worker-a
    assert claimed.id == held

    response = viewer.get("/jobs/", {"worker": "worker-a"})

    assert sorted(shown_ids(response)) == sorted([by_a, held]) and response.context["total"] == 2
    assert shown_ids(viewer.get("/jobs/", {"worker": "worker-b"})) == [retried]
    assert shown_ids(viewer.get("/jobs/", {"worker": "worker-a", "status": "running"})) == [held]
    assert "worker-b</span>" in viewer.get("/jobs/").content.decode(), "the last worker is shown, muted"


def test_jobs_filter_by_error_signature_matches_dead_letters_and_retries(broker: Broker, viewer: Client) -> None:
    first = fail_by(broker, "w", error="KeyError: 'order 17'")
    second = fail_by(broker, "w", error="KeyError: 'order 99'")  # the same signature
    retry = fail_by(broker, "w", error="KeyError: 'order 3'", attempts=2)  # pending, with a last error
    fail_by(broker, "w", error="TimeoutError: 30 s")
    signature = error_signature("KeyError: 'x'")

    everything = viewer.get("/jobs/", {"error": signature})
    dead_only = viewer.get("/jobs/", {"error": signature, "status": "dead"})

    assert sorted(shown_ids(everything)) == sorted([first, second, retry])
    assert sorted(shown_ids(dead_only)) == sorted([first, second])


def test_the_worker_and_error_filters_take_a_part_typed_when_nothing_matches_whole(broker: Broker,
                                                                                   viewer: Client) -> None:
    orders = fail_by(broker, "w-orders-1", error="KeyError: 'X999'")
    other = fail_by(broker, "w-orders-10", error="PaymentDeclined: card 4242")
    fail_by(broker, "w-emails", error="TimeoutError: 30 s")

    assert sorted(shown_ids(viewer.get("/jobs/", {"worker": "W-ORD"}))) == sorted([orders, other])
    # A whole name is that worker only, not every name it is part of (the Workers page links so).
    assert shown_ids(viewer.get("/jobs/", {"worker": "w-orders-1"})) == [orders]
    assert shown_ids(viewer.get("/jobs/", {"error": "keyerror"})) == [orders]
    assert shown_ids(viewer.get("/jobs/", {"error": "KeyError: 'X999'"})) == [orders]  # the error as it reads
    assert shown_ids(viewer.get("/jobs/", {"error": "card"})) == [other]
    assert shown_ids(viewer.get("/jobs/", {"error": "nothing like it"})) == []


def test_the_jobs_list_says_why_and_when_a_dead_letter_died_and_why_a_retry_failed(broker: Broker,
                                                                                    viewer: Client) -> None:
    dead = fail_by(broker, "w", error="Traceback (most recent call last):\n  File x\nKeyError: 'order 17'\n")
    retry = fail_by(broker, "w", error="TimeoutError: took 30 s", attempts=3)
    page = viewer.get("/jobs/").content.decode()
    rows = dict(re.findall(r'<tr data-job-id="([^"]+)">(.*?)</tr>', page, re.S))
    assert re.search(r'<time class="muted" [^>]*title="died [^"]*">[\d.]+ s ago</time>', rows[dead])
    assert '<div class="row-error" title="KeyError: &#x27;order 17&#x27;" data-testid="row-error">' in rows[dead]
    assert "died" not in rows[retry] and "TimeoutError: took 30 s</div>" in rows[retry]
    # A secret in an error is hidden from who may not see secrets, as everywhere.
    hidden = fail_by(broker, "w", error="AuthError: password=hunter2")
    source.reset()  # not the snapshot of a moment ago
    row = dict(re.findall(r'<tr data-job-id="([^"]+)">(.*?)</tr>', viewer.get("/jobs/").content.decode(), re.S))[hidden]
    assert "AuthError" in row and "hunter2" not in row


def test_a_signature_that_matches_whole_is_not_taken_as_a_part(broker: Broker, viewer: Client) -> None:
    short = fail_by(broker, "w", error="ValueError: bad")
    fail_by(broker, "w", error="ValueError: bad row 12")  # its signature holds the other's as a part
    assert shown_ids(viewer.get("/jobs/", {"error": error_signature("ValueError: bad")})) == [short]


def test_each_dead_letter_group_links_to_the_list_of_its_jobs(broker: Broker, viewer: Client) -> None:
    group = [kill(broker, error="ValueError: bad row 12"), kill(broker, error="ValueError: bad row 7")]
    kill(broker, error="other failure")
    kill(broker, "elsewhere", error="ValueError: bad row 1")  # same error, another queue: another group

    page = viewer.get("/dead/").content.decode()
    links = re.findall(r'<a href="(/jobs/\?[^"]+)" data-testid="group-jobs">List its (\d+) jobs?</a>', page)
    target = next(html.unescape(href) for href, n in links if "queue=q&" in html.unescape(href) and n == "2")

    assert parse_qs(urlsplit(target).query) == {
        "queue": ["q"],
        "status": ["dead"],
        "error": [error_signature("ValueError: bad row 12")],
    }
    assert sorted(shown_ids(viewer.get(target))) == sorted(group)


def test_a_shortened_job_id_carries_the_whole_id(broker: Broker, viewer: Client) -> None:
    """Lists cut ids to 14 characters; the whole id is the link's title,
    for an operator to read or copy into the exact-id search."""
    [job_id] = push(broker, "q", [1], ids=["invoice-2026-12-06-000042"])
    kill(broker, "d")
    jobs = viewer.get("/jobs/", {"queue": "q"}).content.decode()
    assert f'title="{job_id}">invoice-2026-…</a>' in jobs
    dead = viewer.get("/dead/").content.decode()
    shown = re.findall(r'href="/jobs/([^/"]+)/" class="id"', dead)
    assert shown and all(f'title="{i}">' in dead for i in shown)


@pytest.mark.parametrize("sort", ["age", "-age", "attempts", "-attempts"])
def test_jobs_sort_by_age_and_attempts_both_ways(broker: Broker, viewer: Client, sort: str) -> None:
    [oldest] = push(broker, "q", [1])
    retried = fail_by(broker, "w", attempts=5)  # 1 attempt, pending again at the back of the document
    [youngest] = push(broker, "q", [3])
    expected = {
        "age": [youngest, retried, oldest],
        "-age": [oldest, retried, youngest],
        "attempts": [oldest, youngest, retried],
        "-attempts": [retried, oldest, youngest],
    }[sort]
    assert shown_ids(viewer.get("/jobs/")) == [oldest, retried, youngest], "document order without a sort"

    assert shown_ids(viewer.get("/jobs/", {"sort": sort})) == expected


def test_sort_links_in_the_headers_keep_the_filter_and_flip_direction(broker: Broker, viewer: Client) -> None:
    push(broker, "q", [1, 2])
    page = viewer.get("/jobs/", {"queue": "q", "sort": "-age"}).content.decode()
    age = html.unescape(re.search(r'<a href="([^"]+)" data-sort="age"', page).group(1))  # type: ignore[union-attr]
    attempts = html.unescape(re.search(r'<a href="([^"]+)" data-sort="attempts"', page).group(1))  # type: ignore[union-attr]

    assert parse_qs(age[1:]) == {"queue": ["q"], "sort": ["age"]}  # sorted oldest first now: flip
    assert parse_qs(attempts[1:]) == {"queue": ["q"], "sort": ["-attempts"]}
    assert 'aria-sort="descending"' in page and "Enqueued ▼" in page


# -- all N matching this filter --------------------------------------------------------------------------


def test_all_matching_acts_on_every_page_and_needs_typed_confirmation_above_100(
    broker: Broker, operator: Client, store: ObjectStore
) -> None:
    dead = [kill(broker) for _ in range(103)]
    kill(broker, "other")
    page = operator.get("/jobs/", {"queue": "q", "status": "dead"})
    assert len(shown_ids(page)) == 50 and page.context["total"] == 103
    [fields] = forms_with(page.content.decode(), "Requeue all 103 matching")
    assert fields["filter"] == "queue=q&status=dead" and "ids" not in fields and "queue" not in fields

    dry = operator.post("/actions/", fields)
    plan = dry.context["plan"]
    assert plan.count == 103 and sorted(plan.ids) == sorted(dead)
    assert b"<strong>103</strong> jobs would be moved back to pending" in dry.content
    assert plan.confirm_phrase == "requeue 103"
    before = stored(store)

    wrong = confirm(operator, plan.token, reason="bad deploy", confirm_text="requeue 100")
    assert wrong.status_code == 422 and "type “requeue 103” to confirm" in wrong.content.decode()
    assert stored(store) == before and not AuditEntry.objects.exists()

    done = confirm(operator, plan.token, reason="bad deploy", confirm_text="requeue 103")

    assert done.status_code == 302
    now = statuses(store)
    assert all(now[i] == "pending" for i in dead) and list(now.values()).count("dead") == 1
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.outcome, entry.count) == ("requeue", "ok", 103)
    assert entry.target == "filter: queue=q status=dead"


def test_all_matching_requeue_leaves_out_pending_jobs_and_says_how_many(
    broker: Broker, operator: Client, store: ObjectStore
) -> None:
    dead = kill(broker, error="Boom: 1")
    retried = fail_by(broker, "w", error="Boom: 2", attempts=3)  # pending, same signature

    plan = preview(operator, action="requeue", filter="error=" + error_signature("Boom: 1")).context["plan"]

    assert plan.ids == [dead] and retried not in plan.ids
    assert "1 matching job is already pending: it is left out." in plan.notes
    assert plan.confirm_phrase is None


def test_selected_jobs_left_out_for_one_reason_get_one_note(broker: Broker, operator: Client) -> None:
    """A page of selected pending jobs sent to requeue is one note, naming
    a few of them, not a line a job."""
    dead = kill(broker)
    pending = push(broker, "q", list(range(5)))
    plan = preview(operator, action="requeue", ids=",".join([*pending, dead])).context["plan"]
    assert plan.ids == [dead]
    left = [n for n in plan.notes if "left out" in n]
    assert left == [f"5 of the selected jobs are already pending: they are left out ({', '.join(pending[:3])}, …)."]
    # One job left out for a reason keeps its own sentence (test_dashboard_stop.py has a stop's).
    single = preview(operator, action="requeue", ids=",".join([pending[0], dead])).context["plan"]
    assert [n for n in single.notes if "left out" in n] == [f"Job {pending[0]} is already pending: it is left out."]


def test_all_matching_without_a_filter_is_refused(broker: Broker, operator: Client, store: ObjectStore) -> None:
    kill(broker)
    dry = preview(operator, action="purge", filter="page=2&sort=age")
    assert not dry.context["plan"].token
    assert "Choose a filter first" in dry.content.decode()


@pytest.mark.parametrize("extra", [{"ids": "x"}, {"queue": "q"}, {"group": "0" * 16}])
def test_a_filter_mixed_with_another_scope_is_refused(
    broker: Broker, operator: Client, store: ObjectStore, extra: dict[str, str]
) -> None:
    kill(broker)
    before = stored(store)
    response = act(operator, action="purge", filter="queue=q", **extra)
    assert response.status_code == 422 and stored(store) == before


def test_read_only_staff_get_no_bulk_buttons(broker: Broker, viewer: Client) -> None:
    kill(broker)
    jobs = viewer.get("/jobs/", {"queue": "q"}).content.decode()
    dead = viewer.get("/dead/").content.decode()
    assert "matching</button>" not in jobs and "data-select-all" not in jobs
    assert "Redrive every dead job" not in dead


# -- dead letters: every dead job of a queue -------------------------------------------------------------


def test_requeue_every_dead_job_of_a_queue(broker: Broker, operator: Client, store: ObjectStore) -> None:
    mine = [kill(broker, error="A"), kill(broker, error="B")]  # two groups, one queue
    theirs = kill(broker, "other")
    page = operator.get("/dead/").content.decode()
    [fields] = forms_with(page, "Redrive every dead job of q<")
    assert {k: fields[k] for k in ("action", "queue")} == {"action": "redrive", "queue": "q"}
    assert "status" not in fields and "group" not in fields

    dry = operator.post("/actions/", fields)
    assert sorted(dry.context["plan"].ids) == sorted(mine)
    response = confirm(operator, dry.context["plan"].token, reason="fixed the bug")

    assert response.status_code == 302
    now = statuses(store)
    assert [now[i] for i in mine] == ["pending", "pending"] and now[theirs] == "dead"
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.queue, entry.count, entry.target) == ("redrive", "q", 2, "queue=q status=dead")


def test_requeue_every_dead_job_of_a_large_queue_needs_typed_confirmation(
    broker: Broker, operator: Client, store: ObjectStore
) -> None:
    for _ in range(101):
        kill(broker)
    plan = preview(operator, action="redrive", queue="q").context["plan"]
    assert plan.confirm_phrase == "redrive 101"
    before = stored(store)
    assert confirm(operator, plan.token).status_code == 422
    assert stored(store) == before


# -- forgetting an empty queue ---------------------------------------------------------------------------


def drained(broker: Broker, queue: str = "old") -> None:
    """A queue that had a job, which completed: its counters linger in the document."""
    push(broker, queue, [1])
    [claimed] = broker.execute(claim_op("w", [queue], policy=broker.policy))
    broker.execute(complete_op(claimed.id, claimed.lease))


def test_an_empty_queue_can_be_forgotten_from_the_overview(
    broker: Broker, operator: Client, store: ObjectStore
) -> None:
    drained(broker)
    push(broker, "busy", [1])
    page = operator.get("/").content.decode()
    forget = forms_with(page, ">Forget</button>")
    assert [f["queue"] for f in forget] == ["old"], "only the empty queue offers Forget"

    dry = operator.post("/actions/", forget[0])
    assert "has no jobs" in dry.content.decode() and "1 pushed, 1 completed" in dry.content.decode()
    response = confirm(operator, dry.context["plan"].token, reason="renamed to new")

    assert response.status_code == 302
    assert "Forgot queue old." in html.unescape(operator.get("/").content.decode())
    assert set(document(store)["queues"]) == {"busy"}
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.outcome, entry.queue, entry.reason) == ("forget", "ok", "old", "renamed to new")


def test_a_queue_with_jobs_cannot_be_planned_for_forgetting(
    broker: Broker, operator: Client, store: ObjectStore
) -> None:
    kill(broker, "q")
    dry = preview(operator, action="forget", queue="q")
    assert not dry.context["plan"].token
    assert "holds 1 job (pending, running or dead)" in dry.content.decode()


def test_a_job_arriving_after_the_dry_run_makes_forget_fail_and_change_nothing(
    broker: Broker, operator: Client, store: ObjectStore
) -> None:
    drained(broker)
    plan = preview(operator, action="forget", queue="old").context["plan"]
    [late] = push(broker, "old", ["late"])
    before = stored(store)

    response = confirm(operator, plan.token, reason="cleanup")

    assert response.status_code == 302
    assert stored(store) == before
    assert statuses(store)[late] == "pending" and "old" in document(store)["queues"]
    entry = AuditEntry.objects.get()
    assert entry.outcome == "failed" and "queue 'old' is not empty" in entry.detail
    assert "Forget failed" in html.unescape(operator.get("/").content.decode())


def test_forgetting_a_queue_someone_else_forgot_says_so(broker: Broker, operator: Client, store: ObjectStore) -> None:
    drained(broker)
    plan = preview(operator, action="forget", queue="old").context["plan"]
    broker.execute(forget_op("old"))

    confirm(operator, plan.token)

    assert "since the dry run): nothing changed" in AuditEntry.objects.get().detail


def test_read_only_staff_cannot_forget(broker: Broker, viewer: Client, store: ObjectStore) -> None:
    drained(broker)
    assert ">Forget</button>" not in viewer.get("/").content.decode()
    before = stored(store)
    assert act(viewer, action="forget", queue="old").status_code == 403
    assert stored(store) == before


@pytest.fixture
def cluster_key(settings: Any, db: None) -> None:
    """A private secret key shared by the nodes (set before anyone signs in)."""
    settings.SECRET_KEY = "test-cluster-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz"


@pytest.mark.parametrize("held", [False, True])
def test_forget_on_a_standby_runs_on_the_leader(
    cluster_key: None, broker: Broker, operator: Client, store: ObjectStore, monkeypatch: pytest.MonkeyPatch, held: bool
) -> None:
    drained(broker)
    plan = preview(operator, action="forget", queue="old").context["plan"]
    if held:
        push(broker, "old", [1])
    real_execute = broker.execute

    def standby(op: object) -> None:
        raise NotLeader("http://leader.test:8000")

    def leader(url: str, *, content: bytes, **kwargs: Any) -> httpx.Response:
        monkeypatch.setattr(broker, "execute", real_execute)
        answer = ApiClient().post("/api/v1/operator", content.decode(), content_type="text/plain")
        monkeypatch.setattr(broker, "execute", standby)
        return httpx.Response(answer.status_code, content=answer.content, request=httpx.Request("POST", url))

    monkeypatch.setattr(broker, "execute", standby)
    monkeypatch.setattr("queueadmin.api.forward.httpx.post", leader)

    confirm(operator, plan.token, reason="from a standby")

    entry = AuditEntry.objects.get()
    if held:
        assert entry.outcome == "failed" and "is not empty" in entry.detail
        assert "old" in document(store)["queues"]
    else:
        assert entry.outcome == "ok" and "on the leader http://leader.test:8000" in entry.detail
        assert "old" not in document(store)["queues"]
    assert actions.Action(entry.action) is actions.Action.FORGET


def test_the_worker_and_error_filters_suggest_known_values(broker: Broker, viewer: Client) -> None:
    fail_by(broker, "worker-7", error="KeyError: 'a'")
    page = html.unescape(viewer.get("/jobs/").content.decode())
    assert '<option value="worker-7">' in page
    signature = error_signature("KeyError: 'a'")
    assert f'<option value="{signature}">' in page
