"""SC-JEPA fine-tuned with the probe (training/evaluate/finetune.py): the encoder learns
a label that only the window's shape carries, the model it starts from is left as it
was, and the net it returns is the one at its best stopping-split loss."""

import numpy as np
import pytest
import torch
from support.train_helpers import TINY_MODEL

from model import SCJEPA
from model.config import ModelConfig
from training.evaluate.finetune import TuneConfig, features, fine_tune, logits
from training.evaluate.metrics import roc_auc

T, V = 100, 2


def shapes(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Windows whose label is the period of a sine on channel 0 (5 or 25 steps), at a
    random level, scale and phase: RevIN removes level and scale, so only the
    encoder, not the statistics, can tell the classes apart."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    t = np.arange(T)
    period = np.where(y == 1, 5.0, 25.0)[:, None]
    phase = rng.uniform(0, 2 * np.pi, (n, 1))
    x = rng.normal(0, 0.3, (n, T, V))
    x[:, :, 0] += np.sin(2 * np.pi * t / period + phase)
    x = x * rng.uniform(0.5, 2, (n, 1, V)) + rng.normal(0, 3, (n, 1, V))
    return x.astype(np.float32), y.astype(np.float32)


@pytest.fixture(scope="module")
def tuned():
    torch.manual_seed(0)
    model = SCJEPA(ModelConfig(**TINY_MODEL))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = shapes(384, 0)
    xv, yv = shapes(128, 1)
    s, sv = np.zeros((len(x), 0), np.float32), np.zeros((len(xv), 0), np.float32)
    # the tiny model needs a larger step than the served size's recipe to learn in a
    # few epochs, and room to leave the plateau it starts on (at 15 epochs, patience
    # 5, it stayed there in one thread after RevIN moved to float64: rounding alone)
    cfg = TuneConfig(epochs=40, patience=10, lr_model=1e-2, lr_head=1e-2)
    net, epochs, best = fine_tune(model, x, s, y, (xv, sv, yv), seed=0, cfg=cfg)
    return model, before, net, epochs, best, (xv, sv, yv), cfg


def test_the_encoder_learns_what_only_the_shape_carries(tuned):
    _, _, net, _, _, (xv, sv, yv), _ = tuned
    assert roc_auc(yv, logits(net, xv, sv)) > 0.9


def test_the_starting_model_is_left_as_it_was_and_the_copy_is_trained(tuned):
    model, before, net, *_ = tuned
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    tuned_encoder = {
        k: v for k, v in net.model.state_dict().items() if k.startswith("encoder")
    }
    assert tuned_encoder
    assert any(not torch.equal(v, before[k]) for k, v in tuned_encoder.items())


def test_the_net_returned_is_the_best_epochs(tuned):
    _, _, net, epochs, best, (xv, sv, yv), cfg = tuned
    assert 1 <= epochs <= cfg.epochs
    _, y = shapes(384, 0)  # the loss is class-weighted by the fit windows' ratio
    loss = torch.nn.functional.binary_cross_entropy_with_logits(
        torch.from_numpy(logits(net, xv, sv)),
        torch.from_numpy(yv),
        pos_weight=torch.tensor(float((1 - y).sum() / y.sum())),
    )
    assert float(loss) == pytest.approx(best, rel=1e-5)


def test_features_are_the_code_probabilities_beside_the_statistics():
    torch.manual_seed(0)
    model = SCJEPA(ModelConfig(**TINY_MODEL))
    x, y = shapes(64, 2)
    s = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    cfg = TuneConfig(epochs=1)
    a, *_ = fine_tune(model, x, s, y, (x, s, y), seed=3, cfg=cfg)
    b, *_ = fine_tune(model, x, s, y, (x, s, y), seed=3, cfg=cfg)
    f = features(a, x, s)
    width = model.cfg.n_tokens * model.cfg.n_codes
    assert f.shape == (64, width + 3)
    np.testing.assert_array_equal(f[:, width:], s)  # the statistics pass as given
    p = f[:, :width].reshape(64, model.cfg.n_tokens, model.cfg.n_codes)
    # each channel's probabilities sum to 1; their maximum over channels to 1 or more
    assert np.all((p >= 0) & (p <= 1)) and np.all(p.sum(-1) >= 1 - 1e-5)
    np.testing.assert_array_equal(f, features(b, x, s))  # the same seed, the same net


def test_a_model_without_a_codebook_is_refused():
    model = SCJEPA(ModelConfig(**(TINY_MODEL | {"use_codebook": False})))
    x, y = shapes(8, 0)
    s = np.zeros((8, 0), np.float32)
    with pytest.raises(ValueError, match="codebook"):
        fine_tune(model, x, s, y, (x, s, y), seed=0)
