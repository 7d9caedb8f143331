"""What the screens share: the official train windows (the label-free detectors'
reference), the kNN and PCA baselines' scores, and the two probes every screen fits on
train and scores on validation."""

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import average_precision_score, roc_auc_score

from training.data import Dataset, Samples
from training.data.windows import cut_windows
from training.evaluate.baselines import FitContext, fit_knn, fit_pca


def official_train_windows(ds: Dataset) -> np.ndarray:
    """(N, 100, V kept) float32: every entity's official train series, hop 100."""
    return np.concatenate(
        [
            cut_windows(e.train[:, ds.mask], 100)
            for e in ds.entities
            if len(e.train) >= 100
        ]
    ).astype(np.float32)


def detector_scores(normal: np.ndarray):
    """Samples -> (N, 2): log kNN distance and log PCA error of each window, the
    baselines fitted on ``normal`` as `scjepa evaluate` fits them."""
    ctx = FitContext(None, None, normal, None)  # type: ignore[arg-type]
    knn, pca = fit_knn(ctx, 0), fit_pca(ctx, 0)

    def score(s: Samples) -> np.ndarray:
        return np.c_[np.log1p(knn(s.x)), np.log(pca(s.x) + 1e-8)]

    return score


def sklearn_probes():
    """Logistic regression and gradient-boosted trees, unfitted."""
    return (
        LogisticRegression(max_iter=3000, C=0.1),
        HistGradientBoostingClassifier(
            max_iter=200, learning_rate=0.05, max_leaf_nodes=15, random_state=0
        ),
    )


def aucs(y: np.ndarray, onset: np.ndarray, p: np.ndarray) -> str:
    """ "ROC / PR / onset AUC" of scores p; onset: the windows that are normal."""
    return (
        f"{roc_auc_score(y, p):.3f} / {average_precision_score(y, p):.3f}"
        f" / {roc_auc_score(y[onset], p[onset]):.3f}"
    )


def fit_score(xtr, ytr, xva, yva, onset) -> str:
    """Logistic regression and gradient-boosted trees fitted on (xtr, ytr), each
    scored on validation by :func:`aucs`."""
    mu, sd = xtr.mean(0), xtr.std(0) + 1e-9
    out = []
    for probe in sklearn_probes():
        p = probe.fit((xtr - mu) / sd, ytr).predict_proba((xva - mu) / sd)[:, 1]
        out.append(aucs(yva, onset, p))
    return "   ".join(out)


