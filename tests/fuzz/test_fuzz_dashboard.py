"""Fuzzing the dashboard: its pages, the Submit form, and every operator action.

Each example builds a random queue (pending, running and dead jobs in two
queues) on a fresh broker and signs in as an operator with every permission.

* Every page renders (200), whatever the queue holds, and every job in the
  document has a job page a browser can reach.
* The Submit form answers 200 or 422, never 500; a refusal changes nothing;
  a submitted job is readable on its page, the document page and the API.
* Operator actions: a dry run changes nothing, and its run acts on at most
  the jobs the dry run showed (I9). Actions are posted two ways: with fuzzed
  form fields, and exactly as each button on each page posts them. An
  operator scoped to one queue (queueadmin.dashboard.scopes) changes
  nothing of the other, whatever they post.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

import orjson
import pytest
from django.contrib.auth.models import User
from django.test import Client
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from engine import Broker, Policy, pause_schedule_op, schedule
from engine.ops import FireSchedules, claim_op, fail_op, push_op, rate_limit_op
from queueadmin.dashboard.forms import ACTIONS
from queueadmin.dashboard.snapshot import error_signature, group_key
from tests.fuzz.asgi_driver import call, client_path, job_path
from tests.fuzz.checks import check_answer, check_document, stored
from tests.fuzz.nodes import AUTH, Nodes
from tests.fuzz.pages import forms, planned, within
from tests.fuzz.profiles import scaled
from tests.fuzz.strategies import json_text, nested

PAGE_SECONDS = 10.0
RECURRING = schedule("fuzz-every-minute", queue="q", payload={"n": 1}, policy=Policy(), every_seconds=60)
ERRORS = ("boom", "bang 42")

# (queue, fate, error) per job: fate is the status the job ends in.
queue_specs = st.lists(st.tuples(st.sampled_from(["q", "r"]), st.sampled_from(["pending", "running", "dead"]),
                                 st.sampled_from(ERRORS)), min_size=1, max_size=8)


def build(broker: Broker, spec: list[tuple[str, str, str]]) -> dict[str, str]:
    """Make the jobs ``spec`` describes; return each id's status."""
    policy = broker.policy
    made: dict[str, str] = {}
    # Running and dead ones first, each claimed as soon as it is pushed (no
    # other job is pending then); the pending ones last.
    ordered = sorted(enumerate(spec), key=lambda e: e[1][1] == "pending")
    for i, (queue, fate, error) in ordered:
        job_id = f"{queue}{i}"
        broker.execute(push_op(queue, [{"n": i}], policy=policy, ids=[job_id], max_attempts=1))
        if fate != "pending":
            [claimed] = broker.execute(claim_op("w-fuzz", [queue], policy=policy))
            assert claimed.id == job_id
            if fate == "dead":
                broker.execute(fail_op(job_id, claimed.lease, error=error, retry_in_seconds=None, policy=policy))
        made[job_id] = fate
    return made


def statuses(broker: Broker) -> dict[str, str]:
    doc = orjson.loads(stored(broker))
    found = {j["id"]: j["status"] for j in doc["jobs"]}
    found.update({d["id"]: "dead" for d in doc["dead"]})
    return found


def affected(before: dict[str, str], after: dict[str, str]) -> set[str]:
    """Jobs an action removed or moved (status changed)."""
    return {i for i, s in before.items() if after.get(i) != s}


@pytest.fixture
def scoped_client(db: None) -> Client:
    """An operator with every queueadmin permission, scoped to queue ``q`` (never ``r``)."""
    from django.contrib.auth.models import Permission

    from queueadmin.models import QueueScope

    user = User.objects.create_user("fuzz-scoped", "scoped@example.com", "pw")
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="queueadmin"))
    QueueScope.objects.create(user=user, pattern="q")
    client = Client()
    client.force_login(user)
    return client


def page(client: Client, path: str) -> Any:
    with within(PAGE_SECONDS, f"GET {path}"):
        return client.get(path)


def post(client: Client, path: str, data: dict[str, str]) -> Any:
    with within(PAGE_SECONDS, f"POST {path}"):
        return client.post(path, data)


def dashboard_job_path(job_id: str) -> str:
    """The job page's path as a browser sends it (dot segments removed)."""
    return client_path(f"/jobs/{quote(job_id, safe='')}/")


# -- pages -------------------------------------------------------------------------------------


odd_payloads = st.one_of(
    st.builds(nested, st.integers(240, 256), st.sampled_from([1, [], "x"]), kind=st.sampled_from(["list", "dict"])),
    st.integers(-(2**63), 2**63 - 1), st.text(max_size=50), st.just("x" * 5000),
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3), st.just({"<script>": "</pre>"}),
)
odd_job_ids = st.one_of(st.sampled_from([".", "..", "...", "-", "a.", "x" * 200, ":", "_"]),
                        st.from_regex(r"[A-Za-z0-9_.:-]{1,20}", fullmatch=True))
