"""The artifact contract and the onnxruntime runtime, without HTTP."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
from support.service_artifact import build_artifact

from service.inference import (
    CPU,
    CUDA,
    WindowError,
    balanced_chunks,
    load_model,
    run_size,
    session_providers,
    validate_windows,
)
from service.manifest import (
    ArtifactError,
    Budget,
    Manifest,
    evaluated_note,
    load_manifest,
    write_manifest,
)


@pytest.fixture
def art(tmp_path: Path, artifact_dir: Path) -> Path:
    d = tmp_path / "art"
    shutil.copytree(artifact_dir, d)
    return d


def edit_manifest(d: Path, **changes: object) -> None:
    raw = json.loads((d / "manifest.json").read_text())
    raw.update(changes)
    (d / "manifest.json").write_text(json.dumps(raw))


def test_good_manifest_round_trips(art: Path) -> None:
    m = load_manifest(art)
    assert (m.name, m.n_channels, m.window, m.hop) == ("tiny", 4, 100, 100)
    assert m.channel_mask == [True, True, True, False]
    assert m.model_cfg == {"window": 100, "n_patches": 5}
    assert json.loads((art / "manifest.json").read_text())["model_config"]
    assert m.quantization is not None and m.quantization.int8_sha256 == m.onnx_sha256


def test_an_undefined_variant_delta_loads(art: Path) -> None:
    """An int8 variant exported on a test split without an anomalous window has no F1
    delta (NaN, written null): before, the manifest was written and then refused."""
    raw = json.loads((art / "manifest.json").read_text())
    raw["quantization"]["metric_deltas"] = {"f1": None, "roc_auc": -0.001}
    (art / "manifest.json").write_text(json.dumps(raw))
    assert load_manifest(art).quantization.metric_deltas["f1"] is None


def test_fa_budget_alerts_at_an_operating_point(art: Path) -> None:
    """SCJEPA_FA_BUDGET: the manifest's threshold at that operating point (`scjepa
    export` lists them); a budget without one is refused with the ones there are."""
    raw = json.loads((art / "manifest.json").read_text())
    points = [
        {"false_alarms_per_1000": 0.1, "threshold": None},
        {"false_alarms_per_1000": 1.0, "threshold": raw["threshold"]},
        {"false_alarms_per_1000": 3.0, "threshold": 0.25, "test": {"warned_rate": 0.2}},
    ]
    raw["eval_metrics"]["threshold"] = {"rule": "cv-budget", "operating_points": points}
    (art / "manifest.json").write_text(json.dumps(raw))
    assert load_model(art).manifest.threshold == raw["threshold"]
    m = load_model(art, fa_budget=3.0).manifest
    assert m.threshold == 0.25
    assert m.eval_metrics["threshold"]["serving_at"] == {
        "false_alarms_per_1000": 3.0,
        "threshold": 0.25,
        "set_by": "SCJEPA_FA_BUDGET",
    }
    for budget in (0.1, 7.0):  # no threshold held 0.1 on the data; 7 is not a point
        with pytest.raises(
            ArtifactError, match=r"has a threshold at 1, 3 false alarms"
        ):
            load_model(art, fa_budget=budget)
    edit_manifest(art, eval_metrics={})  # an artifact exported before them
    with pytest.raises(ArtifactError, match="at none false alarms"):
        load_model(art, fa_budget=1.0)


def test_each_tenant_at_its_own_operating_point(art_points: Path) -> None:
    """SCJEPA_TENANT_FA_BUDGET: a tenant listed alerts at that operating point (its
    manifest, threshold and what its pages say the evaluation measured), the others
    at the model's; a budget without a threshold there is refused naming the tenant,
    and leaves the tenants as they were."""
    model = load_model(art_points)
    model.serve_tenants({"acme": Budget(3.0), "globex": Budget(1.0)})
    acme, globex, other = (model.manifest_for(t) for t in ("acme", "globex", "x"))
    assert (acme.threshold, globex.threshold, other.threshold) == (0.25, 0.9, 0.9)
    assert other is model.manifest
    assert acme.eval_metrics["threshold"]["serving_at"] == {
        "false_alarms_per_1000": 3.0,
        "threshold": 0.25,
        "set_by": "SCJEPA_TENANT_FA_BUDGET",
    }
    assert model.evaluated_for("acme").startswith(
        "At this operating point (3 false alarms per 1,000 windows) the evaluation's "
        "test split had 10% of its 50 incidents warned"
    )
    assert model.evaluated_for("x") == model.evaluated == ""  # no test figures at 1
    with pytest.raises(
        ArtifactError,
        match=r"^SCJEPA_TENANT_FA_BUDGET globex=0.1: tiny 0.0.1 has a threshold at 1, "
        r"3 false alarms per 1,000 windows",
    ):
        model.serve_tenants({"acme": Budget(1.0), "globex": Budget(0.1)})
    assert model.manifest_for("acme").threshold == 0.25  # unchanged


def test_a_page_says_what_the_evaluation_measured_where_it_alerts(art: Path) -> None:
    """The sentence every stream alert carries (annotation ``evaluated``): at the
    operating point served (SCJEPA_FA_BUDGET's, else the exported one), how often the
    test split's incidents were warned, how early, and the false pages; nothing where
    the manifest measured nothing there."""
    raw = json.loads((art / "manifest.json").read_text())
    measured = {"events": 50, "warned_rate": 0.06, "false_pages_per_1000": 0.6,
                "lead_quartiles_steps": [20.0, 45.0, 80.4]}  # fmt: skip
    quiet = {"events": 8, "warned_rate": 0.0, "false_pages_per_1000": 0.0,
             "lead_quartiles_steps": None}  # fmt: skip
    points = [
        {"false_alarms_per_1000": 1.0, "threshold": raw["threshold"], "test": measured},
        {"false_alarms_per_1000": 3.0, "threshold": 0.25, "test": quiet},
        {"false_alarms_per_1000": 10.0, "threshold": 0.2},
    ]
    record = {"rule": "cv-budget", "false_alarms_per_1000": 1.0,
              "operating_points": points}  # fmt: skip
    edit_manifest(art, eval_metrics={"threshold": record})
    assert evaluated_note(load_model(art).manifest) == (
        "At this operating point (1 false alarm per 1,000 windows) the evaluation's "
        "test split had 6% of its 50 incidents warned, a median 45 readings ahead "
        "(quartiles 20-80); 0.60 false pages per 1,000 windows."
    )
    assert evaluated_note(load_model(art, fa_budget=3.0).manifest) == (
        "At this operating point (3 false alarms per 1,000 windows) the evaluation's "
        "test split had 0% of its 8 incidents warned; 0.00 false pages per 1,000 "
        "windows."
    )
    assert evaluated_note(load_model(art, fa_budget=10.0).manifest) == ""
    edit_manifest(art, eval_metrics={"f1": 0.5})  # an F1 threshold: no point
    assert evaluated_note(load_model(art).manifest) == ""


def test_tampered_model_is_refused(art: Path) -> None:
    with (art / "model.onnx").open("ab") as f:
        f.write(b"\0")
    with pytest.raises(ArtifactError, match=r"SHA-256 .* does not match"):
        load_model(art)


@pytest.mark.parametrize("version", [0, 2])
def test_other_format_versions_are_refused(art: Path, version: int) -> None:
    edit_manifest(art, format_version=version)
    with pytest.raises(
        ArtifactError, match=f"format_version {version} is not supported"
    ):
        load_manifest(art)


def test_missing_files_are_refused(art: Path) -> None:
    (art / "model.onnx").unlink()
    with pytest.raises(ArtifactError, match=r"model\.onnx: file not found"):
        load_manifest(art)
    (art / "manifest.json").unlink()
    with pytest.raises(ArtifactError, match=r"manifest\.json: file not found"):
        load_manifest(art)


def test_inconsistent_manifest_is_refused(art: Path) -> None:
    edit_manifest(art, channel_mask=[True, False])
    with pytest.raises(ArtifactError, match="channel_mask has 2 entries for 4"):
        load_manifest(art)


def test_graph_channels_must_match_the_manifest(art: Path) -> None:
    m = load_manifest(art)
    wider = m.model_copy(
        update={"channels": [*m.channels, "extra"], "n_channels": 5,
                "channel_mask": [*m.channel_mask, True]}
    )  # fmt: skip
    write_manifest(art, Manifest.model_validate(wider.model_dump()))
    with pytest.raises(ArtifactError, match=r"\[batch, 100, 5\] \(5 channels\)"):
        load_model(art)


def test_provider_is_the_active_one(artifact_dir: Path) -> None:
    model = load_model(artifact_dir, provider="auto")
    assert model.provider == "CPUExecutionProvider"
    assert model.session.get_providers()[0] == model.provider
    assert load_model(artifact_dir, provider="cpu").provider == "CPUExecutionProvider"


def test_cuda_is_asked_for_without_timing_every_conv_algorithm() -> None:
    """The scorer's batch sizes vary: cuDNN's exhaustive search would time every
    convolution algorithm for each new size (see CUDA_OPTIONS)."""
    assert session_providers([CUDA, CPU]) == [
        (CUDA, {"cudnn_conv_algo_search": "HEURISTIC"}),
        CPU,
    ]
    assert session_providers([CPU]) == [CPU]


def test_int8_file_selection(art: Path) -> None:
    model = load_model(art, precision="int8")
    assert model.precision == "int8"
    assert model.session._model_path.endswith("model.int8.onnx")  # type: ignore[attr-defined]
    (art / "model.int8.onnx").unlink()
    with pytest.raises(ArtifactError, match="no int8 model"):
        load_model(art, precision="int8")


def test_fp16_file_selection(art: Path) -> None:
    """fp16 is for the CUDA provider: recorded by SHA-256, refused on the CPU."""
    with pytest.raises(ArtifactError, match="no fp16 model"):
        load_model(art, precision="fp16")
    (art / "model.fp16.onnx").write_bytes((art / "model.onnx").read_bytes())
    with pytest.raises(ArtifactError, match=r"quantization.fp16_sha256"):
        load_model(art, precision="fp16")  # not recorded in the manifest yet
    m = write_manifest(art, load_manifest(art))
    assert m.quantization is not None and m.quantization.fp16_sha256 == m.onnx_sha256
    assert m.quantization.int8_sha256 is not None  # the int8 record survives
    with pytest.raises(ArtifactError, match="needs the CUDA provider, but CPU"):
        load_model(art, precision="fp16", provider="cpu")
    with (art / "model.fp16.onnx").open("ab") as f:
        f.write(b"\0")
    with pytest.raises(ArtifactError, match="SHA-256 does not match"):
        load_model(art, precision="fp16")


def test_bad_windows_are_refused(artifact_dir: Path) -> None:
    model = load_model(artifact_dir)
    with pytest.raises(WindowError, match=r"shape \(2, 99, 4\)"):
        model.score(np.zeros((2, 99, 4), np.float32))
    with pytest.raises(WindowError, match=r"shape \(1, 100, 3\)"):
        model.score(np.zeros((1, 100, 3), np.float32))
    x = np.zeros((3, 100, 4), np.float32)
    x[1, 7, 2] = np.nan
    with pytest.raises(WindowError, match="window 1 holds NaN at step 7, channel 2"):
        model.score(x)
    x[1, 7, 2] = np.inf
    with pytest.raises(WindowError, match="infinite"):
        validate_windows(x, 100, 4)
    assert issubclass(WindowError, ValueError)


def test_batch_scoring_equals_one_by_one(artifact_dir: Path) -> None:
    model = load_model(artifact_dir, max_batch=4)  # 10 windows -> chunks 4, 4, 2
    rng = np.random.default_rng(1)
    x = (rng.normal(size=(10, 100, 4)) * [1, 2, 3, 0] + [0, 1, -1, 5]).astype(
        np.float32
    )
    batch = model.score(x)
    single = [model.score(w) for w in x]
    np.testing.assert_allclose(batch.risk, [s.risk[0] for s in single], atol=1e-6)
    np.testing.assert_allclose(
        batch.contrib, np.concatenate([s.contrib for s in single])
    )
    np.testing.assert_array_equal(
        batch.codes, np.concatenate([s.codes for s in single])
    )
    assert batch.risk.shape == (10,) and batch.codes.shape == (10, 5)
    assert np.all((batch.risk > 0) & (batch.risk < 1))
    np.testing.assert_allclose(batch.contrib.sum(1), 1.0, atol=1e-6)
    assert np.all(batch.contrib[:, 3] == 0)  # the masked channel never contributes


def test_readings_that_overflow_the_graph_are_served_risk_one(
    artifact_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Finite float32 readings (3e38) overflow the graph's float32 arithmetic into a
    NaN risk, which would read "no alert" on the most extreme window there is: the
    window is served risk 1.0 with no channel credited, and logged; its neighbours in
    the batch keep their scores."""
    model = load_model(artifact_dir)
    x = np.random.default_rng(0).normal(size=(3, 100, 4)).astype(np.float32)
    normal = model.score(x[:1])
    x[1, 10:12, :] = 3e38
    x[2, :, 0] = -3e38
    with caplog.at_level("WARNING"):
        s = model.score(x)
    assert s.risk[0] == normal.risk[0] < 1.0
    np.testing.assert_array_equal(s.risk[1:], 1.0)
    np.testing.assert_array_equal(s.contrib[1:], 0.0)
    assert "2 of 3 windows gave a non-finite risk" in caplog.text


class RunSizes:
    """Session proxy that records the batch of every onnxruntime run."""

    def __init__(self, session: object) -> None:
        self.session, self.batches = session, []

    def run(self, outputs: list[str], feeds: dict[str, np.ndarray]) -> list:
        self.batches.append(len(feeds["window"]))
        return self.session.run(outputs, feeds)


def test_cpu_batches_run_in_chunks_of_the_token_budget(artifact_dir: Path) -> None:
    # the tiny artifact: 3 kept channels x 5 patches = 15 encoder tokens a window
    chunked = load_model(artifact_dir, max_batch=64, cpu_chunk_tokens=45)
    whole = load_model(artifact_dir, max_batch=64, cpu_chunk_tokens=0)
    assert (chunked.run_size, whole.run_size) == (3, 64)
    assert load_model(artifact_dir, cpu_chunk_tokens=1).run_size == 1  # at least one
    chunked.session = RunSizes(chunked.session)  # type: ignore[assignment]
    x = np.random.default_rng(3).normal(size=(10, 100, 4)).astype(np.float32)
    a, b = chunked.score(x), whole.score(x)
    assert chunked.session.batches == [3, 3, 3, 1]
    np.testing.assert_allclose(a.risk, b.risk, atol=1e-6)
    np.testing.assert_allclose(a.contrib, b.contrib, atol=1e-6)
    np.testing.assert_array_equal(a.codes, b.codes)


def test_chunk_budget_counts_the_stats_token(artifact_dir: Path) -> None:
    m = load_manifest(artifact_dir)  # 3 kept channels x 5 patches = 15 tokens
    level = m.model_copy(update={"model_cfg": m.model_cfg | {"stats_token": True}})
    assert run_size(m, CPU, 64, 90) == 6
    assert run_size(level, CPU, 64, 90) == 5  # 3 x 6 tokens


class Overlapping(RunSizes):
    """Session proxy whose first two runs wait for each other: if the runs of one
    batch were sequential the barrier would time out and the score would fail."""

    def __init__(self, session: object) -> None:
        super().__init__(session)
        self.barrier = threading.Barrier(2, timeout=10)
        self.lock = threading.Lock()

    def run(self, outputs: list[str], feeds: dict[str, np.ndarray]) -> list:
        with self.lock:
            first_two = len(self.batches) < 2
            self.batches.append(len(feeds["window"]))
        if first_two:
            self.barrier.wait()
        return self.session.run(outputs, feeds)


def test_cpu_threads_run_the_chunks_of_a_batch_in_parallel(artifact_dir: Path) -> None:
    par = load_model(
        artifact_dir, intra_op_threads=2, max_batch=64, cpu_chunk_tokens=45
    )
    whole = load_model(artifact_dir, max_batch=64, cpu_chunk_tokens=0)
    assert (par.run_size, par.parallel_runs) == (3, 2)
    assert par.serial is not None
    assert par.serial.get_session_options().intra_op_num_threads == 1
    assert par.session.get_session_options().intra_op_num_threads == 2
    par.serial = Overlapping(par.serial)  # type: ignore[assignment]
    par.session = RunSizes(par.session)  # type: ignore[assignment]
    x = np.random.default_rng(4).normal(size=(10, 100, 4)).astype(np.float32)
    a, b = par.score(x), whole.score(x)
    # 10 windows in chunks of <= 3 -> 4 chunks (a multiple of 2 threads), in order
    assert sorted(par.serial.batches) == [2, 2, 3, 3] and par.session.batches == []
    np.testing.assert_allclose(a.risk, b.risk, atol=1e-6)
    np.testing.assert_allclose(a.contrib, b.contrib, atol=1e-6)
    np.testing.assert_array_equal(a.codes, b.codes)
    # a batch of one chunk runs on the intra-op session
    par.score(x[:3])
    assert par.session.batches == [3] and len(par.serial.batches) == 4


def test_no_parallel_runs_without_threads_or_chunks(artifact_dir: Path) -> None:
    one = load_model(
        artifact_dir, intra_op_threads=1, max_batch=64, cpu_chunk_tokens=45
    )
    unchunked = load_model(
        artifact_dir, intra_op_threads=2, max_batch=64, cpu_chunk_tokens=0
    )
    small = load_model(
        artifact_dir, intra_op_threads=2, max_batch=3, cpu_chunk_tokens=45
    )
    for m in (one, unchunked, small):
        assert (m.parallel_runs, m.serial) == (1, None)


@pytest.mark.parametrize(
    ("n", "chunks", "workers", "sizes"),
    [
        (10, 4, 2, [3, 3, 2, 2]),
        (10, 3, 2, [3, 3, 2, 2]),  # 3 chunks -> 4: both threads work to the end
        (64, 16, 2, [4] * 16),
        (3, 3, 2, [1, 1, 1]),  # never an empty slice
        (7, 2, 4, [2, 2, 2, 1]),
    ],
)
def test_balanced_chunks(n: int, chunks: int, workers: int, sizes: list[int]) -> None:
    x = np.arange(n)
    parts = balanced_chunks(x, chunks, workers)
    assert [len(p) for p in parts] == sizes
    np.testing.assert_array_equal(np.concatenate(parts), x)  # in order, each once


def test_run_size_reads_the_exporters_config(artifact_dir: Path) -> None:
    m = load_manifest(artifact_dir)
    real = m.model_copy(update={"model_cfg": {"seq_len": 100, "patch_len": 20}})
    assert run_size(real, CPU, 64, 512) == 34  # 512 // (3 kept x 5 patches)
    assert run_size(real, CPU, 8, 512) == 8  # never above max_batch
    assert run_size(real, CUDA, 64, 512) == 64  # a GPU runs the whole batch
    unknown = m.model_copy(update={"model_cfg": {}})
    assert run_size(unknown, CPU, 64, 512) == 64  # no patch size known: no chunking


def test_masked_channel_is_inert(tmp_path: Path) -> None:
    build_artifact(tmp_path, channels=["x", "dead", "y"], mask=[True, False, True])
    model = load_model(tmp_path)
    rng = np.random.default_rng(2)
    x = rng.normal(size=(4, 100, 3)).astype(np.float32)
    y = x.copy()
    y[:, :, 1] = 1e6
    np.testing.assert_allclose(model.score(x).risk, model.score(y).risk, atol=1e-6)


def test_graph_input_name_must_be_window(tmp_path: Path) -> None:
    build_artifact(tmp_path, input_name="x")
    load_manifest(tmp_path)  # the manifest itself is fine
    with pytest.raises(ArtifactError, match=r"graph inputs \['x'\] != \['window'\]"):
        load_model(tmp_path)
