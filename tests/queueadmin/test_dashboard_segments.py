"""The dashboard in format 2: counts, lists, job pages and problems with
pending jobs in segment objects (``docs/dashboard.md``, "Segments").

A real broker with tiny segments (10 jobs, 20 kept at the front) seals a
backlog of a few hundred jobs into segment objects of a memory store; the
pages are read as a user reads them.
"""

from __future__ import annotations

import asyncio
import html
import re
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from io import StringIO
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from django.core.management import call_command
from django.template.defaultfilters import filesizeformat
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from engine import Broker, ObjectStore
from engine.ops import Tick, claim_op, complete_op
from queueadmin.dashboard import segments
from queueadmin.dashboard.snapshot import Snapshot, moment
from queueadmin.dashboard.source import source
from queueadmin.models import AuditEntry
from tests.helpers import stored, wait_for
from tests.queueadmin.api_client import Client as ApiClient
from tests.queueadmin.dashboard_fixtures import confirm, forms_with, preview, push
from tests.queueadmin.node_fixtures import AUTH, TOKEN

if TYPE_CHECKING:
    from pytest_django.fixtures import Settings as SettingsWrapper

SEGMENT, HEAD = 10, 20


@pytest.fixture
def small_segments(settings: SettingsWrapper) -> Iterator[None]:
    """Format 2 with segments of 10 jobs and 20 at the front (set before the broker starts)."""
    settings.QUEUE_SEGMENT_JOBS = SEGMENT
    settings.QUEUE_HEAD_JOBS = HEAD
    settings.QUEUE_REFILL_BELOW = 10
    segments.cache.clear()
    segments.ranged.clear()
    yield
    segments.cache.clear()
    segments.ranged.clear()


def document(store: ObjectStore) -> dict[str, Any]:
    return orjson.loads(stored(store))  # type: ignore[no-any-return]


def backlog(broker: Broker, queue: str = "q", n: int = 300) -> list[str]:
    """Push ``n`` jobs (payloads 0..n-1) and wait until all but the front and a partial tail are sealed."""
    ids = [job_id for start in range(0, n, 100)
           for job_id in push(broker, queue, list(range(start, min(n, start + 100))))]
    settle(broker, lambda doc: sum(1 for j in doc["jobs"] if j["queue"] == queue) < HEAD + SEGMENT,
           what="the backlog sealed")
    return ids


def settle(broker: Broker, done: Callable[[dict[str, Any]], bool], *, what: str) -> None:
    """Commit until the stored document satisfies ``done``. The lane keeper
    plans its next seal or refill when a commit lands, and the fixture's
    idle heartbeat is minutes long: each empty commit (a Tick) lets it take
    its next step."""
    def step() -> bool:
        if done(document(broker.store)):
            return True
        broker.execute(Tick())
        return False

    wait_for(step, what=what)
    source.reset()


def listed(client: Client, **params: Any) -> list[Any]:
    """The payloads of the jobs a jobs page lists, in order."""
    response = client.get("/jobs/", params)
    assert response.status_code == 200
    return [row["job"]["payload"] for row in response.context["rows"]]