page_params = st.dictionaries(st.sampled_from(["queue", "status", "q", "id", "page", "action", "outcome", "user",
                                               "job", "worker", "error", "sort", "since", "until", "format", "from"]),
                              st.one_of(st.sampled_from(["", "q", "pending", "dead", "-1", "999", "x" * 300, "w-fuzz",
                                                         "boom", "age", "-attempts", "2026-12-04", "0000-01-01",
                                                         "9999-12-31", "csv", "json"]),
                                        st.text(max_size=10)), max_size=3)


@settings(max_examples=scaled(40))
@given(spec=queue_specs, payload=odd_payloads, job_id=odd_job_ids, params=page_params,
       delay=st.sampled_from([0, 0.001, 3600, 31622400]),
       rate=st.sampled_from([None, (1, 0.01), (1, 86_400), (1_000_000, 0.5)]))
def test_pages_render(nodes: Nodes, operator_client: Client, spec: list[tuple[str, str, str]], payload: Any,
                      job_id: str, params: dict[str, str], delay: float, rate: tuple[int, float] | None) -> None:
    """Every page renders whatever the queue holds; every job has a reachable page (defects 6, 7). A job
    pushed due later (up to the longest delay a push takes) has its queue page say when it comes due."""
    with nodes.fresh() as broker:
        made = build(broker, spec)
        body = json_text({"queue": "q", "jobs": [{"id": job_id, "payload": payload, "delay_seconds": delay}]}).encode()
        answer = call("POST", "/api/v1/jobs", body, headers=AUTH)
        check_answer(answer, "push")
        query = "?" + urlencode(params) if params else ""
        # A schedule's mark that no definition on this node explains (the schedules page lists it).
        tick = RECURRING.latest_due(datetime.now(UTC))
        assert tick is not None
        broker.execute(FireSchedules(fires=(RECURRING.fire(tick),), since=tick))
        # And pauses: of that schedule, and of one with no mark (the page offers Resume and Forget).
        broker.execute(pause_schedule_op(RECURRING.name))
        broker.execute(pause_schedule_op("fuzz-paused-unmarked"))
        if rate is not None:  # a rate limit on q, its window opened (and perhaps used up) by a claim
            broker.execute(rate_limit_op("q", *rate))
            broker.execute(claim_op("fuzz-rate", ["q"], policy=broker.policy))
        for path in ("/", "/jobs/" + query, "/workers/", "/dead/", "/document/", "/audit/" + query, "/queues/q/",
                     "/queues/r/", "/schedules/"):
            response = page(operator_client, path)
            assert response.status_code == 200, f"GET {path}: {response.status_code}"
            if path == "/queues/q/" and delay >= 3600 and answer.status == 201 and job_id not in made:
                assert b'data-testid="next-due"' in response.content, f"a job due in {delay} s: no next due"
        # The audit log's export takes the page's filters: CSV or JSON, or 400 for another format.
        export = page(operator_client, "/audit/export/" + query)
        if (params.get("format") or "csv") in ("csv", "json"):
            assert export.status_code == 200, f"GET /audit/export/{query}: {export.status_code}"
            data = b"".join(export.streaming_content)
            if params.get("format") == "json":
                orjson.loads(data)
        else:
            assert export.status_code == 400 and b"Unknown export format" in export.content
        for shown in statuses(broker):
            path = dashboard_job_path(shown)
            response = page(operator_client, path)
            assert response.status_code == 200, f"job {shown!r}: GET {path} answered {response.status_code}"
            assert f"<code>{shown}</code>" in response.content.decode(), \
                f"job {shown!r}: GET {path} shows another page"
            # Its whole payload downloads, as JSON, and it can be cloned.
            download = page(operator_client, path + "payload.json")
            assert download.status_code == 200, f"job {shown!r}: its payload download answered {download.status_code}"
            orjson.loads(download.content)
            clone = page(operator_client, "/submit/?" + urlencode({"from": shown}))
            assert clone.status_code == 200 and b'data-testid="clone-note"' in clone.content


# -- submit ------------------------------------------------------------------------------------

