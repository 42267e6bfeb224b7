"""Broker election, heartbeat, takeover and fencing (layers 3 and 4), in one
process with fast intervals."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from datetime import datetime

import orjson
import pytest

from engine import Broker, MemoryStore, NotLeader, ObjectStore
from engine.ops import Tick, claim_op, push_op
from engine.policy import Policy
from engine.storecheck import probe_prefix
from tests.engine.simulated_wake import SimulatedWake
from tests.helpers import KEY, wait_for

BEAT = 0.05
TAKEOVER = 0.4


def doc(store: ObjectStore) -> dict:  # type: ignore[type-arg]
    blob = store.get(KEY)
    assert blob is not None
    return orjson.loads(blob.data)  # type: ignore[no-any-return]



def push(broker: Broker, payload: object) -> list[str]:
    return broker.execute(push_op("q", [payload], policy=broker.policy))  # type: ignore[no-any-return]


def test_first_broker_leads_at_once_and_names_itself(make_broker: Callable[..., Broker]) -> None:
    store = MemoryStore()
    a = make_broker(store, "http://a")
    wait_for(lambda: a.role == "leader")
    push(a, "x")
    assert doc(store)["broker"] == {"id": a.id, "url": "http://a", "epoch": 1}


def test_the_leader_commits_while_idle_and_expires_leases_on_time(make_broker: Callable[..., Broker]) -> None:
    store = MemoryStore()
    a = make_broker(store, "http://a")
    wait_for(lambda: a.role == "leader")
    push(a, "x")
    [job] = a.execute(claim_op("w", ["q"], policy=a.policy, lease_seconds=0.2))
    seq = doc(store)["seq"]
    wait_for(lambda: doc(store)["seq"] >= seq + 3)  # heartbeats with no traffic
    # No other traffic arrives, yet the lease expires and the job is pending again.
    wait_for(lambda: doc(store)["jobs"][0]["status"] == "pending")
    assert "stopped heartbeating" in doc(store)["jobs"][0]["last_error"]
    assert job.id == doc(store)["jobs"][0]["id"]


def test_leader_and_standby_report_the_seq_they_committed_or_saw(make_broker: Callable[..., Broker]) -> None:
    store = MemoryStore()
    a = make_broker(store, "http://a")
    wait_for(lambda: a.role == "leader")
    b = make_broker(store, "http://b")
    push(a, "x")
    wait_for(lambda: b.seq > 0)
    assert 0 < b.seq <= a.seq <= doc(store)["seq"]


def test_a_standby_refuses_with_the_leaders_url(make_broker: Callable[..., Broker]) -> None:
    store = MemoryStore()
    a = make_broker(store, "http://a")
    wait_for(lambda: a.role == "leader")
    b = make_broker(store, "http://b")
    wait_for(lambda: b.leader.id == a.id)
    assert b.role == "standby"
    with pytest.raises(NotLeader) as info:
        push(b, "x")
    assert info.value.leader_url == "http://a"


def test_standby_takes_over_when_the_leader_stops_writing(make_broker: Callable[..., Broker]) -> None:
    store = MemoryStore()
    a = make_broker(store, "http://a", policy=Policy(lease_seconds=30))
    wait_for(lambda: a.role == "leader")
    push(a, "x")
    a.execute(claim_op("w", ["q"], policy=a.policy))
    b = make_broker(store, "http://b")
    wait_for(lambda: b.leader.id == a.id)
    a.stop(hand_over=False)  # like kill -9: the document simply stops changing
    stopped = time.monotonic()
    wait_for(lambda: b.role == "leader", timeout=TAKEOVER + 3)
    assert time.monotonic() - stopped >= TAKEOVER * 0.9
    after = doc(store)
    assert after["broker"] == {"id": b.id, "url": "http://b", "epoch": 2}
    # The running lease got a fresh full timeout from the new leader's clock.
    lease = after["jobs"][0]["lease"]
    expires = datetime.fromisoformat(lease["expires_at"])
    written = datetime.fromisoformat(after["written_at"])
    assert (expires - written).total_seconds() > 29
    push(b, "y")


def test_a_paused_leader_acknowledges_nothing_after_waking_and_steps_down(
    make_broker: Callable[..., Broker],
) -> None:
    store = MemoryStore()
    a = make_broker(store, "http://a")
    wait_for(lambda: a.role == "leader")
    push(a, "before")
    # "SIGSTOP" the leader: its writer is held inside a write.
    committer = a.committer
    assert committer is not None
    paused, resume = threading.Event(), threading.Event()
    original = store.put_parts

    def held_put(*args: object, **kwargs: object) -> str:
        if threading.current_thread().name.startswith(f"committer-io:{a.id}") and not resume.is_set():
            paused.set()
            resume.wait(10)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    store.put_parts = held_put  # type: ignore[method-assign]
    outcome: list[object] = []

    def stale_push() -> None:
        try:
            outcome.append(push(a, "stale"))
        except NotLeader as exc:
            outcome.append(exc)

    pusher = threading.Thread(target=stale_push)
    pusher.start()
    assert paused.wait(5)
    b = make_broker(store, "http://b")
    wait_for(lambda: b.role == "leader", timeout=TAKEOVER + 5)
    push(b, "after")
    resume.set()  # "SIGCONT"
    pusher.join(5)
    assert len(outcome) == 1 and isinstance(outcome[0], NotLeader), outcome
    assert outcome[0].leader_url == "http://b"
    wait_for(lambda: a.role == "standby")
    with pytest.raises(NotLeader):
        push(a, "later")
    payloads = [j["payload"] for j in doc(store)["jobs"]]
    assert payloads == ["before", "after"]
    assert doc(store)["broker"]["id"] == b.id


def test_a_leader_that_steps_down_and_leads_again_never_acknowledges_its_old_committers_unwritten_write(
    make_broker: Callable[..., Broker],
) -> None:
    """Chaos run, file store, seed 12: a slow write made the leader's heartbeat
    time out; it stepped down and, the document still naming it, led again at
    once with a new committer while the old one's write was in flight. The new
    committer wrote first; the old write lost the race, re-read, found "its"
    (writer, seq) written by the new committer and acknowledged two pushes and
    two completes that were never written (I1, I2)."""
    store = MemoryStore()
    a = make_broker(store, "http://a")
    wait_for(lambda: a.role == "leader")
    push(a, "before")
    first = a.committer
    assert first is not None
    held, resume = threading.Event(), threading.Event()
    original = store.put_parts
    slow_thread: list[threading.Thread] = []  # the first committer's I/O thread

    def slow_put(*args: object, **kwargs: object) -> str:
        # Only the first committer's writes are slow, as in the run.
        me = threading.current_thread()
        if not slow_thread and me.name.startswith("committer-io:"):
            slow_thread.append(me)
        if slow_thread == [me] and not resume.is_set():
            held.set()
            resume.wait(10)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    store.put_parts = slow_put  # type: ignore[method-assign]
    outcome: list[object] = []

    def slow_push() -> None:
        try:
            outcome.append(push(a, "slow"))
        except NotLeader as exc:
            outcome.append(exc)

    pusher = threading.Thread(target=slow_push)
    pusher.start()
    try:
        assert held.wait(5)
        # The heartbeat times out, the node steps down and leads again with a
        # new committer, which commits (heartbeats) on top of the same version.
        wait_for(lambda: a.role == "leader" and a.committer not in (None, first), timeout=TAKEOVER + 5)
        seq = doc(store)["seq"]
        wait_for(lambda: doc(store)["seq"] > seq)
        second = a.committer
    finally:
        resume.set()  # the slow write goes on, and loses its race
        pusher.join(5)
    assert len(outcome) == 1, outcome
    payloads = [j["payload"] for j in doc(store)["jobs"]]
    if isinstance(outcome[0], list):  # acknowledged: then it must be in the document
        assert "slow" in payloads, f"push acknowledged as {outcome[0]} but not in the document: {payloads}"
    else:
        assert isinstance(outcome[0], NotLeader)
        assert "slow" not in payloads
    assert payloads[0] == "before"
    assert second is not None and second.writer_id != first.writer_id
    push(a, "after")
    assert [j["payload"] for j in doc(store)["jobs"]][-1] == "after"


def test_a_restarted_node_with_the_same_url_takes_over_at_once(make_broker: Callable[..., Broker]) -> None:
    store = MemoryStore()
    a = make_broker(store, "http://node-1")
    wait_for(lambda: a.role == "leader")
    a.stop()
    again = make_broker(store, "http://node-1")
    started = time.monotonic()
    wait_for(lambda: again.role == "leader")
    assert time.monotonic() - started < TAKEOVER
    assert doc(store)["broker"]["epoch"] == 2


def test_an_unreadable_document_keeps_every_broker_standing_by(make_broker: Callable[..., Broker]) -> None:
    store = MemoryStore()
    store.put(KEY, b"{corrupt")
    # Forty polls on a simulated clock: over four takeover intervals, in no real time.
    wake = SimulatedWake(budget=40)
    a = Broker(store, url="http://a", heartbeat_seconds=BEAT, takeover_seconds=TAKEOVER, monotonic=wake.monotonic)
    a._wake = wake  # type: ignore[assignment]
    a.start()
    try:
        assert wake.parked.wait(30), "the control loop never reached its budget of waits"
        assert wake.now >= 4 * TAKEOVER
        assert a.role == "standby"
        assert store.get(KEY).data == b"{corrupt"  # type: ignore[union-attr]
        assert KEY in (a.last_error or "")
        with pytest.raises(NotLeader):
            a.execute(Tick())
    finally:
        wake.finish()
        a.stop(timeout=10)


def test_an_idle_standby_polls_the_etag_and_reads_the_document_only_when_it_changes(
    make_broker: Callable[..., Broker],
) -> None:
    store = MemoryStore()
    a = make_broker(store, "http://a")
    wait_for(lambda: a.role == "leader")
    a.stop(hand_over=False)  # from here on the document does not change (it still names a)
    gets: list[str] = []
    original_get = store.get

    def counting_get(key: str):  # type: ignore[no-untyped-def]
        gets.append(key)
        return original_get(key)

    store.get = counting_get  # type: ignore[method-assign]
    wake = SimulatedWake(budget=8)  # several polls of an unchanged document, on a simulated clock
    b = Broker(store, url="http://b", heartbeat_seconds=BEAT, takeover_seconds=60, monotonic=wake.monotonic)
    b._wake = wake  # type: ignore[assignment]
    b.start()
    try:
        assert wake.parked.wait(30), "the control loop never reached its budget of waits"
        assert b.leader.id == a.id
        # The store check's probe once, as the node starts (engine.storecheck);
        # then the document once and its creation marker once, to make sure it
        # exists (I10).
        probes = [key for key in gets if key.startswith(probe_prefix(KEY))]
        assert len(probes) == 1 and gets[1:] == [KEY, f"{KEY}.created"], gets
    finally:
        wake.finish()
        b.stop(timeout=10)


class _GatedStore(MemoryStore):
    """A MemoryStore whose first get after the first put (the takeover's
    write) waits for ``release``: the new leader's committer is then still
    reading the document it has just named itself in."""

    def __init__(self) -> None:
        super().__init__()
        self.wrote = False
        self.held = threading.Event()
        self.release = threading.Event()

    def put(self, key, data, *, if_match=None, if_none_match=False):  # type: ignore[no-untyped-def]
        etag = super().put(key, data, if_match=if_match, if_none_match=if_none_match)
        self.wrote = self.wrote or not key.startswith(probe_prefix(KEY))  # not the store check's probe
        return etag

    def get(self, key):  # type: ignore[no-untyped-def]
        if self.wrote and not self.held.is_set():
            self.held.set()
            self.release.wait(5)
        return super().get(key)


@pytest.mark.parametrize("awaited", [False, True], ids=["execute", "aexecute"])
def test_a_request_during_the_takeover_waits_for_it_instead_of_not_leader(
    make_broker: Callable[..., Broker], awaited: bool
) -> None:
    """Between the takeover's write and its committer serving, the document
    already names this node: a push then must not be refused with "not the
    leader" (pointing at the node itself); it waits and lands."""
    store = _GatedStore()
    # A request waits for a takeover under way at most the takeover interval:
    # 10 s, not TAKEOVER, whose 0.3 s left after the release below a loaded
    # machine once used up (the whole suite on two cores). An empty store is
    # taken over at once whatever the interval.
    a = make_broker(store, "http://a", takeover_seconds=10)
    assert store.held.wait(5)
    outcome: list[object] = []

    def run() -> None:
        try:
            if awaited:
                outcome.append(asyncio.run(a.aexecute(push_op("q", ["x"], policy=a.policy))))
            else:
                outcome.append(push(a, "x"))
        except Exception as exc:  # recorded for the assertion below
            outcome.append(exc)

    caller = threading.Thread(target=run)
    caller.start()
    time.sleep(TAKEOVER / 4)
    assert not outcome, outcome  # still waiting, not refused
    store.release.set()
    caller.join(5)
    [ids] = outcome
    assert isinstance(ids, list) and len(ids) == 1, ids
    assert a.role == "leader" and [j["id"] for j in doc(store)["jobs"]] == ids
