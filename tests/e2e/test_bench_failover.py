"""``python -m bench failover`` (bench/failover.py): two real nodes, the leader
stopped with SIGTERM and with SIGKILL in one run, the pause a producer sees."""

from __future__ import annotations

import re

import pytest

from bench.failover import main

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

# Short intervals: a crash costs about the 2 s takeover, a graceful stop about a 0.25 s poll.
FAST = ["--rounds", "1", "--heartbeat", "0.25", "--takeover", "2", "--settle", "1"]


def test_it_stops_the_leader_both_ways_and_every_answered_push_is_there(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(FAST) == 0
    out = capsys.readouterr().out
    assert f"command: `python -m bench failover {' '.join(FAST)}`" in out
    row = (r"^\| (?P<kind>graceful|crash) \(SIG\w+\) \| 1 \| (?P<pause>[\d.]+) \| [\d.]+ \| [\d.]+ "
           r"\| (?P<status>-?\d+) \|$")
    rows = {m["kind"]: m for m in re.finditer(row, out, re.M)}
    assert set(rows) == {"graceful", "crash"}, out
    # The stopped leader exited cleanly, and the crashed one was killed.
    assert rows["graceful"]["status"] == "0" and rows["crash"]["status"] == "-9"
    # Handed over, pushes resumed sooner than any crash's takeover can be
    # (the interval less two heartbeats); crashed, no sooner.
    assert float(rows["graceful"]["pause"]) < 1.5 <= float(rows["crash"]["pause"]), out
    assert "missing on the leader at the end: 0" in out and "check: PASS" in out
