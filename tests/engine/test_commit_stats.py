"""The committer's counters and histograms (CommitStats), which /metrics exports."""

from __future__ import annotations

import orjson
import pytest

from engine import GroupCommitter, MemoryStore
from engine.pending import Buckets, CommitStats
from tests.helpers import KEY


def test_buckets_count_each_value_in_the_first_bucket_whose_bound_holds_it() -> None:
    b = Buckets((1.0, 5.0))
    for value in (0.5, 1.0, 3.0, 5.0, 7.0):
        b.observe(value)
    assert b.counts == [2, 2, 1]
    assert b.cumulative() == [(1.0, 2), (5.0, 4), (float("inf"), 5)]
    assert (b.count, b.sum) == (5, 16.5)


def test_buckets_refuse_bounds_out_of_order() -> None:
    with pytest.raises(ValueError):
        Buckets((5.0, 1.0))


def test_each_landed_write_is_recorded_with_its_size_and_batch() -> None:
    store = MemoryStore()
    with GroupCommitter(store) as committer:
        committer.push("q", [{"n": 1}, {"n": 2}])
        committer.push("q", [{"n": 3}])
        stats = committer.stats
        blob = store.get(KEY)
    assert blob is not None and orjson.loads(blob.data)["seq"] == stats.commits == 2
    assert stats.latency.count == stats.sizes.count == stats.batches.count == 2
    assert stats.batches.sum == 2  # one push operation per write
    assert stats.sizes.sum > len(blob.data)  # two writes, the last as large as the stored document
    assert stats.last_commit_at > 0 and stats.latency.sum >= stats.last_commit_seconds


def test_committers_given_one_stats_object_add_up() -> None:
    shared = CommitStats()
    store = MemoryStore()
    for _ in range(2):
        with GroupCommitter(store, stats=shared) as committer:
            committer.push("q", [1])
    assert shared.commits == 2
