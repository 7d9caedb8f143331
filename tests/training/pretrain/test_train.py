"""The pre-training loop: learning, artifacts, checkpoints, resume, config, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from support.json_helpers import strict_loads
from support.train_helpers import TINY_MODEL, random_pairs, tiny_train_config

from model import SCJEPA
from training.cli import main
from training.errors import UserError
from training.pretrain import loop
from training.pretrain import train as train_module
from training.pretrain.checkpoint import load_checkpoint, load_model
from training.pretrain.config import TrainConfig, load_config
from training.pretrain.ema import make_target
from training.pretrain.losses import scjepa_loss
from training.pretrain.train import make_optimizer, pretrain, train_step

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _threads() -> None:
    torch.set_num_threads(1)


def test_a_few_steps_on_synthetic_data_lower_the_loss() -> None:
    from training.data import load_dataset, pretrain_pairs

    pairs = pretrain_pairs(load_dataset("synthetic", seed=0))
    cfg = tiny_train_config(optim={"lr": 2e-3})
    torch.manual_seed(0)
    model = SCJEPA(cfg.model)
    target, opt = make_target(model), make_optimizer(model, cfg)
    batch = torch.from_numpy(pairs.train[:64])

    def loss() -> float:
        model.eval()
        with torch.no_grad():
            t = scjepa_loss(
                model(batch[:, 0]), target(batch[:, 1]), batch[:, 0], cfg.loss, 0.3
            )
        model.train()
        return t["loss"].item()

    first = loss()
    amp = torch.autocast("cpu", enabled=False)
    for _ in range(25):
        train_step(model, target, opt, batch, cfg, 0.3, amp)
    assert loss() < 0.8 * first


def test_pretrain_writes_artifacts_and_round_trips(tmp_path: Path) -> None:
    cfg = tiny_train_config()
    row = pretrain(cfg, random_pairs(), tmp_path)
    for name in (
        "config.yaml",
        "metrics.jsonl",
        "last.pt",
        "best.pt",
        "curves.png",
        "usage.png",
    ):
        assert (tmp_path / name).is_file(), name
    rows = [
        json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["epoch"] for r in rows] == [1, 2] and rows[-1] == json.loads(
        json.dumps(row)
    )
    for key in ("train_loss", "val_loss", "train_kl_fine", "train_mse_fine", "val_kl_coarse",
                "train_commit", "train_quant", "train_ent_sample", "train_ent_batch",
                "train_rec", "train_lambda_r", "perplexity", "active_codes", "max_prob",
                "pc1_var", "pc5_var", "pc10_var", "z_spread", "h_pc1_var", "usage"):  # fmt: skip
        assert key in rows[-1], key
    assert sum(rows[-1]["usage"]) == 40 * 5  # val pairs x patches
    assert 0 < rows[-1]["h_pc1_var"] <= 1
    assert rows[0]["train_lambda_r"] > rows[1]["train_lambda_r"]  # annealed by step
    assert rows[1]["step"] == 2 * 5  # 160 pairs / batch 32
    # the resolved config is the run's config
    assert load_config(tmp_path / "config.yaml") == cfg
    # the checkpoint rebuilds the model from its own config
    ckpt = load_checkpoint(tmp_path / "last.pt")
    model = load_model(tmp_path / "last.pt")
    assert model.config == cfg.model and ckpt["epoch"] == 2
    assert ckpt["corpus"] == {}  # random pairs: no data set's entities
    x = torch.randn(3, 100, 2)
    fresh = SCJEPA(cfg.model).eval()
    fresh.load_state_dict(ckpt["model"])
    torch.testing.assert_close(model.code_probs(x), fresh.code_probs(x), rtol=0, atol=0)
    assert not torch.allclose(
        SCJEPA(cfg.model).eval().code_probs(x), model.code_probs(x)
    )


def test_a_new_run_in_an_old_directory_starts_fresh(tmp_path: Path) -> None:
    pretrain(tiny_train_config(), random_pairs(), tmp_path)
    pretrain(
        tiny_train_config(optim={"epochs": 1}), random_pairs(), tmp_path, overwrite=True
    )
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 1
    assert load_checkpoint(tmp_path / "last.pt")["epoch"] == 1


def test_resume_continues_identically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tiny_train_config(optim={"epochs": 3}, model={"dropout": 0.3})
    pairs = random_pairs()
    pretrain(cfg, pairs, tmp_path / "straight")

    def crash(out: Path) -> None:  # killed right after epoch 1's checkpoint
        raise KeyboardInterrupt

    monkeypatch.setattr(loop, "_plots", crash)
    with pytest.raises(KeyboardInterrupt):
        pretrain(cfg, pairs, tmp_path / "resumed")
    assert load_checkpoint(tmp_path / "resumed" / "last.pt")["epoch"] == 1
    monkeypatch.undo()
    torch.manual_seed(123)  # resume must not depend on the caller's RNG state
    pretrain(cfg, pairs, tmp_path / "resumed", resume=True)
    a = load_checkpoint(tmp_path / "straight" / "last.pt")
    b = load_checkpoint(tmp_path / "resumed" / "last.pt")
    assert a["step"] == b["step"] == 15 and a["epoch"] == b["epoch"] == 3
    for part in ("model", "target"):
        for k, v in a[part].items():
            assert torch.equal(v, b[part][k]), f"{part}.{k}"
    rows = (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["epoch"] for r in rows] == [1, 2, 3]


def test_model_selection_waits_for_select_from_and_early_stops(tmp_path: Path) -> None:
    cfg = tiny_train_config(
        optim={"epochs": 6, "select_from": 3, "patience": 1, "lr": 0.0}
    )
    pretrain(cfg, random_pairs(), tmp_path)
    # strict JSON lines: no epoch selected yet is a null best (it was Infinity)
    rows = [
        strict_loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["improved"] for r in rows][:3] == [False, False, True]
    assert [r["best"] for r in rows][:2] == [None, None]
    # lr 0: the val loss cannot improve after epoch 3, so patience 1 stops at epoch 4
    assert len(rows) == 4
    assert load_checkpoint(tmp_path / "best.pt")["epoch"] == 3
    # the run says that early stopping ended it and which epoch best.pt holds
    msg = train_module.stop_message(tmp_path, cfg)
    assert msg.startswith("early stopping: no better validation loss for 1 epochs")
    assert "stopped at epoch 4 of 6; kept epoch 3 in best.pt" in msg
    # ... and when it ran out of epochs, or never selected a model
    cfg.optim.patience = 10
    assert train_module.stop_message(tmp_path, cfg).startswith(
        "ran 4 of 6 epochs; kept epoch 3"
    )
    cfg.optim.select_from = 9
    (tmp_path / "metrics.jsonl").write_text(
        "\n".join(json.dumps(r | {"improved": False}) for r in rows) + "\n"
    )
    assert "no best.pt: model selection starts at epoch 9" in train_module.stop_message(
        tmp_path, cfg
    )


def test_code_usage_reports_the_top5_share() -> None:
    """Argmax usage beside perplexity: soft assignments can look spread (high
    perplexity) while the hard codes pile onto a few."""
    from model.codebook import usage_stats

    k = 16
    p = torch.full((100, k), 0.9 / (k - 1))
    p[:, 0] = 0.1  # every token's argmax... is some other code
    p[torch.arange(100), 1 + torch.arange(100) % 2] = 0.2  # codes 1 and 2 only
    p = p / p.sum(-1, keepdim=True)
    st = usage_stats(p)
    assert st["top5_share"] == 1.0 and st["active_codes"] == 2
    assert st["perplexity"] > 10  # while the mean distribution looks well spread
    uniform = torch.eye(k).repeat(10, 1)  # each code argmax for 10 tokens
    assert usage_stats(uniform)["top5_share"] == pytest.approx(5 / 16)


@pytest.mark.parametrize(
    "switch", ["loss.kl=false", "loss.rec=false", "loss.pred=false", "loss.code=false",
               "model.use_codebook=false", "model.use_coarse=false"],
)  # fmt: skip
def test_every_ablation_trains_end_to_end(tmp_path: Path, switch: str) -> None:
    section, _, rest = switch.partition(".")
    key, _, _ = rest.partition("=")
    cfg = tiny_train_config(
        optim={"epochs": 1, "max_steps": 2}, **{section: {key: False}}
    )
    row = pretrain(cfg, random_pairs(), tmp_path)
    assert row["step"] == 2 and all(
        v == v for v in row.values() if isinstance(v, float)
    )
    zero = {
        "loss.kl": ["train_kl_fine", "train_kl_coarse"],
        "loss.rec": ["train_rec"],
        "loss.pred": ["train_pred"],
        "loss.code": ["train_code", "train_commit"],
        "model.use_codebook": ["train_kl_fine", "train_code"],
        "model.use_coarse": ["train_kl_coarse", "train_mse_coarse"],
    }[f"{section}.{key}"]
    assert all(row[k] == 0 for k in zero), {k: row[k] for k in zero}
    assert row["train_loss"] > 0


def test_stats_token_trains_end_to_end_and_reloads(tmp_path: Path) -> None:
    cfg = tiny_train_config(
        optim={"epochs": 1, "max_steps": 2}, model={"stats_token": True}
    )
    row = pretrain(cfg, random_pairs(), tmp_path)
    assert row["step"] == 2 and row["train_kl_fine"] > 0
    assert all(v == v for v in row.values() if isinstance(v, float))
    model = load_model(tmp_path / "last.pt")  # the switch travels with the checkpoint
    assert model.cfg.stats_token
    x = torch.randn(2, 100, 3)
    assert model.code_probs(x).shape[2] == model.cfg.n_patches + 1


def test_paper_preset_holds_every_default_and_fast_is_small() -> None:
    assert load_config(REPO / "configs" / "paper.yaml") == TrainConfig()
    fast = load_config(REPO / "configs" / "fast.yaml")
    assert fast.model.d_model < 256 and fast.optim.select_from == 1
    assert fast.loss == TrainConfig().loss  # same objective


def test_overrides_and_bad_keys(tmp_path: Path) -> None:
    cfg = load_config(None, ["optim.lr=1e-3", "loss.kl=false", "model.d_model=32"])
    assert cfg.optim.lr == 1e-3 and cfg.loss.kl is False and cfg.model.d_model == 32
    with pytest.raises(UserError, match="unknown key"):
        load_config(None, ["optim.learning_rate=1"])
    with pytest.raises(UserError, match=r"section\.key=value"):
        load_config(None, ["lr=1"])
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"optimizer": {"lr": 1}}))
    with pytest.raises(UserError, match="unknown section"):
        load_config(bad)


def test_cli_pretrain_on_synthetic(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    args = [
        "pretrain",
        "--dataset",
        "synthetic",
        "--config",
        str(REPO / "configs/fast.yaml"),
    ]
    args += [
        "--out",
        str(tmp_path),
        "--set",
        "optim.epochs=1",
        "--set",
        "optim.max_steps=3",
    ]
    args += ["--set", "run.progress=false", "--set", "run.threads=1"]
    args += [f"--set=model.{k}={v}" for k, v in {"d_model": 16, "n_layers": 1}.items()]
    assert main(args) == 0
    assert load_model(tmp_path / "best.pt").config.d_model == 16
    assert main([*args[:-2], "--set", "optim.nope=1"]) == 2
    assert "unknown key" in capsys.readouterr().err
    assert main(["pretrain", "--dataset", "synthetic", "--out", str(tmp_path / "x"),
                 "--config", str(REPO / "configs/fast.yaml"), "--resume"]) == 2  # fmt: skip


def test_cross_domain_pools_datasets_channel_independently() -> None:
    from training.pretrain.train import load_pairs

    cfg = tiny_train_config()
    one = load_pairs(["synthetic"], None, cfg)
    two = load_pairs(["synthetic", "synthetic"], None, cfg)
    assert two.train.shape == (2 * len(one.train), 2, 100)
    assert two.val.shape == (2 * len(one.val), 2, 100)
    assert two.corpus == one.corpus == {"synthetic": one.corpus["synthetic"]}


def test_bench_train_reports_throughput_and_memory(tmp_path: Path) -> None:
    cfg = {"model": dict(TINY_MODEL), "optim": {"batch_size": 16}}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(cfg))
    out = tmp_path / "bench.json"
    args = [
        "bench",
        "train",
        "--config",
        str(tmp_path / "tiny.yaml"),
        "--device",
        "cpu",
    ]
    assert (
        main(
            [
                *args,
                "--threads",
                "1",
                "--steps",
                "3",
                "--warmup",
                "1",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    (r,) = json.loads(out.read_text())
    assert r["batch_size"] == 16 and r["pairs_per_s"] > 0 and r["peak_rss_mb"] > 50
    assert r["step_ms"] == pytest.approx(1000 * 16 / r["pairs_per_s"], rel=0.01)


@pytest.mark.parametrize(
    "switch", [None, "model.stats_token=true", "model.use_coarse=false",
               "model.use_codebook=false", "loss.rec=false"],
)  # fmt: skip
def test_a_training_step_keeps_every_tensor_on_the_model_device(
    switch: str | None,
) -> None:
    """On a GPU, pre-training failed at its first step: the target's attention mask
    and the logged lambda_r were made on the CPU (H100 and H200, 2026-11-27). A step on
    the meta device stands in for the GPU: any tensor made on the CPU shows up."""
    sections: dict[str, dict[str, bool]] = {}
    if switch:
        section, _, rest = switch.partition(".")
        key, _, value = rest.partition("=")
        sections = {section: {key: value == "true"}}
    cfg = tiny_train_config(**sections)
    model = SCJEPA(cfg.model).to("meta")
    target = make_target(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)  # fused Adam has no meta kernels
    batch = torch.randn(8, 2, cfg.model.seq_len, device="meta")
    amp = torch.autocast("cpu", enabled=False)
    terms = train_step(model, target, opt, batch, cfg, 0.5, amp)
    assert {k: v.device.type for k, v in terms.items()} == dict.fromkeys(terms, "meta")
    torch.stack([v.detach().float() for v in terms.values()])  # as the loop logs them


@pytest.mark.requires_cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_pretraining_on_cuda(tmp_path: Path) -> None:
    """On a GPU host: two steps and a validation pass on CUDA, the checkpoint reloads
    on the CPU."""
    cfg = tiny_train_config(optim={"epochs": 1, "max_steps": 2}, run={"device": "cuda"})
    row = pretrain(cfg, random_pairs(), tmp_path)
    assert row["step"] == 2 and row["val_loss"] == row["val_loss"]
    assert load_model(tmp_path / "last.pt").cfg == cfg.model
