"""Checkpoints that carry their own config: ``load_model(path)`` needs nothing else.

Layout of a ``.pt`` file (a plain dict):
    config        ModelConfig as a dict   -> SCJEPA(ModelConfig(**ckpt["config"]))
    model         online state_dict (encoder, codebook, predictors, decoder)
    target        EMA target state_dict (encoder, codebook)
    train_config  the resolved TrainConfig as a dict
    optimizer, step, epoch, best, bad, rng     what --resume needs
    lambda_r      {"from_step", "from"}: where lambda_r's linear anneal starts (0 and
                  loss.rec_start, unless --resume raised optim.epochs)
    data          {"train_pairs", "val_pairs", "sha256"}: the pairs trained on, so
                  --resume refuses other data (absent before 2026-12-01)
    corpus        data set name -> the entities pre-trained on (absent before
                  2026-11-30; see :func:`corpus_overlap`)
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import Any

import torch

from model import SCJEPA, ModelConfig
from training.errors import UserError


def save_checkpoint(path: str | Path, **state: Any) -> None:
    """Write atomically (tmp file + rename) so a killed run never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: str | Path, map_location: str = "cpu") -> dict[str, Any]:
    """Read a checkpoint dict; a missing or foreign file raises UserError."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: checkpoint not found")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as e:  # corrupt / not a torch file: say which file, then stop
        raise UserError(f"{path}: not a readable checkpoint ({e})") from e
    if not isinstance(ckpt, dict) or "config" not in ckpt or "model" not in ckpt:
        raise UserError(f"{path}: not an SC-JEPA checkpoint (no config/model)")
    return ckpt


def build_model(ckpt: dict[str, Any], where: str | Path = "checkpoint") -> SCJEPA:
    """SCJEPA(ModelConfig(**ckpt["config"])) with the stored online weights; a config
    this code cannot build, or weights that do not fit it, raise UserError naming
    ``where`` (the file)."""
    try:
        cfg = ModelConfig(**ckpt["config"])
    except (TypeError, AssertionError) as e:  # a field this code lacks, a bad value
        raise UserError(
            f"{where}: its model config does not fit this code ({e})"
        ) from e
    model = SCJEPA(cfg)
    load_weights(model, ckpt["model"], f"{where}: its model weights")
    return model


def load_weights(module: torch.nn.Module, state: Any, what: str) -> None:
    """``module.load_state_dict(state)``, or UserError saying, in one line, which
    tensors are missing, unexpected or of another shape (``what`` names the file)."""
    if not isinstance(state, dict):
        raise UserError(f"{what}: not a state dict")
    own = module.state_dict()
    problems = [f"missing {k}" for k in own if k not in state]
    problems += [f"unexpected {k}" for k in state if k not in own]
    problems += [
        f"{k} {tuple(v.shape)} for {tuple(own[k].shape)}"
        for k, v in state.items()
        if k in own and isinstance(v, torch.Tensor) and v.shape != own[k].shape
    ]
    if not problems:
        try:
            module.load_state_dict(state)
            return
        except RuntimeError as e:  # whatever else load_state_dict refuses
            problems = [str(e).strip().splitlines()[-1].strip()]
    more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
    raise UserError(
        f"{what} do not fit its model config: {'; '.join(problems[:3])}{more}"
    )


def load_model(path: str | Path, map_location: str = "cpu") -> SCJEPA:
    """The online model of a checkpoint, in eval mode."""
    return build_model(load_checkpoint(path, map_location), path).eval()


def file_sha256(path: str | Path) -> str:
    """A checkpoint's content hash: evaluate records it with the probe it fits, and
    export refuses a probe with another checkpoint's features. (The service hashes its
    artifacts with service.manifest.sha256_file; the evaluation may not import the
    service, tests/test_layout.py.)"""
    with Path(path).open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def checkpoint_corpus(path: str | Path) -> dict[str, list[str]] | None:
    """The checkpoint's corpus (data set -> entities pre-trained on), None where it
    records none; read once per file version (evaluate asks per fold and per probe)."""
    p = Path(path).resolve()
    return _corpus(p, p.stat().st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _corpus(path: Path, mtime_ns: int) -> dict[str, list[str]] | None:
    corpus: dict[str, list[str]] | None = load_checkpoint(path).get("corpus")
    return corpus


def corpus_overlap(
    path: str | Path, dataset: str, held_out: list[str]
) -> list[str] | None:
    """Which of ``held_out`` (entities of ``dataset`` that a fold validates or tests
    on) the checkpoint at ``path`` was pre-trained on: [] if none, None if the
    checkpoint does not record its corpus (one written before it did)."""
    corpus = checkpoint_corpus(path)
    if corpus is None:
        return None
    seen = set(corpus.get(dataset, []))
    return [e for e in held_out if e in seen]
