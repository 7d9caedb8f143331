"""The downstream probe: an MLP on frozen features, BCE, calibrated on validation.

method.md: frozen online encoder + codebook -> p (V, P, K) -> variable-wise max over V
-> flatten -> MLP -> s_hat = P(y_{t+1} = 1). The same probe runs on raw window features
for the baseline rows. Early stopping and calibration use the validation split only.
Beyond the spec, ``kind="trees"``: gradient-boosted trees on the same features, by
default all 200 stages and no class weights (``tree_select_on``,
``tree_class_weight``), the same Platt calibration on validation (model/trees.py runs
them as tensor ops, in evaluation and in the graph).

:class:`SavedProbe` is the probe `scjepa evaluate` hands to `scjepa export` (probe.pt).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import numpy as np

from training.errors import UserError
from training.evaluate.metrics import roc_auc

if TYPE_CHECKING:  # torch is imported where it runs: `scjepa ... --help` stays light
    import torch
    from torch import nn


@dataclass
class ProbeConfig:
    hidden: int = 256
    dropout: float = 0.1
    lr: float = 1e-3
    weight_decay: float = 1e-4
    max_epochs: int = 300
    patience: int = 30  # epochs without a better validation score
    select_on: str = "val_loss"  # or "val_auc"
    class_weight: bool = True  # BCE pos_weight = n_neg / n_pos on the train split
    calibration: str = "platt"  # "platt" | "none"
    kind: str = "mlp"  # "mlp" (the spec's) | "trees" (gradient boosting)
    max_trees: int = 200  # trees: boosting stages
    tree_lr: float = 0.05  # trees: shrinkage
    max_leaves: int = 15  # trees: leaves per tree
    max_features: float = 1.0  # trees: share drawn per split (< 1: seeds differ)
    # trees: how many stages to keep ("none": all max_trees, validation only
    # calibrates; or "val_loss" / "val_auc" as the MLP's select_on) and whether to
    # weight the classes. Out of fold, stopping and class weights both cost the trees
    # ranking (results-notes.md, 2026-11-27, fourth session)
    tree_select_on: str = "none"
    tree_class_weight: bool = False


PROBE_KINDS = ("mlp", "trees")
# a saved probe may also be the label-free head (model/rarity.py, `scjepa calibrate`)
SAVED_KINDS = (*PROBE_KINDS, "rarity")


def build_probe_net(n_features: int, hidden: int, dropout: float) -> nn.Sequential:
    """The probe's MLP; export rebuilds the same module from a saved state dict."""
    from torch import nn

    return nn.Sequential(
        nn.Linear(n_features, hidden),
        nn.GELU(),
        nn.Dropout(dropout),
        nn.Linear(hidden, 1),
    )


class Calibration(TypedDict):
    """How logits become risks: ``{"method": "platt", "a": .., "b": ..}`` (sigmoid(a *
    logit + b)) or ``{"method": "none"}`` (sigmoid(logit))."""

    method: str
    a: NotRequired[float]
    b: NotRequired[float]


class ProbeState(TypedDict):
    """A fitted probe's record: results.json rows ("probe") and probe.pt ("probe")."""

    config: dict[str, Any]  # ProbeConfig as a dict
    seed: int
    best_epoch: int
    calibration: Calibration


