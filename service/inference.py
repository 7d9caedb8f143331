"""ONNX Runtime session for one artifact: load, check against the manifest, warm up, score.

Knows numpy and onnxruntime only (no FastAPI, no PyTorch), so it is tested without HTTP:

    model = load_model(Path("artifacts/msl"), provider="auto")  # an OnnxModel
    scores = model.score(windows)  # (B, window, V) float32 -> risk (B,), contrib (B, V), codes
    # and novelty (B,) where the manifest records the graph's input-drift monitor
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import onnxruntime as ort

from service.manifest import (
    FP16_FILE,
    INT8_FILE,
    MODEL_FILE,
    ArtifactError,
    Budget,
    Manifest,
    at_budget,
    evaluated_note,
    load_manifest,
    sha256_file,
    thresholds_by_budget,
)

log = logging.getLogger(__name__)

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
OUTPUTS = ("risk", "channel_contrib", "codes")
NOVELTY = "novelty"  # the input-drift monitor's output, where manifest.novelty says so
CPU_CHUNK_TOKENS = 512  # encoder tokens per CPU run; see run_size


class WindowError(ValueError):
    """A window batch the model cannot score (wrong shape, NaN or infinite values)."""


@dataclass(frozen=True)
class Scores:
    risk: np.ndarray  # (B,) float32, calibrated probability
    contrib: np.ndarray  # (B, V) float32, share of the variable-wise max per channel
    codes: np.ndarray  # (B, P) int64, dominant code per patch
    by: Model | None = None  # the model that scored them (hot reload swaps models)
    # (B,) float32 in [0, 1]: how unlike the training data's normal windows each one
    # is; None when the model has no input-drift monitor (manifest.novelty null)
    novelty: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.risk)

    def rows(self, i: int, j: int) -> Scores:
        """Windows ``i:j`` of the batch, with the model that scored them."""
        novelty = None if self.novelty is None else self.novelty[i:j]
        return Scores(
            self.risk[i:j], self.contrib[i:j], self.codes[i:j], self.by, novelty
        )


def requested_providers(preference: Literal["auto", "cpu", "cuda"]) -> list[str]:
    """Providers to ask for; whether CUDA is really used is known only after loading."""
    if preference == "cpu":
        return [CPU]
    available = ort.get_available_providers()
    if CUDA in available:
        return [CUDA, CPU]
    if preference == "cuda":
        raise ArtifactError(
            f"provider 'cuda' requested but onnxruntime offers only {available} "
            "(install onnxruntime-gpu and the CUDA runtime)"
        )
    return [CPU]


# The scorer's micro-batches vary in size from one batch to the next. With the CUDA
# provider's default (EXHAUSTIVE), cuDNN times every convolution algorithm for each new
# input shape. On an H100, latency-bound scoring spent 96 ms of inference a batch of
# about 49 windows, against 3 ms for 64 windows at one fixed shape (notebook,
# 2026-11-27): the pattern that re-timing shows. HEURISTIC takes cuDNN's heuristic
# choice without timing (not yet re-measured on a GPU).
CUDA_OPTIONS = {"cudnn_conv_algo_search": "HEURISTIC"}


def session_providers(wanted: list[str]) -> list[str | tuple[str, dict[str, str]]]:
    """``wanted`` with the CUDA provider's options attached."""
    return [(p, CUDA_OPTIONS) if p == CUDA else p for p in wanted]


def validate_windows(x: np.ndarray, window: int, n_channels: int) -> np.ndarray:
    """Return ``x`` as a C-contiguous float32 (B, window, n_channels) array, or raise."""
    x = np.asarray(x)
    if x.ndim == 2:
        x = x[None]
    if x.ndim != 3 or x.shape[1:] != (window, n_channels):
        raise WindowError(
            f"window shape {tuple(x.shape)} does not match the model's "
            f"(batch, {window}, {n_channels})"
        )
    if not np.issubdtype(x.dtype, np.number):
        raise WindowError(f"window dtype {x.dtype} is not numeric")
    x = np.ascontiguousarray(x, dtype=np.float32)
    bad = ~np.isfinite(x)
    if bad.any():
        b, t, v = (int(i) for i in np.argwhere(bad)[0])
        what = "NaN" if np.isnan(x[b, t, v]) else "an infinite value"
        raise WindowError(
            f"window {b} holds {what} at step {t}, channel {v} "
            f"({int(bad.sum())} non-finite cells); fill missing values before scoring"
        )
    return x


