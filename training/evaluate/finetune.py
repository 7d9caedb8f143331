"""SC-JEPA fine-tuned with the probe (issue 20; results-notes.md, 2026-11-29, sixteenth
and seventeenth sessions).

Every other SC-JEPA candidate reads the pre-trained model frozen. Here a copy of the
encoder and codebook is trained further, end to end, with a small MLP head on the next
window's label: the head reads the spec's probe input (code probabilities, max over the
channels, P * K), computed with gradients, beside the pooled window statistics. What the
head reads is then the input of the served trees (:meth:`Tuned.features`).

The product's candidate (:class:`TunedCandidate`, `scjepa evaluate`'s "SC-JEPA
fine-tuned + stats (trees)") is that: fine-tuned on the probe's train split, stopped on
its validation split, then the served trees fitted on the fine-tuned features of the
same split, stopped and calibrated on the same validation split; `scjepa export` serves
the fine-tuned weights (SavedProbe.encoder_state).

The recipe is the one screened out of fold: class-weighted BCE, AdamW (3e-4 for the
model, 1e-3 for the head), batches of 64, up to 20 epochs, kept at the epoch with the
lowest class-weighted loss on the stopping split (patience 3).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model import SCJEPA
from training.data import Samples
from training.evaluate.baselines import (
    FitContext,
    ProbeScorer,
    Scorer,
    WindowStatsFeatures,
)
from training.evaluate.probe import Probe, ProbeConfig
from training.evaluate.select import HeldOut, OutOfFold, cross_fit


@dataclass(frozen=True)
class TuneConfig:
    epochs: int = 20
    patience: int = 3  # epochs without a lower stopping-split loss
    batch: int = 64
    lr_model: float = 3e-4
    lr_head: float = 1e-3
    weight_decay: float = 1e-4
    hidden: int = 64
    dropout: float = 0.1


class Tuned(nn.Module):
    """Code probabilities (max over channels) + window statistics -> a logit."""

    def __init__(self, model: SCJEPA, n_stats: int, cfg: TuneConfig) -> None:
        super().__init__()
        if model.codebook is None:
            raise ValueError("fine-tuning reads code probabilities: no codebook")
        self.model = model
        width = model.cfg.n_tokens * model.cfg.n_codes + n_stats
        self.head = nn.Sequential(
            nn.Linear(width, cfg.hidden),
            nn.GELU(),
            nn.Dropout(cfg.dropout),
            nn.Linear(cfg.hidden, 1),
        )

    def features(self, x: Tensor, s: Tensor) -> Tensor:
        """What the head reads: (B, P * K + n_stats). x: (B, T, V) raw windows; s:
        (B, n_stats) their statistics, scaled."""
        p = self.model.probe_inputs(x)  # (B, V, P, K)
        return torch.cat([p.amax(1).flatten(1), s], 1)

    def forward(self, x: Tensor, s: Tensor) -> Tensor:
        return self.head(self.features(x, s)).squeeze(1)


@torch.no_grad()
def features(net: Tuned, x: np.ndarray, s: np.ndarray, batch: int = 256) -> np.ndarray:
    """:meth:`Tuned.features` of every window, in eval mode: (N, P * K + n_stats)."""
    net.eval()
    out = []
    for i in range(0, len(x), batch):
        xb = torch.from_numpy(np.ascontiguousarray(x[i : i + batch], np.float32))
        sb = torch.from_numpy(np.ascontiguousarray(s[i : i + batch], np.float32))
        out.append(net.features(xb, sb).numpy())
    return np.concatenate(out)


@torch.no_grad()
def head_logits(net: Tuned, f: np.ndarray) -> np.ndarray:
    """The head's logit of features ``f`` (:func:`features`)."""
    out: np.ndarray = net.head(torch.from_numpy(f)).squeeze(1).numpy()
    return out


def logits(net: Tuned, x: np.ndarray, s: np.ndarray) -> np.ndarray:
    """The head's logit of every window."""
    return head_logits(net, features(net, x, s))


def _loss(logit: Tensor, y: Tensor, w_pos: float) -> Tensor:
    return F.binary_cross_entropy_with_logits(logit, y, pos_weight=torch.tensor(w_pos))