def cv_table(
    name: str,
    inputs: dict,
    probes: list[tuple[str, str]],
    paired: str = "first",
    fold: int = 0,
    extra: dict | None = None,
    by_entity: bool | None = None,
) -> None:
    """Out-of-fold keys of each input x probe, over the served model's cross-validation
    blocks (training/evaluate/select.py: ``fold`` (0, the served model's), K = 4; fitted on two blocks, stopped
    and calibrated on the next, scoring the held-out one; 3 seeds for the MLP, one for
    the deterministic trees), printed as a table: the warned rate at 1-10 and at 1
    false alarm per 1,000 windows and the window PR AUC as the selection rule computes
    them (cv_keys), the onset AUC and the PR AUC on the normal windows. No test window
    is read.

    ``inputs``: label -> featurizer (Samples -> features), fitted once per data set by
    the caller; ``probes``: (kind, fitted on), kind "mlp" | "trees" (the served
    recipes, training/evaluate/probe.py), fitted on "every window" (as served),
    "normal windows" (the windows that are normal themselves), "dense windows" (a
    window every ``stride`` steps, as the event counts use) or "mixture" (three
    probes: :func:`_mixture`). Each row's warned rate is
    compared with the table's first row (``paired="first"``), the row above it
    (``"previous"``) or its input's first row (``"first of its input"``), with the
    bootstrap SD of the paired difference. ``by_entity``: blocks of whole entities
    (select.cv_blocks; the default, as the data set is split). ``extra``: label -> a function of the
    blocks returning a row's OutOfFold (a model that is not a featurizer + probe,
    fitted by the caller on the same blocks, fit / stop / score). Returns the
    blocks, the out-of-fold risks and the event config, for screens that look closer."""

    from training.evaluate.metrics import pr_auc, roc_auc
    from training.evaluate.probe import Probe, ProbeConfig
    from training.evaluate.select import CVConfig, OutOfFold, cv_blocks, cv_keys

    ev = event_config(name)
    blocks = cv_blocks(name_ds(name), fold, 4, ev.stride, by_entity=by_entity)
    k, seeds = len(blocks), (0, 1, 2)
    hop_y = np.concatenate([b.hop.y for b in blocks])
    hop_on = np.concatenate([b.hop.cur == 0 for b in blocks])
    print(
        f"\n## {name}, fold {fold}: {k} blocks, {len(hop_y)} hop windows, {hop_y.sum()} positive, "
        f"{hop_y[hop_on].sum()} of them onsets (the window before normal); "
        f"look-back {ev.lookback}, a dense window every {ev.stride} steps",
        flush=True,
    )
    oof: dict[str, list[OutOfFold]] = {}
    for label, featurize in inputs.items():
        f_hop = [featurize(b.hop) for b in blocks]
        f_dense = [featurize(b.dense) for b in blocks]
        for kind, fit_on in probes:
            # what each block offers to fit on, and to stop and calibrate on (its hop
            # windows, the normal ones only when the probe fits on those)
            src = [b.dense if fit_on == "dense windows" else b.hop for b in blocks]
            f_src = f_dense if fit_on == "dense windows" else f_hop
            normal = fit_on == "normal windows"
            m_fit = [s.cur == 0 if normal else np.ones(len(s), bool) for s in src]
            m_val = [
                b.hop.cur == 0 if normal else np.ones(len(b.hop), bool) for b in blocks
            ]
            hop, dense = [], []
            for j in range(k):
                v = (j + 1) % k
                fit = [i for i in range(k) if i not in (j, v)]
                if fit_on == "mixture":
                    h, d = _mixture(kind, seeds, [f_hop[i] for i in fit],
                                    [blocks[i].hop for i in fit], f_hop[v],
                                    blocks[v].hop, f_hop[j], f_dense[j])  # fmt: skip
                    hop.append(h)
                    dense.append(d)
                    continue
                x_tr = np.concatenate([f_src[i][m_fit[i]] for i in fit])
                y_tr = np.concatenate([src[i].y[m_fit[i]] for i in fit])
                x_v, y_v = f_hop[v][m_val[v]], blocks[v].hop.y[m_val[v]]
                h, d = [], []
                for seed in seeds if kind == "mlp" else seeds[:1]:
                    p = Probe(x_tr.shape[1], ProbeConfig(kind=kind), seed)
                    p.fit(x_tr, y_tr, x_v, y_v)
                    h.append(p.predict(f_hop[j]))
                    d.append(p.predict(f_dense[j]))
                reps = len(seeds) // len(h)  # the trees are deterministic
                hop.append(np.stack(h * reps))
                dense.append(np.stack(d * reps))
            oof[f"{label}, {kind}, {fit_on}"] = [
                OutOfFold(hop, dense, f_hop[0].shape[1])
            ]
    for label, fit in (extra or {}).items():
        oof[label] = [fit(blocks)]
    keys = cv_keys([blocks], oof, ev.lookback, CVConfig(n_boot=200))
    print(
        f"{keys.cv['events']} events. | input, probe, fitted on | warned at 1-10 "
        f"(SD) | against the {paired} row (SD of the paired difference) | warned at 1 | "
        "PR AUC | onset AUC | onset PR AUC |"
    )
    names = list(oof)
    for r, (n, o) in enumerate(oof.items()):
        ref = {
            "first": names[0],
            "previous": names[max(r - 1, 0)],
            "first of its input": names[r - r % len(probes)],
        }[paired]
        h = np.concatenate(o[0].hop, axis=1)
        on_roc = np.mean([roc_auc(hop_y[hop_on], s[hop_on]) for s in h])
        on_pr = np.mean([pr_auc(hop_y[hop_on], s[hop_on]) for s in h])
        print(
            f"| {n} | {keys.warned[n]:.3f} ({np.std(keys.warned_reps[n]):.3f}) | "
            f"{keys.warned[n] - keys.warned[ref]:+.3f} "
            f"({np.std(keys.warned_reps[n] - keys.warned_reps[ref]):.3f}) | "
            f"{keys.warned_one[n]:.3f} | {keys.pr_auc[n]:.3f} | {on_roc:.3f} | "
            f"{on_pr:.3f} |",
            flush=True,
        )
    return blocks, oof, ev