def sigmoid(z: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-z)) without exp's overflow warning for large negative z (SciPy
    comes with scikit-learn)."""
    from scipy.special import expit

    return np.asarray(expit(z))


class Platt:
    """sigmoid(a * logit + b), fitted by maximum likelihood on validation logits."""

    def __init__(self) -> None:
        self.a, self.b = 1.0, 0.0

    def fit(self, logits: np.ndarray, y: np.ndarray) -> Platt:
        import torch
        from torch import nn

        z = torch.tensor(logits, dtype=torch.float64)
        t = torch.tensor(y, dtype=torch.float64)
        ab = torch.tensor([1.0, 0.0], dtype=torch.float64, requires_grad=True)
        opt = torch.optim.LBFGS([ab], max_iter=200, line_search_fn="strong_wolfe")

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = nn.functional.binary_cross_entropy_with_logits(ab[0] * z + ab[1], t)
            loss.backward()
            return loss

        opt.step(closure)
        self.a, self.b = (float(v) for v in ab.detach())
        return self

    def __call__(self, logits: np.ndarray) -> np.ndarray:
        return sigmoid(self.a * logits + self.b)


# Feature values this close are one value computed twice: the encoder's float32
# outputs for one window differ by up to 4e-4 relative between PyTorch batches and
# onnxruntime (MSL's and SMD-19's code probabilities, 2026-11-29).
SAME_RTOL, SAME_ATOL = 1e-3, 1e-6


class _Gaps:
    """One feature's training values, grouped where they are one value up to float
    noise; :meth:`split` moves a threshold into the middle of a gap between groups."""

    def __init__(self, col: np.ndarray) -> None:
        u, n = np.unique(col[~np.isnan(col)].astype(np.float64), return_counts=True)
        new = np.diff(u) > SAME_RTOL * np.abs(u[1:]) + SAME_ATOL
        self.u, self.n = u, n
        self.group = np.concatenate([[0], np.cumsum(new)])  # group id of each value

    def split(self, t: float) -> float:
        u, g = self.u, self.group
        i = int(np.searchsorted(u, t, side="right"))  # u[i - 1] <= t < u[i]
        if i == 0 or i == len(u):
            return t  # no training value on one side: nothing to move between
        if g[i - 1] == g[i]:  # inside a group: send all of it the majority's way
            members = g == g[i]
            left = int(self.n[members & (np.arange(len(u)) < i)].sum())
            if 2 * left >= int(self.n[members].sum()):
                i = int(np.flatnonzero(members)[-1]) + 1  # the group goes left
            else:
                i = int(np.flatnonzero(members)[0])  # the group goes right
            if i == len(u):
                return np.inf
            if i == 0:
                return -np.inf
        return (u[i - 1] + u[i]) / 2


class Splits:
    """Where the served trees split, given the features they were fitted on
    (``x_train``): each scikit-learn threshold moved to the middle of the gap between
    the training values on either side of it (see :func:`trees_state`). One
    :class:`_Gaps` per feature, built when first asked for."""

    def __init__(self, x_train: np.ndarray) -> None:
        self.x_train = x_train
        self._gaps: dict[int, _Gaps] = {}

    def threshold(self, feature: int, t: float) -> np.float32:
        if feature not in self._gaps:
            self._gaps[feature] = _Gaps(self.x_train[:, feature])
        t = self._gaps[feature].split(t)
        # scikit-learn compares features as float64 with float64 thresholds; for
        # float32 features the largest float32 <= the threshold splits the same
        th = np.float32(t)
        return np.nextafter(th, np.float32(-np.inf)) if th > t else th


def trees_state(clf: Any, n_trees: int, splits: Splits) -> dict[str, torch.Tensor]:
    """A fitted scikit-learn HistGradientBoostingClassifier's first ``n_trees``
    stages as model/trees.py's TreeEnsemble state. Reads its tree predictors
    (``_predictors``, ``_baseline_prediction``: not public API; the parity tests of
    tests/training/evaluate/test_trees.py fail if a release changes them).

    Each split moves to the midpoint of the gap between the training values
    (``splits``, built on the features the trees were fitted on) on either side of
    it. scikit-learn's own threshold can equal a training value (a percentile among
    repeated values, common in discrete sensors), or fall between two values that
    are one value computed twice with float noise (:data:`SAME_RTOL`): windows there
    would change sides with the last digits, which differ between the evaluation's
    PyTorch and the served onnxruntime. A split inside such a group sends the whole
    group the way most of its training rows went. Every other training value goes
    where scikit-learn sends it, and a value must be half a gap away to change sides.
    """
    import torch

    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("f", "t", "l", "r", "v")}
    roots, offset, depth = [], 0, 0
    for (tree,) in clf._predictors[:n_trees]:
        nodes = tree.nodes
        leaf = nodes["is_leaf"].astype(bool)
        ids = np.arange(len(nodes)) + offset
        th = np.array(
            [
                0.0 if is_leaf else splits.threshold(int(f), float(t))
                for is_leaf, f, t in zip(
                    leaf, nodes["feature_idx"], nodes["num_threshold"], strict=True
                )
            ],
            dtype=np.float32,
        )
        parts["f"].append(np.where(leaf, 0, nodes["feature_idx"]))
        parts["t"].append(th)
        parts["l"].append(np.where(leaf, ids, nodes["left"] + offset))
        parts["r"].append(np.where(leaf, ids, nodes["right"] + offset))
        parts["v"].append(np.where(leaf, nodes["value"], 0.0))  # shrinkage included
        roots.append(offset)
        depth, offset = max(depth, int(nodes["depth"].max())), offset + len(nodes)
    cat = {k: np.concatenate(v) for k, v in parts.items()}
    return {
        "feature": torch.from_numpy(cat["f"].astype(np.int64)),
        "threshold": torch.from_numpy(cat["t"]),
        "left": torch.from_numpy(cat["l"].astype(np.int64)),
        "right": torch.from_numpy(cat["r"].astype(np.int64)),
        "value": torch.from_numpy(cat["v"].astype(np.float32)),
        "roots": torch.tensor(roots, dtype=torch.long),
        "depth": torch.tensor(depth, dtype=torch.long),
        "bias": torch.tensor(float(clf._baseline_prediction.ravel()[0])),
    }


class Probe:
    """MLP (or, with ``kind="trees"``, boosted-trees) probe on precomputed features
    (N, F) float32."""

    def __init__(self, n_features: int, cfg: ProbeConfig, seed: int) -> None:
        import torch

        if cfg.kind not in PROBE_KINDS:
            raise UserError(f"probe kind {cfg.kind!r}: one of {', '.join(PROBE_KINDS)}")
        if cfg.tree_select_on not in ("none", "val_loss", "val_auc"):
            raise UserError(
                f"tree_select_on {cfg.tree_select_on!r}: none, val_loss or val_auc"
            )
        self.cfg, self.seed, self.n_features = cfg, seed, n_features
        torch.manual_seed(seed)
        self.net: nn.Module  # the trees' module is built by fit
        if cfg.kind == "mlp":
            self.net = build_probe_net(n_features, cfg.hidden, cfg.dropout)
        self.calibrator: Platt | None = None
        self.history: list[dict[str, float]] = []

    def logits(self, f: np.ndarray) -> np.ndarray:
        import torch

        self.net.eval()
        with torch.no_grad():
            return self.net(torch.from_numpy(f)).squeeze(1).numpy().astype(np.float64)

    def fit(
        self, f_tr: np.ndarray, y_tr: np.ndarray, f_va: np.ndarray, y_va: np.ndarray
    ) -> Probe:
        """Fit on train, stop and calibrate on validation."""
        cfg = self.cfg
        n_pos = max(float(y_tr.sum()), 1.0)
        ratio = (len(y_tr) - n_pos) / n_pos  # the class weight n_neg / n_pos
        if cfg.kind == "trees":
            w = float(np.float32(ratio if cfg.tree_class_weight else 1.0))
            self._fit_trees(f_tr, y_tr, f_va, y_va, w)
        else:
            self._fit_mlp(f_tr, y_tr, f_va, y_va, ratio if cfg.class_weight else 1.0)
        if cfg.calibration == "platt":
            self.calibrator = Platt().fit(self.logits(f_va), y_va)
        return self

    def _fit_mlp(
        self,
        f_tr: np.ndarray,
        y_tr: np.ndarray,
        f_va: np.ndarray,
        y_va: np.ndarray,
        weight: float,
    ) -> None:
        import torch
        from torch import nn

        cfg = self.cfg
        x, t = torch.from_numpy(f_tr), torch.from_numpy(y_tr.astype(np.float32))
        pos_weight = torch.tensor(weight)
        opt = torch.optim.AdamW(
            self.net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay
        )
        best, best_state, waited = -np.inf, copy.deepcopy(self.net.state_dict()), 0
        for epoch in range(cfg.max_epochs):
            self.net.train()  # full batch: a few hundred windows
            loss = nn.functional.binary_cross_entropy_with_logits(
                self.net(x).squeeze(1), t, pos_weight=pos_weight
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            z_va = self.logits(f_va)
            va_loss = float(
                nn.functional.binary_cross_entropy_with_logits(
                    torch.from_numpy(z_va),
                    torch.from_numpy(y_va.astype(np.float64)),
                    pos_weight=pos_weight.double(),
                )
            )
            score = -va_loss if cfg.select_on == "val_loss" else roc_auc(y_va, z_va)
            self.history.append(
                {"epoch": epoch, "train_loss": loss.item(), "val_loss": va_loss}
            )
            if score > best:
                best, best_state, waited = (
                    score,
                    copy.deepcopy(self.net.state_dict()),
                    0,
                )
                self.best_epoch = epoch
            elif (waited := waited + 1) >= cfg.patience:
                break
        self.net.load_state_dict(best_state)

    def _fit_trees(
        self,
        f_tr: np.ndarray,
        y_tr: np.ndarray,
        f_va: np.ndarray,
        y_va: np.ndarray,
        pos_weight: float,
    ) -> None:
        import torch
        from sklearn.ensemble import HistGradientBoostingClassifier

        from model.trees import TreeEnsemble

        cfg = self.cfg
        clf = HistGradientBoostingClassifier(
            max_iter=cfg.max_trees,
            learning_rate=cfg.tree_lr,
            max_leaf_nodes=cfg.max_leaves,
            max_features=cfg.max_features,
            early_stopping=False,  # tree_select_on, below
            random_state=self.seed,
        )
        # no sample_weight when every weight is 1: the same trees, but scikit-learn
        # (1.9) then bins each feature with np.percentile rather than its weighted
        # percentile, 16x faster on the 320 code features
        weight = np.where(y_tr == 1, pos_weight, 1.0) if pos_weight != 1.0 else None
        clf.fit(f_tr, y_tr, sample_weight=weight)
        # the validation scores after each stage, from the trees as served (their
        # splits at trees_state's midpoints)
        splits = Splits(f_tr)  # shared by both states below
        every = TreeEnsemble.from_state(trees_state(clf, clf.n_iter_, splits))
        with torch.no_grad():
            leaves = every.leaves(torch.from_numpy(f_va)).numpy().astype(np.float64)
        staged = float(every.bias) + np.cumsum(leaves, axis=1)  # (N, n_trees)
        best = -np.inf
        for n, z in enumerate(staged.T):
            # validation BCE (with the class weight, if the trees use one)
            loss = float(
                np.mean(
                    pos_weight * y_va * np.logaddexp(0.0, -z)
                    + (1 - y_va) * np.logaddexp(0.0, z)
                )
            )
            self.history.append({"epoch": n, "val_loss": loss})
            if cfg.tree_select_on == "none":
                score = float(n)  # every stage kept
            elif cfg.tree_select_on == "val_loss":
                score = -loss
            else:
                score = roc_auc(y_va, z)
            if score > best:
                best, self.best_epoch = score, n
        self.net = TreeEnsemble.from_state(
            trees_state(clf, self.best_epoch + 1, splits)
        )

    def predict(self, f: np.ndarray) -> np.ndarray:
        """Calibrated P(next window anomalous)."""
        z = self.logits(f)
        return self.calibrator(z) if self.calibrator else sigmoid(z)

    def state(self) -> ProbeState:
        cal: Calibration = (
            {"method": "platt", "a": self.calibrator.a, "b": self.calibrator.b}
            if self.calibrator
            else {"method": "none"}
        )
        return {
            "config": asdict(self.cfg),
            "seed": self.seed,
            "best_epoch": self.best_epoch,
            "calibration": cal,
        }


# -- the hand-off to `scjepa export` ---------------------------------------------------

# What a probe reads: its parts joined by "+", in this order ("codes": the spec's
# probe; "codes+stats"; "stats" is the raw-feature MLP; the detectors are
# model/detectors.py's scores). Parts that need the SC-JEPA model: SCJEPA_PARTS.
PARTS = ("codes", "stats", "knn", "pca", "surprise", "recon")
SCJEPA_PARTS = ("codes", "surprise", "recon")
DETECTOR_PARTS = ("knn", "pca", "surprise", "recon")
N_STATS = 18  # model/stats.py's N_STATS (not imported: it would import torch)
ProbeFeatures = str


def feature_parts(features: str) -> tuple[str, ...]:
    """ "codes+stats+knn" -> ("codes", "stats", "knn"); raises ValueError on an unknown
    part, a repeated one or one out of :data:`PARTS` order."""
    parts = tuple(features.split("+"))
    if not features or any(p not in PARTS for p in parts):
        raise ValueError(f"unknown features {features!r} (parts: {', '.join(PARTS)})")
    if list(parts) != sorted(set(parts), key=PARTS.index):
        raise ValueError(f"features {features!r}: parts repeated or out of order")
    return parts


def missing_constants(names: Sequence[str], params: Any) -> str | None:
    """What a set of detectors' saved constants (model/detectors.py, as
    DetectorScores.saved gives them) lacks for ``names``: "constants" (a key) or
    "scaling" (their z-scaling fits another number of detectors); None: nothing."""
    need = {"scale_mean", "scale_std"}
    need |= {"knn_bank", "knn_mean", "knn_std"} if "knn" in names else set()
    need |= {"pca_mean", "pca_components"} if "pca" in names else set()
    if not isinstance(params, dict) or not need <= set(params):
        return "constants"
    if len(np.asarray(params["scale_mean"])) != len(names):
        return "scaling"
    return None


def rarity_problem(state: Any) -> str | None:
    """What makes a label-free head's state (model/rarity.py) unusable, or None."""
    ranks, width = state.get("calibration"), state.get("bandwidth")
    if ranks is None or np.ndim(ranks) != 1 or not len(ranks):
        return "has no calibration scores"
    if width is None or not float(width) > 0:
        return "has no positive bandwidth"
    return None


