"""Hedged writes: a write slower than the recent ones is sent again, the same
conditional PUT, and the first attempt that lands decides it.

A store stands in for the slow request: one put is held, either before it
reaches the inner store (a stalled connection: it lands later, or not at
all) or after it landed (a slow reply). The callers must be answered by the
hedge while the held attempt is still out, every job must be in the
document exactly once, and the held attempt, when it ends, must change
nothing (I1, I2, I3).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence

import pytest

from engine import Broker, GroupCommitter, MemoryStore, ObjectStore
from engine.commitwrites import HEDGE_SAMPLES, MAX_STRAGGLERS, verdict
from engine.errors import PreconditionFailed, StoreUnavailable
from engine.ops import push_op
from engine.pending import Write
from engine.policy import Policy
from engine.stores import WrappedStore
from tests.helpers import KEY, document, wait_for

POLICY = Policy()
HEDGE = 0.05  # the least wait before a hedge: the warm-up's writes take far less


class HoldingStore(WrappedStore):
    """A memory store whose next put of the document, once armed, is held
    until released: ``before`` it reaches the store, or ``after`` it landed."""

    def __init__(self) -> None:
        super().__init__(MemoryStore())
        self.armed: str | None = None
        self.release = threading.Event()
        self.held = threading.Event()  # set while an attempt is held
        self.outcomes: list[str] = []  # what each held attempt ended with
        self.puts = 0
        self.fail_next: Exception | None = None  # the next put raises this, without reaching the store

    def hold(self, where: str) -> None:
        assert where in ("before", "after")
        self.armed = where

    def put_parts(
        self, key: str, parts: Sequence[bytes], *, if_match: str | None = None, if_none_match: bool = False
    ) -> str:
        where = self.armed if key == KEY else None
        if where is not None:
            self.armed = None
        self.puts += key == KEY
        if key == KEY and self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        if where == "before":
            self.held.set()
            self.release.wait(30)
        try:
            etag = self.inner.put_parts(key, parts, if_match=if_match, if_none_match=if_none_match)
        except PreconditionFailed:
            if where is not None:
                self.outcomes.append("refused")
            raise
        if where == "after":
            self.held.set()
            self.release.wait(30)
        if where is not None:
            self.outcomes.append("landed")
        return etag


@pytest.fixture
def store() -> Iterator[HoldingStore]:
    holding = HoldingStore()
    yield holding
    holding.release.set()  # never leave an I/O thread held


def warmed(store: HoldingStore, *, hedge: float = HEDGE) -> GroupCommitter:
    """A started committer that has landed enough writes to judge a slow one by."""
    committer = GroupCommitter(store, hedge_seconds=hedge).start()
    for n in range(HEDGE_SAMPLES):
        committer.push("warm", [n])
    return committer


def push_held(committer: GroupCommitter, store: HoldingStore, where: str) -> list[str]:
    """Push one job while its write's first attempt is held ``where``; returns
    its ids, answered while that attempt is still held."""
    store.hold(where)
    ids: list[str] = committer.execute(push_op("q", ["slow"], policy=POLICY), timeout=10)
    assert store.held.is_set() and not store.release.is_set()
    return ids


def pending_ids(store: ObjectStore, queue: str = "q") -> list[str]:
    return [job["id"] for job in document(store)["jobs"] if job["queue"] == queue]


def test_a_write_stalled_before_the_store_is_landed_by_its_hedge_and_the_stall_then_changes_nothing(
    store: HoldingStore,
) -> None:
    committer = warmed(store)
    try:
        ids = push_held(committer, store, "before")
        assert pending_ids(store) == ids
        assert (committer.stats.hedged, committer.stats.hedges_landed) == (1, 1)
        seq = document(store)["seq"]
        store.release.set()
        wait_for(lambda: store.outcomes == ["refused"])  # conditioned on a version the hedge moved past
        assert document(store)["seq"] == seq
        more = committer.push("q", ["after"])  # the committer goes on from the hedge's version
        assert pending_ids(store) == ids + more
        assert committer.stats.lost_races == 0 and committer.stats.ambiguous == 0
    finally:
        committer.stop()


def test_a_write_whose_reply_is_slow_is_settled_by_a_reread_when_its_hedge_is_refused(store: HoldingStore) -> None:
    committer = warmed(store)
    try:
        ids = push_held(committer, store, "after")
        # The first attempt landed; the hedge was refused by it, which says the
        # document moved past both attempts' version: a re-read found the write.
        assert pending_ids(store) == ids
        assert committer.stats.hedged == 1 and committer.stats.hedges_landed == 0
        assert committer.stats.ambiguous == 1 and committer.stats.lost_races == 0
        store.release.set()
        wait_for(lambda: store.outcomes == ["landed"])
        more = committer.push("q", ["after"])
        assert pending_ids(store) == ids + more
    finally:
        committer.stop()


def test_a_hedge_refused_because_another_writer_got_there_is_settled_by_a_reread_and_applied_again(
    store: HoldingStore,
) -> None:
    # A long wait before the hedge: the rival's write must land in it, even on a slow machine.
    committer = warmed(store, hedge=1.0)
    rival = GroupCommitter(store).start()
    try:
        store.hold("before")
        theirs: list[str] = []
        writer = threading.Thread(target=lambda: store.held.wait(10) and theirs.extend(rival.push("q", ["rival"])))
        writer.start()
        ours = committer.execute(push_op("q", ["ours"], policy=POLICY), timeout=10)
        writer.join(10)
        # The rival landed while our first attempt was held; our hedge was
        # refused, the re-read did not find our write, so it was applied again
        # on top of the rival's and written: each job once.
        assert sorted(pending_ids(store)) == sorted(theirs + ours)
        assert committer.stats.hedged == 1 and committer.stats.ambiguous == 1
        store.release.set()
        wait_for(lambda: store.outcomes == ["refused"])
        assert sorted(pending_ids(store)) == sorted(theirs + ours)
    finally:
        rival.stop()
        committer.stop()


def test_a_hedge_that_fails_waits_for_the_first_attempt_which_then_decides(store: HoldingStore) -> None:
    committer = warmed(store)
    try:
        store.hold("before")
        releaser = threading.Thread(
            target=lambda: (store.held.wait(10), setattr(store, "fail_next", StoreUnavailable("injected")),
                            wait_for(lambda: store.fail_next is None), time.sleep(0.1), store.release.set()))
        releaser.start()
        ids = committer.execute(push_op("q", ["slow"], policy=POLICY), timeout=10)
        releaser.join(10)
        assert store.outcomes == ["landed"]  # the first attempt landed, after its hedge had failed
        assert pending_ids(store) == ids
        assert (committer.stats.hedged, committer.stats.hedges_landed, committer.stats.ambiguous) == (1, 0, 0)
    finally:
        committer.stop()


def test_writes_hedge_past_a_straggler_but_not_past_more_than_max_stragglers(store: HoldingStore) -> None:
    committer = warmed(store)
    try:
        # Each of these writes is held and landed by its hedge; their first
        # attempts stay out as stragglers, and the next write still hedges.
        for n in range(MAX_STRAGGLERS + 1):
            push_held(committer, store, "before")
            assert committer.stats.hedged == committer.stats.hedges_landed == n + 1
        puts = store.puts
        store.hold("after")  # the next write's first attempt lands, and its reply is held
        pushed: list[str] = []
        last = threading.Thread(target=lambda: pushed.extend(committer.push("q", ["next"])))
        last.start()
        wait_for(lambda: store.puts == puts + 1)  # its first attempt went out
        time.sleep(HEDGE * 6)
        # Too many stragglers out: no hedge, the write waits for its one attempt.
        assert store.puts == puts + 1 and committer.stats.hedged == MAX_STRAGGLERS + 1 and not pushed
        store.release.set()
        last.join(10)
        assert pushed and pending_ids(store)[-1:] == pushed
        assert len(pending_ids(store)) == MAX_STRAGGLERS + 2
    finally:
        committer.stop()


@pytest.mark.parametrize("hedge, writes", [(0.0, 2 * HEDGE_SAMPLES), (HEDGE, HEDGE_SAMPLES - 1)])
def test_no_hedge_when_off_or_before_enough_writes_landed(store: HoldingStore, hedge: float, writes: int) -> None:
    committer = GroupCommitter(store, hedge_seconds=hedge).start()
    try:
        for n in range(writes):
            committer.push("warm", [n])
        store.hold("before")
        threading.Thread(target=lambda: (store.held.wait(10), time.sleep(HEDGE * 6), store.release.set())).start()
        committer.push("q", ["slow"])
        assert committer.stats.hedged == 0 and store.outcomes == ["landed"]
    finally:
        committer.stop()


def test_hedge_seconds_must_be_a_number_of_seconds_from_0_to_an_hour() -> None:
    # 1e10 passed a finiteness check once, and the writer thread then died
    # waiting on it (past threading.TIMEOUT_MAX), leaving every caller unanswered.
    for bad in (-1.0, float("inf"), float("nan"), 3600.5, 1e10):
        with pytest.raises(ValueError, match="hedge_seconds"):
            GroupCommitter(MemoryStore(), hedge_seconds=bad)


def attempts(*failures: Exception, sent: int = 2) -> Write:
    write = Write.__new__(Write)
    write.attempts, write.answers, write.failures = sent, len(failures), list(failures)
    return write


def test_the_verdict_after_a_failed_attempt() -> None:
    refused, refused_too = PreconditionFailed("changed"), PreconditionFailed("changed again")
    unknown = StoreUnavailable("timed out")
    # Alone: the attempt's own error, as before hedging.
    assert verdict(attempts(refused, sent=1)) is refused
    assert verdict(attempts(unknown, sent=1)) is unknown
    # Both answered: refused by both is a lost race; anything else is unknown.
    assert verdict(attempts(refused, refused_too)) is refused
    assert verdict(attempts(refused, unknown)) is unknown
    assert verdict(attempts(unknown, refused)) is unknown
    # The other still out: an error waits for it, a refusal is settled by a re-read at once.
    assert verdict(attempts(unknown)) is None
    early = verdict(attempts(refused))
    assert isinstance(early, StoreUnavailable) and "second attempt" in str(early)


def test_a_leading_broker_hedges_its_writes_with_the_seconds_it_was_given(store: HoldingStore) -> None:
    broker = Broker(store, url=None, hedge_seconds=HEDGE, check_store=False).start()
    try:
        wait_for(lambda: broker.role == "leader")
        committer = broker.committer
        assert committer is not None and committer.hedge_seconds == HEDGE
        for n in range(HEDGE_SAMPLES):
            broker.execute(push_op("warm", [n], policy=POLICY))
        ids = push_held(committer, store, "before")
        assert pending_ids(store) == ids
        assert broker.stats.hedged >= 1 and broker.stats.hedges_landed >= 1
    finally:
        store.release.set()
        broker.stop()


def test_a_hedge_due_after_the_exiting_interpreter_stopped_the_io_thread_is_not_sent(
    store: HoldingStore, caplog: pytest.LogCaptureFixture,
) -> None:
    """At interpreter exit concurrent.futures refuses new work (see
    test_committer_faults' exiting-interpreter test): a hedge that falls due
    then is not sent, and the attempt already out still decides the write."""
    committer = warmed(store)
    try:
        store.hold("before")
        answers: list[object] = []
        caller = threading.Thread(target=lambda: answers.append(
            committer.execute(push_op("q", ["slow"], policy=POLICY), timeout=10)), daemon=True)
        with caplog.at_level("ERROR", logger="engine"):
            caller.start()
            wait_for(store.held.is_set, what="the first attempt held")
            assert committer._io is not None
            committer._io.shutdown(wait=False)  # the held attempt goes on; nothing new is taken
            threading.Event().wait(10 * HEDGE)  # its hedge falls due meanwhile
            store.release.set()
            caller.join(10)
        assert len(answers) == 1 and pending_ids(store) == answers[0]
        assert committer.stats.hedged == 0 and not [r for r in caplog.records if r.levelname == "ERROR"]
    finally:
        committer.stop(timeout=5)
