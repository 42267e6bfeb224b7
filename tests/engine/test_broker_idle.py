"""I11: idle costs stay flat, before and after any number of failovers.

The broker's control loop is driven on simulated time: its wake event is
replaced by one whose waits return at once but advance a simulated monotonic
clock by the timeout, unless the event is set (then they return at once and
advance nothing, as a real set event does). So the test counts store requests
per simulated heartbeat, and waits that did not wait, without sleeping.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from engine import Broker, MemoryStore, parsing
from engine.direct import DirectClient
from engine.errors import DocumentError
from engine.ops import TakeOver, Tick
from engine.parsing import parse_document
from engine.policy import Policy
from tests.engine.simulated_wake import SimulatedWake
from tests.helpers import KEY

BEAT = 1.0
TAKEOVER = 4.0


def intrude(store: MemoryStore) -> None:
    """Another broker takes over (and then vanishes without heartbeating)."""
    blob = store.get(KEY)
    assert blob is not None
    epoch = parse_document(KEY, blob.data, policy=Policy()).broker.epoch
    DirectClient(store).execute(TakeOver(broker_id="intruder", url="http://intruder", epoch=epoch))


def requests(store: MemoryStore) -> int:
    return store.stats.reads + store.stats.writes + store.stats.conflicts


def test_a_node_that_stepped_down_and_took_over_again_stays_at_one_step_per_interval() -> None:
    store = MemoryStore()
    wake = SimulatedWake(budget=300)
    # Four foreign takeovers: each makes the node step down, stand by for a
    # takeover interval (nobody heartbeats), and lead again.
    step_downs = [20, 60, 100, 140]
    for n in step_downs:
        wake.hooks[n] = lambda: intrude(store)
    broker = Broker(store, url="http://a", heartbeat_seconds=BEAT, takeover_seconds=TAKEOVER,
                    monotonic=wake.monotonic)
    broker._wake = wake  # type: ignore[assignment]
    broker.start()
    try:
        assert wake.parked.wait(60), "the control loop never reached its budget of waits"
        waits, immediate, simulated, used = wake.waits, wake.immediate, wake.now, requests(store)
        takeovers, role = broker.takeovers, broker.role
    finally:
        wake.finish()
        broker.stop(timeout=10)
    assert takeovers == 1 + len(step_downs) and role == "leader"
    # A step-down may cut one wait short; nothing else may (a set event left
    # set turns every wait into a busy loop).
    assert immediate <= len(step_downs), f"{immediate} of {waits} waits did not wait"
    # Every other wait was a whole heartbeat or poll interval.
    assert simulated >= (waits - 1 - len(step_downs)) * min(BEAT, TAKEOVER / 4)
    # Bounded store requests per interval: one commit per heartbeat while
    # leading, one ETag check per poll while standing by, plus a few reads
    # around each change of role.
    intervals = simulated / min(BEAT, TAKEOVER / 4)
    assert used <= 2 * intervals + 10 * len(step_downs), f"{used} store requests in {intervals:g} intervals"


def test_an_idle_standby_after_a_step_down_polls_once_per_interval() -> None:
    store = MemoryStore()
    wake = SimulatedWake(budget=200)
    counted: dict[str, int] = {}

    def snapshot() -> None:
        counted["at"] = requests(store)
        counted["wait"] = wake.waits

    wake.hooks[10] = lambda: intrude(store)  # step down once...
    wake.hooks[15] = snapshot  # ...then count an idle standby's requests
    broker = Broker(store, url="http://a", heartbeat_seconds=BEAT, takeover_seconds=10_000.0,
                    monotonic=wake.monotonic)
    broker._wake = wake  # type: ignore[assignment]
    broker.start()
    try:
        assert wake.parked.wait(60), "the control loop never reached its budget of waits"
        waits, immediate, used, role = wake.waits, wake.immediate, requests(store), broker.role
    finally:
        wake.finish()
        broker.stop(timeout=10)
    assert role == "standby"
    assert immediate <= 1
    # One metadata request (ETag check) per poll, nothing else.
    assert used - counted["at"] <= waits - counted["wait"] + 1


def test_an_idle_standby_does_not_rebuild_the_queue_after_every_leader_heartbeat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The leader writes every heartbeat, so a standby sees a new ETag at every
    # poll. Building the whole state from each version (every job, the dedup
    # window) made an idle standby's CPU grow with the queue: ~23% of a core
    # for a 900 kB document polled every 0.25 s, after a chaos run.
    jobs, beats = 50, 30
    store = MemoryStore()
    DirectClient(store).push("work", [{"n": i} for i in range(jobs)])
    intrude(store)  # the leader, which heartbeats below
    leader_writing = False
    built = 0
    real_job = parsing._job

    def counting_job(*args: Any, **kwargs: Any) -> Any:
        nonlocal built
        if not leader_writing:  # the leader's own reads are not the standby's cost
            built += 1
        return real_job(*args, **kwargs)

    def heartbeat() -> None:
        nonlocal leader_writing
        leader_writing = True
        try:
            DirectClient(store).execute(Tick())
        finally:
            leader_writing = False

    monkeypatch.setattr(parsing, "_job", counting_job)
    wake = SimulatedWake(budget=beats)
    for n in range(1, beats):
        wake.hooks[n] = heartbeat
    broker = Broker(store, url="http://a", heartbeat_seconds=BEAT, takeover_seconds=TAKEOVER,
                    monotonic=wake.monotonic)
    broker._wake = wake  # type: ignore[assignment]
    broker.start()
    try:
        assert wake.parked.wait(60), "the control loop never reached its budget of waits"
        role, leader, seen = broker.role, broker.leader, broker.seq
    finally:
        wake.finish()
        broker.stop(timeout=10)
    blob = store.get(KEY)
    assert blob is not None
    latest = parse_document(KEY, blob.data, policy=Policy())
    assert role == "standby" and leader.id == "intruder" and leader.url == "http://intruder"
    assert seen == latest.seq and latest.seq >= beats  # it saw every heartbeat's version...
    assert built <= jobs, f"the standby built {built} jobs from {beats} versions of {jobs} jobs"  # ...cheaply


def test_a_standby_still_refuses_a_version_whose_header_is_unreadable() -> None:
    store = MemoryStore()
    DirectClient(store).push("work", [{"n": 1}])
    intrude(store)
    wake = SimulatedWake(budget=10)
    blob = store.get(KEY)
    assert blob is not None
    bad = blob.data.replace(b'"seq":', b'"seq":-', 1)

    def corrupt() -> None:
        store.put(KEY, bad)

    wake.hooks[5] = corrupt
    broker = Broker(store, url="http://a", heartbeat_seconds=BEAT, takeover_seconds=10_000.0,
                    monotonic=wake.monotonic)
    broker._wake = wake  # type: ignore[assignment]
    broker.start()
    try:
        assert wake.parked.wait(60), "the control loop never reached its budget of waits"
        problem, role = broker.document_problem, broker.role
    finally:
        wake.finish()
        broker.stop(timeout=10)
    assert role == "standby"
    assert isinstance(problem, DocumentError) and "seq" in str(problem)
    assert store.get(KEY).data == bad  # type: ignore[union-attr]


def test_the_header_a_standby_reads_is_the_documents_own() -> None:
    store = MemoryStore()
    DirectClient(store).push("work", [{"n": 1}])
    intrude(store)
    blob = store.get(KEY)
    assert blob is not None
    state = parse_document(KEY, blob.data, policy=Policy())
    header = parsing.parse_header(KEY, blob.data)
    assert (header.seq, header.writer, header.broker) == (state.seq, state.writer, state.broker)
    raw = orjson.loads(blob.data)
    for bad, problem in ((b"{corrupt", "not valid JSON"), (b'{"format": 99}', "format"),
                         (orjson.dumps({**raw, "broker": {"id": 7}}), "broker.id"),
                         (orjson.dumps({**raw, "jobs": {}}), "jobs")):
        with pytest.raises(DocumentError, match=problem):
            parsing.parse_header(KEY, bad)
