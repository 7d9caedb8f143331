"""Inference in a process of its own: a scorer's onnxruntime session lives in a child
process, so no Python thread of the scorer (its event loop reading work and writing
records) competes with the model for one GIL.

    child = await InferenceProcess.start(settings)   # loads, checks, warms the artifact
    scores = await child.score(windows)              # (B, window, V) float32
    await child.close()                              # after the batches it holds

The child is a fresh interpreter (``python -m service.infer_process``: no copy of the
parent's event loop, sockets or threads, and none of its main module) and is the only
process that opens the session, on the CPU or CUDA. Parent and child talk over a Unix socket pair: a request is
a (B, window, V) header and the float32 windows; a reply is a status, the onnxruntime
time, then the risks, contributions, codes (and novelties, where the manifest records
the monitor) as raw arrays. The child answers in
order, so up to ``in_flight`` batches can be queued on it: it starts the next one while
the parent is still unpacking and writing the last (docs/scaling.md, step 2).

A child that dies (killed, out of memory), or that leaves a batch unanswered for
``SCJEPA_INFER_TIMEOUT_S`` (hung: it is killed), fails the batches it holds with
:class:`InferenceUnavailable`; the scorer leaves their windows pending in the work
queue (they are claimed again) and :class:`service.reload.ModelSlot` starts a new
child. The parent keeps what the records need: the manifest and the provider
(:class:`service.inference.Model`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from service import metrics, sched
from service.config import Settings
from service.inference import Model, Scores, WindowError
from service.manifest import ArtifactError, Budget, Manifest

log = logging.getLogger(__name__)

_HELLO = struct.Struct("<I")  # length of the JSON that follows
_REQUEST = struct.Struct("<III")  # windows, window length, channels; then float32s
_REPLY = struct.Struct("<BdII")  # status, seconds, windows (or message bytes), patches
_OK, _BAD_WINDOWS, _FAILED = 0, 1, 2
# what the child needs of the settings to load the model as load_checked does
_CHILD_SETTINGS = ("artifact", "provider", "precision", "intra_op_threads",
                   "inter_op_threads", "max_batch", "cpu_chunk_tokens", "infer_nice")  # fmt: skip


class InferenceUnavailable(RuntimeError):
    """The inference process died (or could not be started): the batch was not scored."""


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise EOFError
        got += k
    return buf


def _child_main(sock: socket.socket, settings: Settings) -> None:
    """The child: load the artifact, say hello, then score requests until EOF."""
    from service.reload import load_checked  # reload imports this module

    # Ctrl-C goes to the whole process group: the parent decides when the child stops
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if settings.infer_nice and sys.platform == "linux":  # relative to the scorer
        with contextlib.suppress(OSError):
            os.nice(min(settings.infer_nice, 19 - os.getpriority(os.PRIO_PROCESS, 0)))
    sched.set_slice_us(0)  # a spawned process keeps its creator's (the loop's) slice
    try:
        model = load_checked(settings, None)
    except Exception as e:  # reported to the parent, which raises ArtifactError
        error = str(e) if isinstance(e, ArtifactError) else repr(e)
        hello = json.dumps({"ok": False, "error": error}).encode()
        sock.sendall(_HELLO.pack(len(hello)) + hello)
        return
    hello = json.dumps(
        {
            "ok": True,
            "manifest": model.manifest.model_dump_json(by_alias=True),
            "provider": model.provider,
            "precision": model.precision,
            "run_size": model.run_size,
            "parallel_runs": model.parallel_runs,
        }
    ).encode()
    sock.sendall(_HELLO.pack(len(hello)) + hello)
    with contextlib.suppress(EOFError, ConnectionError):
        while True:
            b, w, v = _REQUEST.unpack(_recv_exact(sock, _REQUEST.size))
            x = np.frombuffer(_recv_exact(sock, b * w * v * 4), np.float32)
            start = time.perf_counter()
            try:
                s = model.score(x.reshape(b, w, v))
            except Exception as e:
                status = _BAD_WINDOWS if isinstance(e, WindowError) else _FAILED
                msg = str(e).encode()
                sock.sendall(_REPLY.pack(status, 0.0, len(msg), 0) + msg)
                continue
            took = time.perf_counter() - start
            sock.sendall(
                _REPLY.pack(_OK, took, b, s.codes.shape[1])
                + s.risk.tobytes()
                + s.contrib.tobytes()
                + s.codes.tobytes()
                + (b"" if s.novelty is None else s.novelty.tobytes())
            )
    model.close()


class InferenceProcess:
    """The parent's handle on one child: :meth:`score` sends a batch and awaits its
    scores; ``model`` describes what the child loaded."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        model: Model,
        timeout_s: float = 60.0,
    ) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.model = model
        self.timeout_s = timeout_s  # a batch unanswered this long: the child is hung
        self._reader = reader
        self._writer = writer
        self._waiting: deque[asyncio.Future[Scores]] = deque()
        self._task = asyncio.create_task(self._replies(), name=f"infer-{self.pid}")

    @classmethod
    async def start(
        cls, settings: Settings, budgets: Mapping[str, Budget] | None = None
    ) -> InferenceProcess:
        """Start a child and wait until its model is loaded, checked and warmed (the
        tenants of ``budgets`` at their operating points); raises
        :class:`ArtifactError` naming what failed."""
        ours, theirs = socket.socketpair()
        wanted = settings.model_dump(mode="json", include=set(_CHILD_SETTINGS))
        root = str(Path(__file__).resolve().parent.parent)  # where `service` is
        path = os.environ.get("PYTHONPATH")
        env = os.environ | {"PYTHONPATH": root + (os.pathsep + path if path else "")}
        try:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "service.infer_process",
                    str(theirs.fileno()),
                    json.dumps(wanted),
                ],
                pass_fds=(theirs.fileno(),),
                env=env,
            )
        finally:
            theirs.close()
        reader, writer = await asyncio.open_unix_connection(sock=ours, limit=1 << 20)
        try:
            (n,) = _HELLO.unpack(await reader.readexactly(_HELLO.size))
            hello = json.loads(await reader.readexactly(n))
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            writer.close()
            code = await asyncio.get_running_loop().run_in_executor(None, proc.wait, 10)
            raise ArtifactError(
                f"the inference process exited while loading (exit code {code})"
            ) from e
        if not hello["ok"]:
            writer.close()
            await asyncio.get_running_loop().run_in_executor(None, proc.wait, 10)
            raise ArtifactError(hello["error"])
        model = Model(
            Manifest.model_validate_json(hello["manifest"]),
            provider=hello["provider"],
            precision=hello["precision"],
            max_batch=settings.max_batch,
            run_size=int(hello["run_size"]),
            parallel_runs=int(hello["parallel_runs"]),
        )
        try:
            model.serve_tenants(budgets or {})
        except ArtifactError:
            writer.close()  # the child exits at EOF
            await asyncio.get_running_loop().run_in_executor(None, proc.wait, 10)
            raise
        model.warmed = True  # load_checked warmed it
        return cls(proc, reader, writer, model, settings.infer_timeout_s)

    @property
    def alive(self) -> bool:
        return not self._task.done()

    async def score(self, windows: np.ndarray) -> Scores:
        """Score (B, window, V) windows in the child; raises :class:`WindowError` for
        windows the model refuses, :class:`InferenceUnavailable` if the child is gone."""
        if not self.alive or self._writer.is_closing():
            raise InferenceUnavailable(f"inference process {self.pid} has exited")
        x = np.ascontiguousarray(windows, dtype=np.float32)
        if x.ndim != 3:
            raise WindowError(f"window batch of shape {x.shape} is not 3-dimensional")
        fut: asyncio.Future[Scores] = asyncio.get_running_loop().create_future()
        self._waiting.append(fut)
        self._writer.write(_REQUEST.pack(*x.shape))
        self._writer.write(x.data.cast("B"))
        try:
            return await asyncio.wait_for(fut, self.timeout_s)
        except TimeoutError:
            # hung (stopped, a stuck GPU): killed, so that its batches fail as a dead
            # child's do and the slot starts another (SCJEPA_INFER_TIMEOUT_S)
            log.error(
                "inference process %s: no answer in %.0f s (SCJEPA_INFER_TIMEOUT_S): "
                "killed",
                self.pid,
                self.timeout_s,
            )
            self.proc.kill()
            raise InferenceUnavailable(
                f"inference process {self.pid} did not answer in {self.timeout_s:g} s"
            ) from None

    async def _replies(self) -> None:
        r, v = self._reader, self.model.n_channels
        nov = int(self.model.manifest.novelty is not None)  # the child sends them too
        try:
            while True:
                status, seconds, n, p = _REPLY.unpack(await r.readexactly(_REPLY.size))
                if status == _OK:
                    body = await r.readexactly(n * (4 + 4 * v + 8 * p + 4 * nov))
                    risk = np.frombuffer(body, np.float32, n)
                    contrib = np.frombuffer(body, np.float32, n * v, 4 * n)
                    codes = np.frombuffer(body, np.int64, n * p, 4 * n * (1 + v))
                    novelty = (
                        np.frombuffer(body, np.float32, n, n * (4 + 4 * v + 8 * p))
                        if nov
                        else None
                    )
                    metrics.INFERENCE_LATENCY.observe(seconds)
                    scores = Scores(
                        risk,
                        contrib.reshape(n, v),
                        codes.reshape(n, p),
                        self.model,
                        novelty,
                    )
                    fut = self._waiting.popleft()
                    if not fut.done():
                        fut.set_result(scores)
                    continue
                msg = (await r.readexactly(n)).decode()
                fut = self._waiting.popleft()
                if not fut.done():
                    cls = WindowError if status == _BAD_WINDOWS else RuntimeError
                    fut.set_exception(cls(msg))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._writer.close()
            gone = InferenceUnavailable(
                f"inference process {self.pid} exited (exit code {self.proc.poll()})"
            )
            while self._waiting:
                fut = self._waiting.popleft()
                if not fut.done():
                    fut.set_exception(gone)

    async def close(self, timeout: float = 10.0) -> None:
        """Stop the child once the batches it holds are scored (a model retired by a
        reload): end of input, then it exits; killed if it does not within
        ``timeout``."""
        if self._waiting:
            await asyncio.wait(list(self._waiting), timeout=timeout)
        self._writer.close()
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, self.proc.wait, timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            await loop.run_in_executor(None, self.proc.wait, 5)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


if __name__ == "__main__":  # the child: python -m service.infer_process FD SETTINGS
    _child_main(
        socket.socket(fileno=int(sys.argv[1])),
        Settings.model_validate(json.loads(sys.argv[2])),
    )
