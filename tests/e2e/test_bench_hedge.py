"""``python -m bench hedge`` (bench/hedging.py): pushes through a store whose
writes now and then stall, with hedged writes off and on, in one run."""

from __future__ import annotations

import pytest

from bench.hedging import main, parse_args, run_side

pytestmark = pytest.mark.e2e

# Short sides whose writes stall often, so a few seconds show every path.
# With seed 1 the dice hold puts 10, 14, 21, 27, 36, 72, 92, 113, …: enough after the 32 writes a hedge waits for,
# even on a slow machine.
FAST = ["--duration", "3", "--warmup", "3", "--submitters", "16", "--tail-chance", "0.03", "--tail-seconds", "0.3",
        "--latency-ms", "5", "--hedge-seconds", "0.05", "--seed", "1"]


def test_it_runs_both_sides_checks_every_push_and_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(FAST) == 0
    out = capsys.readouterr().out
    assert f"command: `python -m bench hedge {' '.join(FAST)}`" in out
    assert "3.0% of the document's writes held 0.3 s before they are sent" in out
    rows = [line for line in out.splitlines() if line.startswith(("| off ", "| after 0.05 s "))]
    assert len(rows) == 2
    assert "check: PASS" in out


@pytest.mark.parametrize(("where", "path"), [("before", "hedges_landed"), ("after", "ambiguous")])
def test_a_held_write_is_landed_by_its_hedge_or_settled_by_a_reread(where: str, path: str) -> None:
    hedged = run_side(parse_args([*FAST, "--tail-where", where]), 0.05)
    assert hedged["hedged"] > 0 and hedged[path] > 0
    assert hedged["acknowledged"] == hedged["pushed"] == hedged["pending"] > 0
    assert hedged["unfound"] == hedged["duplicates"] == 0
    plain = run_side(parse_args([*FAST, "--tail-where", where]), 0.0)
    assert plain["hedged"] == plain["hedges_landed"] == 0