form_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
payload_texts = st.one_of(
    # JSON text of values orjson can write (integers past 64 bits come as text below)
    st.builds(lambda v: orjson.dumps(v).decode(),
              st.dictionaries(st.text(max_size=5), st.integers(-(2**63), 2**63 - 1), max_size=3)),
    st.builds(lambda d: "[" * d + "]" * d, st.integers(240, 300)),
    st.sampled_from(['"\\ud800"', "1e400", "123456789012345678901234567890", "NaN", "{", "", " ", "null",
                     '{"a": 1, "a": 2}', "\ufeff{}", '"x"' + " " * 10000, "[" + "1," * 3000 + "1]"]),
    form_text,
)
submit_fields = st.fixed_dictionaries({}, optional={
    "queue": st.one_of(st.sampled_from(["q", "default", " q ", "", "q" * 101, ".", "q/r"]), form_text),
    "payload": payload_texts,
    "max_attempts": st.one_of(st.sampled_from(["", "1", "1000", "1001", "0", "-1", "1e3", "99999999999999999999"]),
                              form_text),
    "delay_seconds": st.one_of(st.sampled_from(["", "0", "0.5", "-1", "1e400", "nan", "inf", "31622400",
                                                "31622401"]), form_text),
    "reason": form_text,
})


@given(fields=submit_fields)
def test_submit_form(nodes: Nodes, operator_client: Client, fields: dict[str, str]) -> None:
    with nodes.fresh() as broker:
        before = stored(broker)
        response = post(operator_client, "/submit/", fields)
        assert response.status_code in (200, 422), f"submit {fields!r}: {response.status_code}"
        check_document(broker, "submit")
        after = statuses(broker)
        if response.status_code == 422:
            assert stored(broker) == before, "a refused submit changed the document"
        for job_id in after:
            assert page(operator_client, dashboard_job_path(job_id)).status_code == 200, f"job {job_id!r} page"
            assert check_answer(call("GET", job_path(job_id), headers=AUTH), "GET job")["id"] == job_id
        assert page(operator_client, "/document/").status_code == 200
        answer = call("GET", "/api/v1/document", headers=AUTH)
        assert check_answer(answer, "GET document") and answer.status == 200


# -- operator actions (I9) ---------------------------------------------------------------------------


def act_and_check(client: Client, broker: Broker, data: dict[str, str], what: str) -> None:
    """Post a dry run of ``data``, then run it exactly as the dry run's page
    offers; the run must act on at most what the dry run showed (I9)."""
    before_bytes, before = stored(broker), statuses(broker)
    preview = post(client, "/actions/", {**data, "step": "preview"})
    assert preview.status_code in (200, 403, 409, 422), f"{what}: dry run answered {preview.status_code}"
    assert stored(broker) == before_bytes, f"{what}: the dry run changed the document"
    html = preview.content.decode()
    shown = planned(html)
    run_forms = [f for f in forms(html, "/actions/") if ("step", "run") in f.fields]
    if preview.status_code != 200 or not run_forms:
        return
    [form] = run_forms
    fields = dict(form.fields)
    fields["reason"] = "fuzzing I9"
    phrase = re.search(r"Type <code>([^<]+)</code> to confirm", html)
    if "confirm_text" in html and phrase is not None:
        fields["confirm_text"] = phrase.group(1)
    response = post(client, "/actions/", fields)
    assert response.status_code in (204, 302, 409, 422), f"{what}: run answered {response.status_code}"
    check_document(broker, what)
    acted = affected(before, statuses(broker))
    if shown is None:  # pause or resume: no job moves
        assert not acted, f"{what}: pausing or resuming changed jobs {sorted(acted)}"
        return
    count, sample = shown
    assert len(acted) <= count, (
        f"{what}: the dry run showed {count} job(s) {sample}, the run acted on {len(acted)}: {sorted(acted)}")
    if count <= len(sample):
        assert acted <= set(sample), f"{what}: the run acted on {sorted(acted - set(sample))}, not in the dry run"


@st.composite
def action_fields(draw: st.DrawFn, ids: list[str], groups: list[str]) -> dict[str, str]:
    pick_ids = st.lists(st.one_of(st.sampled_from(ids), st.sampled_from(["nope", ".", "", "q0,q1"])), max_size=4)
    optional = {
        "ids": st.builds(lambda xs, sep: sep.join(xs), pick_ids, st.sampled_from([" ", ",", ", ", "\n"])),
        "queue": st.sampled_from(["q", "r", "", "zz", ".", "q r", "💥"]),
        "status": st.sampled_from(["pending", "running", "dead", "", "junk"]),
        "group": st.one_of(st.sampled_from(groups or ["none"]), st.sampled_from(["", "nope"])),
        # The jobs list's filter, as its "all N matching" buttons post it.
        "filter": st.sampled_from(["queue=q&status=dead", "status=pending", "queue=r", "worker=w-fuzz",
                                   f"error={quote(error_signature('bang 42'))}", "id=q0", "q=1", "page=2&sort=age",
                                   "status=junk", "%ff=%00", ""]),
        "next": st.sampled_from(["/jobs/", "", "http://evil.example/", "//evil.example", "/jobs/?status=pending"]),
        "reason": st.sampled_from(["", "because"]),
    }
    action = draw(st.one_of(st.sampled_from(ACTIONS), st.sampled_from(["", "delete", "PURGE"])))
    return {"action": action, **draw(st.fixed_dictionaries({}, optional=optional))}


