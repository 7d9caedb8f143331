"""The artifact path end to end: tiny pretrain -> probe -> export -> onnxruntime parity."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from service.manifest import ArtifactError, load_manifest
from training.cli import main
from training.export import build_served, load_probe

TINY = [
    "--set", "model.d_model=32", "--set", "model.n_layers=1", "--set", "model.n_heads=2",
    "--set", "model.n_codes=16", "--set", "model.pred_dim=32", "--set", "model.pred_layers=1",
    "--set", "optim.epochs=1", "--set", "run.progress=false", "--set", "run.threads=1",
]  # fmt: skip


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("artifact")
    syn = ["--dataset", "synthetic"]
    assert (
        main(
            [
                "pretrain",
                *syn,
                "--config",
                "configs/fast.yaml",
                *TINY,
                "--out",
                str(d / "run"),
            ]
        )
        == 0
    )
    ev = ["evaluate", *syn, "--checkpoint", str(d / "run" / "best.pt"), "--seeds", "2"]
    assert (
        main(
            [
                *ev,
                "--baselines",
                "none",
                "--n-boot",
                "10",
                "--probe",
                "max_epochs=20",
                "--out",
                str(d / "eval"),
            ]
        )
        == 0
    )
    art = d / "art"
    assert (
        main(
            [
                "export",
                "--checkpoint",
                str(d / "run" / "best.pt"),
                "--probe",
                str(d / "eval" / "probe.pt"),
                "--out",
                str(art),
                *syn,
            ]
        )
        == 0
    )
    return {"dir": art, "ckpt": d / "run" / "best.pt", "probe": d / "eval" / "probe.pt"}


def test_manifest_records_the_model(artifact: dict[str, Path]) -> None:
    m = load_manifest(artifact["dir"])
    probe = load_probe(artifact["probe"])
    assert m.channels == probe["channels"] and m.channel_mask == probe["mask"]
    assert m.threshold == pytest.approx(probe["threshold"])
    assert m.model_cfg["d_model"] == 32 and m.window == 100
    assert m.eval_metrics["onnx_parity_max_abs"]["random_b64"] < 1e-4
    assert m.training_data_fingerprint != "unknown" and len(m.onnx_sha256) == 64
    # weights live inside model.onnx (no external .data file the sha256 would miss)
    names = sorted(p.name for p in artifact["dir"].iterdir())
    assert names == ["manifest.json", "model.onnx"], names


@pytest.mark.parametrize("batch", [1, 3, 64])
def test_onnx_matches_pytorch(artifact: dict[str, Path], batch: int) -> None:
    served = build_served(artifact["ckpt"], load_probe(artifact["probe"]))
    sess = ort.InferenceSession(
        str(artifact["dir"] / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    x = (
        np.random.default_rng(batch).normal(size=(batch, 100, served.n_in)) * 5 + 2
    ).astype(np.float32)
    risk, contrib, codes = sess.run(None, {"window": x})
    with torch.no_grad():
        t_risk, t_contrib, t_codes = (t.numpy() for t in served(torch.from_numpy(x)))
    np.testing.assert_allclose(risk, t_risk, atol=1e-4)
    assert risk.shape == (batch,) and ((risk >= 0) & (risk <= 1)).all()
    assert contrib.shape == (batch, served.n_in) and codes.shape == (batch, 5)
    np.testing.assert_allclose(contrib.sum(1), 1.0, atol=1e-5)
    np.testing.assert_allclose(contrib, t_contrib, atol=1e-3)  # argmax ties may differ
    assert (codes == t_codes).mean() > 0.99


@pytest.mark.parametrize("n_channels", [1, 7, 40])
def test_served_graph_for_several_channel_counts(
    artifact: dict[str, Path], tmp_path: Path, n_channels: int
) -> None:
    """The same encoder and probe serve any channel count (variable-wise max)."""
    from model.export import ServedModel, export_onnx

    base = build_served(artifact["ckpt"], load_probe(artifact["probe"]))
    mask = [i % 3 != 1 or n_channels == 1 for i in range(n_channels)]  # some masked
    served = ServedModel(base.model, base.probe, mask, (1.0, 0.0)).eval()
    path = export_onnx(served, tmp_path / "m.onnx")
    x = np.random.default_rng(0).normal(size=(5, 100, n_channels)).astype(np.float32)
    risk, contrib, _ = ort.InferenceSession(
        str(path), providers=["CPUExecutionProvider"]
    ).run(None, {"window": x})
    with torch.no_grad():
        ref = served(torch.from_numpy(x))[0].numpy()
    np.testing.assert_allclose(risk, ref, atol=1e-4)
    assert (
        contrib[:, ~np.asarray(mask)] == 0
    ).all()  # masked channels never contribute


def test_masked_channel_values_do_not_matter(artifact: dict[str, Path]) -> None:
    m = load_manifest(artifact["dir"])
    sess = ort.InferenceSession(
        str(artifact["dir"] / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    x = np.random.default_rng(1).normal(size=(4, 100, m.n_channels)).astype(np.float32)
    y = x.copy()
    y[:, :, ~np.asarray(m.channel_mask)] = 123.0
    if not all(m.channel_mask):
        np.testing.assert_array_equal(
            sess.run(["risk"], {"window": x})[0], sess.run(["risk"], {"window": y})[0]
        )


def test_tampered_artifact_is_refused(
    artifact: dict[str, Path], tmp_path: Path
) -> None:
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(artifact["dir"], bad)
    with (bad / "model.onnx").open("ab") as f:
        f.write(b"\0")
    with pytest.raises(ArtifactError, match="does not match the manifest"):
        load_manifest(bad)
    raw = json.loads((artifact["dir"] / "manifest.json").read_text())
    (bad / "manifest.json").write_text(json.dumps(raw | {"format_version": 99}))
    with pytest.raises(ArtifactError, match="format_version 99"):
        load_manifest(bad)


def test_export_errors_are_one_line(
    tmp_path: Path, artifact: dict[str, Path], capsys
) -> None:
    args = [
        "export",
        "--checkpoint",
        str(artifact["ckpt"]),
        "--out",
        str(tmp_path / "x"),
    ]
    assert main([*args, "--probe", str(tmp_path / "missing.pt")]) == 2
    assert "probe file not found" in capsys.readouterr().err
    assert main([*args, "--probe", str(artifact["probe"]), "--int8"]) == 2
    assert "--int8 needs --dataset" in capsys.readouterr().err


def test_evaluate_rows_and_the_served_probe(artifact: dict[str, Path]) -> None:
    """With a checkpoint: both encoders and the window-stats diagnostic are evaluated;
    the probe saved for export is the spec's (code features only, P * K inputs)."""
    from training.evaluate import STATS_ROW

    res = json.loads((artifact["probe"].parent / "results.json").read_text())
    assert set(res["rows"]) == {
        "SC-JEPA probe, untrained encoder",
        "SC-JEPA probe",
        STATS_ROW,
    }
    saved = torch.load(artifact["probe"], weights_only=False)
    assert saved["n_features"] == 5 * 16  # patches x codes of the TINY model
