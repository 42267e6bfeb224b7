"""A SIGTERM to the leading daphne node (a deploy, ``kill``, a container's
stop) hands the lead over (queueadmin.shutdown, ``Broker.stop``): the
standby takes over at its next poll, long before the takeover interval a
crash costs, and every push the old leader acknowledged is in the store."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest

from tests.e2e.harness import Cluster, api
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