def statistics(ds: Dataset, fold: int = 0):
    """Samples -> the 18 pooled window statistics, standardised on ``fold``'s normal
    windows as served (the official train split's where the data set has one)."""
    from training.evaluate.baselines import WindowStatsFeatures
    from training.evaluate.protocol import normal_windows

    stats = WindowStatsFeatures(normal_windows(ds, 100, fold if ds.folds else None))
    return lambda s: stats(s.x)


def statistics_screen(args: list[str], rows, after=None) -> None:
    """The screens that set rows of their own against the served statistics trees:
    ``args`` are data set names and an optional ``--folds 1,2,3`` (default fold 0);
    ``rows(ds, feats, fold)`` gives each fold's extra rows (label -> :func:`held_out`'s
    row) from the data set, its statistics featurizer and the fold. Prints
    :func:`cv_table`'s table per data set and fold, each row paired with the served
    trees; then ``after(name, blocks, oof, ev)``, given, looks closer at them."""
    args = list(args)
    folds = [0]
    if "--folds" in args:
        i = args.index("--folds")
        folds = [int(f) for f in args.pop(i + 1).split(",")]
        args.pop(i)
    for name in args:
        ds = name_ds(name)
        for fold in folds:
            feats = statistics(ds, fold)
            out = cv_table(name, {"statistics": feats}, [("trees", "every window")],
                           extra=rows(ds, feats, fold), paired="first", fold=fold)  # fmt: skip
            if after is not None:
                after(name, *out)


def probe_fit(kind: str, config=None):
    """``fit`` for :func:`held_out`: the served ``kind`` probe (or ``config``), 3 seeds
    for the MLP, one for the deterministic trees."""
    from training.evaluate.probe import Probe, ProbeConfig

    cfg = config or ProbeConfig(kind=kind)

    def fit(x_tr, y_tr, x_v, y_v):
        out = []
        for seed in (0, 1, 2) if cfg.kind == "mlp" else (0,):
            p = Probe(x_tr.shape[1], cfg, seed)
            p.fit(x_tr, y_tr, x_v, y_v)
            out.append(p.predict)
        return out

    return fit


def held_out(featurize, fit, extra=None, fit_dense=False):
    """An ``extra`` row of :func:`cv_table` for a fit that is not the served one:
    ``fit(x_tr, y_tr, x_v, y_v)`` returns scorers (one per seed, or one repeated for
    the table's 3), fitted on two blocks' hop windows (``fit_dense``: their dense
    windows; features ``featurize``) plus, with ``extra(fit_blocks, f_hop)`` -> (x,
    y), rows of its own; stopped and calibrated on the next block's hop windows, they
    score the held-out one."""
    from training.evaluate.select import OutOfFold

    def row(blocks) -> OutOfFold:
        k = len(blocks)
        f_hop = [featurize(b.hop) for b in blocks]
        f_dense = [featurize(b.dense) for b in blocks]
        hop, dense = [], []
        for j in range(k):
            v = (j + 1) % k
            tr = [i for i in range(k) if i not in (j, v)]
            x_tr = [(f_dense if fit_dense else f_hop)[i] for i in tr]
            y_tr = [(blocks[i].dense if fit_dense else blocks[i].hop).y for i in tr]
            if extra is not None:
                x, y = extra([blocks[i] for i in tr], [f_hop[i] for i in tr])
                x_tr, y_tr = [*x_tr, x], [*y_tr, y]
            scorers = fit(np.concatenate(x_tr), np.concatenate(y_tr), f_hop[v],
                          blocks[v].hop.y)  # fmt: skip
            reps = 3 // len(scorers)
            hop.append(np.stack([s(f_hop[j]) for s in scorers] * reps))
            dense.append(np.stack([s(f_dense[j]) for s in scorers] * reps))
        return OutOfFold(hop, dense, f_hop[0].shape[1])

    return row


def event_config(name: str):
    """The published run's event settings of ``name`` (stride, look-back, budget)."""
    import json
    from pathlib import Path

    from training.evaluate.warning import EventConfig

    runs = Path("docs/results")
    run = runs / "skab-trees" if name == "skab" else runs / f"{name}-trees200"
    return EventConfig(
        **json.loads((run / "results.json").read_text())["config"]["events"]
    )


