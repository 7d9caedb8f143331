"""Experiment settings: sectioned dataclasses loaded straight from YAML.

    cfg = load_config("configs/paper.yaml", overrides=["optim.lr=1e-3", "loss.kl=false"])

Sections mirror configs/*.yaml: data / model / loss / optim / logging. Every number of
docs/method.md is a default here or in :class:`model.config.ModelConfig`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from model.config import ModelConfig
from training.data.windows import WINDOW
from training.errors import UserError


@dataclass
class DataConfig:
    window: int = WINDOW
    val_frac: float = 0.1  # last 10 % of each entity's train windows, chronological
    seed: int = 0  # seed of the synthetic data set


REC_SCALES = ("raw", "window")
REDUCTIONS = ("sum", "mean")


@dataclass
class LossConfig:
    """Weights of L = L_pred + L_code + lambda_r * L_rec, and the ablation switches."""

    lambda_f: float = 1.0
    lambda_c: float = 0.5
    gamma: float = 0.1  # weight of MSE_fine next to KL_fine
    commit: float = 1.0  # |sg(z) - h|^2
    quant: float = 0.25  # |z - sg(h)|^2
    entropy: float = 0.005  # + E[H(p)]: confident assignments
    diversity: float = 0.01  # - H(E[p]): use the whole codebook
    # beyond the paper: + mean over dims of relu(1 - std of h across the batch's
    # tokens) (VICReg's variance term), so h cannot be the same for every window
    variance: float = 0.0
    # beyond the paper: + VICReg's covariance term on h (squared off-diagonal
    # covariances over D), so h's dimensions cannot all move along one direction
    covariance: float = 0.0
    rec_start: float = 0.5  # lambda_r, linear over the run's global steps
    rec_end: float = 0.1
    # L_rec's scale. raw: after de-normalisation (the spec), so its weight against
    # L_pred goes with the square of the data's units. window: on the RevIN scale of
    # each window and channel, the same in any units.
    rec_scale: str = "raw"
    # A squared norm |a - b|^2 of a latent (over D) or a patch (over L). sum: the
    # spec's norm. mean: the mean of the squared entries (beyond the paper; every
    # published run and configs/improved.yaml), so no term scales with D or L.
    reduce: str = "sum"
    # -- ablations, one switch each (architecture ones live in ModelConfig)
    kl: bool = True  # False: MSE only (gamma * MSE on fine and coarse latents)
    rec: bool = True  # False: no reconstruction term (decoder unused)
    pred: bool = True  # False: no predictive objective (no target pass)
    code: bool = True  # False: no codebook losses (the bottleneck is kept)

    def __post_init__(self) -> None:
        assert self.rec_scale in REC_SCALES, (
            f"rec_scale {self.rec_scale!r}: expected one of {', '.join(REC_SCALES)}"
        )
        assert self.reduce in REDUCTIONS, (
            f"reduce {self.reduce!r}: expected one of {', '.join(REDUCTIONS)}"
        )


@dataclass
class OptimConfig:
    lr: float = 5e-4
    weight_decay: float = 1e-5
    batch_size: int = 128
    grad_clip: float = 0.5
    ema: float = 0.996  # rho, per optimiser step
    epochs: int = 100
    select_from: int = 50  # model selection on val loss from this epoch (1-based) on
    patience: int = 10  # early stopping, epochs without a better val loss
    max_steps: int = 0  # > 0: stop after this many optimiser steps (smoke tests)


@dataclass
class RunConfig:
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda
    # bf16 autocast (CUDA, or a CPU with AVX512-BF16); recorded in run.json
    amp: bool = False
    threads: int = 0  # torch intra-op threads; 0 = all cores (per process)
    progress: bool = True  # tqdm bar


@dataclass
class TrainConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Rule:
    """What one field accepts: its type (from the dataclass) and a range or choices.

    ``lo``/``hi``: bounds (None = unbounded), closed unless ``open_lo``/``open_hi``;
    ``choices``: the allowed strings (a ``str`` field); ``pattern``: a regex the
    string may match instead of a choice."""

    lo: float | None = None
    hi: float | None = None
    open_lo: bool = False
    open_hi: bool = False
    choices: tuple[str, ...] = ()
    pattern: str | None = None

    def describe(self) -> str:
        if self.choices:
            more = " or cuda:N" if self.pattern else ""
            return "one of " + ", ".join(self.choices) + more
        parts = []
        if self.lo is not None:
            parts.append(f"{'>' if self.open_lo else '>='} {self.lo:g}")
        if self.hi is not None:
            parts.append(f"{'<' if self.open_hi else '<='} {self.hi:g}")
        return " and ".join(parts) or "any value"

    def admits(self, v: Any) -> bool:
        if self.choices:
            return v in self.choices or bool(
                self.pattern and re.fullmatch(self.pattern, v)
            )
        if self.lo is not None and (v <= self.lo if self.open_lo else v < self.lo):
            return False
        return not (
            self.hi is not None and (v >= self.hi if self.open_hi else v > self.hi)
        )


POSITIVE = Rule(lo=0, open_lo=True)  # > 0
NON_NEGATIVE = Rule(lo=0)  # >= 0
AT_LEAST_1 = Rule(lo=1)
ANY = Rule()  # booleans (their type is their range)

# Every field of every section, "section.key" -> its Rule (types come from the
# dataclasses; tests/training/pretrain/test_config.py holds this table to them).
RULES: dict[str, Rule] = {
    "data.window": AT_LEAST_1,
    "data.val_frac": Rule(lo=0, hi=1, open_lo=True, open_hi=True),
    "data.seed": NON_NEGATIVE,
    # model
    "model.seq_len": AT_LEAST_1,
    "model.patch_len": AT_LEAST_1,
    "model.revin_eps": POSITIVE,
    "model.d_model": AT_LEAST_1,
    "model.n_layers": AT_LEAST_1,
    "model.n_heads": AT_LEAST_1,
    "model.ffn_mult": AT_LEAST_1,
    "model.dropout": Rule(lo=0, hi=1, open_hi=True),
    "model.tok_channels": AT_LEAST_1,
    "model.tok_pool": AT_LEAST_1,
    "model.tok_hidden": AT_LEAST_1,
    "model.n_codes": Rule(lo=2),
    "model.tau": POSITIVE,
    "model.pred_dim": AT_LEAST_1,
    "model.pred_layers": AT_LEAST_1,
    "model.pred_heads": AT_LEAST_1,
    "model.use_codebook": ANY,
    "model.use_coarse": ANY,
    "model.stats_token": ANY,
    # loss: weights
    **{
        f"loss.{k}": NON_NEGATIVE
        for k in [
            "lambda_f",
            "lambda_c",
            "gamma",
            "commit",
            "quant",
            "entropy",
            "diversity",
            "variance",
            "covariance",
            "rec_start",
            "rec_end",
        ]
    },
    "loss.rec_scale": Rule(choices=REC_SCALES),
    "loss.reduce": Rule(choices=REDUCTIONS),
    **{f"loss.{k}": ANY for k in ("kl", "rec", "pred", "code")},
    # optim
    "optim.lr": NON_NEGATIVE,
    "optim.weight_decay": NON_NEGATIVE,
    "optim.batch_size": AT_LEAST_1,
    "optim.grad_clip": POSITIVE,
    "optim.ema": Rule(lo=0, hi=1),
    "optim.epochs": AT_LEAST_1,
    "optim.select_from": AT_LEAST_1,
    "optim.patience": AT_LEAST_1,
    "optim.max_steps": NON_NEGATIVE,
    # run
    "run.seed": NON_NEGATIVE,
    "run.device": Rule(choices=("auto", "cpu", "cuda"), pattern=r"cuda:\d+"),
    "run.amp": ANY,
    "run.threads": NON_NEGATIVE,
    "run.progress": ANY,
}

_KINDS = {"int": "an integer", "float": "a number", "bool": "true or false"}
_KINDS["str"] = "a string"


def allowed(key: str, type_name: Any) -> str:
    """What ``key`` accepts, in words: 'an integer >= 1', 'one of raw, window'."""
    rule = RULES[key]
    if rule.choices or type_name == "bool":
        return rule.describe() if rule.choices else _KINDS["bool"]
    return f"{_KINDS.get(str(type_name), str(type_name))} {rule.describe()}"


def _check(value: Any, type_name: Any, key: str, where: str) -> Any:
    """``value`` as the field's type (YAML 1.1 reads 5e-4 as a string and 1 as an int)
    within its Rule; else UserError naming the key and what it accepts."""
    rule = RULES[key]
    kind = _KINDS.get(str(type_name), str(type_name))

    v = value

    def bad(why: str) -> UserError:
        shown = repr(value)  # as written: 0 stays 0, 1e-3 (a str to YAML 1.1) 1e-3
        if isinstance(value, bool) or (isinstance(value, str) and v is not value):
            shown = str(value).lower()
        return UserError(
            f"{where}: {key}={shown} {why}; allowed: {allowed(key, type_name)}"
        )

    if type_name == "float" and isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            raise bad("is not a number") from None
    if isinstance(v, bool) != (type_name == "bool"):
        raise bad(f"is not {kind}")
    if type_name == "float":
        if not isinstance(v, int | float):
            raise bad("is not a number")
        v = float(v)
        if not math.isfinite(v):
            raise bad("is not finite")
    elif type_name == "int" and not isinstance(v, int):
        raise bad("is not an integer")
    elif type_name == "str" and not isinstance(v, str):
        raise bad("is not a string")
    if not rule.admits(v):
        raise bad("is unknown" if rule.choices else "is out of range")
    return v


def _section(cls: type, values: dict[str, Any], name: str, where: str) -> Any:
    fields = {f.name: f.type for f in dataclasses.fields(cls)}
    unknown = set(values) - set(fields)
    if unknown:
        raise UserError(
            f"{where} [{name}]: unknown key(s) {sorted(unknown)}; known: {sorted(fields)}"
        )
    kwargs = {k: _check(v, fields[k], f"{name}.{k}", where) for k, v in values.items()}
    return cls(**kwargs)


def from_dict(d: dict[str, Any], where: str = "config") -> TrainConfig:
    """Nested dict (YAML) -> TrainConfig; unknown sections or keys, a value of the wrong
    type or out of its range (:data:`RULES`) raise UserError."""
    types = {"data": DataConfig, "model": ModelConfig, "loss": LossConfig}
    types |= {"optim": OptimConfig, "run": RunConfig}
    unknown = set(d) - set(types)
    if unknown:
        raise UserError(f"{where}: unknown section(s) {sorted(unknown)}")
    kwargs = {}
    for name, cls in types.items():
        values = d.get(name) or {}
        if not isinstance(values, dict):
            raise UserError(f"{where} [{name}]: expected key: value pairs")
        try:
            kwargs[name] = _section(cls, values, name, where)
        except (TypeError, AssertionError) as e:
            raise UserError(f"{where} [{name}]: {e}") from e
    cfg = TrainConfig(**kwargs)
    if cfg.data.window != cfg.model.seq_len:
        raise UserError(
            f"{where}: data.window={cfg.data.window} but model.seq_len="
            f"{cfg.model.seq_len}; the model reads windows of seq_len steps"
        )
    return cfg


def apply_overrides(d: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``section.key=value`` strings to a nested dict (values parsed as YAML)."""
    for item in overrides:
        key, sep, value = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot:
            raise UserError(
                f"--set {item!r}: expected section.key=value, e.g. optim.lr=1e-3"
            )
        v = yaml.safe_load(value)  # false -> bool, 8 -> int, 0.5 -> float
        d.setdefault(section, {})
        d[section] = dict(d[section] or {}) | {name: v}
    return d


