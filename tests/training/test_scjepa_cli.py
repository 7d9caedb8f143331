"""The `scjepa` command line: --version, --help (fast, with defaults), quiet logs."""

from __future__ import annotations

import ast
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from training.cli import COMMANDS

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "sklearn", "matplotlib", "onnxruntime")
# every command and sub-command; `--help` must not import a heavy library
HELP = [*(c for c in COMMANDS if c not in ("data", "bench")), "data stats"]
HELP += [f"bench {t}" for t in ("train", "infer", "serve", "soak", "streams")]


def _imports_of_help(command: str) -> tuple[str, list[str]]:
    code = (
        "import sys\n"
        "from training.cli import main\n"
        f"try: main({command.split()!r} + ['--help'])\n"
        "except SystemExit as e: assert e.code == 0, e.code\n"
        f"print('HEAVY', sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO
    )
    assert r.returncode == 0, r.stderr
    out, _, heavy = r.stdout.rpartition("HEAVY ")
    return out, ast.literal_eval(heavy)


@pytest.mark.parametrize("command", HELP)
def test_help_is_light(command: str) -> None:
    out, heavy = _imports_of_help(command)
    assert f"scjepa {command}" in out
    assert heavy == [], f"`scjepa {command} --help` imported {heavy}"


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("replay", "readings per second (0 = max) (default: 100.0)"),
        ("data stats", "(default: 100)"),  # --window, which had no help text
        ("bench infer", "default: 1,2,4,8,16,32,64,128,256"),
        ("serve", "(default:"),
    ],
)
def test_help_shows_defaults(command: str, expected: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "training.cli", *command.split(), "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert r.returncode == 0 and expected in " ".join(r.stdout.split()), r.stdout


def test_version() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "training.cli", "--version"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert r.returncode == 0 and r.stdout.strip() == f"scjepa {version('scjepa')}"


def test_progress_bars_redraw_rarely_in_a_log(tmp_path: Path) -> None:
    """Pre-training's tqdm bar with stderr redirected to a file: a handful of redraws
    (start, end, one per 30 s), not one per batch."""
    log = tmp_path / "err.log"
    tiny = ["model.d_model=16", "model.n_layers=1", "model.n_heads=2"]
    tiny += ["model.n_codes=16", "model.pred_dim=16", "optim.epochs=1"]
    tiny += ["run.threads=1", "optim.batch_size=32"]
    argv = ["pretrain", "--dataset", "synthetic", "--config", "configs/fast.yaml"]
    argv += ["--out", str(tmp_path / "run")]
    argv += [x for kv in tiny for x in ("--set", kv)]
    with log.open("w") as err:
        r = subprocess.run(
            [sys.executable, "-m", "training.cli", *argv],
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=REPO,
        )
    text = log.read_text()
    assert r.returncode == 0, text[-2000:]
    steps = text.count("it/s") + text.count("s/it")
    assert "epoch 1/1" in text and steps <= 6, text[-2000:]
