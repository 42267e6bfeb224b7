"""``python -m chaos`` refuses what it cannot run, before starting anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.__main__ import parse


def test_recheck_of_a_folder_without_a_history_names_the_runs_inside_it(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    # --workdir W keeps the run on the file store in W/file: --recheck W found
    # no history and ended in a traceback.
    (tmp_path / "file").mkdir()
    (tmp_path / "file" / "history.json").write_text("{}")

    with pytest.raises(SystemExit):
        parse(["--recheck", str(tmp_path)])

    error = capsys.readouterr().err
    assert f"--recheck {tmp_path}: no history.json there" in error and str(tmp_path / "file") in error


def test_recheck_of_a_run_folder_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "history.json").write_text("{}")

    assert parse(["--recheck", str(tmp_path)]).recheck == [tmp_path]
