"""Format 2 in a real browser, on a real daphne node with tiny segments
(10 jobs each, 20 kept at the front): a backlog of 300 jobs sits almost
entirely in segment objects, and the dashboard must still show it whole.

The operator reads the queue's pending count on the overview, follows it to
the jobs list, pages deep into the backlog (whose jobs are read from the
segment objects) and finds exactly the right jobs in FIFO order; then
purges every pending job of the queue through the list's button, with its
dry run counting the jobs in segments, and the run removing exactly those.

The fixtures (``browser``) and helpers are in tests/e2e/browser.py.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from playwright.sync_api import Browser, expect

from engine import open_store
from tests.e2e.browser import push, shot, signed_in, with_operator
from tests.e2e.harness import Cluster, Node

pytestmark = pytest.mark.e2e

SEGMENT_ENV = {"QUEUE_SEGMENT_JOBS": "10", "QUEUE_HEAD_JOBS": "20", "QUEUE_REFILL_BELOW": "10"}
BACKLOG = 300


@pytest.fixture
def node(cluster_factory: Callable[..., Cluster]) -> tuple[Cluster, Node]:
    return with_operator(cluster_factory(**SEGMENT_ENV))


def sealed_backlog(cluster: Cluster, server: Node, queue: str = "backlog") -> dict[str, Any]:
    """Push BACKLOG jobs (payloads {"n": 0..299}) and wait until the leader has
    sealed all but the front and a partial tail into segments."""
    for start in range(0, BACKLOG, 100):
        push(server, queue, [{"n": n} for n in range(start, start + 100)])
    deadline = time.monotonic() + 30
    while True:
        doc: dict[str, Any] = cluster.document()
        here = sum(1 for j in doc["jobs"] if j["queue"] == queue)
        if doc.get("format") == 2 and here < 30:
            return doc
        assert time.monotonic() < deadline, f"not sealed: {here} jobs still in the document"
        time.sleep(0.1)


def shown_payloads(page: Any) -> list[int]:
    texts = page.locator("#live-jobs tbody tr[data-job-id] td.payload code").all_inner_texts()
    return [orjson.loads(text)["n"] for text in texts]


def test_the_overview_counts_and_a_deep_page_lists_jobs_in_segments(
        browser: Browser, node: tuple[Cluster, Node]) -> None:
    cluster, server = node
    doc = sealed_backlog(cluster, server)
    assert sum(ref["total"] for ref in doc["lanes"]["backlog"]["segments"]) >= 270  # nearly all in segments
    with signed_in(browser, server) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        pending = page.locator('tr[data-row="backlog"] td.num a').first
        expect(pending).to_have_text(str(BACKLOG))
        expect(page.locator("#live-broker")).to_contain_text(f"{BACKLOG} pending")
        shot(page, "segments-overview")

        pending.click()  # the queue's pending jobs, in FIFO order
        expect(page.get_by_test_id("jobs-total")).to_contain_text(f"{BACKLOG} jobs · page 1 of 6")
        expect(page.get_by_test_id("in-segments")).to_be_visible()
        assert shown_payloads(page) == list(range(50))

        page.locator("nav.pager a[rel=next]").click()
        expect(page.get_by_test_id("jobs-total")).to_contain_text("page 2 of 6")
        assert shown_payloads(page) == list(range(50, 100))

        # The page jump: a page number typed in, the filter kept.
        jump = page.get_by_test_id("page-jump")
        jump.get_by_role("spinbutton").fill("5")
        jump.get_by_role("button", name="Go").click()
        expect(page.get_by_test_id("jobs-total")).to_contain_text("page 5 of 6")
        assert "queue=backlog" in page.url and "status=pending" in page.url and "page=5" in page.url
        expect(page.locator("#live-jobs tbody tr[data-job-id]")).to_have_count(50)
        assert shown_payloads(page) == list(range(200, 250))
        shot(page, "segments-deep-page")

        # A job deep in the backlog opens from the list: its page reads it from its segment.
        page.locator("#live-jobs tbody tr[data-job-id] td.id a").nth(7).click()
        expect(page.get_by_test_id("job-status")).to_have_text("pending")
        expect(page.get_by_test_id("in-segment")).to_be_visible()
        expect(page.locator("main")).to_contain_text('"n": 207')
        assert errors == []


def test_an_operator_purges_a_queue_whose_jobs_sit_in_segments(
        browser: Browser, node: tuple[Cluster, Node]) -> None:
    cluster, server = node
    sealed_backlog(cluster, server)
    push(server, "keep", [{"n": n} for n in range(3)])
    with signed_in(browser, server) as page:
        page.goto(f"{server.url}/jobs/?queue=backlog&status=pending&page=5")
        deep = page.locator("#live-jobs tbody tr[data-job-id]").nth(7).get_attribute("data-job-id")  # {"n": 207}
        # Asked to sort, the list stays whole, in queue order, and its button counts every job it purges.
        page.goto(f"{server.url}/jobs/?queue=backlog&status=pending&sort=-age")
        expect(page.get_by_test_id("jobs-total")).to_contain_text(f"{BACKLOG} jobs")
        expect(page.locator("#live-jobs")).to_contain_text("listed in queue order")
        assert shown_payloads(page) == list(range(50))
        page.get_by_role("button", name=f"Purge all {BACKLOG} matching").click()
        expect(page.get_by_test_id("plan-count")).to_have_text(f"{BACKLOG} jobs would be removed for good.")
        expect(page.locator("#action-panel")).to_contain_text("segment objects")
        shot(page, "segments-purge-dry-run")
        page.get_by_test_id("reason").fill("a runaway producer")
        page.get_by_test_id("confirm-text").fill(f"purge {BACKLOG}")
        page.get_by_test_id("run-action").click()
        expect(page.locator("main")).to_contain_text(re.compile(rf"[Pp]urged {BACKLOG} jobs"))
        doc: dict[str, Any] = cluster.document()
        assert "backlog" not in doc.get("lanes", {})
        assert not [j for j in doc["jobs"] if j["queue"] == "backlog"]
        assert doc["queues"]["backlog"]["purged"] == BACKLOG
        assert sorted(j["payload"]["n"] for j in doc["jobs"] if j["queue"] == "keep") == [0, 1, 2]
        page.goto(f"{server.url}/")
        expect(page.locator('tr[data-row="backlog"] td.num a').first).to_have_text("0")
        # A job that went with its segment has no record of its own: its page names the purge.
        page.goto(f"{server.url}/jobs/{deep}/")
        expect(page.get_by_test_id("job-unknown")).to_be_visible()
        expect(page.get_by_test_id("segment-purges")).to_contain_text("purged by")
        expect(page.get_by_test_id("segment-purges")).to_contain_text("(a runaway producer)")
        shot(page, "segments-purged-job-page")


def test_an_operator_purges_one_job_deep_in_the_backlog_from_its_page(
        browser: Browser, node: tuple[Cluster, Node]) -> None:
    """A job inside a segment: its page has the Purge button, the dry run says
    it waits in a segment object, and the run removes exactly that job (the
    leader writes its segment again without it), the rest keeping their order."""
    cluster, server = node
    sealed_backlog(cluster, server)
    with signed_in(browser, server) as page:
        page.goto(f"{server.url}/jobs/?queue=backlog&status=pending&page=5")
        assert shown_payloads(page) == list(range(200, 250))
        page.locator("#live-jobs tbody tr[data-job-id] td.id a").nth(7).click()  # {"n": 207}
        expect(page.get_by_test_id("in-segment")).to_be_visible()
        expect(page.locator("main")).to_contain_text('"n": 207')
        page.get_by_role("button", name="Purge").click()
        expect(page.get_by_test_id("plan-count")).to_have_text("1 job would be removed for good.")
        expect(page.locator("#action-panel")).to_contain_text("1 of these jobs waits in a segment object")
        shot(page, "segments-purge-one-job")
        page.get_by_test_id("reason").fill("a poison job")
        page.get_by_test_id("run-action").click()
        expect(page.locator("main")).to_contain_text(re.compile(r"[Pp]urged 1 job\b"))

        page.goto(f"{server.url}/jobs/?queue=backlog&status=pending&page=5")
        expect(page.get_by_test_id("jobs-total")).to_contain_text(f"{BACKLOG - 1} jobs")
        assert shown_payloads(page) == [*range(200, 207), *range(208, 251)]
    doc: dict[str, Any] = cluster.document()
    assert doc["queues"]["backlog"]["purged"] == 1


def test_an_operator_finds_a_job_deep_in_the_backlog_by_its_payload_and_opens_it(
        browser: Browser, node: tuple[Cluster, Node]) -> None:
    """The jobs list's payload search reads on into the segment objects; the
    hit is marked as in a segment, and its page names the object."""
    cluster, server = node
    sealed_backlog(cluster, server)
    with signed_in(browser, server) as page:
        page.goto(f"{server.url}/jobs/")
        page.get_by_label("Payload contains").fill('"n":231}')
        page.get_by_role("button", name="Filter").click()
        expect(page.locator("#live-jobs tbody tr[data-job-id]")).to_have_count(1)
        assert shown_payloads(page) == [231]
        expect(page.get_by_test_id("in-segment-row")).to_be_visible()
        expect(page.locator("main")).to_contain_text("pending jobs in segment objects too")
        shot(page, "segments-payload-search")
        page.locator("#live-jobs tbody tr[data-job-id] td.id a").click()
        expect(page.get_by_test_id("in-segment")).to_contain_text(".seg/backlog/")
        expect(page.locator("main")).to_contain_text('"n": 231')


def test_a_job_page_opened_by_its_url_reads_its_job_of_the_segment_by_range(
        browser: Browser, node: tuple[Cluster, Node]) -> None:
    """Opened straight from its URL, nothing cached, a job page deep in the
    backlog reads only that job's bytes of its segment (through the id
    index): another job of the same segment, damaged on the store, does not
    stop it. That damaged job's own page reads the segment whole, which
    fails its SHA-256, and names the object (I6); nothing is written."""
    cluster, server = node
    doc = sealed_backlog(cluster, server)
    ref = doc["lanes"]["backlog"]["segments"][2]
    store = open_store(cluster.store_url)
    try:
        index = ref["key"].replace(".seg/", ".idx/", 1).removesuffix(".json") + ".ids"
        deadline = time.monotonic() + 30
        while store.get(index) is None:
            assert time.monotonic() < deadline, f"no id index {index}"
            time.sleep(0.1)
        blob = store.get(ref["key"])
        assert blob is not None
        jobs = orjson.loads(blob.data)["jobs"]
        target, other = jobs[ref["consumed"] + 2], jobs[ref["consumed"] + 6]
        forged = int("9" * len(str(other["payload"]["n"])))  # as many digits: the offsets stay
        damaged = orjson.dumps(dict(other, payload={"n": forged}))
        assert len(damaged) == len(orjson.dumps(other)) and forged != other["payload"]["n"]
        store.put(ref["key"], blob.data.replace(orjson.dumps(other), damaged, 1))
    finally:
        store.close()
    with signed_in(browser, server) as page:
        page.goto(f"{server.url}/jobs/{target['id']}/")
        expect(page.get_by_test_id("in-segment")).to_contain_text(ref["key"])
        expect(page.locator("main")).to_contain_text(f'"n": {target["payload"]["n"]}')
        page.goto(f"{server.url}/jobs/{other['id']}/")
        expect(page.get_by_test_id("segment-error")).to_contain_text(ref["key"])
        expect(page.get_by_test_id("segment-error")).to_contain_text("SHA-256")
        expect(page.locator("main")).not_to_contain_text(f'"n": {forged}')
    assert cluster.document()["lanes"]["backlog"]["segments"][2] == ref


@pytest.fixture
def delayed_node(cluster_factory: Callable[..., Cluster]) -> tuple[Cluster, Node]:
    """Tiny segments, and delayed jobs due more than a second ahead sealed
    into delayed segments (format 3) past the front share."""
    return with_operator(cluster_factory(**SEGMENT_ENV, QUEUE_DELAYED_HORIZON_SECONDS="1"))


def test_the_queue_page_says_when_the_next_job_comes_due_and_moves_on_live(
        browser: Browser, delayed_node: tuple[Cluster, Node]) -> None:
    """Twenty jobs due in a few seconds stay in the document (the front
    share), eighty due in an hour go to delayed segments. The queue page
    first names the twenty's time; once they are due, without a reload, the
    first delayed segment's, an hour on."""
    cluster, server = delayed_node
    push(server, "later", [{"n": n} for n in range(20)], delay_seconds=6)
    push(server, "later", [{"n": n} for n in range(20, 100)], delay_seconds=3600)
    deadline = time.monotonic() + 30
    while sum(ref["total"] for ref in cluster.document().get("lanes", {}).get("later", {}).get("delayed", [])) < 80:
        assert time.monotonic() < deadline, "the jobs due in an hour were not sealed"
        time.sleep(0.1)
    with signed_in(browser, server) as page:
        page.goto(f"{server.url}/queues/later/")
        expect(page.get_by_test_id("pending")).to_contain_text("100")
        next_due = page.get_by_test_id("next-due")
        expect(next_due).to_contain_text(re.compile(r"\(in \d(\.\d)? s\)"))
        shot(page, "queue-next-due")
        # Due now: the live update (a heartbeat's commit at the latest) names the delayed segment's time.
        expect(next_due).to_contain_text(re.compile(r"\(in (59|60) min\)"), timeout=15_000)
        expect(page.get_by_test_id("pending")).to_contain_text("(20 ready)")
