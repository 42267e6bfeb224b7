"""A SIGTERM to the leading daphne node (a deploy, ``kill``, a container's
stop) hands the lead over (queueadmin.shutdown, ``Broker.stop``): the
standby takes over at its next poll, long before the takeover interval a
crash costs, and every push the old leader acknowledged is in the store."""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
import pytest

from engine.stores import fault_store_url
from tests.e2e.harness import TOKEN, Cluster, Node, api
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

#: Far longer than the wait below: a standby that leads within it was handed
#: the lead; after a crash it would wait this long without commits.
TAKEOVER_SECONDS = "60"


def test_a_leader_stopped_with_sigterm_hands_over_to_the_standby(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(QUEUE_TAKEOVER_SECONDS=TAKEOVER_SECONDS)
    a = cluster.node()
    wait_for(lambda: a.role() == "leader", 30, "the first node to lead")
    b = cluster.node()
    assert b.role() == "standby"
    pushed = [api(a, "POST", "/api/v1/jobs", {"queue": "q", "payload": {"n": n}}).json()["ids"][0]
              for n in range(20)]

    a.signal(signal.SIGTERM)
    stopped = time.monotonic()
    assert a.proc.wait(30) == 0
    wait_for(lambda: b.role() == "leader", 15, "the standby to take over")
    assert time.monotonic() - stopped < float(TAKEOVER_SECONDS) / 2
    assert "handed over queue.json" in a.log.read_text(errors="replace")
    document = cluster.document()
    assert document["broker"]["url"] == b.url and document["broker"]["epoch"] == 2
    assert set(pushed) <= {job["id"] for job in document["jobs"]}
    claimed = api(b, "POST", "/api/v1/claim", {"worker": "w", "queues": ["q"]})
    assert claimed.status_code == 200 and claimed.json()["jobs"][0]["id"] == pushed[0]


def _claim_until_refused(node: Node, leases: list[str], ends: list[tuple[float, str]],
                         started: threading.Barrier) -> None:
    """Claim one job at a time, keeping each lease received, until an answer
    other than 200 (or none) comes; ``ends`` gets when that last request was
    sent (monotonic) and what ended it."""
    with httpx.Client(base_url=node.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as client:
        started.wait()
        while True:
            sent = time.monotonic()
            try:
                answer = client.post("/api/v1/claim", json={"worker": "w", "queues": ["q"]})
            except httpx.HTTPError as exc:
                ends.append((sent, type(exc).__name__))
                return
            if answer.status_code != 200:
                ends.append((sent, str(answer.status_code)))
                return
            leases.extend(job["lease"] for job in answer.json()["jobs"])


def test_requests_in_flight_as_the_leader_stops_are_answered_not_cut_off(
    cluster_factory: Callable[..., Cluster], tmp_path: Path,
) -> None:
    """daphne cancels the requests in flight as it shuts down; it now does so
    only after the broker's stop landed their commits and they answered. A
    claim cut off would lease its job to nobody until the lease ran out:
    here every running job's lease in the store is one a client received."""
    # Every write of the store takes 50 ms: the SIGTERM surely finds claims
    # waiting for their commit.
    control = tmp_path / "control.json"
    control.write_bytes(orjson.dumps({"slow": 1.0, "slow_seconds": 0.05, "ops": ["put"]}))
    cluster = cluster_factory(fault_store_url((tmp_path / "store").as_uri(), control),
                              QUEUE_TAKEOVER_SECONDS=TAKEOVER_SECONDS)
    a = cluster.node()
    wait_for(lambda: a.role() == "leader", 30, "the node to lead")
    api(a, "POST", "/api/v1/jobs", {"queue": "q", "jobs": [{"payload": n} for n in range(1000)]})
    leases: list[str] = []
    ends: list[tuple[float, str]] = []
    started = threading.Barrier(9)
    clients = [threading.Thread(target=_claim_until_refused, args=(a, leases, ends, started)) for _ in range(8)]
    for client in clients:
        client.start()
    started.wait()
    wait_for(lambda: len(leases) >= 50, 30, "claims to flow")

    signalled = time.monotonic()
    a.signal(signal.SIGTERM)
    for client in clients:
        client.join(30)
    assert a.proc.wait(30) == 0
    # Each client ended on a 503 not_leader, on a refused connection once the
    # node had closed its port, or on a connection closed with its request
    # unread (RemoteProtocolError): the node answered every request it had
    # begun, and daphne's shutdown had none left to cancel. (Not judged by
    # when each client sent its last request: with eight client threads in
    # this process, a request's bytes may leave tens of milliseconds after
    # its timestamp on a loaded machine, and the full suite once saw one
    # stamped 32 ms before the signal that the node never read.)
    assert {what for _, what in ends} <= {"503", "ConnectError", "RemoteProtocolError", "ReadError"}, ends
    killed = re.findall(r"Killed (\d+) pending application instances", a.log.read_text(errors="replace"))
    assert killed == ["0"], (killed, [(sent - signalled, what) for sent, what in ends])
    running = [job for job in cluster.document()["jobs"] if job["status"] == "running"]
    assert running and {job["lease"]["token"] for job in running} <= set(leases)
