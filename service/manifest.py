"""The artifact contract: ``model.onnx`` + ``manifest.json`` in one folder.

Training writes manifests with :func:`write_manifest`; the service reads them with
:func:`load_manifest`, which refuses an unknown format version, a missing file or a
``model.onnx`` whose SHA-256 is not the one recorded. The graph itself (input
``window: float32[batch, window, n_channels]``; outputs ``risk[batch]``,
``channel_contrib[batch, n_channels]``, ``codes[batch, n_patches]``) is checked against
the manifest when :mod:`service.inference` opens it.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

FORMAT_VERSION = 1
MODEL_FILE = "model.onnx"
INT8_FILE = "model.int8.onnx"
MANIFEST_FILE = "manifest.json"


class ArtifactError(ValueError):
    """An artifact the service must not serve; the message says which check failed."""


class Quantization(BaseModel):
    """Which weights a file holds; for int8, the metric deltas measured against fp32."""

    model_config = ConfigDict(extra="forbid")

    dtype: Literal["fp32", "int8"] = "fp32"
    int8_sha256: str | None = None  # of model.int8.onnx when the artifact ships one
    metric_deltas: dict[str, float] = {}  # int8 - fp32, e.g. {"f1": -0.002}


class Manifest(BaseModel):
    """``manifest.json``: everything needed to serve and audit one exported model."""

    # "model_config" is a field of the file, so pydantic's own config needs no clash
    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, protected_namespaces=()
    )

    format_version: int = FORMAT_VERSION
    name: str = Field(min_length=1)
    version: str = Field(min_length=1)
    created_at: datetime
    git_commit: str
    model_cfg: dict[str, Any] = Field(alias="model_config")  # ModelConfig as a dict
    channels: list[str]  # every input channel, in the order the stream sends them
    n_channels: int = Field(ge=1)
    channel_mask: list[bool]  # True = used by the model (zero-variance mask)
    window: int = Field(100, ge=1)
    hop: int = Field(100, ge=1)
    threshold: float = Field(ge=0.0, le=1.0)
    calibration: dict[str, Any]  # {"method": "platt", "params": {...}}; in the graph
    eval_metrics: dict[str, Any]
    onnx_sha256: str = ""  # filled in by write_manifest
    training_data_fingerprint: str
    quantization: Quantization | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Manifest:
        if self.format_version != FORMAT_VERSION:
            raise ValueError(
                f"format_version {self.format_version} is not supported "
                f"(this service reads {FORMAT_VERSION})"
            )
        if len(self.channels) != self.n_channels:
            raise ValueError(
                f"n_channels is {self.n_channels} but {len(self.channels)} channel names are listed"
            )
        if len(self.channel_mask) != self.n_channels:
            raise ValueError(
                f"channel_mask has {len(self.channel_mask)} entries for {self.n_channels} channels"
            )
        if len(set(self.channels)) != len(self.channels):
            raise ValueError("channel names must be unique")
        if not any(self.channel_mask):
            raise ValueError("channel_mask keeps no channel")
        return self


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(directory: Path, manifest: Manifest) -> Manifest:
    """Record the SHA-256 of ``directory/model.onnx`` (and int8 file) and write the manifest."""
    directory = Path(directory)
    model = directory / MODEL_FILE
    if not model.is_file():
        raise ArtifactError(f"{model}: file not found (export the model first)")
    update: dict[str, Any] = {"onnx_sha256": sha256_file(model)}
    int8 = directory / INT8_FILE
    if int8.is_file():
        q = manifest.quantization or Quantization(dtype="int8")
        update["quantization"] = q.model_copy(update={"int8_sha256": sha256_file(int8)})
    out = manifest.model_copy(update=update)
    text = out.model_dump_json(by_alias=True, indent=2)
    (directory / MANIFEST_FILE).write_text(text + "\n")
    return out


def load_manifest(directory: Path) -> Manifest:
    """Read and validate ``directory/manifest.json`` and check ``model.onnx``'s SHA-256."""
    directory = Path(directory)
    path = directory / MANIFEST_FILE
    if not path.is_file():
        raise ArtifactError(f"{path}: file not found")
    try:
        raw = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ArtifactError(f"{path}: not valid JSON ({e})") from None
    if (
        isinstance(raw, dict)
        and raw.get("format_version", FORMAT_VERSION) != FORMAT_VERSION
    ):
        raise ArtifactError(
            f"{path}: format_version {raw.get('format_version')!r} is not supported "
            f"(this service reads {FORMAT_VERSION})"
        )
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'manifest'}: {err['msg']}"
            for err in e.errors()
        )
        raise ArtifactError(f"{path}: invalid manifest ({problems})") from None
    model = directory / MODEL_FILE
    if not model.is_file():
        raise ArtifactError(f"{model}: file not found")
    digest = sha256_file(model)
    if digest != manifest.onnx_sha256:
        raise ArtifactError(
            f"{model}: SHA-256 {digest[:12]}… does not match the manifest's "
            f"{manifest.onnx_sha256[:12]}… (the model file was changed or replaced)"
        )
    return manifest


def now_utc() -> datetime:
    return datetime.now(UTC)