class Model:
    """What the service knows of a loaded artifact: its manifest, the provider actually
    running it, the precision and how a batch is split into runs. Scored by
    :class:`OnnxModel` in this process, or by a child process of its own
    (service/infer_process.py) that owns the onnxruntime session."""

    def __init__(
        self,
        manifest: Manifest,
        *,
        provider: str,
        precision: Literal["fp32", "int8", "fp16"],
        max_batch: int,
        run_size: int,
        parallel_runs: int = 1,
    ) -> None:
        self.manifest = manifest
        self.precision = precision
        self.max_batch = max_batch
        self.provider = provider  # the ACTIVE one
        self.window = manifest.window
        self.n_channels = manifest.n_channels
        self.run_size = run_size
        self.parallel_runs = parallel_runs  # CPU runs of one batch side by side
        self.warmed = False
        # the graph outputs a run asks for: novelty too where the manifest records it
        self.outputs = OUTPUTS + ((NOVELTY,) if manifest.novelty is not None else ())
        # what a page of this model says its evaluation measured (once per model)
        self.evaluated = evaluated_note(manifest)
        # tenants served at an operating point of their own: (manifest, evaluated)
        self.tenants: dict[str, tuple[Manifest, str]] = {}
        self.budgets: dict[str, Budget] = {}  # what set them
        # every operating point's (budget, threshold): the windows at or above each
        # are counted per tenant (scjepa_tenant_windows_at_point)
        self.points = thresholds_by_budget(manifest)

    def serve_tenants(self, budgets: Mapping[str, Budget]) -> None:
        """Each tenant of ``budgets`` alerts at its own operating point (false alarms
        per 1,000 windows: SCJEPA_TENANT_FA_BUDGET, the key file's budget lines); the
        others at :attr:`manifest`'s threshold. Raises :class:`ArtifactError` naming
        the first tenant whose budget is none of the manifest's operating points
        (nothing changed then)."""
        points = {
            t: at_budget(self.manifest, b.per_1000, t, b.set_by)
            for t, b in budgets.items()
        }
        self.tenants = {t: (m, evaluated_note(m)) for t, m in points.items()}
        self.budgets = dict(budgets)

    def manifest_for(self, tenant: str) -> Manifest:
        """The manifest ``tenant`` is served at: its threshold and, in
        ``eval_metrics.threshold.serving_at``, the operating point it keeps."""
        own = self.tenants.get(tenant)
        return self.manifest if own is None else own[0]

    def evaluated_for(self, tenant: str) -> str:
        """:attr:`evaluated` at ``tenant``'s operating point."""
        own = self.tenants.get(tenant)
        return self.evaluated if own is None else own[1]