def fine_tune(
    model: SCJEPA,
    x: np.ndarray,
    s: np.ndarray,
    y: np.ndarray,
    stop: tuple[np.ndarray, np.ndarray, np.ndarray],
    seed: int,
    cfg: TuneConfig = TuneConfig(),
    per_epoch: int | None = None,
) -> tuple[Tuned, int, float]:
    """A copy of ``model`` trained with a new head on windows ``x`` (N, T, V), their
    statistics ``s`` (N, n_stats) and next-window labels ``y``; stopped on ``stop`` =
    (x, s, y) of the stopping split. ``per_epoch``: windows drawn an epoch (all of
    them by default). Returns the net at its best epoch, the epochs run and its
    stopping-split loss. ``model`` is left as it was."""
    torch.manual_seed(seed)
    net = Tuned(copy.deepcopy(model), s.shape[1], cfg)
    opt = torch.optim.AdamW(
        [
            {"params": net.model.parameters(), "lr": cfg.lr_model},
            {"params": net.head.parameters(), "lr": cfg.lr_head},
        ],
        weight_decay=cfg.weight_decay,
    )
    x = np.ascontiguousarray(x, np.float32)
    s = np.ascontiguousarray(s, np.float32)
    y = np.asarray(y, np.float32)
    w_pos = float((1 - y).sum() / max(y.sum(), 1))  # the fit windows' class ratio
    x_v, s_v, y_stop = stop
    y_v = torch.from_numpy(np.asarray(y_stop, np.float32))
    n = per_epoch or len(x)
    best, bad, state, epochs = np.inf, 0, copy.deepcopy(net.state_dict()), 0
    g = torch.Generator().manual_seed(seed)
    for _ in range(cfg.epochs):
        net.train()
        order = torch.randperm(len(x), generator=g).numpy()[:n]
        for i in range(0, len(order), cfg.batch):
            b = order[i : i + cfg.batch]
            loss = _loss(
                net(torch.from_numpy(x[b]), torch.from_numpy(s[b])),
                torch.from_numpy(y[b]),
                w_pos,
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
        epochs += 1
        val = float(_loss(torch.from_numpy(logits(net, x_v, s_v)), y_v, w_pos))
        if val < best:
            best, bad, state = val, 0, copy.deepcopy(net.state_dict())
        else:
            bad += 1
            if bad >= cfg.patience:
                break
    net.load_state_dict(state)
    return net, epochs, best


class TunedScorer(ProbeScorer):
    """A fitted fine-tuned candidate: a probe reading :meth:`Tuned.features` of the
    fine-tuned net (``net.model``: the weights to serve)."""

    def __init__(self, net: Tuned, stats: WindowStatsFeatures, probe: Probe) -> None:
        self.net, self.stats = net, stats
        super().__init__(probe, self.featurize)

    def featurize(self, x: np.ndarray) -> np.ndarray:
        return features(self.net, x, self.stats(x))


def fit_scorer(
    model: SCJEPA,
    stats: WindowStatsFeatures,
    train: Samples,
    stop: Samples,
    seed: int,
    probe: ProbeConfig,
    cfg: TuneConfig = TuneConfig(),
) -> TunedScorer:
    """``model`` fine-tuned on ``train`` (stopped on ``stop``), then a probe of config
    ``probe`` fitted on its features of ``train``, stopped and calibrated on ``stop``."""
    s_tr = stats(train.x)
    s_stop = stats(stop.x)
    net, _, _ = fine_tune(
        model, train.x, s_tr, train.y, (stop.x, s_stop, stop.y), seed, cfg
    )
    f_tr, f_stop = features(net, train.x, s_tr), features(net, stop.x, s_stop)
    p = Probe(f_tr.shape[1], probe, seed).fit(f_tr, train.y, f_stop, stop.y)
    return TunedScorer(net, stats, p)


class TunedCandidate:
    """One fold's fine-tuned candidate (``model``: its pre-trained model, or the
    untrained twin for the floor): what `scjepa evaluate` fits on the probe's splits
    (:meth:`fit`), cross-fits on the served model's CV blocks (:meth:`out_of_fold`)
    and saves; it reads what "codes+stats" reads, from the fine-tuned model."""

    features = "codes+stats"
    detectors = None
    detector_names: tuple[str, ...] = ()

    def __init__(
        self,
        model: SCJEPA,
        stats: WindowStatsFeatures,
        kind: str = "trees",
        cfg: TuneConfig = TuneConfig(),
    ) -> None:
        if model.codebook is None:
            raise ValueError("fine-tuning reads code probabilities: no codebook")
        self.model, self.stats, self.kind, self.cfg = model, stats, kind, cfg
        self.n_inputs = model.cfg.n_tokens * model.cfg.n_codes + len(stats.scale.mean)

    def fit(self, ctx: FitContext, seed: int) -> Scorer:
        """Fine-tuned on ctx.train, stopped on ctx.val; the probe the same."""
        probe = replace(ctx.probe, kind=self.kind)
        return fit_scorer(
            self.model, self.stats, ctx.train, ctx.val, seed, probe, self.cfg
        )

    def out_of_fold(
        self,
        blocks: Sequence[HeldOut],
        probe: ProbeConfig,
        seeds: Sequence[int],
        jobs: int = 1,
    ) -> OutOfFold:
        """The served model's cross-validation (select.cross_fit): per held-out block
        and seed, fine-tuned and fitted on the fit blocks' windows, stopped on the
        next block."""
        probe = replace(probe, kind=self.kind)

        def fit(idx: list[int], v: int, seed: int) -> Callable[[int, str], np.ndarray]:
            train = Samples.concat([blocks[i].hop for i in idx])
            scorer = fit_scorer(
                self.model, self.stats, train, blocks[v].hop, seed, probe, self.cfg
            )
            return lambda i, kind: scorer(getattr(blocks[i], kind).x)

        return cross_fit(blocks, fit, seeds, self.n_inputs, jobs)