# the shipped presets (configs/ of the checkout the code runs from)
PRESETS = Path(__file__).resolve().parents[2] / "configs"


def config_path(path: str | Path) -> Path:
    """A config file as given; a preset's name (``paper``, ``improved.yaml``) or its
    path in the checkout (``configs/paper.yaml``) is found from any working directory:
    the README's commands run outside the checkout too."""
    p = Path(path)
    if p.is_file() or p.parent not in (Path("."), Path("configs")):
        return p
    shipped = PRESETS / (p.name if p.suffix else f"{p.name}.yaml")
    return shipped if shipped.is_file() else p


def load_config(
    path: str | Path | None, overrides: list[str] | None = None
) -> TrainConfig:
    """Read a sectioned YAML file (or only defaults when path is None; a preset by
    name: :func:`config_path`), apply overrides."""
    d: dict[str, Any] = {}
    if path is not None:
        p = config_path(path)
        if not p.is_file():
            presets = ", ".join(sorted(q.stem for q in PRESETS.glob("*.yaml")))
            raise UserError(
                f"{p}: config file not found (a file, or a preset: {presets})"
            )
        d = yaml.safe_load(p.read_text()) or {}
        if not isinstance(d, dict):
            raise UserError(f"{p}: expected sections data/model/loss/optim/run")
    d = apply_overrides(d, list(overrides or []))
    return from_dict(d, str(path or "config"))


def save_config(cfg: TrainConfig, path: str | Path) -> None:
    """Write the resolved config (every default included) next to the run."""
    Path(path).write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