class OnnxModel(Model):
    """One loaded artifact: the session, its manifest and the provider actually running it.

    On the CPU a batch runs in chunks of ``run_size`` windows (see :func:`run_size`).
    With a ``serial`` session (one intra-op thread) and ``parallel_runs`` > 1, a batch
    of several chunks runs them ``parallel_runs`` at a time, one thread each (the
    sessions release the GIL): chunks are independent, so this scales where intra-op
    threads, which split every small operator of one chunk, do not
    (docs/notebook/benchmarks.md).
    A batch of one chunk uses ``session`` and its intra-op threads.
    """

    def __init__(
        self,
        session: ort.InferenceSession,
        manifest: Manifest,
        *,
        precision: Literal["fp32", "int8", "fp16"],
        max_batch: int,
        cpu_chunk_tokens: int = CPU_CHUNK_TOKENS,
        serial: ort.InferenceSession | None = None,
        parallel_runs: int = 1,
    ) -> None:
        provider: str = session.get_providers()[0]  # the ACTIVE one
        super().__init__(
            manifest,
            provider=provider,
            precision=precision,
            max_batch=max_batch,
            run_size=run_size(manifest, provider, max_batch, cpu_chunk_tokens),
            parallel_runs=parallel_runs if serial is not None else 1,
        )
        self.session = session
        self.serial = serial
        # threads start on first use, from the scoring thread: they inherit its nice
        self._pool = (
            ThreadPoolExecutor(self.parallel_runs, thread_name_prefix="scjepa-chunk")
            if self.parallel_runs > 1
            else None
        )
        self._check_graph()

    def _check_graph(self) -> None:
        m = self.manifest
        inputs = self.session.get_inputs()
        if [i.name for i in inputs] != ["window"]:
            raise ArtifactError(
                f"graph inputs {[i.name for i in inputs]} != ['window'] (the contract)"
            )
        shape = inputs[0].shape
        if len(shape) != 3 or shape[1:] != [m.window, m.n_channels]:
            raise ArtifactError(
                f"graph input 'window' has shape {shape}; the manifest says "
                f"[batch, {m.window}, {m.n_channels}] ({m.n_channels} channels)"
            )
        if isinstance(shape[0], int) and shape[0] != -1:
            raise ArtifactError(f"graph input 'window' has a fixed batch of {shape[0]}")
        if inputs[0].type != "tensor(float)":
            raise ArtifactError(
                f"graph input 'window' is {inputs[0].type}, not float32"
            )
        outs = {o.name: o for o in self.session.get_outputs()}
        missing = [name for name in OUTPUTS if name not in outs]
        if missing:
            raise ArtifactError(f"graph outputs {sorted(outs)} lack {missing}")
        if m.novelty is not None:
            novelty = outs.get(NOVELTY)
            if novelty is None:
                raise ArtifactError(
                    f"graph outputs {sorted(outs)} lack ['novelty'], which the "
                    "manifest's novelty record (the input-drift monitor) says it has"
                )
            if novelty.type != "tensor(float)" or len(novelty.shape) != 1:
                raise ArtifactError(
                    f"graph output 'novelty' is {novelty.type} of shape "
                    f"{novelty.shape}; expected float32 [batch]"
                )
        if outs["codes"].type != "tensor(int64)":
            raise ArtifactError(
                f"graph output 'codes' is {outs['codes'].type}, not int64"
            )
        contrib = outs["channel_contrib"].shape  # the exporter may leave dim 1 symbolic
        if len(contrib) != 2 or (
            isinstance(contrib[1], int) and contrib[1] != m.n_channels
        ):
            raise ArtifactError(
                f"graph output 'channel_contrib' has shape {contrib}; "
                f"expected [batch, {m.n_channels}]"
            )

    def score(self, windows: np.ndarray) -> Scores:
        """Score (B, window, V) windows, one onnxruntime run per ``run_size`` of them
        (``parallel_runs`` of those runs at a time when there are several)."""
        x = validate_windows(windows, self.window, self.n_channels)
        chunks = -(-len(x) // self.run_size)
        names = list(self.outputs)
        if self._pool is not None and self.serial is not None and chunks > 1:
            serial = self.serial
            parts = list(
                self._pool.map(
                    lambda part: serial.run(names, {"window": part}),
                    balanced_chunks(x, chunks, self.parallel_runs),
                )
            )
        else:
            parts = [
                self.session.run(names, {"window": x[i : i + self.run_size]})
                for i in range(0, len(x), self.run_size)
            ]
        risk, contrib, codes, *rest = (
            np.concatenate([p[k] for p in parts]) for k in range(len(names))
        )
        novelty = None
        if rest:
            novelty = rest[0].astype(np.float32, copy=False).reshape(-1)
            if novelty.shape != (len(x),):
                raise ArtifactError(
                    f"graph returned novelty {rest[0].shape} for {len(x)} windows "
                    "(contract broken)"
                )
            # non-finite: readings beyond the float32 arithmetic, unlike any seen
            novelty = np.clip(np.nan_to_num(novelty, nan=1.0), 0.0, 1.0)
        if risk.shape != (len(x),) or contrib.shape != (len(x), self.n_channels):
            raise ArtifactError(
                f"graph returned risk {risk.shape}, channel_contrib {contrib.shape} for "
                f"{len(x)} windows of {self.n_channels} channels (contract broken)"
            )
        risk = risk.astype(np.float32, copy=False).reshape(len(x))
        if not np.isfinite(risk).all():
            # readings the graph's float32 arithmetic overflows on (around 1e19 in
            # the detectors, 1e38 anywhere): far beyond anything seen, as the risk of
            # a slightly smaller reading (1.0) says; the channels get no credit
            bad = ~np.isfinite(risk)
            log.warning(
                "%d of %d windows gave a non-finite risk (readings too large for "
                "the model's float32 arithmetic): served as risk 1.0",
                int(bad.sum()),
                len(x),
            )
            risk = np.where(bad, np.float32(1.0), risk)
            contrib = np.where(bad[:, None] | ~np.isfinite(contrib), 0.0, contrib)
        return Scores(
            risk=risk,
            contrib=contrib.astype(np.float32, copy=False),
            codes=codes.astype(np.int64, copy=False),
            by=self,
            novelty=novelty,
        )

    def close(self) -> None:
        """Stop the chunk threads (a model swapped out by a reload)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def warmup(self, batch_sizes: tuple[int, ...] | None = None) -> None:
        """Run the batch sizes the batcher will use, so the first request is not slow."""
        sizes = batch_sizes or tuple(
            sorted({1, min(8, self.max_batch), self.max_batch})
        )
        rng = np.random.default_rng(0)
        for b in sizes:
            self.score(rng.standard_normal((b, self.window, self.n_channels)))
        self.warmed = True


def run_size(
    manifest: Manifest, provider: str, max_batch: int, cpu_chunk_tokens: int
) -> int:
    """Windows per onnxruntime run: ``max_batch``, or fewer on the CPU provider.

    The encoder sees one token per kept channel and patch, so a batch of B windows is
    B * kept * patches tokens. On the CPU a large run spills its activations out of the
    cache and scores fewer windows per second than the same windows run in chunks
    (docs/notebook/benchmarks.md, "Chunked CPU calls"), so a batch runs in chunks of
    about ``cpu_chunk_tokens`` tokens; 0 turns that off. A GPU wants the whole batch in
    one run.
    """
    cfg = manifest.model_cfg
    if provider != CPU or cpu_chunk_tokens <= 0:
        return max_batch
    if "n_patches" in cfg:
        patches = int(cfg["n_patches"])
    elif "patch_len" in cfg:
        patches = manifest.window // int(cfg["patch_len"])
    else:  # a config that does not say: no chunking rather than a guess
        return max_batch
    patches += int(bool(cfg.get("stats_token", False)))  # the level token, if any
    tokens = sum(manifest.channel_mask) * patches  # per window
    return max(1, min(max_batch, cpu_chunk_tokens // tokens))


def balanced_chunks(x: np.ndarray, chunks: int, workers: int) -> list[np.ndarray]:
    """``x`` in ``chunks`` slices or more, rounded up to a multiple of ``workers``
    (at most one window each): sizes differ by one at most, none larger than a
    ``chunks`` split's, so the workers finish together."""
    return np.array_split(x, min(len(x), -(-chunks // workers) * workers))


def session_options(intra_op_threads: int, inter_op_threads: int) -> ort.SessionOptions:
    """Latency-oriented options: every graph optimisation, sequential execution."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.intra_op_num_threads = intra_op_threads
    so.inter_op_num_threads = inter_op_threads
    return so


def load_model(
    artifact: Path,
    *,
    provider: Literal["auto", "cpu", "cuda"] = "auto",
    precision: Literal["fp32", "int8", "fp16"] = "fp32",
    intra_op_threads: int = 1,
    inter_op_threads: int = 1,
    max_batch: int = 64,
    cpu_chunk_tokens: int = CPU_CHUNK_TOKENS,
    fa_budget: float | None = None,
) -> OnnxModel:
    """Open an artifact folder; raises :class:`ArtifactError` naming the failed check.

    ``fa_budget`` (false alarms per 1,000 windows; ``SCJEPA_FA_BUDGET``) alerts at
    that operating point of the manifest instead of its threshold
    (:func:`~service.manifest.at_budget`).

    ``precision="int8"`` loads ``model.int8.onnx`` (for the CPU) and ``"fp16"`` loads
    ``model.fp16.onnx`` (for the CUDA provider), each checked against the SHA-256 the
    manifest records for it; an artifact without the file is refused, and so is fp16
    on any provider but CUDA (onnxruntime's CPU kernels run fp16 far slower than fp32).
    """
    artifact = Path(artifact)
    manifest = at_budget(load_manifest(artifact), fa_budget)
    path = artifact / MODEL_FILE
    if precision != "fp32":
        path = artifact / (INT8_FILE if precision == "int8" else FP16_FILE)
        if not path.is_file():
            raise ArtifactError(
                f"{path}: precision {precision} requested but no {precision} model"
            )
        q = manifest.quantization
        digest = None if q is None else getattr(q, f"{precision}_sha256")
        if digest != sha256_file(path):
            raise ArtifactError(
                f"{path}: SHA-256 does not match the manifest's "
                f"quantization.{precision}_sha256"
            )
    wanted = requested_providers(provider)
    # On the CPU with several threads, a batch of several chunks runs them in
    # parallel on a one-thread session; the intra-op session keeps single chunks.
    parallel = (
        wanted == [CPU]
        and intra_op_threads > 1
        and run_size(manifest, CPU, max_batch, cpu_chunk_tokens) < max_batch
    )
    try:
        session = ort.InferenceSession(
            str(path),
            sess_options=session_options(intra_op_threads, inter_op_threads),
            providers=session_providers(wanted),
        )
    except Exception as e:  # onnxruntime raises its own untyped errors
        raise ArtifactError(f"{path}: onnxruntime cannot load it ({e})") from None
    active = session.get_providers()[0]
    serial = None
    if parallel:
        serial = ort.InferenceSession(
            str(path), sess_options=session_options(1, 1), providers=[CPU]
        )
    if precision == "fp16" and active != CUDA:
        raise ArtifactError(
            f"{path}: precision fp16 needs the CUDA provider, but {active} is active"
        )
    if provider == "cuda" and active != CUDA:
        raise ArtifactError(f"provider 'cuda' requested but {active} is active")
    if CUDA in wanted and active != CUDA:
        log.warning("CUDA requested but inactive after loading; running on %s", active)
    return OnnxModel(
        session,
        manifest,
        precision=precision,
        max_batch=max_batch,
        cpu_chunk_tokens=cpu_chunk_tokens,
        serial=serial,
        parallel_runs=intra_op_threads,
    )