def count_reads(store: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """Every read of ``store`` from now on, as (key, whether by range), in
    order; a range read through a whole get (the memory store's) counts once,
    as a range."""
    reads: list[tuple[str, bool]] = []
    get, get_range = store.get, store.get_range
    ranging = threading.local()

    def counted_get(key: str) -> Any:
        if not getattr(ranging, "on", False):
            reads.append((key, False))
        return get(key)

    def counted_range(key: str, start: int, length: int) -> bytes | None:
        reads.append((key, True))
        ranging.on = True
        try:
            return get_range(key, start, length)
        finally:
            ranging.on = False

    monkeypatch.setattr(store, "get", counted_get)
    monkeypatch.setattr(store, "get_range", counted_range)
    return reads


def every_pending(client: Client, queue: str = "q") -> list[Any]:
    """The payloads of every pending job of ``queue``, page after page."""
    pages = client.get("/jobs/", {"queue": queue, "status": "pending"}).context["pages"]
    return [p for n in range(1, pages + 1) for p in listed(client, queue=queue, status="pending", page=n)]


def test_counts_include_the_jobs_in_segments(small_segments: None, broker: Broker, viewer: Client) -> None:
    backlog(broker, n=300)
    doc = document(broker.store)
    assert sum(ref["total"] for ref in doc["lanes"]["q"]["segments"]) >= 250  # nearly all of it sits in segments
    response = viewer.get("/")
    row = next(r for r in response.context["rows"] if r["q"].name == "q")
    assert row["q"].pending == 300 and row["q"].ready == 300
    assert row["q"].in_segments == 300 - sum(1 for j in doc["jobs"] if j["queue"] == "q")
    assert response.context["totals"]["pending"] == 300
    queue_page = viewer.get("/queues/q/")
    assert queue_page.context["q"].pending == 300
    in_segments = row["q"].in_segments
    assert f"{in_segments} of them, in {row['q'].segments} segment objects" in queue_page.content.decode()
    # The objects' size in the store, and when the oldest was written.
    refs = doc["lanes"]["q"]["segments"]
    q = queue_page.context["q"]
    assert q.segment_bytes == sum(ref["size"] for ref in refs) > 0
    assert q.oldest_sealed_at == min(moment(ref["sealed_at"]) for ref in refs)
    size = re.search(r'data-testid="segments-size">\(([^;]+); the oldest written <time[^>]*>([^<]+)</time>\)',
                     queue_page.content.decode())
    assert size is not None and size.group(1) == filesizeformat(q.segment_bytes) and size.group(2).endswith(" ago")
    # The oldest pending job is the first one pushed, at the front.
    first = min(j["enqueued_at"] for j in doc["jobs"])
    assert queue_page.context["q"].oldest_pending_at.isoformat().replace("+00:00", "Z").startswith(first[:19])


def test_oldest_pending_comes_from_the_first_segment_when_it_is_older() -> None:
    """A front of young jobs (a requeued one, say) and a first segment whose
    first job waited longer: the oldest pending is the segment's."""
    now = datetime(2026, 1, 1, 12, tzinfo=UTC)
    ref = {"key": "queue.json.seg/q/a", "total": 10, "consumed": 2, "front": 12, "last_pos": 21, "size": 100,
           "sha256": "0" * 64, "oldest_enqueued_at": "2026-01-01T10:00:00Z", "epoch": 1,
           "sealed_at": "2026-01-01T10:00:01Z"}
    job = {"id": "young", "pos": 30, "queue": "q", "status": "pending", "attempts": 0, "max_attempts": 3,
           "enqueued_at": "2026-01-01T11:59:00Z", "not_before": None, "lease": None, "last_error": None,
           "history": [], "payload": 1}
    header = {"format": 2, "seq": 5, "queues": {"q": {"pushed": 11}}, "next_pos": 31,
              "lanes": {"q": {"segments": [ref]}}}
    snapshot = Snapshot(header, [job], [], etag="e", size=1, taken_at=now)
    q = snapshot.queues["q"]
    assert (q.pending, q.ready, q.in_segments, q.segments) == (9, 9, 8, 1)
    assert q.oldest_pending_at == datetime(2026, 1, 1, 10, tzinfo=UTC)
    assert snapshot.status_counts()["pending"] == 9


def test_a_deep_page_lists_the_right_jobs_in_fifo_order_reading_only_its_segments(
        small_segments: None, broker: Broker, viewer: Client) -> None:
    backlog(broker, n=300)
    assert listed(viewer, queue="q", status="pending", page=1) == list(range(50))
    reads = segments.cache.reads
    assert listed(viewer, queue="q", status="pending", page=4) == list(range(150, 200))
    assert segments.cache.reads - reads <= 6  # 50 jobs span at most 6 segments of 10
    again = segments.cache.reads
    assert listed(viewer, queue="q", status="pending", page=4) == list(range(150, 200))
    assert segments.cache.reads == again  # cached: immutable objects never go stale
    response = viewer.get("/jobs/", {"queue": "q", "status": "pending", "page": "6"})
    assert response.context["total"] == 300 and response.context["pages"] == 6
    assert [r["job"]["payload"] for r in response.context["rows"]] == list(range(250, 300))
    assert every_pending(viewer) == list(range(300))



def test_rows_from_segments_can_be_selected_and_purged_by_id(
        small_segments: None, broker: Broker, operator: Client) -> None:
    """A job in a segment is purged by id like any other: the leader writes its
    segment again without it, in the commit that removes the rest."""
    ids = backlog(broker, n=100)
    front = operator.get("/jobs/", {"queue": "q", "status": "pending", "page": "1"})
    assert all(r["segment"] is None for r in front.context["rows"][:20])
    assert all(r["segment"] for r in front.context["rows"][20:])
    content = front.content.decode()
    assert content.count("data-select>") == 50 and content.count('data-testid="in-segment-row"') == 30
    chosen = [ids[5], ids[33], ids[71]]  # one at the front, two in segments
    before = {ref["key"] for ref in document(broker.store)["lanes"]["q"]["segments"]}

    dry = preview(operator, action="purge", ids=",".join(chosen))
    plan = dry.context["plan"]
    assert plan.ids == chosen and plan.expect == ["pending"] * 3 and plan.count == 3
    assert sorted(j["payload"] for j in plan.sample) == [5, 33, 71]
    assert b"2 of these jobs wait in segment objects" in dry.content
    assert confirm(operator, plan.token, reason="poison").status_code == 302

    entry = AuditEntry.objects.get(action="purge")
    assert entry.outcome == "ok" and entry.count == 3 and "purged 3 jobs" in entry.detail
    assert sorted(entry.jobs.values_list("job_id", flat=True)) == sorted(chosen)
    doc = document(broker.store)
    assert doc["queues"]["q"]["purged"] == 3
    assert sum(r["total"] - r["consumed"] for r in doc["lanes"]["q"]["segments"]) + len(pending_ids(broker.store)) == 97
    assert before - {ref["key"] for ref in doc["lanes"]["q"]["segments"]}  # rewritten: new objects
    source.reset()
    assert every_pending(operator) == [n for n in range(100) if n not in (5, 33, 71)]


def test_a_job_page_in_a_segment_offers_purge_and_its_dry_run_names_the_segment(
        small_segments: None, broker: Broker, operator: Client) -> None:
    ids = backlog(broker, n=100)
    page = operator.get(f"/jobs/{ids[75]}/")
    assert page.context["in_segment"] and b'name="action" value="purge"' in page.content
    assert b'value="requeue"' not in page.content  # pending: nothing to requeue
    dry = preview(operator, action="purge", ids=ids[75])
    assert dry.context["plan"].count == 1 and b"1 of these jobs waits in a segment object" in dry.content
    requeue = preview(operator, action="requeue", ids=ids[75])
    assert requeue.context["plan"].count == 0 and b"already pending" in requeue.content


def test_a_refilled_front_keeps_the_fifo_order(small_segments: None, broker: Broker, viewer: Client) -> None:
    backlog(broker, n=120)  # 20 at the front, 100 in segments
    push(broker, "q", list(range(120, 125)))  # 5 in the tail: fewer than a seal share, they stay
    # Drain 25 jobs: the front runs low and is refilled from the first segment,
    # whose jobs come back at the end of the document's list (after the tail) with their old pos.
    done = 0
    while done < 25:
        claimed = broker.execute(claim_op("w", ["q"], policy=broker.policy, max_jobs=5))
        for job in claimed:
            broker.execute(complete_op(job.id, job.lease))
        done += len(claimed)
    settle(broker, lambda doc: sum(1 for j in doc["jobs"] if j["status"] == "pending") >= 10, what="a refill")
    doc = document(broker.store)
    order = [j["payload"] for j in doc["jobs"] if j["status"] == "pending"]
    assert order != sorted(order)  # the list order is not the FIFO order
    assert every_pending(viewer) == list(range(25, 125))


def test_a_missing_segment_shows_an_error_naming_it_never_a_500(
        small_segments: None, broker: Broker, viewer: Client) -> None:
    backlog(broker, n=200)
    refs = document(broker.store)["lanes"]["q"]["segments"]
    victim = refs[len(refs) // 2]["key"]
    broker.store.delete(victim)
    before = stored(broker.store)
    pages = [viewer.get("/jobs/", {"queue": "q", "status": "pending", "page": str(n)}) for n in range(1, 5)]
    assert all(p.status_code == 200 for p in pages)
    broken = [p for p in pages if p.context["segment_error"]]
    assert broken and all(victim in p.context["segment_error"] for p in broken)
    assert victim.encode() in broken[0].content and b'data-testid="segment-error"' in broken[0].content
    assert pages[0].context["segment_error"] is None  # the front needs no segment
    assert stored(broker.store) == before  # the dashboard never writes


def test_other_filters_say_how_many_jobs_in_segments_they_leave_out(
        small_segments: None, broker: Broker, viewer: Client) -> None:
    backlog(broker, n=100)
    held = viewer.get("/").context["rows"][0]["q"].in_segments
    response = viewer.get("/jobs/", {"queue": "q"})
    assert f"{held} pending jobs sit in segment objects" in response.context["notice"]
    assert response.context["total"] == 100 - held


def test_a_job_page_finds_a_job_in_a_segment(small_segments: None, broker: Broker, viewer: Client) -> None:
    ids = backlog(broker, n=100)
    deep = ids[75]
    response = viewer.get(f"/jobs/{deep}/")
    assert response.status_code == 200 and response.context["found"]
    assert response.context["in_segment"] and response.context["status"] == "pending"
    assert response.context["job"]["payload"] == 75
    assert b'data-testid="in-segment"' in response.content


def test_the_jobs_lists_search_by_exact_id_finds_a_job_in_a_segment(
        small_segments: None, broker: Broker, viewer: Client) -> None:
    ids = backlog(broker, n=100)
    response = viewer.get("/jobs/", {"id": ids[75]})
    [row] = response.context["rows"]
    assert row["job"]["payload"] == 75 and row["status"] == "pending"
    assert row["segment"] in {ref["key"] for ref in document(broker.store)["lanes"]["q"]["segments"]}
    assert b'data-testid="in-segment-row"' in response.content and response.context["notice"] is None
    missing = viewer.get("/jobs/", {"id": "no-such-job"})
    assert missing.context["rows"] == []
    assert "the document or the segment objects a lookup reads" in missing.context["notice"]
    # The job page names the object too.
    assert row["segment"].encode() in viewer.get(f"/jobs/{ids[75]}/").content


def test_a_payload_search_goes_on_into_the_segments_oldest_first_within_its_bound(
        small_segments: None, broker: Broker, viewer: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    backlog(broker, n=100)  # payloads 0..99: "75" matches only 75, deep in a segment
    held = viewer.get("/").context["rows"][0]["q"].in_segments
    response = viewer.get("/jobs/", {"q": "75"})
    assert [r["job"]["payload"] for r in response.context["rows"]] == [75]
    assert response.context["rows"][0]["segment"]
    assert response.context["notice"] == f"Searched the {held} pending jobs in segment objects too."
    assert listed(viewer, queue="q", status="pending", q="7") == [n for n in range(100) if "7" in str(n)]
    # A search that cannot match a job in a segment (another status, a worker) leaves them alone, and says so.
    assert listed(viewer, status="running", q="75") == []
    assert "are not listed (or searched) here" in viewer.get("/jobs/", {"q": "75", "error": "x"}).context["notice"]
    # The bound counts the document's jobs first, then the segments' oldest first.
    in_document = 100 - held
    monkeypatch.setattr("queueadmin.dashboard.joblist.SEARCH_LIMIT", in_document + 30)
    bounded = viewer.get("/jobs/", {"q": "75"})
    assert bounded.context["rows"] == []  # 75 is further in than 30 jobs into the segments
    assert bounded.context["notice"].startswith(f"Searched 30 of the {held} pending jobs in segment objects")
    assert bounded.context["notice"].endswith("narrow by queue to search further into one, or search the next jobs.")
    # Narrowed to the queue already, it does not send the operator there again; it goes on, page by page.
    narrowed = viewer.get("/jobs/", {"q": "75", "queue": "q", "status": "pending"})
    assert narrowed.context["notice"].endswith("search the next jobs to go on.")
    assert narrowed.context["search_next"] == "?queue=q&status=pending&q=75&from=30"
    assert 'data-testid="search-next"' in narrowed.content.decode()
    going = viewer.get("/jobs/?queue=q&status=pending&q=75&from=30")
    assert [r["job"]["payload"] for r in going.context["rows"]] == [75]  # 20-49 searched, then 50-...
    assert going.context["rows"][0]["segment"]
    assert going.context["query_base"] == "queue=q&status=pending&q=75&from=30"  # its pages stay in its window
    assert viewer.get("/jobs/?queue=q&status=pending&from=30").context["query_base"] == "queue=q&status=pending"
    assert going.context["notice"].startswith(f"Searched 31 to {min(30 + in_document + 30, held)} of the {held}")
    # A window that starts inside a segment (of 10 jobs) starts at that job: 35 jobs in, payload 55.
    mid = viewer.get("/jobs/?queue=q&status=pending&q=5&from=35")
    assert [r["job"]["payload"] for r in mid.context["rows"]] == [n for n in range(55, 20 + held) if "5" in str(n)]
    # Its hits sit in segments: no "all matching" action takes them (they are selected on the list).
    assert going.context["bulk"]["purge"] == 0 and going.context["bulk_in_segments"] == 1
    # The document's jobs (the front, 0-19, and the tail) and the first 30 in segments (20-49).
    tail = [j["payload"] for j in document(broker.store)["jobs"] if j["payload"] >= 20]
    assert listed(viewer, q="3") == [n for n in [*range(50), *tail] if "3" in str(n)]


def test_purging_all_jobs_a_payload_search_matches_leaves_those_in_segments_to_be_selected(
        small_segments: None, broker: Broker, operator: Client) -> None:
    """Acting on all of a search's hits would have the leader look up and
    rewrite a segment per hit: those in segments are left out, and the dry
    run says so; the ones in the document go."""
    backlog(broker, n=100)
    listed_now = listed(operator, q="7")
    doc_hits = [j["payload"] for j in document(broker.store)["jobs"] if "7" in str(j["payload"])]
    assert len(listed_now) == 19 and 0 < len(doc_hits) < 19

    dry = preview(operator, action="purge", filter="q=7")
    plan = dry.context["plan"]
    assert plan.count == len(doc_hits)
    assert f"{19 - len(doc_hits)} matching jobs wait in segment objects and are left out" in dry.content.decode()
    assert confirm(operator, plan.token, reason="search").status_code == 302

    source.reset()
    left = listed(operator, q="7")
    assert left == [n for n in listed_now if n not in doc_hits]  # the segments' hits are still there
    entry = AuditEntry.objects.get(action="purge")
    assert entry.count == len(doc_hits)
    assert "arrived after the dry run" not in entry.detail  # the hits left out were there all along


def test_each_all_matching_button_names_what_its_dry_run_acts_on(
        small_segments: None, broker: Broker, operator: Client) -> None:
    """A payload search lists hits inside segment objects, which "all N
    matching" leaves out: the purge button counts only the others, says
    how many it leaves, and agrees with its dry run. Requeue, which leaves
    pending jobs out, is not offered for a list of pending jobs."""
    backlog(broker, n=100)
    doc_hits = [j["payload"] for j in document(broker.store)["jobs"] if "7" in str(j["payload"])]
    page = operator.get("/jobs/", {"q": "7"})
    assert page.context["total"] == 19 and 0 < len(doc_hits) < 19
    text = html.unescape(page.content.decode())
    [fields] = forms_with(page.content.decode(), f"Purge all {len(doc_hits)} matching")
    assert f"{19 - len(doc_hits)} matching jobs wait in segment objects and are not included" in text
    assert "Requeue all" not in text
    assert operator.post("/actions/", fields).context["plan"].count == len(doc_hits)

    # Every hit of this one sits in a segment (75): no button, since no action would take any of them.
    only_sealed = operator.get("/jobs/", {"q": "75"})
    assert only_sealed.context["total"] == 1 and only_sealed.context["bulk"]["purge"] == 0
    assert "matching</button>" not in only_sealed.content.decode()
    assert "1 matching job waits in segment objects and is not included" in only_sealed.content.decode()


def test_a_sorted_list_of_a_queues_pending_jobs_still_lists_its_segments_in_queue_order(
        small_segments: None, broker: Broker, operator: Client) -> None:
    """Sorting would have listed the document's jobs only, under a button
    purging every pending job of the queue: the list stays whole, in FIFO
    order, and says it is not sorted; the headers offer no sort."""
    backlog(broker, n=100)
    for sort in ("age", "-attempts"):
        page = operator.get("/jobs/", {"queue": "q", "status": "pending", "sort": sort})
        assert page.context["total"] == 100 and page.context["sort"] == ""
        assert "listed in queue order (the order workers claim them), not sorted" in page.context["notice"]
        assert [r["job"]["payload"] for r in page.context["rows"]] == list(range(50))
        assert 'data-sort="age"' not in page.content.decode()
        [fields] = forms_with(page.content.decode(), "Purge all 100 matching")
        assert operator.post("/actions/", fields).context["plan"].count == 100
    # Any other list still sorts.
    assert 'data-sort="age"' in operator.get("/jobs/", {"queue": "q", "sort": "age"}).content.decode()


def test_an_exact_id_is_held_to_the_other_filters(small_segments: None, broker: Broker, operator: Client) -> None:
    """``id=`` with a queue (or status) it is not in lists nothing, and
    says where the job is, so that "all N matching" never reaches a job of
    another queue; a job in a segment is held to them too."""
    [front] = push(broker, "a", ["x"])
    sealed = backlog(broker, "q", n=100)[40]
    for job_id, queue, status in ((front, "a", "pending"), (sealed, "q", "pending")):
        assert len(operator.get("/jobs/", {"id": job_id, "queue": queue}).context["rows"]) == 1
        other = operator.get("/jobs/", {"id": job_id, "queue": "b"})
        assert other.context["rows"] == [] and other.context["total"] == 0
        assert other.context["notice"] == (f"Job {job_id!r} is {status} in queue {queue!r}: it does not match the "
                                           "other filters.")
        assert operator.get("/jobs/", {"id": job_id, "status": "dead"}).context["rows"] == []
        assert preview(operator, action="purge", filter=f"id={job_id}&queue=b").context["plan"].count == 0
    assert not AuditEntry.objects.exists()  # a dry run only


def test_the_api_shows_a_pending_job_in_a_segment_by_id(
        small_segments: None, broker: Broker, settings: SettingsWrapper) -> None:
    """``GET /api/v1/jobs/<id>`` answers a job pending in a segment (it used
    to be a 404), with the object it sits in; an unknown id is still a 404."""
    settings.QUEUE_API_TOKEN = TOKEN
    ids = backlog(broker, n=100)
    lanes = document(broker.store)["lanes"]["q"]["segments"]
    client = ApiClient(headers=AUTH)
    answer = client.get(f"/api/v1/jobs/{ids[75]}")
    assert answer.status_code == 200, answer.content
    view = answer.json()
    assert (view["status"], view["payload"], view["queue"]) == ("pending", 75, "q")
    assert view["segment"] in {ref["key"] for ref in lanes} and "lease" in view
    missing = client.get("/api/v1/jobs/no-such-job")
    assert missing.status_code == 404 and missing.json()["error"] == "job_not_found"
    # An object that no longer matches its reference is reported, naming it, never answered as not found.
    keeper = broker._keeper
    assert keeper is not None
    wait_for(lambda: not keeper._busy, what="the seals' outcomes handled")  # no segment kept after the clear
    keeper._held.drop_parts()
    broker.store.put(view["segment"], b"{}")
    damaged = client.get(f"/api/v1/jobs/{ids[75]}")
    assert damaged.status_code == 503 and damaged.json()["error"] == "document_error"
    assert view["segment"] in damaged.json()["message"]


def test_a_job_page_lookup_is_bounded(small_segments: None, broker: Broker, viewer: Client,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    ids = backlog(broker, n=200)
    keys = [ref["key"] for ref in document(broker.store)["lanes"]["q"]["segments"]]
    # Each segment's id index, named after it (docs/format.md, "Id indexes").
    indexes = {key.replace(".seg/", ".idx/", 1).removesuffix(".json") + ".ids" for key in keys}
    wait_for(lambda: indexes <= set(broker.store.list(f"{broker.key}.idx/")), what="every seal's id index")
    monkeypatch.setattr("queueadmin.dashboard.snapshot.Snapshot.sealed_recently", lambda self, job_id: False)
    # Not in the sealed window, nothing cached: the page reads the one job its index names, by range.
    reads = count_reads(broker.store, monkeypatch)
    response = viewer.get(f"/jobs/{ids[100]}/")
    assert response.context["found"] and response.context["in_segment"] and segments.cache.reads == 0
    segment = response.context["in_segment"]
    assert not [key for key, ranged in reads if not ranged and key in keys], "a segment was read whole"
    assert [key for key, ranged in reads if ranged and key in keys] == [segment]
    reads.clear()
    assert viewer.get(f"/jobs/{ids[100]}/").context["found"] and not reads, "viewed again, it reads nothing"

    # Segments without an index (written before indexes existed: here, their
    # indexes deleted) are not read blindly outside the sealed window.
    for key in indexes:
        broker.store.delete(key)
    segments.cache.clear()
    segments.ranged.clear()
    segments.indexes().clear()
    response = viewer.get(f"/jobs/{ids[100]}/")
    assert not response.context["found"] and segments.cache.reads == 0
    assert b'data-testid="segments-not-searched"' in response.content
    # Once its segment was read for a list page, the job page finds it with no read.
    listed(viewer, queue="q", status="pending", page=3)
    cached_reads = segments.cache.reads
    found = viewer.get(f"/jobs/{ids[100]}/")
    assert found.context["found"] and segments.cache.reads == cached_reads


def indexed_backlog(broker: Broker, n: int = 200) -> tuple[list[str], list[dict[str, Any]]]:
    """A backlog whose every segment has its id index written, and its references."""
    ids = backlog(broker, n=n)
    refs = document(broker.store)["lanes"]["q"]["segments"]
    indexes = {ref["key"].replace(".seg/", ".idx/", 1).removesuffix(".json") + ".ids" for ref in refs}
    wait_for(lambda: indexes <= set(broker.store.list(f"{broker.key}.idx/")), what="every seal's id index")
    return ids, refs


def segment_jobs(broker: Broker, ref: dict[str, Any]) -> list[dict[str, Any]]:
    blob = broker.store.get(ref["key"])
    assert blob is not None
    return orjson.loads(blob.data)["jobs"]  # type: ignore[no-any-return]


def test_a_second_job_page_in_the_same_segment_reads_it_whole_for_the_list_pages_too(
        small_segments: None, broker: Broker, viewer: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first job page in a segment reads its job by range; a second one
    in the same segment reads the segment whole, into the cache the list
    pages share, so that browsing it costs no more reads (as the leader's
    lookups do, engine.lookup)."""
    _, refs = indexed_backlog(broker)
    monkeypatch.setattr("queueadmin.dashboard.snapshot.Snapshot.sealed_recently", lambda self, job_id: False)
    ref = refs[-1]
    first, second, third = (job["id"] for job in segment_jobs(broker, ref)[ref["consumed"]:][:3])
    reads = count_reads(broker.store, monkeypatch)
    assert viewer.get(f"/jobs/{first}/").context["in_segment"] == ref["key"]
    assert [(key, ranged) for key, ranged in reads if key == ref["key"]] == [(ref["key"], True)]
    reads.clear()
    assert viewer.get(f"/jobs/{second}/").context["in_segment"] == ref["key"]
    assert [(key, ranged) for key, ranged in reads if key == ref["key"]] == [(ref["key"], False)]
    assert segments.cache.keys() == [ref["key"]]
    reads.clear()
    assert viewer.get(f"/jobs/{third}/").context["in_segment"] == ref["key"] and not reads


def test_a_job_altered_in_its_segment_is_reported_by_the_whole_segment_never_shown(
        small_segments: None, broker: Broker, viewer: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job whose bytes no longer match its index entry's CRC-32 is not
    shown from the range: the segment is read whole, fails its SHA-256, and
    the page names the object (I6)."""
    _, refs = indexed_backlog(broker)
    monkeypatch.setattr("queueadmin.dashboard.snapshot.Snapshot.sealed_recently", lambda self, job_id: False)
    ref = refs[-1]
    target = segment_jobs(broker, ref)[ref["consumed"] + 4]
    blob = broker.store.get(ref["key"])
    assert blob is not None
    encoded = orjson.dumps(target["payload"])
    altered = orjson.dumps(target).replace(b'"payload":' + encoded, b'"payload":' + encoded.replace(b"4", b"5"))
    assert len(altered) == len(orjson.dumps(target)) and altered != orjson.dumps(target)
    broker.store.put(ref["key"], blob.data.replace(orjson.dumps(target), altered, 1))
    page = viewer.get(f"/jobs/{target['id']}/")
    assert page.status_code == 200 and not page.context["found"]
    assert ref["key"] in page.context["segment_error"] and "SHA-256" in page.context["segment_error"]


def test_a_job_found_by_range_and_then_refilled_and_done_is_not_shown_pending_from_its_segment(
        small_segments: None, broker: Broker, viewer: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page keeps a job it found by range for its next view; once the
    job was moved back into the document (and then claimed and completed),
    the segment still holds its bytes, but the page must not show it there
    as pending."""
    _, refs = indexed_backlog(broker, n=100)
    monkeypatch.setattr("queueadmin.dashboard.snapshot.Snapshot.sealed_recently", lambda self, job_id: False)
    ref = refs[0]
    target = segment_jobs(broker, ref)[ref["consumed"]]
    assert viewer.get(f"/jobs/{target['id']}/").context["in_segment"] == ref["key"]
    done: set[str] = set()
    while target["id"] not in done:
        claimed = broker.execute(claim_op("w", ["q"], policy=broker.policy, max_jobs=5))
        assert claimed, "the backlog ran dry before the job was claimed"
        for job in claimed:
            broker.execute(complete_op(job.id, job.lease))
            done.add(job.id)
        broker.execute(Tick())
    source.reset()
    page = viewer.get(f"/jobs/{target['id']}/")
    # Nothing is known of it (no finished-job record here): a 404 that says so.
    assert page.status_code == 404 and not page.context["found"] and page.context.get("in_segment") is None


def test_a_job_page_finds_a_job_deep_in_a_merged_segment_through_its_index(
        small_segments: None, broker: Broker, viewer: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job long out of the ``sealed`` window, in a segment merged from 64
    seals: the job page reads the id indexes and that one job of that one
    segment by range, no segment whole."""
    ids = [job_id for start in range(0, 7_000, 100) for job_id in push(broker, "q", list(range(start, start + 100)))]

    def merged(doc: dict[str, Any]) -> bool:
        return any(ref["total"] >= 1_000 for ref in doc.get("lanes", {}).get("q", {}).get("segments", []))

    settle(broker, merged, what="a merged segment")
    ref = next(r for r in document(broker.store)["lanes"]["q"]["segments"] if r["total"] >= 1_000)
    target = orjson.loads(broker.store.get(ref["key"]).data)["jobs"][ref["consumed"] + 5]  # type: ignore[union-attr]
    monkeypatch.setattr("queueadmin.dashboard.snapshot.Snapshot.sealed_recently", lambda self, job_id: False)
    segments.cache.clear()
    keys = {r["key"] for r in document(broker.store)["lanes"]["q"]["segments"]}
    reads = count_reads(broker.store, monkeypatch)
    response = viewer.get(f"/jobs/{target['id']}/")
    assert response.status_code == 200 and response.context["found"] and response.context["in_segment"]
    assert response.context["job"]["payload"] == target["payload"] and target["id"] in ids
    assert [key for key, _ in reads if key in keys] == [ref["key"]], "only that segment was read, by range"
    assert all(ranged for key, ranged in reads if key in keys) and not segments.cache.keys()
    # The indexes it read are the ones this node's lanes keeper holds: one cache a process.
    keeper = broker._keeper
    assert keeper is not None and segments.indexes() is keeper._indexes and keeper._indexes.known(ref["key"])


def test_a_dashboard_page_reads_the_id_indexes_in_the_background_so_a_job_page_needs_none(
        small_segments: None, broker: Broker, viewer: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """A standby's dashboard (whose lanes keeper does not run) holds no id
    index: the first job page for a job deep in the backlog would read them
    all while its user waits. Reading any page starts reading them in the
    background, so the job page reads none; within WARM_EVERY_SECONDS a
    page starts no other."""
    for start in range(0, 7_000, 100):
        push(broker, "q", list(range(start, start + 100)))

    def merged(doc: dict[str, Any]) -> bool:
        return any(ref["total"] >= 1_000 for ref in doc.get("lanes", {}).get("q", {}).get("segments", []))

    settle(broker, merged, what="a merged segment")
    # The keeper goes on merging: wait until a landed version leaves it
    # nothing to do (it plans as each version lands, before the commit is
    # answered), or a merge landing later brings a segment whose index was
    # cleared.
    keeper = broker._keeper
    assert keeper is not None

    def merged_all() -> bool:
        broker.execute(Tick())
        with keeper._cond:
            return not keeper._tasks and not keeper._busy and keeper._merge_slot is None

    wait_for(merged_all, timeout=60, what="no merge left")
    refs = document(broker.store)["lanes"]["q"]["segments"]
    ref = next(r for r in refs if r["total"] >= 1_000)
    target = orjson.loads(broker.store.get(ref["key"]).data)["jobs"][ref["consumed"] + 5]  # type: ignore[union-attr]
    index = segments.indexes()
    index.clear()  # as on a standby
    segments.forget_warm_up()
    assert len(refs) > 1 and not any(index.known(r["key"]) for r in refs)
    assert viewer.get("/").status_code == 200
    wait_for(lambda: all(index.known(r["key"]) for r in refs), timeout=30, what="every index read in the background")
    monkeypatch.setattr("queueadmin.dashboard.snapshot.Snapshot.sealed_recently", lambda self, job_id: False)
    reads = index.reads
    response = viewer.get(f"/jobs/{target['id']}/")
    assert response.status_code == 200 and response.context["found"] and response.context["in_segment"]
    assert index.reads == reads, "the job page read an index"
    index.clear()
    viewer.get("/jobs/")
    assert segments.warm_soon({"q": [segments.ref_of(r) for r in refs]}) is None
    assert not any(index.known(r["key"]) for r in refs), "a second warm-up within WARM_EVERY_SECONDS"


def stop_at_a_missing_segment(broker: Broker) -> str:
    """Seal a backlog, delete its first segment and claim the front: the
    leader cannot refill queue q and reports it. Returns the object's key."""
    backlog(broker, n=100)
    first: str = document(broker.store)["lanes"]["q"]["segments"][0]["key"]
    broker.store.delete(first)
    broker.execute(claim_op("w", ["q"], policy=broker.policy, max_jobs=HEAD))
    settle(broker, lambda doc: "q" in broker.segment_problems, what="the problem reported")
    return first


def test_every_page_has_a_banner_naming_the_queue_and_object_a_segment_stops(
        small_segments: None, broker: Broker, viewer: Client) -> None:
    assert b'id="segment-problems"' not in viewer.get("/").content
    key = stop_at_a_missing_segment(broker)
    for path in ("/", "/jobs/", "/workers/", "/dead/", "/queues/q/"):
        content = viewer.get(path).content
        assert b'id="segment-problems"' in content, path
        assert key.encode() in content and b'href="/queues/q/"' in content


def test_health_and_readyz_report_a_segment_problem(small_segments: None, broker: Broker) -> None:
    assert ApiClient().get("/api/v1/health").json()["segments"] == {"state": "ok"}
    assert "segment_problems" not in ApiClient().get("/readyz").json()
    key = stop_at_a_missing_segment(broker)
    health = ApiClient().get("/api/v1/health").json()["segments"]
    assert health["state"] == "unreadable"
    [problem] = health["problems"]
    assert problem["queue"] == "q" and problem["object"] == key and "missing" in problem["message"]
    ready = ApiClient().get("/readyz", HTTP_HOST="10.1.2.3:8000")
    # Still ready: other queues, and q's pushes, carry on; another node would find the same object.
    assert ready.status_code == 200 and ready.json()["segment_problems"] == [problem]


def test_queuestatus_counts_the_jobs_in_segments(small_segments: None, broker: Broker) -> None:
    backlog(broker, n=100)
    doc = document(broker.store)
    held = sum(ref["total"] - ref["consumed"] for ref in doc["lanes"]["q"]["segments"])
    out = StringIO()
    call_command("queuestatus", "--json", stdout=out)
    status = orjson.loads(out.getvalue())
    q = status["queues"]["q"]
    assert status["format"] == 2
    assert q["in_segments"] == held and q["segments"] == len(doc["lanes"]["q"]["segments"])
    assert q["ready"] + q["in_segments"] == 100
    text = StringIO()
    call_command("queuestatus", stdout=text)
    lines = text.getvalue().splitlines()
    header = next(line.split() for line in lines if line.startswith("queue "))
    row = next(line.split() for line in lines if line.startswith("q "))
    assert header[:3] == ["queue", "ready", "segments"] and row[:3] == ["q", str(100 - held), str(held)]


def test_metrics_count_the_jobs_and_objects_in_segments(
        small_segments: None, broker: Broker, settings: SettingsWrapper) -> None:
    settings.QUEUE_API_TOKEN = TOKEN
    backlog(broker, n=100)
    refs = document(broker.store)["lanes"]["q"]["segments"]
    response = ApiClient().get("/metrics", headers=AUTH)
    assert response.status_code == 200
    samples = {(s.name, s.labels.get("queue")): s.value
               for family in text_string_to_metric_families(response.content.decode()) for s in family.samples}
    assert samples[("queueadmin_queue_in_segments", "q")] == sum(r["total"] - r["consumed"] for r in refs)
    assert samples[("queueadmin_queue_segments", "q")] == len(refs)
    assert samples[("queueadmin_queue_pending", "q")] == 100


# -- operator actions ------------------------------------------------------------------------------


def pending_ids(store: ObjectStore, queue: str = "q") -> list[str]:
    return [j["id"] for j in document(store)["jobs"] if j["queue"] == queue and j["status"] == "pending"]


def test_a_purge_of_a_queues_pending_jobs_counts_and_removes_those_in_segments(
        small_segments: None, broker: Broker, operator: Client) -> None:
    backlog(broker, n=300)
    push(broker, "other", [1, 2])
    dry = preview(operator, action="purge", queue="q", status="pending")
    plan = dry.context["plan"]
    assert plan.count == 300 and plan.segment_jobs == 300 - len(pending_ids(broker.store))
    assert plan.before_pos == document(broker.store)["next_pos"]
    assert len(plan.sample) == 10 and [j["payload"] for j in plan.sample] == list(range(10))
    assert b"sit in" in dry.content and b"segment objects" in dry.content
    assert plan.confirm_phrase == "purge 300"
    seq = document(broker.store)["seq"]
    # A mistyped confirmation shows the dry run again, with what it said about the segments.
    wrong = confirm(operator, plan.token, reason="backlog of junk", confirm_text="purge 30")
    assert wrong.status_code == 422 and document(broker.store)["seq"] == seq
    assert b"sit in" in wrong.content and b"segment objects" in wrong.content
    done = confirm(operator, plan.token, reason="backlog of junk", confirm_text="purge 300")
    assert done.status_code == 302
    doc = document(broker.store)
    assert doc["seq"] == seq + 1  # one commit, whatever the backlog
    assert "q" not in doc["lanes"] and pending_ids(broker.store) == []
    assert doc["queues"]["q"]["purged"] == 300 and len(pending_ids(broker.store, "other")) == 2
    entry = AuditEntry.objects.get(action="purge")
    assert entry.outcome == "ok" and entry.count == 300
    assert "in segment objects" in entry.detail
    source.reset()
    assert viewer_count(operator, "q") == 0


def test_the_page_of_a_job_purged_with_its_segment_names_the_purge(
        small_segments: None, broker: Broker, operator: Client) -> None:
    """A queue's purge drops its segments' references without recording
    each job in them (one commit however many): the page of such a job,
    which finds no record, names the purge that took it, who and why."""
    ids = backlog(broker, n=100)
    in_document = {j["id"] for j in document(broker.store)["jobs"]}
    sealed = next(job_id for job_id in ids if job_id not in in_document)
    assert "segment-purges" not in operator.get(f"/jobs/{sealed}/").content.decode()  # still pending
    plan = preview(operator, action="purge", queue="q", status="pending").context["plan"]
    assert confirm(operator, plan.token, reason="junk backlog", confirm_text="purge 100").status_code == 302
    source.reset()

    page = operator.get(f"/jobs/{sealed}/").content.decode()
    assert 'data-testid="job-unknown"' in page and 'data-testid="segment-purges"' in page
    unlisted = 100 - len(in_document)
    text = html.unescape(page)
    assert f"{unlisted} of 100 jobs not listed, purged by operator" in text and "(junk backlog)" in text
    assert "/audit/?action=purge&queue=q" in text
    entry = AuditEntry.objects.get(action="purge")
    assert entry.unlisted == unlisted and entry.count - entry.jobs.count() == unlisted
    # A purge that listed every job it removed is not named: its jobs have pages of their own.
    AuditEntry.objects.filter(action="purge").update(count=len(in_document), unlisted=0)
    assert "segment-purges" not in operator.get(f"/jobs/{sealed}/").content.decode()


def viewer_count(client: Client, queue: str) -> int:
    row = next(r for r in client.get("/").context["rows"] if r["q"].name == queue)
    return int(row["q"].pending)


def test_a_purge_never_removes_more_than_its_dry_run_showed(
        small_segments: None, broker: Broker, operator: Client) -> None:
    """I9: pushed, sealed, refilled and claimed since the dry run, through the jobs list's filter button."""
    backlog(broker, n=200)
    page = operator.get("/jobs/", {"queue": "q", "status": "pending"})
    assert b"Purge all 200 matching" in page.content
    plan = preview(operator, action="purge", filter="queue=q&status=pending").context["plan"]
    assert plan.count == 200 and plan.segment_jobs > 150
    # Since the dry run: 15 jobs claimed (running now), so the front is refilled from the first segment;
    # 40 more pushed, and some of them sealed into a new segment.
    before = document(broker.store)["lanes"]["q"]["segments"]
    claimed = broker.execute(claim_op("w", ["q"], policy=broker.policy, max_jobs=15))
    later = push(broker, "q", list(range(1000, 1040)))

    def moved_on(doc: dict[str, Any]) -> bool:
        refs = doc["lanes"]["q"]["segments"]
        refilled = refs[0]["key"] != before[0]["key"] or refs[0]["consumed"] > 0
        return refilled and any(r["front"] >= plan.before_pos for r in refs)

    settle(broker, moved_on, what="a refill and a segment sealed after the dry run")
    done = confirm(operator, plan.token, reason="r", confirm_text="purge 200")
    assert done.status_code == 302
    entry = AuditEntry.objects.get(action="purge")
    assert entry.count == 185  # 200 planned, less the 15 claimed
    doc = document(broker.store)
    assert doc["queues"]["q"]["purged"] == 185
    left_pending = sum(1 for j in doc["jobs"] if j["queue"] == "q" and j["status"] == "pending")
    left_pending += sum(r["total"] - r["consumed"] for r in doc["lanes"].get("q", {}).get("segments", []))
    assert left_pending == 40  # exactly the later pushes
    running = {j["id"] for j in doc["jobs"] if j["status"] == "running"}
    assert running == {c.id for c in claimed}
    source.reset()
    assert sorted(every_pending(operator)) == list(range(1000, 1040))
    assert set(later).isdisjoint(AuditEntry.objects.get(action="purge").jobs.values_list("job_id", flat=True))


def test_a_purge_says_why_jobs_sealed_with_later_pushes_were_left(
        small_segments: None, broker: Broker, operator: Client) -> None:
    """The dry run counts the queue's tail. Pushes after it are sealed
    together with that tail into one segment, which also holds jobs the dry
    run never saw: the bounded purge leaves that segment whole (I9), so
    those tail jobs stay pending, and the result says so rather than
    calling them no longer pending."""
    backlog(broker, n=205)
    doc = document(broker.store)
    tail = [j for j in doc["jobs"] if j["pos"] > doc["lanes"]["q"]["segments"][-1]["last_pos"]]
    assert 0 < len(tail) < SEGMENT
    plan = preview(operator, action="purge", filter="queue=q&status=pending").context["plan"]
    assert plan.count == 205
    push(broker, "q", list(range(1000, 1040)))

    def mixed(doc: dict[str, Any]) -> bool:
        return any(r["front"] < plan.before_pos <= r["last_pos"] for r in doc["lanes"]["q"]["segments"])

    settle(broker, mixed, what="the counted tail sealed with the later pushes")
    assert confirm(operator, plan.token, reason="r", confirm_text="purge 205").status_code == 302
    entry, left = AuditEntry.objects.get(action="purge"), len(tail)
    assert entry.outcome == "ok" and entry.count == 205 - left
    # What the operator read on the page, and the audit log keeps.
    assert (f"{left} of 205 jobs were claimed, or sealed into a segment with jobs pushed after the dry run, "
            "and were left alone") in entry.detail, entry.detail
    source.reset()
    assert sorted(every_pending(operator)) == sorted([j["payload"] for j in tail] + list(range(1000, 1040)))


def test_a_forwarded_purge_outcome_says_whether_a_segment_was_kept_whole() -> None:
    from queueadmin.dashboard.actions import _removed

    assert _removed({"ids": ["a"], "in_segments": 3, "kept_whole": "seg/q/k"}) == (["a"], 3, True)
    assert _removed({"ids": ["a"], "in_segments": 3, "kept_whole": None}) == (["a"], 3, False)
    # A leader of an earlier release does not say: the dashboard reads the document after the run instead.
    assert _removed({"ids": ["a"], "in_segments": 3}) == (["a"], 3, None)


def test_a_queue_with_jobs_in_segments_cannot_be_forgotten(
        small_segments: None, broker: Broker, operator: Client) -> None:
    backlog(broker, n=100)
    dry = preview(operator, action="forget", queue="q")
    assert not dry.context["plan"].token
    assert "holds 100 jobs (pending, running or dead)" in dry.content.decode()


def test_a_requeued_job_goes_behind_the_segments(small_segments: None, broker: Broker, operator: Client) -> None:
    backlog(broker, n=100)
    [claimed] = broker.execute(claim_op("w", ["q"], policy=broker.policy))
    source.reset()
    plan = preview(operator, action="requeue", ids=claimed.id).context["plan"]
    assert plan.count == 1 and plan.before_pos is None
    assert confirm(operator, plan.token, reason="stuck").status_code == 302
    source.reset()
    order = every_pending(operator)
    assert order == [*range(1, 100), 0]  # back of the queue (I7), behind every segment


# -- the live socket -------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_live_jobs_fragment_pages_into_segments(small_segments: None, broker: Broker) -> None:
    """An open page of a queue's pending jobs deep in its backlog is redrawn
    from the segments, as the page itself was."""
    from asgiref.sync import sync_to_async

    from tests.queueadmin.dashboard_fixtures import client_for, make_user
    from tests.queueadmin.test_dashboard_live import ORIGIN, connect, cookie_for, next_update

    backlog(broker, n=200)

    async def body() -> None:
        viewer = await sync_to_async(lambda: client_for(make_user("viewer", "view_dashboard", staff=True)))()
        path = "/jobs/%3Fqueue%3Dq%26status%3Dpending%26page%3D3"
        communicator, connected, _ = await connect(path, cookie_for(viewer), ORIGIN)
        assert connected
        try:
            fragment = (await next_update(communicator))["fragments"]["live-jobs"]
            assert "200 jobs · page 3 of 4" in fragment
            assert re.findall(r"<code>(\d+)</code>", fragment) == [str(n) for n in range(100, 150)]
        finally:
            await communicator.disconnect()

    asyncio.run(body())


@pytest.fixture
def cluster_key(settings: SettingsWrapper) -> None:
    """The nodes' shared secret key (not the public development one), set
    before any user signs in: standbys sign what they forward with it."""
    settings.SECRET_KEY = "test-cluster-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz"


def test_a_purge_on_a_standby_runs_bounded_on_the_leader_and_is_audited_with_its_count(
        small_segments: None, cluster_key: None, broker: Broker, operator: Client,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The pos bound travels in the signed operation; the leader's outcome comes back as JSON."""
    import httpx

    from engine import NotLeader
    from queueadmin.api import forward

    backlog(broker, n=100)
    plan = preview(operator, action="purge", queue="q", status="pending").context["plan"]
    later = push(broker, "q", ["late"])
    real_execute = broker.execute

    def standby(op: object) -> None:
        raise NotLeader("http://leader.test:8000")

    def leader(url: str, *, content: bytes, **kwargs: Any) -> httpx.Response:
        monkeypatch.setattr(broker, "execute", real_execute)
        answer = ApiClient().post("/api/v1/operator", content.decode(), content_type="text/plain")
        monkeypatch.setattr(broker, "execute", standby)
        return httpx.Response(answer.status_code, content=answer.content, request=httpx.Request("POST", url))

    monkeypatch.setattr(broker, "execute", standby)
    monkeypatch.setattr(forward.httpx, "post", leader)
    assert confirm(operator, plan.token, reason="from b", confirm_text="purge 100").status_code == 302
    entry = AuditEntry.objects.get(action="purge")
    assert entry.outcome == "ok" and entry.count == 100 and "on the leader" in entry.detail
    assert pending_ids(broker.store) == later  # the job pushed after the dry run stays
    assert "q" not in document(broker.store)["lanes"]


def test_a_document_with_a_malformed_segment_reference_is_shown_as_unreadable(
        small_segments: None, broker: Broker, viewer: Client) -> None:
    backlog(broker, n=60)
    broker.stop()  # nobody leads: the page reads the store itself
    doc = document(broker.store)
    del doc["lanes"]["q"]["segments"][0]["sha256"]
    broken = orjson.dumps(doc)
    broker.store.put("queue.json", broken)
    source.reset()
    response = viewer.get("/")
    assert response.status_code == 503
    assert b"lanes.q.segments[0]" in response.content
    assert stored(broker.store) == broken


def test_an_altered_segment_or_a_store_outage_is_named_on_the_page(
        small_segments: None, broker: Broker, viewer: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine import StoreUnavailable

    backlog(broker, n=100)
    key = document(broker.store)["lanes"]["q"]["segments"][-1]["key"]
    blob = broker.store.get(key)
    assert blob is not None
    broker.store.put(key, blob.data.replace(b'"pending"', b'"pendinG"', 1))
    last = viewer.get("/jobs/", {"queue": "q", "status": "pending", "page": "2"})
    assert last.status_code == 200 and key in last.context["segment_error"]
    assert "SHA-256" in last.context["segment_error"]

    def outage(*args: object, **kwargs: object) -> list[Any]:
        raise StoreUnavailable("the store answered 503")

    segments.cache.clear()
    monkeypatch.setattr(segments.cache, "jobs", outage)
    down = viewer.get("/jobs/", {"queue": "q", "status": "pending", "page": "1"})
    assert down.status_code == 200 and "StoreUnavailable" in down.context["segment_error"]
    # A job page whose lookup must read a segment (its index names the job) says why it could not.
    monkeypatch.setattr("queueadmin.dashboard.snapshot.Snapshot.sealed_recently", lambda self, job_id: True)
    monkeypatch.setattr(broker.store, "get_range", outage)  # the job's bytes by range, too
    job = viewer.get(f"/jobs/{orjson.loads(blob.data)['jobs'][0]['id']}/")
    assert job.status_code == 200 and "StoreUnavailable" in job.context["segment_error"]
    assert b'data-testid="segment-error"' in job.content
