"""The artifact contract: ``model.onnx`` + ``manifest.json`` in one folder.

Training writes manifests with :func:`write_manifest`; :func:`load_manifest` refuses an
unknown format version, a missing file or a ``model.onnx`` whose SHA-256 is not the
recorded one. :mod:`service.inference` checks the graph against the manifest.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

FORMAT_VERSION = 1
MODEL_FILE = "model.onnx"
INT8_FILE = "model.int8.onnx"
FP16_FILE = "model.fp16.onnx"
MANIFEST_FILE = "manifest.json"
_PART = "(codes|stats|knn|pca|surprise|recon)"
PROBE_FEATURES = rf"^{_PART}(\+{_PART})*$"  # e.g. "codes+stats", "knn+pca+surprise"


class ArtifactError(ValueError):
    """An artifact the service must not serve; the message says which check failed."""


class Quantization(BaseModel):
    """The reduced-precision variants an artifact ships, each with its measured cost.

    ``dtype`` is "int8" when ``model.int8.onnx`` (CPU) is shipped; ``fp16_sha256`` is set
    when ``model.fp16.onnx`` (CUDA) is. Export keeps a variant only if no evaluation
    metric drops more than 0.5 points against fp32; the deltas are recorded here.
    """

    model_config = ConfigDict(extra="forbid")

    dtype: Literal["fp32", "int8"] = "fp32"
    int8_sha256: str | None = None  # of model.int8.onnx when the artifact ships one
    int8_method: str | None = None  # e.g. "static QDQ, per-tensor, MinMax calibration"
    # int8 - fp32 on test, e.g. {"f1": -0.002}; None where the figure is undefined
    # (a test split without an anomalous window has no F1 or AUC)
    metric_deltas: dict[str, float | None] = {}
    fp16_sha256: str | None = None  # of model.fp16.onnx when the artifact ships one
    fp16_metric_deltas: dict[str, float | None] = {}  # fp16 - fp32 on test


class Novelty(BaseModel):
    """``novelty``: the graph's input-drift monitor. Its ``novelty`` output (B,) is how
    unusual each window is among normal windows of the training data: the smoothed
    rank of the mean of its z-scored label-free detector scores (``detectors``,
    model/detectors.py) among ``calibration_windows`` normal windows the detectors'
    reference (``reference_windows``) did not include (model/rarity.py, as `scjepa
    calibrate`'s label-free risk). A window at or above ``level`` counts as unlike the
    training data; ``expected_share`` of the calibration windows do, so a much larger
    share of the served windows says the streams have drifted from what the model and
    its threshold were fitted and checked on."""

    model_config = ConfigDict(extra="forbid")

    detectors: str = Field(pattern=PROBE_FEATURES)  # e.g. "knn+pca"
    level: float = Field(gt=0.0, lt=1.0)
    expected_share: float = Field(ge=0.0, le=1.0)
    reference_windows: int = Field(ge=1)
    calibration_windows: int = Field(ge=1)


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
    # what the probe reads, "+"-joined: the spec's code features, pooled window
    # statistics, label-free detector scores (kNN distance, PCA error, SC-JEPA's
    # surprise and reconstruction error), all computed in the graph; informational,
    # the graph is self-contained
    probe_features: str = Field("codes", pattern=PROBE_FEATURES)
    # the SC-JEPA weights in the graph: the pre-training checkpoint's, or those
    # fine-tuned with the probe on the next window's label (the fine-tuned candidate
    # of `scjepa evaluate`); informational, the weights are in the graph
    encoder: Literal["pre-trained", "fine-tuned"] = "pre-trained"
    eval_metrics: dict[str, Any]
    onnx_sha256: str = ""  # filled in by write_manifest
    training_data_fingerprint: str
    quantization: Quantization | None = None
    # the graph's input-drift monitor (its ``novelty`` output); None: the graph has
    # none (artifacts exported before it, or from a probe file without one)
    novelty: Novelty | None = None

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
        record = self.eval_metrics.get("threshold")
        if record is not None:  # read by the alerting and the metrics
            try:
                ThresholdRecord.model_validate(record)
            except ValidationError as e:
                first = e.errors()[0]
                loc = ".".join(map(str, ("eval_metrics.threshold", *first["loc"])))
                raise ValueError(f"{loc}: {first['msg']}") from None
        return self


class OperatingPoint(BaseModel):
    """One entry of ``eval_metrics.threshold.operating_points`` (what the service
    reads of it; `scjepa export` records more)."""

    model_config = ConfigDict(extra="allow")

    false_alarms_per_1000: float
    threshold: float | None = None


class ThresholdRecord(BaseModel):
    """``eval_metrics.threshold``: how the served threshold was set (what the service
    reads of it; `scjepa export` records more)."""

    model_config = ConfigDict(extra="allow")

    rule: str | None = None
    false_alarms_per_1000: float | None = None
    serving_at: OperatingPoint | None = None
    operating_points: list[OperatingPoint] = []


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(directory: Path, manifest: Manifest) -> Manifest:
    """Record the SHA-256 of ``directory/model.onnx`` (and variants) and write the manifest."""
    directory = Path(directory)
    model = directory / MODEL_FILE
    if not model.is_file():
        raise ArtifactError(f"{model}: file not found (export the model first)")
    update: dict[str, Any] = {"onnx_sha256": sha256_file(model)}
    q = manifest.quantization or Quantization()
    int8, fp16 = directory / INT8_FILE, directory / FP16_FILE
    if int8.is_file():
        q = q.model_copy(update={"dtype": "int8", "int8_sha256": sha256_file(int8)})
    if fp16.is_file():
        q = q.model_copy(update={"fp16_sha256": sha256_file(fp16)})
    if int8.is_file() or fp16.is_file():
        update["quantization"] = q
    out = manifest.model_copy(update=update)
    text = out.model_dump_json(by_alias=True, indent=2)
    (directory / MANIFEST_FILE).write_text(text + "\n")
    return out


def load_manifest(directory: Path) -> Manifest:
    """Read and validate ``directory/manifest.json`` and check ``model.onnx``'s SHA-256."""
    directory = Path(directory)
    path = directory / MANIFEST_FILE
    if directory.is_file():  # e.g. model.onnx itself: "model.onnx/manifest.json" misled
        raise ArtifactError(f"{directory}: a file, not the artifact's folder")
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


TENANT_BUDGETS = "SCJEPA_TENANT_FA_BUDGET"  # the setting of tenants' budgets


@dataclass(frozen=True)
class Budget:
    """A tenant's own operating point: false alarms per 1,000 windows, and the
    setting that gave it (SCJEPA_TENANT_FA_BUDGET, or a ``TENANT fa_budget:B`` line
    of SCJEPA_API_KEYS_FILE, which a running service re-reads)."""

    per_1000: float
    set_by: str = TENANT_BUDGETS


def at_budget(
    manifest: Manifest,
    fa_budget: float | None,
    tenant: str | None = None,
    set_by: str | None = None,
) -> Manifest:
    """``manifest`` alerting at its operating point of ``fa_budget`` false alarms per
    1,000 windows (``eval_metrics.threshold.operating_points``, written by `scjepa
    export`), which ``eval_metrics.threshold.serving_at`` then records with the
    setting that chose it (GET /models shows it): SCJEPA_FA_BUDGET, or for a
    ``tenant`` ``set_by`` (its :class:`Budget`'s); unchanged for None. Raises
    :class:`ArtifactError` naming the setting and the budgets the artifact has when
    it has no threshold at this one."""
    if set_by is None:
        set_by = "SCJEPA_FA_BUDGET" if tenant is None else TENANT_BUDGETS
    if fa_budget is None:
        return manifest
    record = manifest.eval_metrics.get("threshold") or {}
    points = record.get("operating_points") or []
    have = [p for p in points if p.get("threshold") is not None]
    listed = ", ".join(f"{p['false_alarms_per_1000']:g}" for p in have) or "none"
    for p in have:
        if math.isclose(p["false_alarms_per_1000"], fa_budget):
            thr = float(p["threshold"])
            serving = {"false_alarms_per_1000": fa_budget, "threshold": thr}
            metrics = manifest.eval_metrics | {
                "threshold": record | {"serving_at": serving | {"set_by": set_by}}
            }
            return manifest.model_copy(
                update={"threshold": thr, "eval_metrics": metrics}
            )
    raise ArtifactError(
        f"{set_by}{'' if tenant is None else f' {tenant}'}={fa_budget:g}: "
        f"{manifest.name} {manifest.version} has a "
        f"threshold at {listed} false alarms per 1,000 windows (its operating "
        "points); choose one of them, or export the model with --fa-budget"
    )


def serving_budget(manifest: Manifest) -> float | None:
    """The false alarms per 1,000 windows the manifest's threshold keeps:
    ``eval_metrics.threshold``'s ``serving_at`` (set by SCJEPA_FA_BUDGET or a tenant's
    SCJEPA_TENANT_FA_BUDGET), else the exported budget; None where it records none."""
    record = manifest.eval_metrics.get("threshold") or {}
    budget = (record.get("serving_at") or record).get("false_alarms_per_1000")
    return None if budget is None else float(budget)


def thresholds_by_budget(manifest: Manifest) -> tuple[tuple[str, float], ...]:
    """(budget, threshold) of each operating point the manifest has a threshold for,
    the budget (false alarms per 1,000 windows) as a label (``3``, ``0.3``)."""
    record = manifest.eval_metrics.get("threshold") or {}
    return tuple(
        (f"{p['false_alarms_per_1000']:g}", float(p["threshold"]))
        for p in record.get("operating_points") or []
        if p.get("threshold") is not None
    )


def served_point(manifest: Manifest) -> dict[str, Any] | None:
    """The operating point the manifest alerts at (:func:`serving_budget`) among its
    ``operating_points``, with the test split's figures there where `scjepa export`
    recorded them; None for a threshold no operating point describes (F1, or an older
    manifest)."""
    budget = serving_budget(manifest)
    if budget is None:
        return None
    record = manifest.eval_metrics.get("threshold") or {}
    points: list[dict[str, Any]] = record.get("operating_points") or []
    for p in points:
        if math.isclose(p["false_alarms_per_1000"], budget):
            return p
    return None


def evaluated_note(manifest: Manifest) -> str:
    """What the evaluation's test split measured at the operating point served, in a
    sentence for a page's annotations: how often such alerts came before an incident,
    how early, and how often one was false. Empty where the manifest records no test
    figures there (an F1 threshold, a label-free model, an older artifact)."""
    point = served_point(manifest)
    test = (point or {}).get("test") or {}
    events, rate = test.get("events"), test.get("warned_rate")
    if not events or rate is None or point is None:
        return ""
    parts = [f"{rate:.0%} of its {events} incidents warned"]
    quartiles = test.get("lead_quartiles_steps")
    if rate > 0 and quartiles:
        q1, q2, q3 = (round(q) for q in quartiles)
        parts[0] += f", a median {q2} readings ahead (quartiles {q1}-{q3})"
    if (pages := test.get("false_pages_per_1000")) is not None:
        parts.append(f"{pages:.2f} false pages per 1,000 windows")
    budget = float(point["false_alarms_per_1000"])
    alarms = "false alarm" if budget == 1 else "false alarms"
    return (
        f"At this operating point ({budget:g} {alarms} per 1,000 windows) the "
        f"evaluation's test split had {'; '.join(parts)}."
    )


def now_utc() -> datetime:
    return datetime.now(UTC)
