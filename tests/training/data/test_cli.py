"""`scjepa data stats` end to end, through the console entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from training.cli import main


def test_stats_json_matches_printed(tmp_path: Path, capsys) -> None:
    out = tmp_path / "s.json"
    assert (
        main(
            [
                "data",
                "stats",
                "--dataset",
                "synthetic",
                "--json",
                str(out),
                "--per-entity",
            ]
        )
        == 0
    )
    st = json.loads(out.read_text())
    printed = capsys.readouterr().out
    assert st["dataset"] == "synthetic" and len(st["per_entity"]) == 4
    assert f"{st['splits']['test']['windows']:>8}" in printed
    assert "unit-4" in printed


def test_stats_bad_root_is_one_line_error(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "training.cli",
            "data",
            "stats",
            "--dataset",
            "smd",
            "--root",
            str(tmp_path / "missing"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert "data root not found" in r.stderr and "Traceback" not in r.stderr


def test_help_lists_commands(capsys) -> None:
    assert main(["--help"]) == 0
    assert "data" in capsys.readouterr().out


def test_stats_json_unwritable_is_one_line_error(tmp_path: Path, capsys) -> None:
    # a --json FILE in a folder that does not exist, or a folder: one line, exit 2
    for target in (tmp_path / "missing" / "s.json", tmp_path):
        code = main(["data", "stats", "--dataset", "synthetic", "--json", str(target)])
        err = capsys.readouterr().err
        assert code == 2
        assert f"--json {target}: cannot write" in err and "Traceback" not in err
