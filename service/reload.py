"""Hot model reload: the artifact folder (``SCJEPA_ARTIFACT``) is read again, checked,
warmed and swapped in atomically, while the old model keeps serving.

Triggered by POST /admin/reload (an @admin key) or SIGHUP. Where inference runs in a
child process (service/infer_process.py) the new model is loaded by a new child, and
the old child is stopped once the batches it holds are scored; otherwise it is loaded
on a thread of its own (same nice and CPU slice as the inference thread, kept for the
next reload). Either way scoring goes on meanwhile. Refused, with the old model still
serving and the reason reported (log,
``scjepa_reloads_total{what="model",outcome="failed"}``, the reload status on
GET /admin/reload and GET /models), when:

- the manifest or the model file fails the artifact contract (service/manifest.py:
  format, SHA-256, graph inputs and outputs against the manifest);
- the new model's window or channels differ from the loaded one's (the streams hold
  buffered rows of the old layout: that change needs a restart);
- a warm-up batch scores anything but finite risks in [0, 1] or the wrong shapes.

The swap is one reference assignment on the event loop; :meth:`ModelSlot.score` reads
the reference once per micro-batch, so every batch is scored by one model, and each
risk record names the model that scored it (``model.version``). A child process that
dies is replaced the same way (the artifact read again, as a restart would).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import numpy as np

from service import metrics
from service.batcher import inference_executor
from service.config import Settings
from service.infer_process import InferenceProcess, InferenceUnavailable
from service.inference import Model, OnnxModel, Scores, load_model
from service.manifest import ArtifactError, Budget, now_utc
from service.schemas import ModelRef, ReloadStatus


def release_memory() -> None:
    """Hand the heap's free memory back to the system (glibc's ``malloc_trim``): a
    swapped-out session's memory otherwise stays in the process, and the RSS grew by
    a few MB a reload (measured: 120 -> 141 MB over 30 reloads; flat with it)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class ReloadBusy(RuntimeError):
    """A reload is already running."""


def ref(model: Model) -> ModelRef:
    return ModelRef(name=model.manifest.name, version=model.manifest.version)


def load_checked(
    settings: Settings,
    current: Model | None,
    budgets: Mapping[str, Budget] | None = None,
) -> OnnxModel:
    """Load, check and warm the artifact in ``settings.artifact``, its tenants at the
    operating points of ``budgets``; raises :class:`ArtifactError` naming the check
    that failed."""
    model = load_model(
        settings.artifact,
        provider=settings.provider,
        precision=settings.precision,
        intra_op_threads=settings.intra_op_threads,
        inter_op_threads=settings.inter_op_threads,
        max_batch=settings.max_batch,
        cpu_chunk_tokens=settings.cpu_chunk_tokens,
        fa_budget=settings.fa_budget,
    )
    try:
        model.serve_tenants(budgets or {})
        if current is not None:
            same_layout(current, model)
        model.warmup()
        rng = np.random.default_rng(1)
        x = rng.standard_normal((3, model.window, model.n_channels))
        check(model.score(x.astype(np.float32)), 3, model.n_channels)
    except BaseException:
        model.close()
        raise
    return model


def same_layout(current: Model, new: Model) -> None:
    """Raise :class:`ArtifactError` if ``new`` reads windows of another layout."""
    old, m = current.manifest, new.manifest
    for what in ("window", "n_channels", "channels"):
        a, b = getattr(old, what), getattr(m, what)
        if a != b:
            raise ArtifactError(
                f"the new model's {what} is {b}, the loaded one's {a}: streams "
                "hold readings of the old layout (restart to change it)"
            )


def check(scores: Scores, n: int, channels: int) -> None:
    risk = scores.risk
    if risk.shape != (n,) or scores.contrib.shape != (n, channels):
        raise ArtifactError(
            f"warm-up scored risk {risk.shape}, channel_contrib "
            f"{scores.contrib.shape} for {n} windows of {channels} channels"
        )
    if not np.all(np.isfinite(risk)) or risk.min() < 0 or risk.max() > 1:
        raise ArtifactError(f"warm-up risks {risk.tolist()} are not all in [0, 1]")