def novelty_problem(record: Any) -> str | None:
    """What makes a probe file's ``novelty`` record unusable, or None."""
    if not isinstance(record, dict):
        return "its novelty record is not a dict"
    names = str(record.get("detectors", "")).split("+")
    if not names or not set(names) <= {"knn", "pca"}:
        return f"its novelty monitor reads {record.get('detectors')!r}, not knn/pca"
    missing = missing_constants(names, record.get("params") or {})
    if missing == "constants":
        return "its novelty monitor lacks its detectors' constants"
    if missing == "scaling":
        return f"its novelty monitor's scaling does not fit {len(names)} detectors"
    head = rarity_problem(record.get("rarity") or {})
    if head is not None:
        return f"its novelty monitor {head}"
    if not 0.0 < float(record.get("level", 0.0)) < 1.0:
        return "its novelty level is not between 0 and 1"
    if not 0.0 <= float(record.get("expected_share", -1.0)) <= 1.0:
        return "its novelty expected_share is not a share"
    for key in ("reference_windows", "calibration_windows"):
        if not int(record.get(key, 0)) >= 1:
            return f"its novelty {key} is not a positive count"
    return None


PROBE_FORMAT = 1  # probe.pt's layout; files without "format_version" have this one
# keys every probe.pt has had; the others have defaults (older files lack them)
_REQUIRED = (
    "state_dict",
    "n_features",
    "probe",
    "threshold",
    "dataset",
    "channels",
    "mask",
    "metrics",
)


