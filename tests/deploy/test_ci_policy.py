"""The CI policy of tests/conftest.py and tests/support/components.py, run on a scratch
suite in a subprocess: a test whose component is missing skips locally and FAILS under
CI=true, whichever way it skips (require(), a skipif marker, pytest.skip, a module-level
importorskip); hardware (CUDA, a kernel feature) is skipped even under CI; the run ends
with the list of absent components."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.components import component_of, in_ci, may_skip_in_ci
from support.deploy_helpers import REPO

SCRATCH = {
    "test_skips.py": """
import pytest
from support.components import COMPONENTS, Component, require

def test_require_missing(monkeypatch):
    gone = Component("chromium", "apt-get install chromium", lambda: None)
    monkeypatch.setitem(COMPONENTS, "chromium", gone)
    require("chromium", "renders the page")

def test_plain_skip():
    pytest.skip("redis-server not on PATH")

@pytest.mark.skipif(True, reason="needs Linux 6.12+ (EEVDF custom slices)")
def test_kernel_feature():
    pass

@pytest.mark.requires_cuda
@pytest.mark.skipif(True, reason="onnxruntime has no CUDA provider")
def test_gpu():
    pass

def test_runs():
    pass
""",
    "test_module_skip.py": """
import pytest
pytest.importorskip("surely_not_installed_module_xyz")

def test_never():
    pass
""",
}


def run_scratch(tmp_path: Path, ci: str | None, *files: str) -> tuple[int, str]:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "conftest.py").write_text((REPO / "tests/conftest.py").read_text())
    (tests / "support").symlink_to(REPO / "tests/support")
    for name in files or tuple(SCRATCH):
        (tests / name).write_text(SCRATCH[name])
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\npythonpath = tests\naddopts = -v -rA -p no:cacheprovider\n"
        "markers =\n    requires_cuda: gpu\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = str(REPO)  # service.* for the conftest's imports
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr


def outcomes(out: str) -> dict[str, str]:
    found = re.findall(r"::(\w+) (PASSED|FAILED|SKIPPED|ERROR)", out)
    return dict(found)


@pytest.mark.slow
def test_locally_missing_components_skip(tmp_path: Path) -> None:
    code, out = run_scratch(tmp_path, None)
    assert code == 0, out
    got = outcomes(out)
    assert got == {
        "test_require_missing": "SKIPPED",
        "test_plain_skip": "SKIPPED",
        "test_kernel_feature": "SKIPPED",
        "test_gpu": "SKIPPED",
        "test_runs": "PASSED",
    }, out
    assert "= optional components =" in out, out
    assert "missing components skip tests" in out, out


@pytest.mark.slow
def test_under_ci_missing_components_fail(tmp_path: Path) -> None:
    code, out = run_scratch(tmp_path, "true", "test_skips.py")
    assert code != 0, out
    assert outcomes(out) == {
        "test_require_missing": "FAILED",  # require()
        "test_plain_skip": "FAILED",  # a skip that names redis-server
        "test_kernel_feature": "SKIPPED",  # hardware: nothing to install
        "test_gpu": "SKIPPED",
        "test_runs": "PASSED",
    }, out
    assert "CI=true and chromium missing (renders the page)" in out, out
    assert "missing components FAIL tests" in out, out


@pytest.mark.slow
def test_under_ci_a_module_level_skip_fails_collection(tmp_path: Path) -> None:
    code, out = run_scratch(tmp_path, "true", "test_module_skip.py")
    assert code != 0, out
    assert "ERROR tests/test_module_skip.py - skipped under CI=true" in out, out


def test_reasons_map_to_components() -> None:
    assert component_of("redis-server not on PATH (apt-get install redis-server)") == (
        "redis-server"
    )
    assert component_of("needs redis-server") == "redis-server"
    assert component_of("chromium not installed (apt-get install -y chromium)") == (
        "chromium"
    )
    assert component_of("the scjepa command is not installed (pip install -e .)") == (
        "scjepa-cli"
    )
    assert component_of("could not import 'PIL.Image': No module named 'PIL'") == (
        "pillow"
    )
    assert component_of("x missing: y [component: promtool]") == "promtool"
    assert component_of("something else entirely") is None
    assert may_skip_in_ci("onnxruntime has no CUDA provider")
    assert may_skip_in_ci("needs Linux 6.12+ (EEVDF custom slices)")
    assert may_skip_in_ci("per-thread nice is Linux's")
    assert may_skip_in_ci("anything", hardware_marked=True)
    # the benchmark archives live beside the checkout, not in it: CI may lack them
    assert may_skip_in_ci("/x/shared/datasets not present: real-data tests skipped")
    assert not may_skip_in_ci("redis-server not on PATH")
    assert not may_skip_in_ci("something else entirely")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("true", True),
        ("1", True),
        ("yes", True),
        ("", False),
        ("false", False),
        (None, False),
    ],
)
def test_in_ci_reads_the_ci_variable(
    monkeypatch: pytest.MonkeyPatch, value: str | None, expected: bool
) -> None:
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    assert in_ci() is expected
