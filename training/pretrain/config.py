"""Experiment settings: sectioned dataclasses loaded straight from YAML.

    cfg = load_config("configs/paper.yaml", overrides=["optim.lr=1e-3", "loss.kl=false"])

Sections mirror configs/*.yaml: data / model / loss / optim / logging. Every number of
docs/method.md is a default here or in :class:`model.config.ModelConfig`.
"""

from __future__ import annotations

import dataclasses
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
    # -- ablations, one switch each (architecture ones live in ModelConfig)
    kl: bool = True  # False: MSE only (gamma * MSE on fine and coarse latents)
    rec: bool = True  # False: no reconstruction term (decoder unused)
    pred: bool = True  # False: no predictive objective (no target pass)
    code: bool = True  # False: no codebook losses (the bottleneck is kept)

    def __post_init__(self) -> None:
        assert self.rec_scale in REC_SCALES, (
            f"rec_scale {self.rec_scale!r}: expected one of {', '.join(REC_SCALES)}"
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


def _coerce(value: Any, type_name: Any, where: str) -> Any:
    """YAML 1.1 reads 5e-4 as a string and 1 as an int: cast to the field's type."""
    if (
        type_name == "float"
        and isinstance(value, str | int)
        and not isinstance(value, bool)
    ):
        try:
            return float(value)
        except ValueError as e:
            raise UserError(f"{where}: {value!r} is not a number") from e
    if type_name in ("int", "float") and not isinstance(value, int | float):
        raise UserError(f"{where}: {value!r} is not a number")
    if type_name == "bool" and not isinstance(value, bool):
        raise UserError(f"{where}: {value!r} is not true/false")
    return value


def _section(cls: type, values: dict[str, Any], where: str) -> Any:
    fields = {f.name: f.type for f in dataclasses.fields(cls)}
    unknown = set(values) - set(fields)
    if unknown:
        raise UserError(
            f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(fields)}"
        )
    return cls(**{k: _coerce(v, fields[k], f"{where} {k}") for k, v in values.items()})


def from_dict(d: dict[str, Any], where: str = "config") -> TrainConfig:
    """Nested dict (YAML) -> TrainConfig; unknown sections or keys raise UserError."""
    types = {"data": DataConfig, "model": ModelConfig, "loss": LossConfig}
    types |= {"optim": OptimConfig, "run": RunConfig}
    unknown = set(d) - set(types)
    if unknown:
        raise UserError(f"{where}: unknown section(s) {sorted(unknown)}")
    kwargs = {}
    for name, cls in types.items():
        try:
            kwargs[name] = _section(cls, d.get(name) or {}, f"{where} [{name}]")
        except (TypeError, AssertionError) as e:
            raise UserError(f"{where} [{name}]: {e}") from e
    return TrainConfig(**kwargs)


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


def load_config(
    path: str | Path | None, overrides: list[str] | None = None
) -> TrainConfig:
    """Read a sectioned YAML file (or only defaults when path is None), apply overrides."""
    d: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise UserError(f"{p}: config file not found")
        d = yaml.safe_load(p.read_text()) or {}
        if not isinstance(d, dict):
            raise UserError(f"{p}: expected sections data/model/loss/optim/run")
    d = apply_overrides(d, list(overrides or []))
    return from_dict(d, str(path or "config"))


def save_config(cfg: TrainConfig, path: str | Path) -> None:
    """Write the resolved config (every default included) next to the run."""
    Path(path).write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
