"""`scjepa bench infer`: serving speed of a model artifact, onnxruntime vs PyTorch eager.

    scjepa bench infer --artifact artifacts/msl --json docs/notebook/bench/infer.json \\
        --figure docs/notebook/bench/efficiency.png

Both runtimes score the same windows in the same process, so their ratio survives a noisy
machine. PyTorch runs the same architecture rebuilt from the manifest's config (random
weights: speed does not depend on them). FLOPs per window come from PyTorch's flop
counter. The efficiency figure compares SC-JEPA with a PatchTST-style encoder of the same
width and depth (overlapping patches of 16, stride 8) in latency vs batch size and vs
window length, as the paper's inference-efficiency figure does.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from collections.abc import Callable, Collection
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from training.bench import positive_float, positive_int

if TYPE_CHECKING:  # imported where they run: `scjepa bench --help` loads no torch
    import torch
    from torch import nn

    from model.config import ModelConfig
    from model.export import ServedModel


def time_fn(
    fn: Callable[[], Any], seconds: float, warmup: int = 2, min_calls: int = 5
) -> np.ndarray:
    """Per-call latencies (s) of ``fn`` over about ``seconds`` of repeated calls (at
    least ``min_calls``)."""
    for _ in range(warmup):
        fn()
    lat: list[float] = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds or len(lat) < min_calls:
        t = time.perf_counter()
        fn()
        lat.append(time.perf_counter() - t)
    return np.asarray(lat)


def time_interleaved(
    fns: dict[str, Callable[[], Any]],
    seconds: float,
    rounds: int = 5,
    warmup: bool = True,
) -> dict[str, np.ndarray]:
    """Per-call latencies of each fn, timed in alternation: up to ``rounds`` turns
    each, all of them together within about ``seconds`` (the warm-up call of each
    included; ``warmup=False`` when the caller has made it).

    On a shared machine the load changes by the second; alternating short turns gives
    every runtime (and the peak-matmul reference) the same conditions, so their ratios
    hold even when the absolute figures move. Every fn runs at least once per turn and
    at least one round runs: when single calls are slower than the budget allows, the
    rounds stop early, so the overshoot is at most one round of single calls.
    """
    deadline = time.perf_counter() + seconds
    for fn in fns.values() if warmup else ():
        fn()
    turn = max(deadline - time.perf_counter(), 0.0) / (rounds * len(fns))
    lat: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(rounds):
        if r and time.perf_counter() >= deadline:
            break
        for name, fn in fns.items():
            start = time.perf_counter()
            while True:
                t = time.perf_counter()
                fn()
                lat[name].append(time.perf_counter() - t)
                if t - start >= turn:
                    break
    return {name: np.asarray(v) for name, v in lat.items()}


def summary(lat: np.ndarray, batch: int) -> dict[str, float]:
    return {
        "windows_per_s": batch / float(np.median(lat)),
        "p50_ms": 1e3 * float(np.percentile(lat, 50)),
        "p99_ms": 1e3 * float(np.percentile(lat, 99)),
    }


def flops_per_window(model: nn.Module, n_channels: int, seq_len: int) -> float:
    """FLOPs of one window through ``model`` (PyTorch's counter: matmuls, convs, SDPA)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.randn(1, seq_len, n_channels))
    return float(counter.get_total_flops())


def sgemm(
    device: str = "cpu", dtype: torch.dtype | None = None, n: int = 2048
) -> tuple[Callable[[], Any], float]:
    """The machine's practical matmul peak as a timed call: (fn, FLOPs per call).

    Timed beside the model (CPU: same intra-op threads; CUDA: TF32 off for fp32), so
    "share of peak" compares like with like on a shared machine.
    """
    import torch

    dtype = dtype or torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    cuda = device == "cuda"

    def mm() -> None:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.mm(a, b)
        if cuda:
            torch.cuda.synchronize()

    return mm, 2.0 * n**3


def patchtst_style(
    d_model: int,
    n_layers: int,
    n_heads: int,
    seq_len: int,
    patch: int = 16,
    stride: int = 8,
) -> nn.Module:
    """A channel-independent Transformer over overlapping patches (len 16, stride 8),
    with random weights, in eval mode."""
    import torch
    from torch import nn

    from model.layers import Block
    from model.patching import revin

    class PatchTSTStyle(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            n = (seq_len - patch) // stride + 1
            self.embed = nn.Linear(patch, d_model)
            self.pos = nn.Parameter(0.02 * torch.randn(n, d_model))
            self.blocks = nn.ModuleList(
                Block(d_model, n_heads) for _ in range(n_layers)
            )
            self.ln = nn.LayerNorm(d_model)
            self.head = nn.Linear(n * d_model, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            B, T, V = x.shape
            xn, _, _ = revin(x.transpose(1, 2).reshape(B * V, T))  # (B*V, T)
            p = xn.unfold(1, patch, stride)  # (B*V, n, patch)
            h = self.embed(p) + self.pos  # (B*V, n, D)
            for blk in self.blocks:
                h = blk(h)
            out = self.head(self.ln(h).flatten(1)).view(B, V)  # (B, V)
            return torch.sigmoid(out.max(1).values)  # (B,)

    return PatchTSTStyle().eval()


def cpu_info() -> dict[str, Any]:
    """Model name and the vector extensions that decide fp32/int8 kernels (Linux)."""
    import os

    info: dict[str, Any] = {"cores": os.cpu_count()}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            info["model"] = value.strip()
        elif key.strip() == "flags":
            wanted = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")
            info["isa"] = [f for f in value.split() if f in wanted]
            break
    return info


def served_from_config(
    cfg: ModelConfig, mask: list[bool], hidden: int = 256
) -> ServedModel:
    """The served graph's architecture with random weights and the artifact's channel mask.

    The mask matters: the graph encodes only the kept channels (33 of MSL's 55), so an
    eager model keeping all of them would do 55/33 of the work and flatter onnxruntime.
    """
    from model.export import ServedModel
    from model.scjepa import SCJEPA
    from training.evaluate.probe import build_probe_net

    probe = build_probe_net(cfg.n_tokens * cfg.n_codes, hidden, 0.0)
    return ServedModel(SCJEPA(cfg), probe, list(mask), (1.0, 0.0)).eval()


def ort_session(path: Path, threads: int, providers: list[str]) -> Any:
    """A plain onnxruntime session, with the provider options the service uses."""
    import onnxruntime as ort

    from service.inference import session_providers

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(path), so, providers=session_providers(providers))


Runtime = tuple[Callable[[np.ndarray], Any], str, str]  # (fn, baseline name, peak key)


def in_calls_of(
    fn: Callable[[np.ndarray], Any], n: int
) -> Callable[[np.ndarray], list[Any]]:
    """``fn`` over a batch in calls of at most ``n`` windows."""
    return lambda x: [fn(x[i : i + n]) for i in range(0, len(x), n)]


def ort_fn(sess: Any) -> Callable[[np.ndarray], Any]:
    """The graph run as the service runs it (its outputs, not the probe's features;
    the input-drift monitor's where the graph has one)."""
    from model.export import NOVELTY
    from service.inference import OUTPUTS

    names = list(OUTPUTS)
    names += [NOVELTY] if NOVELTY in {o.name for o in sess.get_outputs()} else []
    return lambda x: sess.run(names, {"window": x})


def without_novelty(path: Path, threads: int) -> Any | None:
    """A session of the graph at ``path`` cut down to the outputs before its
    input-drift monitor (None: it has none), so one run times what the monitor costs."""
    import tempfile

    import onnx

    from model.export import NOVELTY, OUTPUTS

    outputs = [
        o.name for o in onnx.load(str(path), load_external_data=False).graph.output
    ]
    if NOVELTY not in outputs:
        return None
    with tempfile.TemporaryDirectory() as d:
        bare = Path(d) / "bare.onnx"
        onnx.utils.extract_model(str(path), str(bare), ["window"], list(OUTPUTS))
        return ort_session(bare, threads, ["CPUExecutionProvider"])


def torch_fn(
    model: nn.Module, device: str, half: bool = False
) -> Callable[[np.ndarray], Any]:
    import torch

    amp = torch.autocast(device, dtype=torch.float16, enabled=half)

    def f(x: np.ndarray) -> Any:
        with torch.inference_mode(), amp:
            out = model(torch.from_numpy(x).to(device))
            return [o.float().cpu() for o in out]  # .cpu() waits for the GPU

    return f


def _runtimes(
    artifact: Path,
    eager: ServedModel,
    threads: int,
    devices: Collection[str],
    max_batch: int,
) -> tuple[
    dict[str, Runtime], dict[str, tuple[Callable[[], Any], float]], dict[str, str]
]:
    """Every runtime this machine offers for the artifact, with its baseline and peak.

    CPU rows compare with PyTorch eager on the CPU; CUDA rows with PyTorch eager on the
    GPU (fp32), so each ratio is ours vs the framework on the same device. ``devices``
    picks which of the two sets run ("cpu", "cuda"): CPU rows at GPU batch sizes take
    minutes a call.
    """
    import onnxruntime as ort
    import torch

    rt: dict[str, Runtime] = {}
    peaks: dict[str, tuple[Callable[[], Any], float]] = {}
    notes: dict[str, str] = {}

    if "cpu" in devices:
        _cpu_runtimes(artifact, eager, threads, rt, peaks)
    if "cuda" in devices:
        _cuda_runtimes(artifact, eager, threads, max_batch, rt, peaks, notes)
        if not any("cuda" in k for k in rt):
            notes["cuda"] = (
                "no CUDA runtime on this machine (onnxruntime providers: "
                f"{', '.join(ort.get_available_providers())}; torch CUDA "
                f"{torch.cuda.is_available()})"
            )
    return rt, peaks, notes


def _cpu_runtimes(
    artifact: Path,
    eager: ServedModel,
    threads: int,
    rt: dict[str, Runtime],
    peaks: dict[str, tuple[Callable[[], Any], float]],
) -> None:
    from service.inference import load_model
    from service.manifest import INT8_FILE, MODEL_FILE

    cpu_eager = "pytorch eager cpu fp32"
    peaks["cpu fp32"] = sgemm("cpu")
    sess = ort_session(artifact / MODEL_FILE, threads, ["CPUExecutionProvider"])
    rt["onnxruntime cpu fp32"] = (ort_fn(sess), cpu_eager, "cpu fp32")
    bare = without_novelty(artifact / MODEL_FILE, threads)
    if bare is not None:  # the monitor's cost: this row against the one above
        rt["onnxruntime cpu fp32 without the novelty monitor"] = (
            ort_fn(bare),
            "onnxruntime cpu fp32",
            "cpu fp32",
        )
    if (artifact / INT8_FILE).is_file():
        q = ort_session(artifact / INT8_FILE, threads, ["CPUExecutionProvider"])
        rt["onnxruntime cpu int8"] = (ort_fn(q), "onnxruntime cpu fp32", "cpu fp32")

    rt[cpu_eager] = (torch_fn(eager, "cpu"), cpu_eager, "cpu fp32")
    # What the service runs: its runtime (service/inference.py) splits a batch into
    # onnxruntime calls of about CPU_CHUNK_TOKENS encoder tokens. Eager in the same
    # chunks shows how much of that gain is the chunking, not onnxruntime. With
    # threads > 1 the runtime runs those calls side by side, one thread each, while
    # eager's chunks run one after another on its intra-op threads.
    served = load_model(
        artifact, provider="cpu", intra_op_threads=threads, max_batch=1 << 16
    )
    n, par = served.run_size, served.parallel_runs
    at_once = f", {par} calls at once" if par > 1 else ""  # threads > 1: see Model
    rt[f"service runtime cpu fp32 ({n} windows a call{at_once})"] = (
        served.score,
        cpu_eager,
        "cpu fp32",
    )
    rt[f"pytorch eager cpu fp32 ({n} windows a call)"] = (
        in_calls_of(torch_fn(eager, "cpu"), n),
        cpu_eager,
        "cpu fp32",
    )


def _cuda_runtimes(
    artifact: Path,
    eager: ServedModel,
    threads: int,
    max_batch: int,
    rt: dict[str, Runtime],
    peaks: dict[str, tuple[Callable[[], Any], float]],
    notes: dict[str, str],
) -> None:
    """onnxruntime's CUDA provider, plain and through the scorer's runtime (which
    refuses to load unless CUDA is the active provider), in fp32 and fp16."""
    import onnxruntime as ort
    import torch

    from service.inference import load_model
    from service.manifest import FP16_FILE, MODEL_FILE, ArtifactError

    cuda = "CUDAExecutionProvider"
    if cuda in ort.get_available_providers():
        dtypes: tuple[tuple[Literal["fp32", "fp16"], str], ...] = (
            ("fp32", MODEL_FILE),
            ("fp16", FP16_FILE),
        )
        for dtype, name in dtypes:
            if not (artifact / name).is_file():
                notes[f"onnxruntime cuda {dtype}"] = f"no {name} in the artifact"
                continue
            g = ort_session(artifact / name, threads, [cuda, "CPUExecutionProvider"])
            active = g.get_providers()[0]
            if active != cuda:  # asked for CUDA, got the CPU: report, do not time it
                notes[f"onnxruntime cuda {dtype}"] = f"CUDA requested, {active} active"
                continue
            rt[f"onnxruntime cuda {dtype}"] = (
                ort_fn(g),
                "pytorch eager cuda fp32",
                f"cuda {dtype}",
            )
            try:
                served = load_model(
                    artifact, provider="cuda", precision=dtype, max_batch=max_batch
                )
            except ArtifactError as e:
                notes[f"service runtime cuda {dtype}"] = str(e)
                continue
            rt[f"service runtime cuda {dtype}"] = (
                served.score,
                "pytorch eager cuda fp32",
                f"cuda {dtype}",
            )
    if torch.cuda.is_available():
        gpu = copy.deepcopy(eager).to("cuda")
        rt["pytorch eager cuda fp32"] = (
            torch_fn(gpu, "cuda"),
            "pytorch eager cuda fp32",
            "cuda fp32",
        )
        rt["pytorch eager cuda fp16 (autocast)"] = (
            torch_fn(gpu, "cuda", half=True),
            "pytorch eager cuda fp32",
            "cuda fp16",
        )
        peaks["cuda fp32"] = sgemm("cuda", torch.float32, 8192)
        peaks["cuda fp16"] = sgemm("cuda", torch.float16, 8192)


def drop_failing(
    runtimes: dict[str, Runtime], x: np.ndarray, notes: dict[str, str]
) -> None:
    """Call each runtime once on ``x`` (its warm-up call); one that fails (a GPU out
    of memory at a large batch, say) leaves the run, noted with its error, and the
    others go on."""
    for name in list(runtimes):
        try:
            runtimes[name][0](x)
        except Exception as e:  # onnxruntime and torch raise their own error types
            first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
            notes[name] = f"failed at batch {len(x)}: {type(e).__name__}: {first}"
            print(f"dropped {name}: {notes[name]}", flush=True)
            del runtimes[name]


def parity(
    artifact: Path,
    manifest: dict[str, Any],
    runtimes: dict[str, Runtime],
    threads: int,
    n: int = 256,
) -> dict[str, dict[str, float]]:
    """Each onnxruntime row's risks against onnxruntime's CPU fp32 run of model.onnx,
    on the export's random windows: the largest difference and how many of ``n``
    windows land on the other side of the alert threshold."""
    from service.manifest import MODEL_FILE

    rng = np.random.default_rng(1)
    x = (
        rng.normal(size=(n, manifest["window"], len(manifest["channel_mask"]))) * 3 + 1
    ).astype(np.float32)
    ref_sess = ort_session(artifact / MODEL_FILE, threads, ["CPUExecutionProvider"])
    ref = ref_sess.run(["risk"], {"window": x})[0].reshape(n)
    out: dict[str, dict[str, float]] = {}
    for name, (fn, _, _) in runtimes.items():
        if name != "onnxruntime cpu fp32" and name.startswith(
            ("onnxruntime", "service runtime")
        ):
            got = fn(x)
            risk = np.asarray(got.risk if hasattr(got, "risk") else got[0]).reshape(n)
            flips = (risk >= manifest["threshold"]) != (ref >= manifest["threshold"])
            out[name] = {
                "max_abs_risk_diff": float(np.abs(risk - ref).max()),
                "alert_flips": int(flips.sum()),
                "windows": n,
            }
    return out


def bench_artifact(
    artifact: Path,
    batch_sizes: list[int],
    seconds: float,
    threads: int,
    devices: Collection[str] = ("cpu", "cuda"),
) -> dict[str, Any]:
    import onnxruntime as ort
    import torch

    from model.config import ModelConfig

    manifest = json.loads((artifact / "manifest.json").read_text())
    cfg = ModelConfig(**manifest["model_config"])
    mask = manifest["channel_mask"]
    n_in = len(mask)
    torch.set_num_threads(threads)
    eager = served_from_config(cfg, mask)
    flops = flops_per_window(eager, n_in, cfg.seq_len)
    runtimes, peaks, notes = _runtimes(
        artifact, eager, threads, devices, max(batch_sizes)
    )
    if not runtimes:
        from training.errors import UserError

        raise UserError(
            "bench infer: nothing to time on this machine ("
            + "; ".join(f"{k}: {v}" for k, v in notes.items())
            + ")"
        )
    agree = parity(artifact, manifest, runtimes, threads)
    for name, d in agree.items():
        print(
            f"parity {name}: max |risk - cpu fp32| {d['max_abs_risk_diff']:.2e}, "
            f"{d['alert_flips']} of {d['windows']} alerts flipped",
            flush=True,
        )
    print(
        f"{flops / 1e9:.3f} GFLOP/window ({sum(mask)} of {n_in} channels kept)",
        flush=True,
    )
    for name, why in notes.items():
        print(f"skipped {name}: {why}", flush=True)
    n_timed = len(runtimes) + len(peaks)
    print(
        f"timing {n_timed} runtimes x {len(batch_sizes)} batch sizes x {seconds:g} s "
        f"= about {n_timed * len(batch_sizes) * seconds:.0f} s",
        flush=True,
    )
    t_start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    peak_rows: list[dict[str, Any]] = []
    rng = np.random.default_rng(0)
    for b in batch_sizes:
        x = rng.normal(size=(b, cfg.seq_len, n_in)).astype(np.float32)
        drop_failing(runtimes, x, notes)  # their warm-up calls
        for fn, _ in peaks.values():
            fn()
        fns: dict[str, Callable[[], Any]] = {
            name: partial(f, x) for name, (f, _, _) in runtimes.items()
        }
        fns |= {f"peak {k}": fn for k, (fn, _) in peaks.items()}
        lat = time_interleaved(fns, seconds * len(fns), warmup=False)
        peak = {
            k: f / float(np.median(lat[f"peak {k}"])) / 1e9
            for k, (_, f) in peaks.items()
        }
        peak_rows.append(
            {"batch": b} | {f"{k} gflop_per_s": v for k, v in peak.items()}
        )
        res: dict[str, dict[str, Any]] = {
            name: summary(lat[name], b) for name in runtimes
        }
        for name, r in res.items():
            _, base, pk = runtimes[name]
            r["gflop_per_s"] = r["windows_per_s"] * flops / 1e9
            r["share_of_peak"] = r["gflop_per_s"] / peak[pk] if pk in peak else None
            r["baseline"] = base
            r["vs_baseline"] = (
                r["windows_per_s"] / res[base]["windows_per_s"] if base in res else None
            )
            rows.append({"batch": b, "runtime": name} | r)
        print(
            f"batch {b:>4} (peak "
            + ", ".join(f"{k} {v:.0f}" for k, v in peak.items())
            + " GFLOP/s): "
            + "  ".join(
                f"{n} {r['windows_per_s']:.1f} w/s ({r['vs_baseline'] or 0:.2f}x, "
                f"{100 * (r['share_of_peak'] or 0):.0f}% pk)"
                for n, r in res.items()
            ),
            flush=True,
        )
    return {
        "artifact": str(artifact),
        "channels_in": n_in,
        "channels_kept": sum(mask),
        "flops_per_window": flops,
        "peak_gflop_per_s": peak_rows,
        "threads": threads,
        "cpu": cpu_info(),
        "onnxruntime": ort.__version__,
        "onnxruntime_providers": ort.get_available_providers(),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "devices": sorted(set(devices)),
        "skipped": notes,
        "parity_vs_cpu_fp32": agree,
        "seconds_per_runtime_and_batch": seconds,
        "timing_s": round(time.perf_counter() - t_start, 2),
        "rows": rows,
    }


def efficiency_figure(
    cfg: ModelConfig, n_channels: int, path: Path, seconds: float
) -> dict[str, Any]:
    """Latency vs batch size and vs window length: SC-JEPA vs a PatchTST-style encoder."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    def latency(model: nn.Module, b: int, t: int) -> float:
        x = torch.randn(b, t, n_channels)
        with torch.inference_mode():
            lat = time_fn(lambda: model(x), seconds, warmup=1, min_calls=3)
            return 1e3 * float(np.median(lat))

    out: dict[str, Any] = {"batch": {}, "length": {}}
    batches, lengths = [1, 4, 16, 64], [100, 200, 400, 800]
    for name, make in (
        (
            "SC-JEPA",
            lambda t: served_from_config(
                ModelConfig(**(cfg.to_dict() | {"seq_len": t})), [True] * n_channels
            ),
        ),
        (
            "PatchTST-style",
            lambda t: patchtst_style(cfg.d_model, cfg.n_layers, cfg.n_heads, t),
        ),
    ):
        at_window = make(cfg.seq_len)  # the batch sweep: the artifact's window
        out["batch"][name] = [latency(at_window, b, cfg.seq_len) for b in batches]
        out["length"][name] = [latency(make(t), 16, t) for t in lengths]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for name in out["batch"]:
        a.plot(batches, out["batch"][name], "o-", label=name)
        b.plot(lengths, out["length"][name], "o-", label=name)
    a.set(
        xscale="log",
        yscale="log",
        xlabel=f"batch size (windows of {cfg.seq_len})",
        ylabel="latency (ms)",
        title=f"Latency vs batch ({n_channels} channels)",
    )
    b.set(
        xlabel="window length (steps)",
        ylabel="latency (ms)",
        title="Latency vs window length (batch 16)",
    )
    a.legend()
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return out | {"batches": batches, "lengths": lengths}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--artifact",
        type=Path,
        required=True,
        help="folder with model.onnx + manifest.json",
    )
    p.add_argument("--batch-sizes", default="1,2,4,8,16,32,64,128,256")
    p.add_argument(
        "--seconds",
        type=positive_float,
        default=2.0,
        help="timing budget per runtime and batch size: the run times every runtime "
        "(and the matmul peak) at every batch size, about runtimes x batch sizes x "
        "SECONDS in all (printed at the start), plus set-up",
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        default=2,
        help="intra-op threads for both runtimes",
    )
    p.add_argument(
        "--devices",
        default="cpu,cuda",
        help="which runtimes to time: cpu, cuda or both (CUDA rows run where "
        "onnxruntime's CUDA provider and PyTorch's CUDA are present)",
    )
    p.add_argument("--json", type=Path, help="write results here")
    p.add_argument("--figure", type=Path, help="write the efficiency figure (PNG) here")


def run(args: argparse.Namespace) -> int:
    from model.config import ModelConfig
    from training.bench import (
        check_json,
        load_after,
        machine,
        read_manifest,
        write_json,
    )
    from training.errors import UserError

    try:
        sizes = [int(b) for b in args.batch_sizes.split(",")]
    except ValueError:
        raise UserError(
            f"--batch-sizes {args.batch_sizes!r}: integers, e.g. 1,8,64"
        ) from None
    if not sizes or min(sizes) < 1:
        raise UserError(f"--batch-sizes {args.batch_sizes!r}: each must be >= 1")
    devices = {d.strip() for d in args.devices.split(",") if d.strip()}
    if not devices or not devices <= {"cpu", "cuda"}:
        raise UserError(f"--devices {args.devices!r}: cpu, cuda or cpu,cuda")
    read_manifest(args.artifact, ("model_config", "channel_mask", "threshold"))
    if not (args.artifact / "model.onnx").is_file():
        raise UserError(f"--artifact {args.artifact}: no model.onnx")
    check_json(args.json)
    check_json(args.figure, "--figure")
    ran_on = machine()
    res = ran_on | bench_artifact(
        args.artifact, sizes, args.seconds, args.threads, devices
    )
    res["cpu_model"], res["load_after"] = ran_on["cpu"], load_after()
    if args.figure:
        manifest = json.loads((args.artifact / "manifest.json").read_text())
        cfg = ModelConfig(**manifest["model_config"])
        res["efficiency"] = efficiency_figure(
            cfg, len(manifest["channel_mask"]), args.figure, args.seconds / 2
        )
    if args.json:
        write_json(args.json, res, indent=2)
    return 0
