"""The declared habits run: the pre-commit hooks are a valid config and check what
`make lint` (and so CI) checks, with the same mypy strictness."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def lint_commands() -> list[str]:
    """The tool invocations of the Makefile's lint target, without the $(BIN)/ prefix."""
    text = (REPO / "Makefile").read_text()
    m = re.search(r"^lint:.*\n((?:\t.*\n)+)", text, re.M)
    assert m, "Makefile has no lint target"
    return [line.strip().replace("$(BIN)/", "") for line in m.group(1).splitlines()]


def hook_commands() -> list[str]:
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    hooks = [h for repo in config["repos"] for h in repo["hooks"]]
    return [h["entry"].replace(".venv/bin/", "") for h in hooks]


def test_hooks_run_the_linters_of_make_lint() -> None:
    hooks = hook_commands()
    for cmd in lint_commands():
        tool = cmd.split()[0]
        if tool == "mypy":  # the same targets and flags, exactly
            assert cmd in hooks, f"make lint runs `{cmd}`; no hook does"
        else:  # the ruff hooks fix where make lint only checks
            assert any(h.split()[:2] == cmd.split()[:2] for h in hooks), cmd
    assert any(c.startswith("mypy --strict service/") for c in lint_commands())


def test_pre_commit_config_is_valid() -> None:
    exe = shutil.which("pre-commit") or str(Path(sys.executable).parent / "pre-commit")
    r = subprocess.run(
        [exe, "validate-config", ".pre-commit-config.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
