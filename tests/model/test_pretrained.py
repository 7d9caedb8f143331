"""The shipped encoder (model/pretrained/): a new data set fits only the probe on it."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from training.pretrain.checkpoint import file_sha256, load_checkpoint, load_model

PRETRAINED = Path(__file__).resolve().parents[2] / "model" / "pretrained"
CARD = json.loads((PRETRAINED / "scjepa-pooled.json").read_text())


def test_the_shipped_encoder_is_the_file_its_card_describes() -> None:
    path = PRETRAINED / CARD["file"]
    assert file_sha256(path) == CARD["sha256"]
    ckpt = load_checkpoint(path)
    assert ckpt["epoch"] == CARD["epoch"]
    assert ckpt["train_config"]["loss"]["rec_scale"] == "window"
    assert "optimizer" not in ckpt  # weights and config only
    # the entities it saw: evaluate refuses it for a fold holding one out
    assert sorted(ckpt["corpus"]) == sorted(d.split("@")[0] for d in CARD["trained_on"])


def test_the_shipped_encoder_reads_any_channel_count_one_channel_at_a_time() -> None:
    model = load_model(PRETRAINED / CARD["file"])
    cfg = model.cfg
    x = torch.randn(4, cfg.seq_len, 3)
    with torch.no_grad():
        p3 = model.probe_inputs(x)  # (B, V, P, K)
        wide = torch.cat([x, 50 * torch.randn(4, cfg.seq_len, 8)], dim=2)
        p11 = model.probe_inputs(wide)
    assert p3.shape == (4, 3, cfg.seq_len // cfg.patch_len, cfg.n_codes)
    assert p11.shape[1] == 11
    assert torch.isfinite(p11).all()
    # each channel is encoded alone: added channels leave the first three's codes as they were
    torch.testing.assert_close(p11[:, :3], p3, rtol=1e-5, atol=1e-6)
    # and the codes depend on the window: two different windows, different code probabilities
    assert not torch.allclose(p3[0], p3[1])
