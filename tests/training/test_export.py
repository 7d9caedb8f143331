"""The artifact path end to end: tiny pretrain -> probe -> export -> onnxruntime parity."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from model.export import OUTPUTS, ServedModel
from service.manifest import ArtifactError, load_manifest
from training.cli import main
from training.data import WINDOW, load_dataset
from training.errors import UserError
from training.evaluate.probe import SavedProbe
from training.export import NOVELTY_TOLERANCE, build_served
from training.pretrain.checkpoint import load_model
from training.strict_json import json_num

REPO = Path(__file__).resolve().parents[2]

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
                "--cv-seeds",
                "1",
                # a budget the synthetic validation split (a few hundred windows) can
                # hold: at 1 per 1,000 its first false alarm already breaks it
                "--fa-budget",
                "20",
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


def _served(artifact: dict[str, Path]) -> ServedModel:
    """The artifact's graph in PyTorch, built from its checkpoint and probe."""
    return build_served(
        load_model(artifact["ckpt"]), SavedProbe.load(artifact["probe"])
    )


def test_manifest_records_the_model(artifact: dict[str, Path]) -> None:
    m = load_manifest(artifact["dir"])
    probe = SavedProbe.load(artifact["probe"])
    assert m.channels == probe.channels and m.channel_mask == probe.mask
    # the service alerts at the most cautious of the thresholds that kept validation's
    # and the cross-validation's out-of-fold false alarms within the evaluation's
    # budget (--fa-budget), in risks and in quantiles, not at the F1-optimal one
    assert probe.budget_threshold is not None and probe.budget is not None
    assert probe.cv_budget_threshold is not None
    assert probe.cv_quantile_threshold is not None
    three = (
        probe.budget_threshold,
        probe.cv_budget_threshold,
        probe.cv_quantile_threshold,
    )
    cautious = max(t for t in three if np.isfinite(t))
    assert m.threshold == pytest.approx(cautious)
    record = dict(m.eval_metrics["threshold"])
    assert len(record.pop("operating_points")) == 6  # test_operating_points
    assert record == {
        "rule": "cv-budget",
        "f1_threshold": pytest.approx(probe.threshold),
        "budget_threshold": pytest.approx(probe.budget_threshold),
        "cv_budget_threshold": pytest.approx(probe.cv_budget_threshold),
        "cv_quantile_threshold": json_num(probe.cv_quantile_threshold),
        "false_alarms_per_1000": 20.0,
        "lookback": 100.0,
        "stride": 5.0,
    }
    assert m.model_cfg["d_model"] == 32 and m.window == 100
    # the window is the model's own (its seq_len); the hop defaults to the windows the
    # budget threshold was set on (the evaluation's stride), so the service pages on
    # the windows the event figures count
    assert m.window == m.model_cfg["seq_len"] == WINDOW and m.hop == 5
    assert m.eval_metrics["onnx_parity"]["random_b64"]["risk_max_abs"] < 1e-4
    assert m.training_data_fingerprint != "unknown" and len(m.onnx_sha256) == 64
    # split in time within each entity: the manifest names the entities whose earlier
    # stretches were fitted and whose latest were tested (its figures are of them)
    names = [e.name for e in load_dataset("synthetic").entities]
    assert len(names) > 1
    assert m.eval_metrics["entities"] == {
        "split": "time",
        "fitted_on": names,
        "validated_on": names,
        "tested_on": names,
    }
    assert "fold" not in m.eval_metrics
    # the input-drift monitor, fitted by evaluate on the normal train series
    assert m.novelty is not None and probe.novelty is not None
    assert m.novelty.model_dump() == {
        k: probe.novelty[k] for k in type(m.novelty).model_fields
    }
    assert m.novelty.detectors == "knn+pca" and m.novelty.level == 0.99
    assert 0.0 < m.novelty.expected_share < 0.05
    assert m.eval_metrics["onnx_parity"]["edge"]["novelty_max_abs"] < 1e-4
    # weights live inside model.onnx (no external .data file the sha256 would miss)
    names = sorted(p.name for p in artifact["dir"].iterdir())
    assert names == ["manifest.json", "model.onnx"], names


