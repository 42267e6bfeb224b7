"""Hedged writes under random faults: nothing acknowledged is lost or doubled.

A committer hedges early (10 ms after a write starts) on a store (in memory,
and the folder store, where the two attempts race in one process) whose writes
of the document, drawn from a seed, are held before they reach it (a stalled
request, which lands late or is refused), land and then answer late (a slow
reply), fail before reaching it, or land and lose their reply; a rival
committer writes to the same document now and then, so hedges race real
conflicts. Threads push one job at a time. At the end, with the faults off:
every push that was answered is in the document exactly once, no job is there
twice, and a push that failed (the outcome unknown to its caller) is there at
most once (I1, I2, I3).
"""

from __future__ import annotations

import random
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import EngineError, GroupCommitter, MemoryStore, StoreUnavailable
from engine.ops import push_op
from engine.stores import FileStore, ObjectStore, WrappedStore
from tests.fuzz.profiles import scaled
from tests.helpers import KEY, document

WARM_UP = 40  # writes before the committer judges one slow
PUSHERS = 6
PUSHES_EACH = 12


class DiceStore(WrappedStore):
    """A memory store whose puts of the document, once ``faults`` is set,
    meet one of: held before (up to 60 ms), answered late after landing
    (up to 60 ms), an error before reaching the store, a lost reply after
    landing, or nothing, by a seeded die."""

    def __init__(self, seed: int, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.faults = False
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    def _roll(self) -> tuple[str, float]:
        with self._lock:
            if not self.faults:
                return "none", 0.0
            kind = self._random.choices(["before", "after", "error", "lost", "none"], [3, 3, 1, 1, 4])[0]
            return kind, self._random.uniform(0, 0.06)

    def put_parts(
        self, key: str, parts: Sequence[bytes], *, if_match: str | None = None, if_none_match: bool = False
    ) -> str:
        kind, seconds = self._roll() if key == KEY else ("none", 0.0)
        if kind == "error":
            raise StoreUnavailable("injected: the request never reached the store")
        if kind == "before":
            time.sleep(seconds)
        etag = self.inner.put_parts(key, parts, if_match=if_match, if_none_match=if_none_match)
        if kind == "after":
            time.sleep(seconds)
        if kind == "lost":
            raise StoreUnavailable("injected: the write landed and its reply was lost")
        return etag


@pytest.mark.parametrize("where", ["memory", "folder"])
@settings(max_examples=scaled(4))
@given(seed=st.integers(0, 2**32 - 1))
def test_hedged_writes_under_stalls_errors_lost_replies_and_a_rival_lose_and_double_nothing(
    where: str, seed: int,
) -> None:
    folder = tempfile.mkdtemp() if where == "folder" else None
    store = DiceStore(seed, FileStore(folder) if folder else MemoryStore())
    committer = GroupCommitter(store, hedge_seconds=0.01, retry_backoff_seconds=0.001, max_retries=50).start()
    rival = GroupCommitter(store, retry_backoff_seconds=0.001, max_retries=50).start()
    answered: list[str] = []
    unknown: list[str] = []
    lock = threading.Lock()
    try:
        for n in range(WARM_UP):
            committer.push("warm", [n])
        store.faults = True
        rng = random.Random(seed)

        def pusher(n: int, queue: str, client: GroupCommitter, pause: float) -> None:
            for i in range(PUSHES_EACH):
                op = push_op(queue, [{"n": n, "i": i}], policy=client.policy)
                try:
                    client.execute(op, timeout=30)
                except EngineError:
                    with lock:
                        unknown.append(op.jobs[0].id)
                else:
                    with lock:
                        answered.append(op.jobs[0].id)
                time.sleep(pause)

        threads = [threading.Thread(target=pusher, args=(n, "q", committer, rng.uniform(0, 0.01)))
                   for n in range(PUSHERS)]
        threads.append(threading.Thread(target=pusher, args=(99, "rival", rival, 0.03)))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
            assert not thread.is_alive()
    finally:
        store.faults = False
        rival.stop()
        committer.stop()
    ids = Counter(job["id"] for job in document(store)["jobs"])
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
    assert not [job_id for job_id, count in ids.items() if count > 1], "a job is in the document twice"
    assert not [job_id for job_id in answered if job_id not in ids], "an answered push is not in the document"
    assert len(answered) + len(unknown) == (PUSHERS + 1) * PUSHES_EACH
    assert committer.stats.hedged > 0  # the dice held writes long enough to hedge
