"""The broker over real HTTP: bad input and security, lease fencing, and a
kill -9 of the broker in the middle of a push load."""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx
import orjson
import pytest

from tests.e2e.harness import Cluster, Node, api
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def test_bad_input_and_credentials_get_their_status_and_change_nothing(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster = cluster_factory(QUEUE_MAX_PAYLOAD_BYTES="1024")
    node = cluster.node()
    wait_for(lambda: node.role() == "leader", 10, "the node to lead")
    [job_id] = api(node, "POST", "/api/v1/jobs", {"queue": "q", "payload": {"n": 1}}).json()["ids"]
    claimed = api(node, "POST", "/api/v1/claim", {"worker": "w", "queues": ["q"]}).json()["jobs"][0]
    before = cluster.raw_document()

    cases: list[tuple[str, str, dict[str, object], int, str]] = [
        ("POST", "/api/v1/jobs", {"content": b"{not json"}, 400, "malformed_json"),
        ("POST", "/api/v1/jobs", {"json_body": {"queue": "q"}}, 400, "invalid"),
        ("POST", "/api/v1/jobs", {"json_body": {"queue": "q", "payload": 1, "colour": "red"}}, 400, "invalid"),
        ("POST", "/api/v1/jobs", {"json_body": {"queue": "q", "payload": "x" * 2000}}, 413, "payload_too_large"),
        ("GET", "/api/v1/jobs/no-such-job", {}, 404, "job_not_found"),
        ("POST", "/api/v1/jobs/no-such-job/complete", {"json_body": {"lease": "x"}}, 404, "job_not_found"),
        ("POST", f"/api/v1/jobs/{job_id}/complete", {"json_body": {"lease": "wrong"}}, 409, "lease_lost"),
        ("POST", f"/api/v1/jobs/{job_id}/heartbeat", {"json_body": {"lease": "wrong"}}, 409, "lease_lost"),
        ("POST", "/api/v1/jobs", {"json_body": {"queue": "q", "payload": 1}, "token": None}, 401, "unauthorized"),
        ("POST", "/api/v1/jobs", {"json_body": {"queue": "q", "payload": 1}, "token": "wrong"}, 401, "unauthorized"),
        ("GET", "/api/v1/claim", {}, 405, "method_not_allowed"),
    ]
    for method, path, options, status, code in cases:
        options = dict(options)
        body = options.pop("json_body", None)
        response = api(node, method, path, body, **options)  # type: ignore[arg-type]
        assert (response.status_code, response.json()["error"]) == (status, code), (path, response.text)
        assert response.json()["message"]
        assert cluster.raw_document() == before or _only_heartbeats_changed(cluster, before), path

    # The real lease still works after all of that.
    done = api(node, "POST", f"/api/v1/jobs/{job_id}/complete", {"lease": claimed["lease"]})
    assert done.status_code == 200


def _only_heartbeats_changed(cluster: Cluster, before: bytes) -> bool:
    """The leader commits every heartbeat interval; compare what matters."""
    old, new = orjson.loads(before), cluster.document()
    return (old["jobs"], old["dead"], old["queues"]) == (new["jobs"], new["dead"], new["queues"])


def test_a_stale_worker_cannot_complete_a_job_leased_again(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory()
    node = cluster.node()
    wait_for(lambda: node.role() == "leader", 10, "the node to lead")
    [job_id] = api(node, "POST", "/api/v1/jobs", {"queue": "q", "payload": "work"}).json()["ids"]
    stale = api(node, "POST", "/api/v1/claim", {"worker": "slow", "queues": ["q"], "lease_seconds": 0.5}).json()
    # The leader expires the lease by itself; a second worker gets the job.
    fresh = api(node, "POST", "/api/v1/claim", {"worker": "fast", "queues": ["q"], "wait_seconds": 10}).json()
    assert fresh["jobs"][0]["id"] == job_id and fresh["jobs"][0]["attempt"] == 2
    late = api(node, "POST", f"/api/v1/jobs/{job_id}/complete", {"lease": stale["jobs"][0]["lease"]})
    assert late.status_code == 409 and late.json()["error"] == "lease_lost"
    assert api(node, "GET", f"/api/v1/jobs/{job_id}").json()["lease"]["worker"] == "fast"
    ok = api(node, "POST", f"/api/v1/jobs/{job_id}/complete", {"lease": fresh["jobs"][0]["lease"]})
    assert ok.status_code == 200
    assert cluster.document()["queues"]["q"]["completed"] == 1


def test_a_job_pending_in_a_segment_is_found_by_id_also_by_the_leader_after_a_kill_9(
    cluster_factory: Callable[..., Cluster],
) -> None:
    """Format 2 with tiny segments: a job pushed and sealed into a segment
    object is answered by ``GET /api/v1/jobs/<id>`` as pending (it was a
    404), by the leader that sealed it and, after that one is killed, by
    the next one, which reads the object from the store."""
    cluster = cluster_factory(QUEUE_SEGMENT_JOBS="10", QUEUE_HEAD_JOBS="20", QUEUE_REFILL_BELOW="10")
    first = cluster.node()
    wait_for(lambda: first.role() == "leader", 10, "the node to lead")
    ids = api(first, "POST", "/api/v1/jobs", {"queue": "q", "jobs": [{"payload": n} for n in range(60)]}).json()["ids"]
    wait_for(lambda: ids[50] not in {job["id"] for job in cluster.document()["jobs"]}, 15, "job 50 sealed")
    keys = {ref["key"] for ref in cluster.document()["lanes"]["q"]["segments"]}

    def found_by(node: Node) -> None:
        answer = api(node, "GET", f"/api/v1/jobs/{ids[50]}")
        assert answer.status_code == 200, answer.text
        view = answer.json()
        assert (view["status"], view["payload"], view["segment"] in keys) == ("pending", 50, True)
        missing = api(node, "GET", "/api/v1/jobs/no-such-job")
        assert missing.status_code == 404 and missing.json()["error"] == "job_not_found"

    found_by(first)
    second = cluster.node()
    wait_for(lambda: second.role() == "standby", 10, "the second node to stand by")
    first.kill()
    wait_for(lambda: second.role() == "leader", 30, "the second node to take over")
    found_by(second)


def test_a_job_sealed_long_before_the_window_is_found_by_id_through_its_index_after_a_kill_9(
    cluster_factory: Callable[..., Cluster],
) -> None:
    """A backlog of 20,000 jobs: the early ones are merged into a segment of
    16,384 jobs, long out of the document's ``sealed`` window (10,000 ids).
    ``GET /api/v1/jobs/<id>`` finds one of them (it answered 404 before the
    merged segments got id indexes), on the leader and, after a ``kill -9``,
    on the next one, which reads the indexes from the store."""
    cluster = cluster_factory(QUEUE_SEGMENT_JOBS="100", QUEUE_HEAD_JOBS="200", QUEUE_REFILL_BELOW="100")
    first = cluster.node()
    wait_for(lambda: first.role() == "leader", 10, "the node to lead")
    ids: list[str] = []
    for start in range(0, 20_000, 1_000):
        batch = [{"payload": n} for n in range(start, start + 1_000)]
        answer = api(first, "POST", "/api/v1/jobs", {"queue": "q", "jobs": batch})
        assert answer.status_code == 201, answer.text
        ids += answer.json()["ids"]
    target = ids[2_000]

    def merged_segment() -> str | None:
        refs = cluster.document().get("lanes", {}).get("q", {}).get("segments", [])
        return next((ref["key"] for ref in refs if ref["total"] > 4_096 and ref["consumed"] == 0), None)

    wait_for(lambda: merged_segment() is not None, 60, "a merged segment")
    doc = cluster.document()
    assert target not in " ".join(group[1] for group in doc["sealed"]), "the job must be out of the sealed window"
    assert target not in {job["id"] for job in doc["jobs"]}

    def found_by(node: Node) -> None:
        answer = api(node, "GET", f"/api/v1/jobs/{target}")
        assert answer.status_code == 200, answer.text
        view = answer.json()
        assert (view["status"], view["payload"]) == ("pending", 2_000)
        assert view["segment"] == merged_segment()
        missing = api(node, "GET", "/api/v1/jobs/no-such-job")
        assert missing.status_code == 404 and missing.json()["error"] == "job_not_found"

    found_by(first)
    second = cluster.node()
    wait_for(lambda: second.role() == "standby", 10, "the second node to stand by")
    first.kill()
    wait_for(lambda: second.role() == "leader", 30, "the second node to take over")
    found_by(second)


def test_every_acknowledged_push_survives_a_broker_kill_9(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory()
    node = cluster.node()
    wait_for(lambda: node.role() == "leader", 10, "the node to lead")
    acknowledged: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def pusher(n: int) -> None:
        with httpx.Client(timeout=5) as http:
            i = 0
            while not stop.is_set():
                try:
                    response = http.post(
                        f"{node.url}/api/v1/jobs",
                        json={"queue": "q", "jobs": [{"payload": {"pusher": n, "i": i}} for _ in range(5)]},
                        headers={"Authorization": "Bearer e2e-token"},
                    )
                except httpx.HTTPError:
                    return  # the broker died under us: that push was never acknowledged
                if response.status_code == 201:
                    with lock:
                        acknowledged.extend(response.json()["ids"])
                i += 1

    threads = [threading.Thread(target=pusher, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    wait_for(lambda: len(acknowledged) > 200, 30, "some pushes to be acknowledged")
    node.kill()
    stop.set()
    for t in threads:
        t.join(10)

    # Restart on the same address: the node takes over its own earlier life.
    again = cluster.node(port=node.port)
    wait_for(lambda: again.role() == "leader", 15, "the restarted node to lead")
    stored = {job["id"] for job in cluster.document()["jobs"]}
    missing = set(acknowledged) - stored
    assert not missing, f"{len(missing)} of {len(acknowledged)} acknowledged pushes lost"
    assert api(again, "POST", "/api/v1/jobs", {"queue": "q", "payload": "after"}).status_code == 201