def dead_groups(spec: list[tuple[str, str, str]]) -> list[str]:
    return sorted({group_key(q, error_signature(e)) for q, fate, e in spec if fate == "dead"})


@given(spec=queue_specs, data=st.data())
def test_actions_with_fuzzed_fields(nodes: Nodes, operator_client: Client, spec: list[tuple[str, str, str]],
                                    data: st.DataObject) -> None:
    with nodes.fresh() as broker:
        made = build(broker, spec)
        fields = data.draw(action_fields(sorted(made), dead_groups(spec)), label="fields")
        act_and_check(operator_client, broker, fields, f"action {fields!r}")


def buttons_on(nodes: Nodes, client: Client, spec: list[tuple[str, str, str]],
               path: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The jobs ``spec`` makes on a fresh broker, and the fields every action
    button of ``path`` posts as ``client`` sees it."""
    with nodes.fresh() as broker:
        made = build(broker, spec)
        response = page(client, path)
        assert response.status_code == 200, f"GET {path}: {response.status_code}"
        return made, [s for f in forms(response.content.decode(), "/actions/") for s in f.submissions()
                      if "action" in s]


def fill_selection(fields: dict[str, str], made: dict[str, str], data: st.DataObject) -> None:
    """The jobs page's selection buttons post the ticked rows, which a script fills in: tick some."""
    if fields.get("ids") == "":
        fields["ids"] = " ".join(data.draw(st.lists(st.sampled_from(sorted(made)), min_size=1, max_size=3,
                                                    unique=True), label="selected"))


@settings(max_examples=scaled(10), phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(spec=queue_specs, data=st.data())
def test_a_scoped_operator_never_changes_a_queue_outside_their_scope(
        nodes: Nodes, scoped_client: Client, operator_client: Client, spec: list[tuple[str, str, str]],
        data: st.DataObject) -> None:
    """Whatever an operator scoped to ``q`` posts, queue ``r`` (its jobs, its
    pause and limits) stays as it was, and the dry run still bounds the run:
    every button of the pages that show ``r`` (as the unscoped operator sees
    them, so that every action on ``r`` is offered), and fuzzed fields."""
    others = sorted(f"r{i}" for i, (q, _, _) in enumerate(spec) if q == "r")
    status = data.draw(st.sampled_from(["pending", "running", "dead"]), label="status")
    paths = ["/", "/dead/", "/queues/r/", f"/jobs/?queue=r&status={status}",
             *([dashboard_job_path(data.draw(st.sampled_from(others), label="job"))] if others else [])]
    presses: list[dict[str, str]] = []
    for path in paths:
        made, buttons = buttons_on(nodes, operator_client, spec, path)  # unscoped: every action on r is offered
        presses += buttons
    presses.append(data.draw(action_fields(sorted(made), dead_groups(spec)), label="fields"))
    for fields in presses:
        fill_selection(fields, made, data)
        with nodes.fresh() as broker:
            build(broker, spec)

            def outside(broker: Broker = broker) -> tuple[dict[str, str], Any]:
                doc = orjson.loads(stored(broker))
                return {i: s for i, s in statuses(broker).items() if i.startswith("r")}, doc["queues"].get("r")

            before = outside()
            act_and_check(scoped_client, broker, fields, f"scoped action {fields!r}")
            assert outside() == before, f"scoped action {fields!r} changed queue r"


# Each example presses a dozen buttons, each on a fresh queue: fewer examples,
# and no shrinking (minutes of it on a broken build). The failure message
# names the page, the button and the fields it posted.
@settings(max_examples=scaled(10), phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(spec=queue_specs, data=st.data())
def test_every_button_does_what_its_dry_run_showed(nodes: Nodes, operator_client: Client,
                                                   spec: list[tuple[str, str, str]], data: st.DataObject) -> None:
    """Press every button on the pages, exactly as a browser posts it, each
    on a fresh copy of the same queue; then confirm its dry run (defect 1)."""
    job_id = data.draw(st.sampled_from(sorted(f"{q}{i}" for i, (q, _, _) in enumerate(spec))), label="job")
    queue, status = data.draw(st.sampled_from(["q", "r"])), data.draw(st.sampled_from(["pending", "running",
                                                                                        "dead"]))
    paths = [dashboard_job_path(job_id), f"/jobs/?queue={queue}&status={status}", "/dead/", "/", "/jobs/"]
    for path in paths:
        made, buttons = buttons_on(nodes, operator_client, spec, path)
        for fields in buttons:
            fill_selection(fields, made, data)
            with nodes.fresh() as broker:
                build(broker, spec)
                act_and_check(operator_client, broker, fields, f"button on {path} posting {fields!r}")