def _mixture(kind, seeds, f_fit, s_fit, f_val, s_val, f_hop, f_dense):
    """(seeds, hop), (seeds, dense) risks of the mixture p_cur * cont + (1 - p_cur) *
    onset: ``onset`` fitted on the normal windows, ``cont`` on the anomalous ones (both
    to the next window's label), ``p_cur`` on every window to the current window's
    label; each stopped and calibrated on the matching windows of the validation
    block. A part whose windows hold one class is that class's share (a constant)."""
    from training.evaluate.probe import Probe, ProbeConfig

    x = np.concatenate(f_fit)
    y = np.concatenate([s.y for s in s_fit])
    cur = np.concatenate([s.cur for s in s_fit])

    def part(m_tr, t_tr, m_va, t_va, seed):
        xt, yt, xv, yv = x[m_tr], t_tr[m_tr], f_val[m_va], t_va[m_va]
        if len(np.unique(yt)) < 2 or len(np.unique(yv)) < 2:
            c = float(np.r_[yt, yv].mean()) if len(yt) + len(yv) else 0.0
            return lambda f: np.full(len(f), c)
        p = Probe(x.shape[1], ProbeConfig(kind=kind), seed)
        p.fit(xt, yt, xv, yv)
        return p.predict

    h, d = [], []
    every = np.ones(len(y), bool)
    for seed in seeds if kind == "mlp" else seeds[:1]:
        onset = part(cur == 0, y, s_val.cur == 0, s_val.y, seed)
        cont = part(cur == 1, y, s_val.cur == 1, s_val.y, seed)
        det = part(every, cur, np.ones(len(s_val), bool), s_val.cur, seed)
        for f, out in ((f_hop, h), (f_dense, d)):
            pc = det(f)
            out.append(pc * cont(f) + (1 - pc) * onset(f))
    reps = len(seeds) // len(h)
    return np.stack(h * reps), np.stack(d * reps)


def beside_statistics(name: str, label: str, per_channel) -> None:
    """:func:`cv_table` of three inputs: the served pooled window statistics, those and
    ``label``, and ``label`` alone, each read by the trees and the MLP fitted on every
    window. ``per_channel``: (N, T, V) windows -> (N, F, V) features, pooled over the
    channels by mean, max and min and standardised on the normal windows."""
    from training.evaluate.baselines import WindowStatsFeatures
    from training.evaluate.features import Standardizer
    from training.evaluate.protocol import normal_windows

    def pooled(x: np.ndarray) -> np.ndarray:
        f = per_channel(x)
        return np.concatenate([f.mean(2), f.max(2), f.min(2)], axis=1).astype(
            np.float32
        )

    ds = name_ds(name)
    normal = normal_windows(ds, 100, 0 if ds.folds else None)
    stats = WindowStatsFeatures(normal)
    scale = Standardizer().fit(pooled(normal))
    cv_table(
        name,
        {
            "pooled statistics (served)": lambda s: stats(s.x),
            f"pooled statistics + {label}": lambda s: np.c_[
                stats(s.x), scale(pooled(s.x))
            ],
            f"{label} alone": lambda s: scale(pooled(s.x)),
        },
        [("trees", "every window"), ("mlp", "every window")],
    )


def preceding(ds: Dataset, s: Samples, k: int = 1, window: int = 100) -> np.ndarray:
    """(N, window, V) the window k windows before each of ``s``'s in its entity's
    series; one too close to the series' start stands in for its own predecessor."""
    x = s.x.copy()
    for n, (e, end) in enumerate(zip(s.entity, s.end, strict=True)):
        lo = int(end) - window * (k + 1)
        if lo >= 0:
            x[n] = ds.entities[e].test[lo : lo + window][:, ds.mask]
    return x


_loaded: dict = {}


def name_ds(name: str) -> Dataset:
    """The data set ``name``, loaded once per process."""
    from training.data import load_dataset

    if name not in _loaded:
        _loaded[name] = load_dataset(name)
    return _loaded[name]


def served_monitor(name: str):
    """(event settings, fold 0, its served model's input-drift monitor record) of the
    data set ``name``: the monitor fitted as `scjepa evaluate` fits it
    (protocol.served_novelty: the normal windows of fold 0's train split its
    reference, of its validation split its calibration)."""
    from training.evaluate.protocol import prepare_fold, served_novelty
    from training.evaluate.warning import event_config as events

    ds = name_ds(name)
    ev = events(ds)
    fold = prepare_fold(ds, 0, ev)
    record = served_novelty(name, fold)
    assert record is not None, name
    return ev, fold, record
