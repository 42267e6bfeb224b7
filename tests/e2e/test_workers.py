"""Real workers against real brokers: draining a backlog, failover under load,
SIGSTOP fencing, worker crashes and dead letters, and the same on S3."""

from __future__ import annotations

import signal
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from engine import BrokerClient
from tests.e2e.harness import TAKEOVER_SECONDS, TOKEN, Cluster, Node, api
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
THREADS = 32
PER_THREAD = 50


def push_backlog(node: Node, *, threads: int = THREADS, per_thread: int = PER_THREAD) -> list[str]:
    """``threads`` threads push ``per_thread`` jobs each over HTTP, one request per job."""
    ids: list[str] = []
    lock = threading.Lock()

    def pusher(t: int) -> None:
        with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            for i in range(per_thread):
                response = http.post(f"{node.url}/api/v1/jobs", json={"queue": "q", "payload": {"n": t * 1000 + i}})
                assert response.status_code == 201, response.text
                with lock:
                    ids.extend(response.json()["ids"])

    workers = [threading.Thread(target=pusher, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return ids


def records(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def drain(cluster: Cluster, node: Node, record: Path, *, expected: int) -> None:
    workers = [
        cluster.worker("--queue", "q", "--handler", "tests.e2e.handlers:record", "--burst", "--concurrency", "4",
                       "--broker", node.url, E2E_RECORD=str(record))
        for _ in range(2)
    ]
    for w in workers:
        assert w.wait(180) == 0
    executed = Counter(records(record))
    assert len(executed) == expected
    # Leases are 30 s and nothing crashed, so nothing may run twice.
    assert max(executed.values()) == 1, [n for n, c in executed.items() if c > 1][:5]


def check_end_to_end(cluster: Cluster, tmp_path: Path) -> None:
    node = cluster.node()
    wait_for(lambda: node.role() == "leader", 15, "the node to lead")
    ids = push_backlog(node)
    assert len(set(ids)) == THREADS * PER_THREAD
    drain(cluster, node, tmp_path / "record.txt", expected=THREADS * PER_THREAD)
    doc = cluster.document()
    assert doc["jobs"] == [] and doc["queues"]["q"]["completed"] == THREADS * PER_THREAD


def test_two_burst_workers_drain_sixteen_hundred_jobs_exactly_once(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    check_end_to_end(cluster_factory(), tmp_path)


def test_the_same_end_to_end_run_on_s3(cluster_factory: Callable[..., Cluster], tmp_path: Path, s3_url: str) -> None:
    import os

    credentials = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    check_end_to_end(cluster_factory(s3_url, **credentials), tmp_path)


def test_failover_under_load_and_a_paused_leader_is_fenced(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    # Short leases: jobs whose claim answer died with the leader are handed out again soon.
    cluster = cluster_factory(QUEUE_LEASE_SECONDS="3")
    a = cluster.node()
    wait_for(lambda: a.role() == "leader", 15, "node a to lead")
    b = cluster.node()
    wait_for(lambda: b.role() == "standby", 15, "node b to stand by")
    with BrokerClient([a.url, b.url], token=TOKEN) as client:
        for start in range(0, 400, 100):
            client.push("q", [{"n": n, "seconds": 0.02} for n in range(start, start + 100)])
    record = tmp_path / "record.txt"
    workers = [
        cluster.worker("--queue", "q", "--handler", "tests.e2e.handlers:slow", "--concurrency", "4", "--burst",
                       "--broker", a.url, "--broker", b.url, E2E_RECORD=str(record))
        for _ in range(2)
    ]
    wait_for(lambda: sum(line.startswith("done") for line in records(record)) >= 40, 60, "work to start")
    a.kill()
    wait_for(lambda: b.role() == "leader", TAKEOVER_SECONDS + 8, "node b to take over")
    for w in workers:
        assert w.wait(180) == 0
    # A claim the old leader committed but never answered leaves a lease nobody
    # holds (at-least-once): it expires, and a last burst worker finishes it.
    orphans = [j for j in cluster.document()["jobs"] if j["status"] == "running"]
    assert len(orphans) <= 8, orphans
    if cluster.document()["jobs"]:
        wait_for(
            lambda: all(j["status"] == "pending" for j in cluster.document()["jobs"]), 15, "orphaned leases to expire"
        )
        last = cluster.worker("--queue", "q", "--handler", "tests.e2e.handlers:slow", "--burst",
                              "--broker", a.url, "--broker", b.url, E2E_RECORD=str(record))
        assert last.wait(60) == 0
    done = {line.split()[1] for line in records(record) if line.startswith("done")}
    assert done == {str(n) for n in range(400)}
    assert cluster.document()["queues"]["q"]["completed"] == 400
    assert cluster.document()["jobs"] == []

    # Now pause the leader, let a fresh node take over, and wake the old one.
    c = cluster.node()
    wait_for(lambda: c.role() == "standby", 15, "node c to stand by")
    b.signal(signal.SIGSTOP)
    wait_for(lambda: c.role() == "leader", TAKEOVER_SECONDS + 8, "node c to take over from the paused b")
    [job_id] = api(c, "POST", "/api/v1/jobs", {"queue": "q", "payload": {"n": "after"}}).json()["ids"]
    b.signal(signal.SIGCONT)
    wait_for(lambda: b.role() == "standby", 15, "the old leader to report standby")
    stale = api(b, "POST", "/api/v1/jobs", {"queue": "q", "payload": {"n": "stale"}})
    assert stale.status_code == 503 and stale.json()["error"] == "not_leader"
    assert stale.json()["leader_url"] == c.url
    doc = cluster.document()
    assert doc["broker"]["url"] == c.url and doc["broker"]["epoch"] == 3
    assert [j["id"] for j in doc["jobs"]] == [job_id]


def test_a_worker_given_only_the_leader_finds_the_new_one_from_the_document_when_it_dies(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    """``--broker`` names the leader alone: when it is killed, the worker
    (which reads the same store, as the cluster's environment gives it)
    finds the node that took over from the document, not only once the old
    node is back."""
    cluster = cluster_factory(QUEUE_LEASE_SECONDS="3")
    a = cluster.node()
    wait_for(lambda: a.role() == "leader", 15, "node a to lead")
    b = cluster.node()
    wait_for(lambda: b.role() == "standby", 15, "node b to stand by")
    record = tmp_path / "record.txt"
    worker = cluster.worker("--queue", "q", "--handler", "tests.e2e.handlers:record", "--concurrency", "2",
                            "--broker", a.url, E2E_RECORD=str(record))
    try:
        with BrokerClient([a.url], token=TOKEN) as client:
            client.push("q", [{"n": n} for n in range(50)])
        wait_for(lambda: len(records(record)) >= 50, 60, "the first jobs to run")
        a.kill()  # and it stays dead
        wait_for(lambda: b.role() == "leader", TAKEOVER_SECONDS + 8, "node b to take over")
        with BrokerClient([b.url], token=TOKEN) as client:
            client.push("q", [{"n": n} for n in range(50, 100)])
        wait_for(lambda: set(records(record)) >= {str(n) for n in range(100)}, 60,
                 "the jobs pushed after the failover to run, on the worker given the dead node only")
        assert worker.poll() is None  # it never gave up
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)


def test_a_killed_worker_s_job_is_leased_again_and_a_failing_job_ends_dead(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    cluster = cluster_factory(QUEUE_LEASE_SECONDS="1.5")
    node = cluster.node()
    wait_for(lambda: node.role() == "leader", 15, "the node to lead")
    record = tmp_path / "record.txt"
    [slow_id] = api(node, "POST", "/api/v1/jobs", {"queue": "slow", "payload": {"n": 1, "seconds": 60}}).json()["ids"]
    victim = cluster.worker("--queue", "slow", "--handler", "tests.e2e.handlers:slow", "--broker", node.url,
                            E2E_RECORD=str(record))
    wait_for(lambda: any(line.startswith("start 1") for line in records(record)), 30, "the job to start")
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    # Nobody heartbeats any more: after the lease expires the job is pending again...
    wait_for(lambda: api(node, "GET", f"/api/v1/jobs/{slow_id}").json()["status"] == "pending", 10, "expiry")
    claimed = api(node, "POST", "/api/v1/claim", {"worker": "rescuer", "queues": ["slow"]}).json()["jobs"]
    assert [(j["id"], j["attempt"]) for j in claimed] == [(slow_id, 2)]

    [dead_id] = api(node, "POST", "/api/v1/jobs",
                    {"queue": "bad", "jobs": [{"payload": {"n": 7}, "max_attempts": 2}]}).json()["ids"]
    failing = cluster.worker("--queue", "bad", "--handler", "tests.e2e.handlers:always_fail", "--broker", node.url,
                             E2E_RECORD=str(record))
    wait_for(lambda: api(node, "GET", f"/api/v1/jobs/{dead_id}").json()["status"] == "dead", 30, "dead letter")
    failing.send_signal(signal.SIGTERM)
    assert failing.wait(30) == 0
    job = api(node, "GET", f"/api/v1/jobs/{dead_id}").json()
    assert job["attempts"] == 2 and "always fails" in job["error"] and "Traceback" in job["error"]
    assert records(record).count("fail 7") == 2


def test_a_worker_with_max_jobs_runs_that_many_then_exits_and_the_next_one_goes_on(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    """``queueworker --max-jobs 3`` (not in burst mode) runs 3 jobs, exits 0 by
    itself with the rest pending, and a fresh process takes the rest: what
    a supervisor restarting it sees."""
    cluster = cluster_factory()
    node = cluster.node()
    wait_for(lambda: node.role() == "leader", 15, "the node to lead")
    assert api(node, "POST", "/api/v1/jobs", {"queue": "q", "jobs": [{"payload": {"n": n}} for n in range(5)]}
               ).status_code == 201
    record = tmp_path / "record.txt"
    argv = ("--queue", "q", "--handler", "tests.e2e.handlers:record", "--concurrency", "2", "--max-jobs", "3",
            "--broker", node.url)
    assert cluster.worker(*argv, E2E_RECORD=str(record)).wait(60) == 0
    assert sorted(records(record)) == ["0", "1", "2"]
    assert [j["payload"]["n"] for j in cluster.document()["jobs"]] == [3, 4]
    assert cluster.worker(*argv, "--burst", E2E_RECORD=str(record)).wait(60) == 0
    assert sorted(records(record)) == ["0", "1", "2", "3", "4"]


def test_a_worker_in_order_runs_its_first_queues_jobs_before_older_jobs_of_the_next(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    """``queueworker --queue high --queue low --in-order``: the queues are
    priorities, as an RQ worker's; without ``--in-order`` the oldest jobs
    across both go first. Both runs see the same jobs, pushed low first."""
    cluster = cluster_factory()
    node = cluster.node()
    wait_for(lambda: node.role() == "leader", 15, "the node to lead")
    orders = []
    for flags in ((), ("--in-order",)):
        for queue, numbers in (("low", (1, 2, 3)), ("high", (4, 5))):
            body = {"queue": queue, "jobs": [{"payload": {"n": n}} for n in numbers]}
            assert api(node, "POST", "/api/v1/jobs", body).status_code == 201
        record = tmp_path / f"record{len(orders)}.txt"
        worker = cluster.worker("--queue", "high", "--queue", "low", "--handler", "tests.e2e.handlers:record",
                                "--burst", *flags, "--broker", node.url, E2E_RECORD=str(record))
        assert worker.wait(60) == 0
        orders.append(records(record))
    assert orders == [["1", "2", "3", "4", "5"], ["4", "5", "1", "2", "3"]]
    assert "queues high, low (in this order)" in cluster.logs()
