"""The last commit's age and the clocks' difference a standby's overview shows (queueadmin/dashboard/clocks.py).
The pages themselves are tested in test_dashboard_pages.py (``standby``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from queueadmin.dashboard.clocks import clock_warning, commit_timing
from queueadmin.dashboard.snapshot import Snapshot
from queueadmin.dashboard.source import NodeInfo

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def snapshot(*, seq: int, written_seconds_ago: float) -> Snapshot:
    written = (T0 - timedelta(seconds=written_seconds_ago)).isoformat().replace("+00:00", "Z")
    return Snapshot({"format": 2, "seq": seq, "queues": {}, "written_at": written}, [], [], etag=None, size=0,
                    taken_at=T0)


def node(role: str, quiet: tuple[int, float] | None) -> NodeInfo:
    return NodeInfo(role=role, id="n", url=None, last_error=None, last_commit_ms=None, commit_ms_p50=None,
                    commit_ms_max=None, commits=None, mean_batch=None, quiet=quiet, poll_seconds=0.5)


def test_the_leader_reads_the_age_on_its_own_clock_and_knows_no_skew() -> None:
    assert commit_timing(snapshot(seq=7, written_seconds_ago=1.5), node("leader", None)) == (1.5, None)


def test_a_standby_that_saw_this_version_land_gives_its_own_measure_and_the_clocks_difference() -> None:
    # By the wall clocks 31 s ago; by its own clock 1 s: it reads 30 s ahead (or up to a poll less).
    assert commit_timing(snapshot(seq=7, written_seconds_ago=31), node("standby", (7, 1.0))) == (1.0, 30.0)


def test_a_standby_that_saw_another_version_land_gives_its_measure_and_no_skew() -> None:
    assert commit_timing(snapshot(seq=7, written_seconds_ago=31), node("standby", (8, 1.0))) == (1.0, None)


def test_a_standby_that_has_not_seen_a_version_land_falls_back_on_the_wall_clocks() -> None:
    assert commit_timing(snapshot(seq=7, written_seconds_ago=31), node("standby", None)) == (31.0, None)


@pytest.mark.parametrize(("skew", "said"), [
    (None, None),
    (2.4, None),  # up to 0.5 s of it may be the poll: it may be 1.9 s, within the margin
    (2.6, "at least 2 s ahead of"),
    (30.5, "at least 30 s ahead of"),
    (-1.9, None),
    (-2.1, "at least 2 s behind"),
])
def test_the_clocks_are_said_to_differ_only_when_they_surely_do(skew: float | None, said: str | None) -> None:
    warning = clock_warning(skew, 0.5)
    if said is None:
        assert warning is None
    else:
        assert warning is not None and f"This node's clock reads {said} the leader's" in warning