class ModelSlot:
    """The model in service; :meth:`reload` swaps it and :meth:`score` is what the
    micro-batcher awaits. ``current`` describes the model (manifest, provider) for
    records and readers. Scoring runs either on this process's inference thread
    (``executor``, the model an :class:`OnnxModel`) or in a child process
    (``child``, service/infer_process.py), restarted when it dies."""

    def __init__(
        self,
        settings: Settings,
        *,
        local: OnnxModel | None = None,
        executor: ThreadPoolExecutor | None = None,
        child: InferenceProcess | None = None,
        on_swap: Callable[[Model], None] | None = None,
    ) -> None:
        model: Model | None = child.model if child is not None else local
        if model is None or (local is not None and executor is None):
            raise ValueError("a slot holds a child process, or a model and its thread")
        self.current = model
        self.local = local
        self.child = child
        self.settings = settings
        self.executor = executor  # the inference thread: the old model closes there
        self.on_swap = on_swap
        # the tenants at operating points of their own (the keys' table): every
        # model loaded serves them (:meth:`serve_budgets` changes them)
        self.budgets = dict(model.budgets)
        self.status = ReloadStatus(outcome="none", serving=ref(model))
        self._lock = asyncio.Lock()
        # a SIGHUP's reload waits for the one running: later SIGHUPs join it
        self._queued = False
        self._restart = asyncio.Lock()
        self._loading: ThreadPoolExecutor | None = None
        self.log = logging.getLogger(__name__)

    @classmethod
    async def open(
        cls,
        settings: Settings,
        *,
        in_process: bool,
        budgets: Mapping[str, Budget] | None = None,
        on_swap: Callable[[Model], None] | None = None,
    ) -> ModelSlot:
        """Load, check and warm ``settings.artifact``, its tenants at the operating
        points of ``budgets``: on an inference thread of this process (its nice and
        slice: batcher.inference_executor) or, ``in_process`` false, in a child
        process of its own."""
        if not in_process:
            child = await InferenceProcess.start(settings, budgets)
            return cls(settings, child=child, on_swap=on_swap)
        executor = inference_executor(settings.infer_nice)
        local = await asyncio.get_running_loop().run_in_executor(
            executor, partial(load_checked, settings, None, budgets)
        )
        return cls(settings, local=local, executor=executor, on_swap=on_swap)

    def _loader(self) -> ThreadPoolExecutor:
        """One thread, kept for every reload, loads the new models (same nice and
        CPU slice as the inference thread)."""
        if self._loading is None:
            self._loading = inference_executor(self.settings.infer_nice)
        return self._loading

    async def close(self) -> None:
        if self._loading is not None:
            self._loading.shutdown(wait=False)
        if self.child is not None:
            await self.child.close()
        if self.executor is not None:
            self.executor.shutdown(wait=True)

    async def score(self, windows: np.ndarray) -> Scores:
        """Score one micro-batch with the model in service now (read once per batch).
        Raises :class:`InferenceUnavailable` when the child process died holding it,
        after a new child was started (or failed to start)."""
        child = self.child
        if child is None:
            local = self.local
            assert local is not None and self.executor is not None
            start = time.perf_counter()
            loop = asyncio.get_running_loop()
            out = await loop.run_in_executor(self.executor, local.score, windows)
            metrics.INFERENCE_LATENCY.observe(time.perf_counter() - start)
            return out
        try:
            return await child.score(windows)
        except InferenceUnavailable:
            await self._revive(child)
            raise

    async def _revive(self, dead: InferenceProcess) -> None:
        """Start a child in place of ``dead`` (once, however many batches it failed);
        the artifact is loaded again as a restarted process would."""
        async with self._restart:
            if self.child is not dead:  # replaced already (or by a reload)
                return
            self.log.error("inference process %s died; starting a new one", dead.pid)
            try:
                new = await self._start_child()
            except Exception as e:  # tried again on the next batch; not ready till then
                self.current.warmed = False
                metrics.RELOADS.labels(what="inference_process", outcome="failed").inc()
                self.log.error("inference process could not be restarted: %s", e)
                return
            metrics.RELOADS.labels(what="inference_process", outcome="ok").inc()
            old, at = self.current.manifest, now_utc()
            self._swap(new.model, child=new)
            await dead.close(timeout=1.0)
            m = new.model.manifest
            if (m.name, m.version, m.onnx_sha256) != (
                old.name,
                old.version,
                old.onnx_sha256,
            ):  # the folder held a newer artifact, not yet reloaded: now it serves
                metrics.set_model(new.model)
                metrics.RELOADS.labels(what="model", outcome="ok").inc()
                previous = ModelRef(name=old.name, version=old.version)
                self.status = ReloadStatus(
                    outcome="ok", serving=ref(new.model), previous=previous, at=at
                )
                self.log.warning(
                    "the new inference process loaded the artifact folder's %s %s "
                    "(was %s %s): it serves now, as after a reload",
                    m.name,
                    m.version,
                    old.name,
                    old.version,
                )

    def _swap(
        self,
        model: Model,
        *,
        local: OnnxModel | None = None,
        child: InferenceProcess | None = None,
    ) -> None:
        self.current, self.local, self.child = model, local, child
        if self.on_swap is not None:
            self.on_swap(model)

    async def _start_child(self) -> InferenceProcess:
        """A new child on the artifact folder; one whose model reads another layout
        is stopped before the error is raised (else every failed revival, one per
        batch, left a process holding a model)."""
        child = await InferenceProcess.start(self.settings, self.budgets)
        try:
            same_layout(self.current, child.model)
        except ArtifactError:
            await child.close(timeout=1.0)
            raise
        return child

    async def _load(self) -> tuple[Model, OnnxModel | None, InferenceProcess | None]:
        loop = asyncio.get_running_loop()
        new: Model
        local: OnnxModel | None = None
        child: InferenceProcess | None = None
        close: Callable[[], Awaitable[Any]]
        if self.child is not None:
            child = await self._start_child()
            new, close = child.model, partial(child.close, timeout=1.0)
        else:
            local = await loop.run_in_executor(
                self._loader(),
                partial(load_checked, self.settings, self.current, self.budgets),
            )
            new = local
            close = partial(loop.run_in_executor, self._loader(), local.close)
        if new.budgets != self.budgets:  # the key file changed them while it loaded
            try:
                new.serve_tenants(self.budgets)
            except ArtifactError:
                await close()
                raise
        return new, local, child

    def serve_budgets(self, budgets: Mapping[str, Budget]) -> None:
        """Serve the tenants of ``budgets`` at their operating points from the next
        window scored (the keys' table changed them); raises :class:`ArtifactError`
        naming a budget the model serving has no threshold for, nothing changed."""
        self.current.serve_tenants(budgets)
        self.budgets = dict(budgets)
        metrics.set_model(self.current)

    async def reload(self, *, wait: bool = False) -> ReloadStatus:
        """Load, check, warm and swap; the status says what happened. Raises
        :class:`ReloadBusy` while another reload runs, unless ``wait`` (SIGHUP's):
        then it runs once that one ends, as the folder may have changed since that
        one read it (a reload asked for is never dropped). Those waiting run as one,
        that reads the folder after them all (five SIGHUPs were five full reloads)."""
        if self._lock.locked():
            if not wait:
                raise ReloadBusy("a reload is already running")
            if self._queued:  # one waits already, to read the folder after this one
                return self.status
            self._queued = True
            try:  # until the running one ends (cancelled too: none left queued)
                async with self._lock:
                    pass
            finally:
                self._queued = False
        async with self._lock:  # free, with no waiter: taken without a pause
            loop = asyncio.get_running_loop()
            started, at = time.perf_counter(), now_utc()
            old, old_local, old_child = self.current, self.local, self.child
            try:
                new, local, child = await self._load()
            except Exception as e:  # onnxruntime and numpy raise their own types
                error = str(e) if isinstance(e, ArtifactError) else repr(e)
                self.status = ReloadStatus(
                    outcome="failed",
                    serving=ref(old),
                    error=error,
                    at=at,
                    seconds=round(time.perf_counter() - started, 3),
                )
                metrics.RELOADS.labels(what="model", outcome="failed").inc()
                self.log.error(
                    "model reload failed, still serving %s %s: %s",
                    old.manifest.name,
                    old.manifest.version,
                    error,
                )
                return self.status
            self._swap(new, local=local, child=child)  # scores the next micro-batch
            previous, was = ref(old), f"{old.manifest.name} {old.manifest.version}"
            del old
            if old_child is not None:  # after the batches it holds
                await old_child.close()
            elif old_local is not None and self.executor is not None:
                # after any batch the old model is running now (one inference
                # thread); then, its last reference gone, its memory goes back
                retired = loop.run_in_executor(self.executor, old_local.close)
                del old_local
                await retired
                await loop.run_in_executor(self.executor, release_memory)
            m = new.manifest
            metrics.set_model(new)
            metrics.RELOADS.labels(what="model", outcome="ok").inc()
            self.status = ReloadStatus(
                outcome="ok",
                serving=ref(new),
                previous=previous,
                at=at,
                seconds=round(time.perf_counter() - started, 3),
            )
            self.log.info(
                "model reloaded: %s -> %s %s on %s (%.2f s)",
                was,
                m.name,
                m.version,
                new.provider,
                self.status.seconds,
            )
            return self.status