@pytest.mark.parametrize("batch", [1, 3, 64])
def test_onnx_matches_pytorch(artifact: dict[str, Path], batch: int) -> None:
    served = _served(artifact)
    sess = ort.InferenceSession(
        str(artifact["dir"] / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    x = (
        np.random.default_rng(batch).normal(size=(batch, 100, served.n_in)) * 5 + 2
    ).astype(np.float32)
    assert [o.name for o in sess.get_outputs()] == [*OUTPUTS, "novelty"]
    risk, contrib, codes, feats, novelty = sess.run(None, {"window": x})
    with torch.no_grad():
        t_risk, t_contrib, t_codes, t_feats, t_novelty = (
            t.numpy() for t in served(torch.from_numpy(x))
        )
    np.testing.assert_allclose(risk, t_risk, atol=1e-4)
    # the input-drift monitor, the same smooth rank as a label-free risk
    np.testing.assert_allclose(novelty, t_novelty, atol=1e-4)
    assert novelty.shape == (batch,) and ((novelty >= 0) & (novelty <= 1)).all()
    np.testing.assert_allclose(feats, t_feats, atol=1e-3)  # what the probe reads
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

    base = _served(artifact)
    mask = [i % 3 != 1 or n_channels == 1 for i in range(n_channels)]  # some masked
    served = ServedModel(base.model, base.probe, mask, (1.0, 0.0)).eval()
    path = export_onnx(served, tmp_path / "m.onnx")
    x = np.random.default_rng(0).normal(size=(5, 100, n_channels)).astype(np.float32)
    risk, contrib, *_ = ort.InferenceSession(
        str(path), providers=["CPUExecutionProvider"]
    ).run(None, {"window": x})
    with torch.no_grad():
        ref = served(torch.from_numpy(x))[0].numpy()
    np.testing.assert_allclose(risk, ref, atol=1e-4)
    assert (
        contrib[:, ~np.asarray(mask)] == 0
    ).all()  # masked channels never contribute


def test_stats_token_model_exports_and_matches_pytorch(tmp_path: Path) -> None:
    """A `model.stats_token` encoder (P + 1 tokens into the probe) runs as one ONNX
    graph; the served codes stay one per patch and the level reaches the risk."""
    from model import SCJEPA, ModelConfig
    from model.export import ServedModel, export_onnx
    from training.evaluate.probe import build_probe_net

    cfg = ModelConfig(
        d_model=16, n_layers=1, n_heads=2, n_codes=8, pred_dim=16, pred_layers=1,
        pred_heads=2, tok_channels=4, dropout=0.0, stats_token=True,
    )  # fmt: skip
    torch.manual_seed(0)
    probe = build_probe_net(cfg.n_tokens * cfg.n_codes, 8, 0.0)
    served = ServedModel(SCJEPA(cfg), probe, [True, True, False], (1.0, 0.0)).eval()
    path = export_onnx(served, tmp_path / "m.onnx")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).normal(size=(4, 100, 3)).astype(np.float32)
    risk, contrib, codes, _ = sess.run(None, {"window": x})
    with torch.no_grad():
        ref = served(torch.from_numpy(x))[0].numpy()
    np.testing.assert_allclose(risk, ref, atol=1e-4)
    assert codes.shape == (4, cfg.n_patches) and contrib.shape == (4, 3)
    shifted = sess.run(None, {"window": x + 5.0})[0]  # RevIN alone would not see it
    assert np.abs(shifted - risk).max() > 1e-4


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
    assert "--int8/--fp16 need --dataset" in capsys.readouterr().err
    assert main([*args, "--probe", str(artifact["probe"]), "--hop", "0"]) == 2
    err = capsys.readouterr().err
    assert "--hop 0: a window is scored every hop >= 1" in err
    assert "Traceback" not in err
    (tmp_path / "file").write_text("")
    args[-1] = str(tmp_path / "file")
    assert main([*args, "--probe", str(artifact["probe"])]) == 2
    assert "file: a file, not a folder" in capsys.readouterr().err


def test_a_failed_export_leaves_the_served_artifact_as_it_was(
    artifact: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README exports into the folder being served: an export that fails after
    tracing (here its parity check, made to fail) changes none of its files and
    leaves no staging folder; one that succeeds replaces them all."""
    import shutil

    import training.export as export
    from training.errors import UserError

    served = tmp_path / "current"
    shutil.copytree(artifact["dir"], served)
    before = {f.name: f.read_bytes() for f in served.iterdir()}
    model, probe = load_model(artifact["ckpt"]), SavedProbe.load(artifact["probe"])
    with monkeypatch.context() as m:
        m.setattr(export, "parity_failure", lambda *a, **k: "made to fail")
        with pytest.raises(UserError, match="made to fail"):
            export.export_artifact(model=model, probe=probe, out=served, version="v2")
    assert {f.name: f.read_bytes() for f in served.iterdir()} == before
    assert load_manifest(served).version != "v2"
    m2 = export.export_artifact(model=model, probe=probe, out=served, version="v2")
    assert load_manifest(served) == m2 and m2.version == "v2"
    assert sorted(f.name for f in served.iterdir()) == sorted(before)


def test_evaluate_rows_and_the_served_probe(artifact: dict[str, Path]) -> None:
    """With a checkpoint: both encoders, the window-stats diagnostic, the label-free
    reconstruction error, the served-model candidates with detector scores and their
    refits without SC-JEPA's inputs are evaluated; probe.pt is the spec's (code
    features only, P * K inputs)."""
    from training.evaluate.protocol import (
        ABLATIONS,
        DET_ONLY_ROW,
        DET_ONLY_UNTRAINED_ROW,
        DET_ROW,
        RECON_ROW,
        RECON_UNTRAINED_ROW,
        STATS_ROW,
        TUNED_ROW,
        TUNED_UNTRAINED_ROW,
        probe_kind,
    )

    res = json.loads((artifact["probe"].parent / "results.json").read_text())
    mlp = {"SC-JEPA probe", STATS_ROW, DET_ROW, DET_ONLY_ROW}
    assert set(res["rows"]) == {
        "SC-JEPA probe, untrained encoder",
        RECON_ROW,
        RECON_UNTRAINED_ROW,
        DET_ONLY_UNTRAINED_ROW,
        *mlp,
        *(f"{n} (trees)" for n in mlp),
        *ABLATIONS,
        TUNED_ROW,
        TUNED_UNTRAINED_ROW,
    }
    # each row fitted the probe its name says
    for name, row in res["rows"].items():
        if "probe" in row and name != DET_ONLY_UNTRAINED_ROW:
            assert row["probe"][0]["config"]["kind"] == probe_kind(name), name
    for row in (RECON_ROW, RECON_UNTRAINED_ROW):
        assert "brier" not in res["rows"][row]  # a score, not a calibrated risk
    # the floor is scored by another model: not a copy of the trained row's scores
    saved_scores = np.load(artifact["probe"].parent / "scores.npz")
    a, b = (saved_scores[f"score/{r}"] for r in (RECON_ROW, RECON_UNTRAINED_ROW))
    assert a.shape == b.shape and np.all(np.isfinite(b)) and not np.allclose(a, b)
    saved = torch.load(artifact["probe"], weights_only=False)
    assert saved["n_features"] == 5 * 16  # patches x codes of the TINY model


def _shape(res: dict) -> dict:
    """The key structure of a results.json (every level a table or report reads)."""
    rows = res["rows"]
    probe_row = next(r for r in rows.values() if "probe" in r)
    other = next(r for r in rows.values() if "probe" not in r)
    return {
        "top": list(res),
        "config": list(res["config"]),
        "split": list(res["splits"]["test"]),
        "probe row": list(probe_row),
        "other row": list(other),
        "subset": list(probe_row["all"]),
        "probe state": list(probe_row["probe"][0]),
    }


def test_results_json_keeps_the_published_format(artifact: dict[str, Path]) -> None:
    """results.json as written now has the shape of the published ones that `scjepa
    report` and docs/results read: their keys, in their order, at every level (keys
    added since, e.g. checkpoint_sha256, among them), and the checkpoint's hash."""
    from service.manifest import sha256_file

    res = json.loads((artifact["probe"].parent / "results.json").read_text())
    published = json.loads((REPO / "docs/results/msl/results.json").read_text())
    new, old = _shape(res), _shape(published)
    assert new.keys() == old.keys()
    for level, keys in old.items():
        assert [k for k in new[level] if k in keys] == keys, level
    assert set(new["top"]) - set(old["top"]) == {"checkpoint_sha256"}
    assert res["checkpoint_sha256"] == [sha256_file(artifact["ckpt"])]
    assert res["config"]["window"] == WINDOW


def test_export_artifact_called_directly(
    artifact: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The function behind `scjepa export` (and the demo): typed arguments, the hop
    given here, a refused variant request before anything is written; its progress
    is one numbered line per step on stderr."""
    from training.errors import UserError
    from training.export import export_artifact

    model, probe = load_model(artifact["ckpt"]), SavedProbe.load(artifact["probe"])
    with pytest.raises(UserError, match="need --dataset"):
        export_artifact(model=model, probe=probe, out=tmp_path / "no", int8=True)
    assert not (tmp_path / "no").exists()
    m = export_artifact(
        model=model, probe=probe, out=tmp_path / "art", name="direct", hop=20
    )
    assert load_manifest(tmp_path / "art") == m
    assert (m.name, m.window, m.hop) == ("direct", model.cfg.seq_len, 20)
    assert set(m.eval_metrics["onnx_parity"]) == {"random_b1", "random_b64", "edge"}
    assert m.training_data_fingerprint == probe.data_fingerprint != "unknown"
    steps = [
        ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("export [")
    ]
    assert [ln.split("]")[0] for ln in steps] == [
        f"export [{k}/4" for k in (1, 2, 3, 4)
    ]
    assert "parity with PyTorch on 81 windows" in steps[2]


def test_a_probe_without_a_novelty_record_exports_without_the_monitor(
    artifact: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Probe files older than the monitor export as before: no novelty output,
    manifest.novelty null, and one line saying how to get one."""
    from training.export import export_artifact

    model, probe = load_model(artifact["ckpt"]), SavedProbe.load(artifact["probe"])
    probe.novelty = None
    probe.save(tmp_path / "old.pt")
    assert SavedProbe.load(tmp_path / "old.pt").novelty is None
    m = export_artifact(model=model, probe=probe, out=tmp_path / "art")
    assert m.novelty is None and load_manifest(tmp_path / "art").novelty is None
    assert "novelty_max_abs" not in m.eval_metrics["onnx_parity"]["edge"]
    sess = ort.InferenceSession(
        str(tmp_path / "art" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    assert [o.name for o in sess.get_outputs()] == OUTPUTS
    notes = [ln for ln in capsys.readouterr().err.splitlines() if "novelty" in ln]
    assert len(notes) == 1 and "no input-drift monitor" in notes[0]
    assert "scjepa evaluate" in notes[0]


@pytest.mark.parametrize(
    ("info", "hop"),
    [
        ({"rule": "budget", "stride": 8.0}, 8),  # Daphnet's stride
        ({"rule": "budget", "stride": 5.0}, 5),
        ({"rule": "cv-budget", "stride": 5.0}, 5),  # set on the same dense windows
        ({"rule": "f1", "stride": 8.0}, 100),  # the F1 threshold: hop-100 windows
        ({"rule": "budget"}, 100),  # no stride recorded: the window
    ],
)
def test_served_hop_is_the_windows_the_threshold_was_set_on(
    info: dict[str, object], hop: int
) -> None:
    from training.export import served_hop

    assert served_hop(info, 100) == hop


def test_threshold_rule(
    artifact: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--threshold budget and f1 serve validation's budget and F1-optimal thresholds
    (on the windows each was set on); a probe without the threshold asked for, or
    whose data no threshold kept within the budget, is refused with what to do,
    before anything is written; without a cross-fitted one the default is
    validation's."""
    from dataclasses import replace

    from training.errors import UserError
    from training.export import export_artifact, served_threshold

    probe = SavedProbe.load(artifact["probe"])
    # the three differ here, so the manifests below tell which one was served
    thresholds = (probe.threshold, probe.budget_threshold, probe.cv_budget_threshold)
    assert len({round(float(t), 6) for t in thresholds if t is not None}) == 3
    args = ["export", "--checkpoint", str(artifact["ckpt"]), "--probe"]
    args += [str(artifact["probe"]), "--out", str(tmp_path / "f1")]
    assert main([*args[:-1], str(tmp_path / "val"), "--threshold", "budget"]) == 0
    m = load_manifest(tmp_path / "val")
    assert m.threshold == pytest.approx(probe.budget_threshold)
    assert m.eval_metrics["threshold"]["rule"] == "budget" and m.hop == 5
    assert main([*args, "--threshold", "f1"]) == 0
    m = load_manifest(tmp_path / "f1")
    assert m.threshold == pytest.approx(probe.threshold)
    assert m.eval_metrics["threshold"]["rule"] == "f1"
    assert m.hop == m.window  # the F1 threshold was set on non-overlapping windows
    # a hop other than the threshold's windows is served as asked, and said
    capsys.readouterr()
    hop100 = [*args[:-1], str(tmp_path / "hop100"), "--hop", "100"]
    assert main(hop100) == 0 and load_manifest(tmp_path / "hop100").hop == 100
    assert "set on a window every 5 steps" in capsys.readouterr().err
    model = load_model(artifact["ckpt"])
    # (a probe file older than the operating points:) the most cautious of the
    # three; any alone where the others held no budget; a probe file older than the
    # quantile (None) serves the higher of the two
    probe = replace(probe, operating_points=None)
    inf = float("inf")
    for val, cv, q, want in (
        (0.2, 0.3, 0.1, 0.3),
        (0.4, 0.3, 0.1, 0.4),
        (inf, 0.3, inf, 0.3),
        (0.2, 0.3, 0.5, 0.5),
        (inf, inf, 0.5, 0.5),
        (0.2, 0.3, None, 0.3),
    ):
        changed = replace(
            probe, budget_threshold=val, cv_budget_threshold=cv, cv_quantile_threshold=q
        )
        value, info = served_threshold(changed)
        assert value == pytest.approx(want) and info["rule"] == "cv-budget"
    no_cv = replace(
        probe, cv_budget_threshold=None, cv_quantile_threshold=None
    )  # chosen on validation alone
    for changed, rule, match in (
        (
            replace(
                probe,
                budget_threshold=inf,
                cv_budget_threshold=inf,
                cv_quantile_threshold=inf,
            ),
            None,
            "cross-validation held no threshold",
        ),
        (no_cv, "cv-budget", "--threshold budget"),
        (replace(no_cv, budget_threshold=inf), None, "larger --fa-budget"),
        (replace(no_cv, budget_threshold=None, budget=None), None, "evaluate again"),
    ):
        with pytest.raises(UserError, match=match):
            export_artifact(
                model=model, probe=changed, out=tmp_path / "no", threshold=rule
            )
        assert not (tmp_path / "no").exists()
        value, info = served_threshold(changed, "f1")  # still servable at F1
        assert value == pytest.approx(probe.threshold) and info["rule"] == "f1"
    value, info = served_threshold(no_cv)
    assert value == pytest.approx(probe.budget_threshold) and info["rule"] == "budget"
    assert info["cv_budget_threshold"] is None
    with pytest.raises(UserError, match="choose one of cv-budget, budget, f1"):
        served_threshold(probe, "0.5")
    # a validation split without an anomalous window chose no F1 threshold (its F1
    # is n/a): before, --threshold f1 served the "flag nothing" placeholder
    no_val_f1 = replace(probe, metrics={**probe.metrics, "val": {"f1": float("nan")}})
    with pytest.raises(UserError, match="no anomalous window"):
        served_threshold(no_val_f1, "f1")


@pytest.fixture(scope="module")
def variants(
    artifact: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The same model exported with --int8 and --fp16 (synthetic data decides)."""
    out = tmp_path_factory.mktemp("variants") / "art"
    args = ["export", "--checkpoint", str(artifact["ckpt"]), "--probe"]
    args += [str(artifact["probe"]), "--out", str(out), "--dataset", "synthetic"]
    assert main([*args, "--int8", "--fp16"]) == 0
    return out


def test_int8_quantizes_exactly_the_encoder_block_matmuls(
    artifact: dict[str, Path],
) -> None:
    import onnx

    from training.export import block_matmuls

    served = _served(artifact)
    model = onnx.load(str(artifact["dir"] / "model.onnx"))
    names = block_matmuls(model, served)
    # TINY has 1 block: qkv, attention out, FFN in, FFN out; never the codebook/probe
    assert len(names) == 4 and len(set(names)) == 4
    weights = {i.name for i in model.graph.initializer}
    for n in model.graph.node:
        if n.name in names:
            assert n.op_type == "MatMul" and any(i in weights for i in n.input)


@pytest.mark.parametrize("key", ["int8", "fp16"])
def test_variant_kept_only_within_half_a_point(variants: Path, key: str) -> None:
    m = load_manifest(variants)
    check = m.eval_metrics[f"{key}_check"]
    file = variants / f"model.{key}.onnx"
    drops = [
        check[s]["fp32"][k] - check[s]["variant"][k]
        for s in ("val", "test")
        for k in check[s]["fp32"]
        if np.isfinite(check[s]["fp32"][k]) and np.isfinite(check[s]["variant"][k])
    ]
    assert check["max_drop"] == pytest.approx(max(drops))
    # the variant carries the input-drift monitor (read from it by name), and one
    # that moves it by more than NOVELTY_TOLERANCE is refused as a metric drop is
    moved = max(v for k, v in check.items() if k.endswith("_max_abs_novelty_diff"))
    assert 0.0 <= check["val_max_abs_novelty_diff"] <= moved
    kept = max(drops) <= 0.005 and moved <= NOVELTY_TOLERANCE
    assert check["kept"] == kept == file.is_file()
    q = m.quantization
    assert q is not None
    sha = q.int8_sha256 if key == "int8" else q.fp16_sha256
    assert (sha is not None) == file.is_file()
    if file.is_file():
        from service.manifest import sha256_file

        assert sha == sha256_file(file)


def test_a_variant_that_moves_the_drift_monitor_is_refused(
    artifact: dict[str, Path], tmp_path: Path
) -> None:
    """The same risks but a novelty moved beyond NOVELTY_TOLERANCE: refused, as a
    metric drop is (its drift warning would fire on other windows)."""
    import copy

    from model.export import export_onnx
    from training.data.windows import Samples
    from training.export import variant_check

    served = _served(artifact)
    assert served.novelty is not None
    moved = copy.deepcopy(served)
    assert moved.novelty is not None
    moved.novelty.rarity.bandwidth.mul_(10.0)  # the ranks flattened towards 0.5
    export_onnx(moved, tmp_path / "moved.onnx")
    x = np.random.default_rng(0).normal(size=(64, 100, served.n_in)).astype("float32")
    y = np.r_[np.zeros(32, np.int8), np.ones(32, np.int8)]
    zeros = np.zeros(64, np.int64)
    s = Samples(x, y, np.zeros(64, np.int8), zeros.astype(np.int32), zeros, zeros)
    fp32 = artifact["dir"] / "model.onnx"
    same = variant_check(fp32, fp32, {"val": s, "test": s}, 0.5, novelty=True)
    assert same["kept"] and same["val_max_abs_novelty_diff"] == 0.0
    check = variant_check(
        fp32, tmp_path / "moved.onnx", {"val": s, "test": s}, 0.5, True
    )
    assert check["max_drop"] == 0.0  # the risks are the same
    assert check["val_max_abs_novelty_diff"] > NOVELTY_TOLERANCE
    assert not check["kept"]


def test_int8_scores_do_not_depend_on_the_batch(
    artifact: dict[str, Path], tmp_path: Path
) -> None:
    """Static ranges: a window's risk is the same alone or in a micro-batch of others
    (dynamic quantization's per-batch ranges would break this)."""
    from training.export import quantize_int8

    served = _served(artifact)
    rng = np.random.default_rng(3)
    calib = rng.normal(size=(64, 100, served.n_in)).astype(np.float32)
    q = tmp_path / "q.onnx"
    how = quantize_int8(artifact["dir"] / "model.onnx", q, served, calib)
    assert how["nodes"] == 4
    text = q.read_bytes()
    assert b"QuantizeLinear" in text and b"DequantizeLinear" in text
    sess = ort.InferenceSession(str(q), providers=["CPUExecutionProvider"])
    x = (rng.normal(size=(16, 100, served.n_in)) * 4).astype(np.float32)
    x[0] *= 50  # an outlier window would move dynamic ranges for its neighbours
    batch = sess.run(["risk"], {"window": x})[0]
    alone = np.concatenate(
        [sess.run(["risk"], {"window": x[i : i + 1]})[0] for i in range(16)]
    )
    np.testing.assert_allclose(batch, alone, rtol=0, atol=1e-6)
    fp32 = ort.InferenceSession(
        str(artifact["dir"] / "model.onnx"), providers=["CPUExecutionProvider"]
    ).run(["risk"], {"window": x})[0]
    assert np.abs(batch - fp32).max() < 0.1  # quantized, but the same model


def test_fp16_variant_keeps_float32_io_and_tracks_fp32(variants: Path) -> None:
    from training.export import convert_fp16

    path = variants / "model.fp16.onnx"
    if not path.is_file():  # refused on this model: convert again to test the graph
        convert_fp16(variants / "model.onnx", path)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.type for i in sess.get_inputs()] == ["tensor(float)"]
    assert [o.type for o in sess.get_outputs()] == [
        "tensor(float)",
        "tensor(float)",
        "tensor(int64)",
        "tensor(float)",
        "tensor(float)",  # novelty
    ]
    n = load_manifest(variants).n_channels
    x = np.random.default_rng(4).normal(size=(8, 100, n)).astype(np.float32)
    ref = ort.InferenceSession(
        str(variants / "model.onnx"), providers=["CPUExecutionProvider"]
    ).run(["risk"], {"window": x})[0]
    np.testing.assert_allclose(sess.run(["risk"], {"window": x})[0], ref, atol=5e-3)


def test_bench_infer_compares_like_with_like(
    artifact: dict[str, Path], tmp_path: Path
) -> None:
    """`scjepa bench infer`: the eager baseline keeps the artifact's channel mask (same
    work as the graph), ratios and shares of the measured peak are consistent."""
    from model.config import ModelConfig
    from model.export import ServedModel, export_onnx
    from service.manifest import write_manifest
    from training.bench.infer import flops_per_window, served_from_config

    # the TINY artifact with two of its channels masked, as MSL masks 22 of 55
    base = _served(artifact)
    mask = [i not in (1, 4) for i in range(base.n_in)]
    art = tmp_path / "masked"
    art.mkdir()
    export_onnx(
        ServedModel(base.model, base.probe, mask, (1.0, 0.0)), art / "model.onnx"
    )
    write_manifest(  # a graph without the input-drift monitor: none in its manifest
        art,
        load_manifest(artifact["dir"]).model_copy(
            update={"channel_mask": mask, "novelty": None}
        ),
    )

    out = tmp_path / "infer.json"
    args = ["bench", "infer", "--artifact", str(art), "--batch-sizes", "1,4"]
    assert main([*args, "--seconds", "0.05", "--threads", "1", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    cfg = ModelConfig(**load_manifest(art).model_cfg)
    n = len(mask)
    all_kept = flops_per_window(served_from_config(cfg, [True] * n), n, 100)
    assert res["channels_kept"] == n - 2 and res["channels_in"] == n
    assert (
        res["cpu"]["cores"] >= 1
    )  # the ISA decides kernels: recorded with the figures
    assert res["flops_per_window"] == pytest.approx(all_kept * (n - 2) / n, rel=0.02)
    assert all(p["cpu fp32 gflop_per_s"] > 0 for p in res["peak_gflop_per_s"])
    rows = {(r["batch"], r["runtime"]): r for r in res["rows"]}
    for (b, _), r in rows.items():
        base_row = rows[(b, r["baseline"])]
        assert r["vs_baseline"] == pytest.approx(
            r["windows_per_s"] / base_row["windows_per_s"]
        )
        assert r["gflop_per_s"] == pytest.approx(
            r["windows_per_s"] * res["flops_per_window"] / 1e9
        )
    # the service's runtime splits a batch into calls of ~512 encoder tokens; eager is
    # timed in the same calls too, so the gain of the chunking is not credited to ORT
    k = max(1, 512 // ((n - 2) * (cfg.seq_len // cfg.patch_len)))
    assert {n for _, n in rows} == {
        "onnxruntime cpu fp32",
        "pytorch eager cpu fp32",
        f"service runtime cpu fp32 ({k} windows a call)",
        f"pytorch eager cpu fp32 ({k} windows a call)",
    }


def test_bench_infer_costs_the_novelty_monitor(
    artifact: dict[str, Path], tmp_path: Path
) -> None:
    """A graph with the input-drift monitor is timed beside itself without it (the
    outputs before it), in the same run: the monitor's cost is their ratio."""
    from training.bench.infer import without_novelty

    bare = without_novelty(artifact["dir"] / "model.onnx", 1)
    assert bare is not None
    assert [o.name for o in bare.get_outputs()] == OUTPUTS
    out = tmp_path / "infer.json"
    args = ["bench", "infer", "--artifact", str(artifact["dir"]), "--batch-sizes", "4"]
    assert main([*args, "--seconds", "0.05", "--threads", "1", "--json", str(out)]) == 0
    rows = {r["runtime"]: r for r in json.loads(out.read_text())["rows"]}
    row = rows["onnxruntime cpu fp32 without the novelty monitor"]
    assert row["baseline"] == "onnxruntime cpu fp32" and row["vs_baseline"] > 0


def _cuda_in_onnxruntime() -> bool:
    return "CUDAExecutionProvider" in ort.get_available_providers()


@pytest.mark.requires_cuda
@pytest.mark.skipif(
    not _cuda_in_onnxruntime(), reason="onnxruntime has no CUDA provider"
)
def test_cuda_provider_is_active_and_matches_cpu(variants: Path) -> None:
    """On a GPU host: CUDA is the ACTIVE provider (not a silent CPU fallback), its fp32
    risks match the CPU's, and the fp16 variant (if kept) stays close."""
    from service.inference import CUDA, load_model

    n = load_manifest(variants).n_channels
    x = np.random.default_rng(5).normal(size=(64, 100, n)).astype(np.float32)
    cpu = load_model(variants, provider="cpu").score(x).risk
    gpu = load_model(variants, provider="cuda", max_batch=64)
    assert gpu.provider == CUDA
    options = gpu.session.get_provider_options()[CUDA]
    assert options["cudnn_conv_algo_search"] == "HEURISTIC"
    np.testing.assert_allclose(gpu.score(x).risk, cpu, atol=1e-3)  # TF32 matmuls
    if (variants / "model.fp16.onnx").is_file():
        half = load_model(variants, provider="cuda", precision="fp16")
        assert half.provider == CUDA and half.precision == "fp16"
        np.testing.assert_allclose(half.score(x).risk, cpu, atol=5e-3)


def test_graph_window_stats_equal_the_training_features(tmp_path: Path) -> None:
    """model/stats.py (in PyTorch and in onnxruntime) == training/evaluate/features.py
    (what the probe was fitted on), bit for bit: a tree probe's split can fall between
    two values a few ulps apart. Discrete sensors (a level repeated in many windows)
    are where float32 sums in different orders disagreed."""
    import warnings

    from model.stats import WindowStats
    from training.evaluate.baselines import window_stats

    rng = np.random.default_rng(6)
    normal = (rng.normal(size=(50, 100, 7)) * 3 + 5).astype(np.float32)
    x = (rng.normal(size=(300, 100, 7)) * rng.uniform(0.1, 20, 7) + 40).astype(
        np.float32
    )
    x[:150, :, :4] = np.round(x[:150, :, :4] / 7) * 0.7  # discrete levels
    x[0, :, 2] = 1.5  # a flat channel: std 0
    feats = window_stats(normal)
    graph = WindowStats(feats.scale.mean.tolist(), feats.scale.std.tolist(), 100)
    with torch.no_grad():
        got = graph(torch.from_numpy(x)).numpy()
    want = feats(x)
    path = tmp_path / "stats.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            graph,
            (torch.from_numpy(x[:2]),),
            str(path),
            input_names=["window"],
            dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1, max=4096)}},
            dynamo=True,
            verbose=False,
        )
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (onnx_got,) = sess.run(None, {"window": x})
    assert got.dtype == want.dtype == onnx_got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(onnx_got, want)


def _tiny_served(probe: torch.nn.Module) -> ServedModel:
    from model import SCJEPA, ModelConfig

    cfg = ModelConfig(
        d_model=16, n_layers=1, n_heads=2, n_codes=8, pred_dim=16, pred_layers=1,
        pred_heads=2, tok_channels=4, dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    return ServedModel(SCJEPA(cfg), probe, [True, True, True], (1.0, 0.0)).eval()


def test_tree_parity_is_held_on_the_graphs_own_features(tmp_path: Path) -> None:
    """A tree probe's risk jumps at a split: a window whose feature lies between its
    PyTorch and onnxruntime values (a few ulps apart) takes two branches, and no
    end-to-end tolerance is both safe and strict (results-notes.md, nineteenth
    session). The check holds the graph's features within their float tolerance and
    its trees exactly on those features; the window that crossed is counted."""
    from model.export import export_onnx
    from model.trees import TreeEnsemble
    from training.export import onnx_outputs, parity, parity_failure

    trees = TreeEnsemble(n_nodes=3, n_trees=1, depth=1)
    served = _tiny_served(trees)
    x = (np.random.default_rng(2).normal(size=(64, 100, 3)) * 3 + 1).astype(np.float32)
    path = export_onnx(served, tmp_path / "m.onnx")
    (ort_feats,) = onnx_outputs(path, x, ("features",))
    with torch.no_grad():
        feats = served(torch.from_numpy(x))[3].numpy()
    gap = np.abs(ort_feats - feats)
    row, col = np.unravel_index(gap.argmax(), gap.shape)
    assert 0 < gap[row, col] < 1e-4  # float noise, not a fault
    a, b = sorted((feats[row, col], ort_feats[row, col]))
    split = np.float32((float(a) + float(b)) / 2)
    assert a <= split < b  # the two values go different ways
    state = {
        "feature": torch.tensor([col, 0, 0]),
        "threshold": torch.tensor([split, 0.0, 0.0]),
        "left": torch.tensor([1, 1, 2]),
        "right": torch.tensor([2, 1, 2]),
        "value": torch.tensor([0.0, -3.0, 3.0]),
        "roots": torch.tensor([0]),
        "depth": torch.tensor(1),
        "bias": torch.tensor(0.0),
    }
    served.probe.load_state_dict(state)
    path = export_onnx(served, tmp_path / "m.onnx")
    (par,) = parity(served, path, {"x": x}).values()
    assert par["risk_windows_off"] >= 1 and par["risk_max_abs"] > 0.9
    assert par["features_excess"] < 1 and par["head_max_abs"] < 1e-6
    assert parity_failure({"x": par}, trees=True) is None
    # a smooth probe's risk is held end to end
    assert "max |risk difference|" in str(parity_failure({"x": par}, trees=False))


def test_parity_on_flat_channels_and_extreme_levels(tmp_path: Path) -> None:
    """A channel flat within the window (a forward-filled sensor) at 98765.43: RevIN's
    float32 mean missed it by an ulp and made +-2.5 spikes of it, different ones in
    PyTorch and in onnxruntime (features 1e3 times their tolerance, a tree or
    label-free risk off by up to 1). RevIN now works in float64: codes, window
    statistics and every detector agree on the parity check's edge windows, and so
    do the channel contributions wherever a channel moves."""
    from model.detectors import Detectors, fit_detector_params
    from model.export import export_onnx
    from model.stats import WindowStats
    from training.evaluate.baselines import window_stats
    from training.evaluate.probe import build_probe_net
    from training.export import (
        EDGE_LEVELS,
        edge_windows,
        onnx_outputs,
        parity,
        parity_failure,
    )

    rng = np.random.default_rng(9)
    normal = (rng.normal(size=(60, 100, 3)) * [1, 3, 0.5] + [0, 10, -2]).astype(
        np.float32
    )
    scale = window_stats(normal).scale
    stats = WindowStats(scale.mean.tolist(), scale.std.tolist(), 100)
    names = ("knn", "pca", "surprise", "recon")
    params = fit_detector_params(normal, ("knn", "pca"))
    params |= {"scale_mean": np.zeros(4), "scale_std": np.ones(4)}
    served = _tiny_served(build_probe_net(5 * 8 + 18 + 4, 8, 0.0))
    served.stats, served.detectors = stats, Detectors(names, params)
    path = export_onnx(served.eval(), tmp_path / "m.onnx")
    x = edge_windows(rng, 100, 3)
    (par,) = parity(served, path, {"edge": x}).values()
    assert parity_failure({"edge": par}, trees=False) is None
    assert par["features_excess"] < 0.1 and par["risk_max_abs"] < 1e-5
    flat = x[: 2 * len(EDGE_LEVELS)]  # one channel, then all, flat at each level
    (contrib,) = onnx_outputs(path, flat, ("channel_contrib",))
    with torch.no_grad():
        ref = served(torch.from_numpy(flat))[1].numpy()
    np.testing.assert_allclose(contrib, ref, atol=1e-5)


def test_parity_catches_a_graph_unlike_pytorch(tmp_path: Path) -> None:
    """The graph differing from PyTorch in its features, or in its probe on the same
    features, fails the check."""
    from model.export import export_onnx
    from training.evaluate.probe import build_probe_net
    from training.export import parity, parity_failure

    served = _tiny_served(build_probe_net(5 * 8, 8, 0.0))
    x = np.random.default_rng(3).normal(size=(16, 100, 3)).astype(np.float32)
    path = export_onnx(served, tmp_path / "m.onnx")
    ok = parity(served, path, {"x": x})
    assert parity_failure(ok, trees=False) is None
    served.platt.copy_(torch.tensor([1.0, 0.5]))  # the probe's calibration differs
    bad_head = parity(served, path, {"x": x})
    assert bad_head["x"]["features_excess"] < 1
    assert "on the same features" in str(parity_failure(bad_head, trees=True))
    served.platt.copy_(torch.tensor([1.0, 0.0]))
    with torch.no_grad():  # the codebook differs
        embed = served.model.codebook.embed
        embed.copy_(embed.roll(1, dims=0))
    bad = parity(served, path, {"x": x})
    assert "the probe's features differ" in str(parity_failure(bad, trees=True))
    with torch.no_grad():  # 1 % noise on the codebook: a risk change of ~1e-4 only
        embed.copy_(embed.roll(-1, dims=0) + torch.randn_like(embed) * 0.01)
    noisy = parity(served, path, {"x": x})
    assert "the probe's features differ" in str(parity_failure(noisy, trees=False))


def test_served_codes_plus_stats_probe(
    artifact: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`scjepa evaluate` also saves probe-stats.pt; export serves it with the statistics
    computed inside the graph (parity with PyTorch), and unlike the codes-only graph,
    whose RevIN makes it blind to a channel's level, its risk moves with the level."""
    stats_probe = artifact["probe"].parent / "probe-stats.pt"
    probe = SavedProbe.load(stats_probe)
    assert probe.features == "codes+stats" and probe.n_features == 5 * 16 + 18
    out = tmp_path / "art"
    args = [
        "export",
        "--checkpoint",
        str(artifact["ckpt"]),
        "--probe",
        str(stats_probe),
    ]
    assert main([*args, "--out", str(out), "--dataset", "synthetic"]) == 0
    # the operator is told the figures are of the entities fitted on
    n = len(load_dataset("synthetic").entities)
    assert (
        f"synthetic is split in time within each entity; this model was fitted on "
        f"the earlier stretches of {n} entities and tested on the latest stretches of "
        f"{n}: its figures are of these entities, not of new ones"
    ) in " ".join(capsys.readouterr().err.split())
    m = load_manifest(out)
    assert m.probe_features == "codes+stats"
    assert load_manifest(artifact["dir"]).probe_features == "codes"
    assert max(p["risk_max_abs"] for p in m.eval_metrics["onnx_parity"].values()) < 1e-4

    served = build_served(load_model(artifact["ckpt"]), probe)
    x = np.random.default_rng(7).normal(size=(16, 100, m.n_channels)).astype(np.float32)
    shifted = x + 25.0  # same shapes, another level
    run = ort.InferenceSession(
        str(out / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    with torch.no_grad():
        ref = served(torch.from_numpy(x))[0].numpy()
    np.testing.assert_allclose(run.run(["risk"], {"window": x})[0], ref, atol=1e-4)
    moved = np.abs(run.run(["risk"], {"window": shifted})[0] - ref).max()
    codes_only = ort.InferenceSession(
        str(artifact["dir"] / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    still = np.abs(
        codes_only.run(["risk"], {"window": shifted})[0]
        - codes_only.run(["risk"], {"window": x})[0]
    ).max()
    assert still < 1e-4 < moved


def test_export_serves_the_validation_winner(
    artifact: dict[str, Path], tmp_path: Path
) -> None:
    """`scjepa export --probe RESULTS_DIR` serves the candidate chosen by
    cross-validation on train + validation (training/evaluate/select.py: the fewest
    inputs among those within one SD of the best), and the manifest records that
    leaderboard with non-test figures only."""
    results = artifact["probe"].parent
    board = json.loads((results / "results.json").read_text())["leaderboard"]
    # 4 candidates (the raw-feature ones are baselines, not run here), 2 probes each,
    # and the fine-tuned one
    assert board["winner"] == board["rows"][0]["row"] and len(board["rows"]) == 9
    assert board["cv"]["blocks"] == 4 and board["cv"]["events"] > 0
    kept = [e for e in board["rows"] if e["cv_stage"] == 2]
    assert board["rows"][0] in kept
    assert board["rows"][0]["n_inputs"] == min(e["n_inputs"] for e in kept)
    rest = [(e["cv_warned_rate"], e["cv_pr_auc"]) for e in board["rows"][1:]]
    assert rest == sorted(rest, reverse=True)
    out = tmp_path / "art"
    args = ["export", "--checkpoint", str(artifact["ckpt"]), "--probe", str(results)]
    assert main([*args, "--out", str(out), "--dataset", "synthetic"]) == 0
    m = load_manifest(out)
    assert m.eval_metrics["row"] == board["winner"]
    assert m.eval_metrics["leaderboard"] == board
    assert all(
        k.startswith(("row", "features", "val_", "cv_", "n_inputs", "operating_points"))
        for e in board["rows"]
        for k in e
    )
    assert m.probe_features == board["rows"][0]["features"]
    assert max(p["risk_max_abs"] for p in m.eval_metrics["onnx_parity"].values()) < 1e-4


def test_operating_points(
    artifact: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`scjepa evaluate` sets each candidate's thresholds at every operating point
    (select.OPERATING_BUDGETS and its own --fa-budget) on validation and out of fold,
    and each candidate's test figures at the threshold served at each; `scjepa
    export --fa-budget B` serves one of them under the same rule and lists them all in
    the manifest; another budget, or one with --threshold f1, is refused with what to
    do."""
    from training.evaluate.protocol import point_figures
    from training.evaluate.select import OPERATING_BUDGETS, served_thresholds
    from training.export import served_threshold

    results = artifact["probe"].parent
    res = json.loads((results / "results.json").read_text())
    board = res["leaderboard"]
    budgets = sorted({*OPERATING_BUDGETS, 20.0})  # the fixture's --fa-budget is 20
    inf = float("inf")
    for row in board["rows"]:
        points = row["operating_points"]
        assert [p["false_alarms_per_1000"] for p in points] == budgets
        # a tighter budget never lowers a threshold
        cv = [inf if p["cv_budget_thresholds"][0] is None else p["cv_budget_thresholds"][0] for p in points]  # fmt: skip
        assert cv == sorted(cv, reverse=True)
        # the run's own budget is the row's served threshold's
        own = next(p for p in points if p["false_alarms_per_1000"] == 20.0)
        assert own["cv_budget_thresholds"] == row["cv_budget_thresholds"]
        assert own["cv_budget_quantiles"] == row["cv_budget_quantiles"]
    events = res["rows"][board["winner"]]["events"]
    test = {p["false_alarms_per_1000"]: p for p in events["operating_points"]}
    assert sorted(test) == budgets
    assert test[20.0]["thresholds"] == events["cv_budget"]["thresholds"]
    assert test[20.0]["warned"] == events["cv_budget"]["warned"]
    probe = SavedProbe.load(results / "probe-served.pt")
    assert probe.operating_points is not None
    at = {p["false_alarms_per_1000"]: p for p in probe.operating_points}
    assert at[20.0]["budget_threshold"] == probe.budget_threshold
    assert at[20.0]["cv_budget_threshold"] == probe.cv_budget_threshold
    assert at[20.0]["cv_quantile_threshold"] == probe.cv_quantile_threshold
    served = served_thresholds([(b, *_three(p)) for b, p in at.items()])
    # a budget within rounding of a point (3.00001 for 3) is that point
    near = served_threshold(probe, None, 3.00001)
    assert near == served_threshold(probe, None, 3.0)
    assert near[1]["false_alarms_per_1000"] == 3.0
    # every candidate's probe file carries its own
    other = SavedProbe.load(artifact["probe"])
    assert other.operating_points is not None and other.features == "codes"
    # export at another point: the rule's threshold there, every point listed
    b = max(x for x in budgets if x < 20 and np.isfinite(served[x]))
    out = tmp_path / "art"
    args = ["export", "--checkpoint", str(artifact["ckpt"]), "--probe", str(results)]
    assert main([*args, "--out", str(out), "--fa-budget", f"{b:g}"]) == 0
    m = load_manifest(out)
    t = m.eval_metrics["threshold"]
    assert m.threshold == pytest.approx(served[b])
    assert t["false_alarms_per_1000"] == b and t["rule"] == "cv-budget"
    assert [p["false_alarms_per_1000"] for p in t["operating_points"]] == budgets
    listed = {p["false_alarms_per_1000"]: p["threshold"] for p in t["operating_points"]}
    assert listed == {x: None if np.isinf(v) else pytest.approx(v) for x, v in served.items()}  # fmt: skip
    assert listed[20.0] == pytest.approx(served_threshold(probe)[0])
    value, info = served_threshold(probe, "budget", b)  # validation's alone
    assert value == pytest.approx(at[b]["budget_threshold"])
    assert info["cv_budget_threshold"] is None
    # (the test figures are the served rule's thresholds', not validation's alone)
    assert all("test" not in p for p in info["operating_points"])
    # the test figures at each point are at the threshold served there (one seed's
    # is the probe file's)
    for x in budgets:
        if np.isfinite(served[x]):
            assert pytest.approx(served[x]) in test[x]["thresholds"], x
    # the served probe's points carry the test split's figures there, and the
    # manifest lists them: warned of events, false alarms, their intervals
    for p in t["operating_points"]:
        x = p["false_alarms_per_1000"]
        if not np.isfinite(served[x]):
            assert "test" not in p
            continue
        fig, at_x = p["test"], test[x]
        assert fig["events"] == at_x["events"]
        assert fig["warned_rate"] == pytest.approx(at_x["warned_rate"]["mean"])
        assert fig["warned_rate_ci95"] == pytest.approx(at_x["ci95"]["warned_rate"])
        fa = at_x["false_alarms_per_1000_windows"]["mean"]
        assert fig["false_alarms_per_1000"] == pytest.approx(fa)
        assert fig["chance_p"] == pytest.approx(at_x["chance"]["p"])
        # false pages per 1,000 windows: the per-seed pages over the windows scored
        pages = [d["false_pages"] for d in at_x["per_seed"]]
        assert fig["false_pages_per_1000"] == pytest.approx(
            1000 * np.mean(pages) / at_x["windows"]
        )
        assert fig["false_pages_per_1000"] <= fig["false_alarms_per_1000"] + 1e-9
        assert len(fig["false_pages_per_1000_ci95"]) == 2
    assert "false_pages_per_day" not in p["test"]  # the fixture's rate is unknown
    at_x = test[x] | {"false_pages_per_day": {"mean": 2.5}}
    at_x["ci95"] = at_x["ci95"] | {"false_pages_per_day": [1.0, 4.0]}
    fig = point_figures(at_x)
    assert fig is not None and fig["false_pages_per_day"] == 2.5
    assert fig["false_pages_per_day_ci95"] == [1.0, 4.0]
    assert point_figures(test[x] | {"thresholds": [[None]]}) is None  # none served
    # another candidate's probe file lists its own test figures at each point
    other_points = served_threshold(other)[1]["operating_points"]
    other_test = {
        p["false_alarms_per_1000"]: p
        for p in res["rows"]["SC-JEPA probe"]["events"]["operating_points"]
    }
    assert sorted(other_test) == budgets
    for p in other_points:
        at_p = other_test[p["false_alarms_per_1000"]]
        assert ("test" in p) == (p["threshold"] is not None)
        if "test" in p:
            want = at_p["warned_rate"]["mean"]
            assert p["test"]["warned_rate"] == pytest.approx(want)
            seeds = np.ravel(np.asarray(at_p["thresholds"], dtype=float))
            assert np.isclose(seeds, p["threshold"]).any()
    capsys.readouterr()
    assert main([*args, "--out", str(tmp_path / "no"), "--fa-budget", "7"]) == 2
    assert (
        "thresholds at 0.1, 0.3, 1, 3, 10, 20 false alarms" in capsys.readouterr().err
    )
    assert main([*args, "--out", str(tmp_path / "no"), "--fa-budget", "10", "--threshold", "f1"]) == 2  # fmt: skip
    assert "use one of the two" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()
    # results.md: one row per operating point, the test figures at each
    doc = tmp_path / "results.md"
    assert main(["report", str(results), "--out", str(doc)]) == 0
    text = doc.read_text()
    assert "**Operating points of the served model**" in text
    row = next(x for x in text.splitlines() if x.startswith("| 20 | "))
    assert f"{test[20.0]['warned']['mean']:.3g} / {test[20.0]['events']}" in row
    fp = test[20.0]["false_pages_per_1000_windows"]["mean"]
    assert row.split(" | ")[5].startswith(f"{fp:.2f} [")


def test_served_thresholds_rule() -> None:
    """The most cautious of the three at each budget, never below a looser budget's,
    none where neither out-of-fold estimate held the budget (validation's alone does
    not certify it)."""
    from training.evaluate.select import served_thresholds

    inf = float("inf")
    got = served_thresholds(
        [
            (0.1, 0.9, inf, None),  # only validation held it: none
            (0.3, inf, 0.5, inf),  # validation did not: the out-of-fold one, but ...
            (1.0, 0.6, 0.4, 0.45),  # ... never below a looser budget's (0.6)
            (10.0, 0.3, 0.35, None),
        ]
    )
    assert got == {0.1: inf, 0.3: 0.6, 1.0: 0.6, 10.0: 0.35}


def _three(p: dict[str, float]) -> tuple[float, float, float]:
    return p["budget_threshold"], p["cv_budget_threshold"], p["cv_quantile_threshold"]


def test_cv_scores_reproduce_the_choice(artifact: dict[str, Path]) -> None:
    """cv_scores.npz holds every candidate's out-of-fold risks: the rule run again on
    them, over the same blocks, chooses the same winner with the same keys."""
    from training.data import load_dataset
    from training.evaluate.select import CVConfig, choose, cv_blocks, read_out_of_fold

    results = artifact["probe"].parent
    res = json.loads((results / "results.json").read_text())
    board, events = res["leaderboard"], res["config"]["events"]
    oof = read_out_of_fold(results / "cv_scores.npz")
    assert sorted(oof) == sorted(e["row"] for e in board["rows"])
    blocks = cv_blocks(load_dataset("synthetic"), 0, 4, events["stride"])
    for per_fold in oof.values():
        (o,) = per_fold
        assert [h.shape for h in o.hop] == [(1, len(b.hop)) for b in blocks]
        assert [d.shape for d in o.dense] == [(1, len(b.dense)) for b in blocks]
    again = choose([blocks], oof, events["lookback"], CVConfig(seeds=1, n_boot=10))
    assert again["winner"] == board["winner"]
    keys = ("n_inputs", "cv_warned_rate", "cv_pr_auc", "cv_stage")
    got = {e["row"]: [e[k] for k in keys] for e in again["rows"]}
    assert got == {e["row"]: [e[k] for k in keys] for e in board["rows"]}


def _export_and_compare(
    artifact: dict[str, Path], path: Path, out: Path, seed: int, n: int
) -> np.ndarray:
    """Export the probe at ``path``; its ONNX risk on n random windows must match the
    PyTorch graph's (the evaluation's modules). Returns that risk."""
    args = ["export", "--checkpoint", str(artifact["ckpt"]), "--probe", str(path)]
    assert main([*args, "--out", str(out), "--dataset", "synthetic"]) == 0
    m = load_manifest(out)
    assert m.probe_features == SavedProbe.load(path).features
    assert max(p["risk_max_abs"] for p in m.eval_metrics["onnx_parity"].values()) < 1e-4
    served = build_served(load_model(artifact["ckpt"]), SavedProbe.load(path))
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(n, 100, m.n_channels)) * 2 + 1).astype(np.float32)
    run = ort.InferenceSession(
        str(out / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    with torch.no_grad():
        ref = served(torch.from_numpy(x))[0].numpy()
    np.testing.assert_allclose(run.run(["risk"], {"window": x})[0], ref, atol=1e-4)
    return ref


def test_served_detector_probe(artifact: dict[str, Path], tmp_path: Path) -> None:
    """The candidate reading codes, statistics and the four detector scores exports to
    one graph (kNN bank, PCA basis and SC-JEPA's surprise inside) whose risk matches
    PyTorch, and whose PyTorch risk is the evaluation's (same featurizer modules)."""
    from training.evaluate.protocol import CANDIDATES, DET_ROW

    features = CANDIDATES[DET_ROW]
    path = artifact["probe"].parent / "candidates" / f"{features}.pt"
    probe = SavedProbe.load(path)
    assert probe.features == features and probe.n_features == 5 * 16 + 18 + 4
    _export_and_compare(artifact, path, tmp_path / "art", seed=3, n=33)
    # refused: a detector probe whose constants are gone
    probe.detectors = None
    assert probe.problem() is not None and "detectors' constants" in probe.problem()


def test_served_tree_probe(artifact: dict[str, Path], tmp_path: Path) -> None:
    """A "(trees)" candidate exports to one graph (model/trees.py's gathers after the
    same inputs) whose risk matches PyTorch, which is the evaluation's own."""
    from training.evaluate.protocol import CANDIDATES, DET_ROW, candidate_file

    name = f"{DET_ROW} (trees)"
    path = (
        artifact["probe"].parent / "candidates" / candidate_file(name, CANDIDATES[name])
    )
    probe = SavedProbe.load(path)
    assert probe.kind == "trees" and probe.features == CANDIDATES[DET_ROW]
    # all 200 stages kept by default (tree_select_on="none")
    assert len(probe.state_dict["roots"]) == probe.probe["config"]["max_trees"]
    ref = _export_and_compare(artifact, path, tmp_path / "art", seed=4, n=17)
    assert ref.std() > 0  # the trees split these windows


def test_served_fine_tuned_probe(artifact: dict[str, Path], tmp_path: Path) -> None:
    """The fine-tuned candidate's probe carries the fine-tuned SC-JEPA weights; its
    export puts them in the graph, whose ONNX risk on the test windows is the risk
    `scjepa evaluate` scored them with (that seed's row of scores.npz)."""
    from training.data import downstream_splits, load_dataset
    from training.evaluate.protocol import CANDIDATES, TUNED_ROW, candidate_file

    results = artifact["probe"].parent
    path = results / "candidates" / candidate_file(TUNED_ROW, CANDIDATES[TUNED_ROW])
    probe = SavedProbe.load(path)
    assert probe.kind == "trees" and probe.features == "codes+stats"
    assert probe.n_features == 5 * 16 + 18 and probe.encoder_state is not None
    frozen = load_model(artifact["ckpt"]).state_dict()
    assert probe.encoder_state.keys() == frozen.keys()
    moved = [k for k, v in frozen.items() if not torch.equal(v, probe.encoder_state[k])]
    assert any(k.startswith("encoder.") for k in moved)  # fine-tuned, not frozen
    _export_and_compare(artifact, path, tmp_path / "art", seed=5, n=9)
    m = load_manifest(tmp_path / "art")
    assert m.encoder == "fine-tuned" and load_manifest(artifact["dir"]).encoder == (
        "pre-trained"
    )
    # the graph's risk is the evaluation's: the same windows, the same seed's scores
    ds = load_dataset("synthetic")
    test = downstream_splits(ds, 100)["test"]
    x = np.zeros((*test.x.shape[:2], m.n_channels), np.float32)
    x[:, :, np.asarray(m.channel_mask)] = test.x
    run = ort.InferenceSession(
        str(tmp_path / "art" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    seeds = json.loads((results / "results.json").read_text())["seeds"]
    want = np.load(results / "scores.npz")[f"score/{TUNED_ROW}"]
    want = want[seeds.index(probe.probe["seed"])]
    np.testing.assert_allclose(run.run(["risk"], {"window": x})[0], want, atol=1e-4)
    # refused: weights that do not fit the checkpoint's model
    probe.encoder_state = dict(list(probe.encoder_state.items())[1:])
    with pytest.raises(UserError, match="fine-tuned weights do not fit"):
        build_served(load_model(artifact["ckpt"]), probe)


def test_leaderboard_ranks_on_validation_only() -> None:
    """Ranking reads validation figures (warned rate at the budget, then PR AUC),
    never the test split; the winner's refit without SC-JEPA's inputs is named."""
    from training.evaluate.protocol import (
        DET_ROW,
        RAW_ROW,
        STATS_ROW,
        leaderboard,
        without_scjepa,
    )

    def row(warned: float, pr: float, test_pr: float) -> dict:
        return {
            "val": {"pr_auc": {"mean": pr}, "roc_auc": {"mean": 0.5}},
            "val_events": {
                "warned_rate": {"mean": warned},
                "false_alarms_per_1000_windows": {"mean": 1.0},
            },
            "all": {"pr_auc": {"mean": test_pr}},
        }

    rows = {
        "SC-JEPA probe": row(0.0, 0.9, 0.9),
        STATS_ROW: row(0.1, 0.2, 0.1),
        DET_ROW: row(0.1, 0.3, 0.0),
        RAW_ROW: row(0.0, 0.5, 0.99),
        "probe on stats + kNN + PCA (no SC-JEPA)": row(
            0.5, 0.9, 0.9
        ),  # not a candidate
    }
    board = leaderboard(rows)  # type: ignore[arg-type]
    assert [e["row"] for e in board["rows"]] == [
        DET_ROW,
        STATS_ROW,
        "SC-JEPA probe",
        RAW_ROW,
    ]
    assert board["winner"] == DET_ROW
    assert board["winner_without_scjepa"] == "probe on stats + kNN + PCA (no SC-JEPA)"
    assert without_scjepa("codes+stats") == "stats" and without_scjepa("codes") is None
    assert leaderboard({STATS_ROW: rows[STATS_ROW]})["winner_without_scjepa"] is None
    # with a cross-validated choice: its winner first, the rest by its keys
    cv = {
        n: {"row": n, "cv_warned_rate": w, "cv_pr_auc": 0.5, "n_inputs": i}
        for n, w, i in (
            ("SC-JEPA probe", 0.3, 80),
            (STATS_ROW, 0.2, 98),
            (DET_ROW, 0.1, 102),
            (RAW_ROW, 0.25, 18),
        )
    }
    choice = {"winner": RAW_ROW, "rows": list(cv.values()), "cv": {"blocks": 4}}
    board = leaderboard(rows, choice)  # type: ignore[arg-type]
    assert [e["row"] for e in board["rows"]] == [
        RAW_ROW,
        "SC-JEPA probe",
        STATS_ROW,
        DET_ROW,
    ]
    assert board["winner"] == RAW_ROW and board["cv"] == {"blocks": 4}
    assert board["winner_without_scjepa"] is None  # it reads no SC-JEPA input
    assert (
        board["rows"][0]["n_inputs"] == 18 and "cross-validation" in board["chosen_on"]
    )