@dataclass(kw_only=True)
class SavedProbe:
    """The probe `scjepa export` serves: one fitted probe (the seed with the best
    validation PR AUC), its threshold, and what the artifact records about it.

    probe.pt holds these fields as a plain dict (``torch.save``), plus
    ``format_version``; :meth:`load` validates a file and reads the older dicts too.
    """

    state_dict: dict[str, torch.Tensor]  # the MLP of build_probe_net, or the trees
    n_features: int  # P * K code features (+ N_STATS with "codes+stats")
    probe: ProbeState  # config (hidden, dropout, ...), seed, best epoch, calibration
    threshold: float  # on the calibrated risk, chosen on validation
    dataset: str
    channels: list[str]  # every input channel, in the data set's order
    mask: list[bool]  # train-only zero-variance mask over ``channels`` (True = kept)
    metrics: dict[str, Any]  # "val", "test" (this seed), "test_mean_over_seeds"
    checkpoint: str | None = None  # the pre-training checkpoint the features came from
    checkpoint_sha256: str | None = None  # its content (None in older files)
    data_fingerprint: str = "unknown"  # training.data.Dataset.fingerprint()
    # what the probe reads (:func:`feature_parts`): "codes" is the spec's probe; with
    # "stats" the pooled window statistics z-scored with ``stats_scale``
    # (model/stats.py computes them in the graph); detector parts read ``detectors``
    features: ProbeFeatures = "codes"
    # the SC-JEPA weights the probe reads, where they are not the checkpoint's: the
    # fine-tuned candidate's (training/evaluate/finetune.py), a state_dict of the
    # checkpoint's architecture; None: the checkpoint's model, frozen
    encoder_state: dict[str, torch.Tensor] | None = None
    stats_scale: dict[str, list[float]] | None = None  # {"mean": [...], "std": [...]}
    # model/detectors.py's constants (kNN bank, PCA basis, z-scaling), numpy arrays
    detectors: dict[str, Any] | None = None
    # the lowest threshold keeping this seed's validation false alarms within the
    # evaluation's budget (inf: none does) and that budget ("false_alarms_per_1000",
    # "lookback", "stride"); None in files older than them
    budget_threshold: float | None = None
    budget: dict[str, float] | None = None
    # the same budget on the out-of-fold risks of every train + validation CV block
    # (training.evaluate.select.cv_threshold; inf: none held it); None where the
    # served model was not chosen by cross-validation, and in older files
    cv_budget_threshold: float | None = None
    # that budget as a quantile within each CV block (select.cv_quantile), carried to
    # this probe as that quantile of its validation risks (select.quantile_threshold);
    # None where cv_budget_threshold is, and in files older than it
    cv_quantile_threshold: float | None = None
    # the same three at each of the probe's operating points, one dict per budget:
    # "false_alarms_per_1000", "budget_threshold", "cv_budget_threshold",
    # "cv_quantile_threshold" (inf: none held it), and "test", the test split's
    # figures there (protocol.point_figures; in files since the fourteenth session of
    # 2026-11-28 for every candidate, before it for the served model alone, and
    # before the thirteenth "cv_*" figures of the cross-validation instead); None
    # where the served model was not chosen by cross-validation, and in files older
    # than them (2026-11-28, twelfth session)
    operating_points: list[dict[str, Any]] | None = None
    # the served graph's input-drift monitor (model/export.py NoveltyMonitor), the
    # same whatever the probe reads (training/calibrate.py novelty_record):
    # "detectors" ("knn+pca"), "params" (their constants, as ``detectors``),
    # "rarity" (model/rarity.py's state), and the manifest's "level",
    # "expected_share", "reference_windows", "calibration_windows"; None: the graph
    # has no monitor (files older than it)
    novelty: dict[str, Any] | None = None

    @property
    def parts(self) -> tuple[str, ...]:
        return feature_parts(self.features)

    @property
    def platt(self) -> tuple[float, float]:
        """(a, b) of sigmoid(a * logit + b); (1, 0) when uncalibrated."""
        cal = self.probe["calibration"]
        return (cal["a"], cal["b"]) if cal["method"] == "platt" else (1.0, 0.0)

    @property
    def kind(self) -> str:
        """The probe kind, "mlp", "trees" or "rarity" (the label-free head of `scjepa
        calibrate`; files older than the tree probe: "mlp")."""
        return str(self.probe["config"].get("kind", "mlp"))

    def build_net(self) -> nn.Module:
        """The probe (MLP, model/trees.py's TreeEnsemble or model/rarity.py's Rarity)
        with its fitted weights."""
        if self.kind == "rarity":
            from model.rarity import Rarity

            return Rarity.from_state(self.state_dict)
        if self.kind == "trees":
            from model.trees import TreeEnsemble

            return TreeEnsemble.from_state(self.state_dict)
        cfg = self.probe["config"]
        net = build_probe_net(self.n_features, cfg["hidden"], cfg["dropout"])
        net.load_state_dict(self.state_dict)
        return net

    def problem(self) -> str | None:
        """What makes this probe unusable for export, or None."""
        cfg, cal = self.probe.get("config", {}), self.probe.get("calibration", {})
        if cal.get("method") not in ("platt", "none"):
            return f"unknown calibration {cal.get('method')!r}"
        if cal["method"] == "platt" and not {"a", "b"} <= set(cal):
            return "Platt calibration without a and b"
        if self.kind not in SAVED_KINDS:
            return f"unknown probe kind {self.kind!r}"
        if self.kind == "rarity":
            head = rarity_problem(self.state_dict)
            if head is not None:
                return f"its label-free head {head}"
            if not set(self.features.split("+")) <= set(DETECTOR_PARTS):
                return (
                    f"a label-free head reads detector scores only, not {self.features}"
                )
        elif self.kind == "trees":
            from model.trees import TREE_KEYS

            if not set(TREE_KEYS) <= set(self.state_dict):
                return "its trees lack " + ", ".join(
                    k for k in TREE_KEYS if k not in self.state_dict
                )
            if int(self.state_dict["feature"].max()) >= self.n_features:
                return f"its trees read beyond {self.n_features} features"
        elif not {"hidden", "dropout"} <= set(cfg):
            return "its probe config has no hidden/dropout"
        else:
            weight = self.state_dict.get("0.weight")
            if weight is None or tuple(weight.shape) != (
                cfg["hidden"],
                self.n_features,
            ):
                return f"its weights do not fit {self.n_features} features"
        if self.encoder_state is not None and not (
            isinstance(self.encoder_state, dict)
            and all(hasattr(v, "shape") for v in self.encoder_state.values())
        ):
            return "its fine-tuned encoder weights are not a state_dict"
        if len(self.channels) != len(self.mask):
            return f"{len(self.channels)} channels but a mask of {len(self.mask)}"
        try:
            parts = feature_parts(self.features)
        except ValueError as e:
            return str(e)
        scale = self.stats_scale or {}
        if "stats" in parts and not all(
            len(scale.get(k, [])) == N_STATS for k in ("mean", "std")
        ):
            return f"{self.features} without the {N_STATS} statistics' mean and std"
        dets = [p for p in parts if p in DETECTOR_PARTS]
        missing = missing_constants(dets, self.detectors or {}) if dets else None
        if missing == "constants":
            return f"{self.features} without its detectors' constants"
        if missing == "scaling":
            return f"detector scaling does not fit {len(dets)} detectors"
        if self.novelty is not None:
            return novelty_problem(self.novelty)
        return None

    def save(self, path: Path) -> Path:
        import torch

        path.parent.mkdir(parents=True, exist_ok=True)
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        torch.save({"format_version": PROBE_FORMAT, **d}, path)
        return path

    @classmethod
    def load(cls, path: Path) -> SavedProbe:
        """Read and check probe.pt; a missing, unreadable or foreign file -> UserError."""
        if not path.is_file():
            raise UserError(
                f"{path}: probe file not found "
                "(written by `scjepa evaluate --checkpoint ...`)"
            )
        import torch

        try:
            raw = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as e:  # torch raises many types for a bad file
            raise UserError(f"{path}: not a readable probe file ({e})") from e
        if not isinstance(raw, dict):
            kind = type(raw).__name__
            raise UserError(f"{path}: not a served-probe file (a {kind}, not a dict)")
        missing = [k for k in _REQUIRED if k not in raw]
        if missing:
            raise UserError(f"{path}: not a served-probe file (no {missing[0]!r})")
        version = raw.get("format_version", PROBE_FORMAT)
        if version != PROBE_FORMAT:
            raise UserError(
                f"{path}: probe format_version {version} (this version reads "
                f"{PROBE_FORMAT})"
            )
        known = {f.name for f in fields(cls)}
        try:
            probe = cls(**{k: v for k, v in raw.items() if k in known})
            problem = probe.problem()
        except (TypeError, AttributeError, KeyError, ValueError) as e:  # wrong types
            problem = f"{type(e).__name__}: {e}"
        if problem is not None:
            raise UserError(f"{path}: corrupt probe file ({problem})")
        return probe
