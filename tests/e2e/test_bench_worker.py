"""``python -m bench worker`` (bench/workerloop.py): a Worker's own cost a job."""

from __future__ import annotations

import pytest

from bench.workerloop import InstantClient, main, run_once


def test_it_runs_every_job_once_and_prints_the_medians(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--jobs", "300", "--workers", "3", "--repeat", "2", "--round-trip-ms", "0"]) == 0
    out = capsys.readouterr()
    assert "command: `python -m bench worker --jobs 300 --workers 3 --repeat 2 --round-trip-ms 0`" in out.out
    assert "3 Workers x 1 slot(s), batch=True, 0 ms a call, 300 no-op jobs a run, median of 2:" in out.out
    assert out.err.count("[worker] ") == 2 and "context switches a job" in out.out


@pytest.mark.parametrize("batch", [True, False])
def test_a_run_completes_exactly_the_jobs_it_was_given(batch: bool) -> None:
    run = run_once(jobs=150, workers=4, concurrency=2, batch=batch, round_trip=0)
    assert run["jobs_per_s"] > 0 and run["cpu_us"] > 0 and run["switches"] >= 0


def test_the_client_hands_out_each_job_once_and_no_more() -> None:
    client = InstantClient(jobs=5, round_trip=0)
    first = client.claim("w", ["q"], max_jobs=3)
    rest = client.claim("w", ["q"], max_jobs=3)
    assert [j.id for j in first + rest] == [f"job-{n}" for n in range(5)]
    assert client.claim("w", ["q"], max_jobs=3) == []


def test_bad_options_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--workers", "0"])
    assert "must be >= 1" in capsys.readouterr().err
