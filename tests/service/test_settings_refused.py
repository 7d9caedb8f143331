"""Bad SCJEPA_* values stop `scjepa serve` at start-up in one line naming the variable
and why (exit 2): before, pydantic's block per error named the field, and a binary key
file failed with a traceback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError
from served import scjepa_exe
from support.service_helpers import free_port

from service.config import Settings, describe


def refusal(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> str:
    """describe() of the error these variables raise (none raised: the test fails)."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValidationError) as err:
        Settings()
    return describe(err.value)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no .env file
    for k in [k for k in os.environ if k.startswith("SCJEPA_")]:
        monkeypatch.delenv(k)


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ({"SCJEPA_HOP": "abc"}, "SCJEPA_HOP: Input should be a valid integer"),
        (
            {"SCJEPA_MAX_BATCH": "0", "SCJEPA_PROVIDER": "gpu"},
            "SCJEPA_PROVIDER: Input should be 'auto', 'cpu' or 'cuda'; "
            "SCJEPA_MAX_BATCH: Input should be greater than or equal to 1",
        ),
        ({"SCJEPA_API_KEYS_FILE": "BINARY"}, "SCJEPA_API_KEYS_FILE: BINARY: not UTF-8 text"),
        ({"SCJEPA_API_KEYS_FILE": "MISSING"}, "SCJEPA_API_KEYS_FILE: MISSING: No such file"),
    ],
)  # fmt: skip
def test_serve_refuses_in_one_line(
    artifact_dir: Path, tmp_path: Path, env: dict[str, str], line: str
) -> None:
    """The real command: exit 2, one stderr line naming the variable, no traceback
    (uvicorn never starts: the port is free and unused)."""
    names = {
        "BINARY": str(artifact_dir / "model.onnx"),
        "MISSING": str(tmp_path / "no"),
    }
    env = {k: names.get(v, v) for k, v in env.items()}
    line = line.replace("BINARY", names["BINARY"]).replace("MISSING", names["MISSING"])
    base = {k: v for k, v in os.environ.items() if not k.startswith("SCJEPA_")}
    args = [scjepa_exe(), "serve", "--artifact", str(artifact_dir), "--port", str(free_port())]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, env=base | env, cwd=tmp_path, timeout=30)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"scjepa serve: error: {line}"), done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
