"""A short, fixed-seed run of the chaos harness (``python -m chaos``) on a
folder, on S3 (moto), on GCS (fake-gcs-server) and on Azure Blob (Azurite):
real daphne nodes, producers and workers on the HTTP API, operators
purging waiting jobs by id and requeuing running and dead ones (some at a
pace) through signed /api/v1/operator requests, delayed pushes, every fault kind
(three on the cloud stores), and every check of chaos/checker.py must hold.

The long run (hundreds of faults) is ``python -m chaos --duration 720 ...``;
its figures are in docs/reliability.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chaos.nemesis import KINDS
from chaos.report import text
from chaos.run import Options, Outcome, run

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(400)]

SEED = 20261130


def _run(store: str, kinds: list[str], workdir: Path, **more: Any) -> Outcome:
    # Each kind once, in a seeded order; the duration only caps a run that hangs.
    # One push in ten delayed: none may be leased before it is due.
    options = Options(**{"seed": SEED, "duration": 120, "store": store, "kinds": kinds, "each": True,
                         "faults": len(kinds), "workdir": workdir, "delayed": 0.1, **more})
    outcome = run(options, log=False)
    report = text(outcome)
    print(report)
    assert outcome.verdict.figures["faults"] == len(kinds), report
    assert outcome.verdict.figures["delayed_leased"] > 0, report
    failed = {name: problems for name, problems in outcome.verdict.failures.items() if problems}
    assert not failed, report
    return outcome


def test_chaos_on_a_folder(tmp_path: Path) -> None:
    # One job in ten worked with a lease watch open, some past the lease (chaos.clients.WATCH_SECONDS).
    outcome = _run("file", list(KINDS), tmp_path / "file", watches=0.1)
    # The operators' signed purges and requeues reached the leader (chaos.purger, chaos.requeuer) and acted.
    assert outcome.verdict.figures["purged"] > 0, text(outcome)
    assert outcome.verdict.figures["requeued_jobs"] > 0, text(outcome)
    # Some watch was told its lease was lost (by a requeue or the lease's end), and the checker judged it.
    assert outcome.verdict.figures["watches_told_lost"] > 0, text(outcome)


def test_chaos_on_s3(tmp_path: Path, aws_credentials: None) -> None:
    _run("s3", ["kill", "lost", "delete"], tmp_path / "s3")


def test_chaos_on_gcs(tmp_path: Path) -> None:
    _run("gcs", ["kill", "lost", "delete"], tmp_path / "gcs")


def test_chaos_on_azure(tmp_path: Path) -> None:
    _run("azure", ["kill", "lost", "delete"], tmp_path / "azure")


def test_chaos_with_delayed_segments_on_a_folder(tmp_path: Path) -> None:
    """Format 3 under faults: tiny segments and a short delayed horizon, half
    the pushes delayed by 0.5-4 s, so delayed jobs are sealed into delayed
    segments and refilled all through the run (the leader killed, a
    segment deleted or altered): none lost, none leased early."""
    outcome = _run("file", ["kill", "segment", "pause"], tmp_path / "file", segments=(3, 4, 2), delayed=0.5,
                   pace=0.04, delayed_horizon=0.3)
    assert outcome.verdict.figures["delayed_segments_seen"] > 0, text(outcome)
