"""Inference in a child process (service/infer_process.py, ``SCJEPA_INFER_IN``): the
scores come from another process and equal the in-process model's; a child killed
mid-batch is replaced and every window is still scored exactly once; a hot reload
swaps the child and the old one exits."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from support.service_artifact import build_artifact
from support.service_helpers import RedisServer
from test_api import body, series
from test_reload import ADMIN, TENANT, copy_artifact, set_version, settings
from test_scale_out import records

from service.config import Settings
from service.infer_process import InferenceProcess, InferenceUnavailable
from service.inference import WindowError, load_model
from service.main import create_app, uses_child
from service.reload import ModelSlot
from service.store import completed_ends


def restarts(outcome: str) -> float:
    labels = {"what": "inference_process", "outcome": outcome}
    return REGISTRY.get_sample_value("scjepa_reloads_total", labels) or 0.0


def windows(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 100, 4)).astype(np.float32)


def test_scores_come_from_another_process_and_equal_in_process(
    artifact_dir: Path,
) -> None:
    async def main() -> None:
        child = await InferenceProcess.start(Settings(artifact=artifact_dir))
        try:
            assert child.pid is not None and child.pid != os.getpid()
            assert child.proc.poll() is None  # running
            x = windows(70)
            got = await child.score(x)
            local = load_model(artifact_dir, provider="cpu")
            want = local.score(x)
            np.testing.assert_allclose(got.risk, want.risk, atol=1e-5)
            np.testing.assert_allclose(got.contrib, want.contrib, atol=1e-5)
            np.testing.assert_array_equal(got.codes, want.codes)
            assert got.by is child.model
            assert child.model.manifest == local.manifest
            assert child.model.provider == local.provider and child.model.warmed
            # batches queued at once come back in order, each its own
            a, b = await asyncio.gather(child.score(x[:5]), child.score(x[5:9]))
            np.testing.assert_allclose(a.risk, want.risk[:5], atol=1e-5)
            np.testing.assert_allclose(b.risk, want.risk[5:9], atol=1e-5)
            # windows the model refuses: the error crosses over, the child goes on
            bad = x[:2].copy()
            bad[1, 3, 2] = np.nan
            with pytest.raises(WindowError, match="NaN at step 3, channel 2"):
                await child.score(bad)
            assert len(await child.score(x[:1])) == 1
        finally:
            await child.close()
        assert child.proc.returncode == 0  # ended by end of input, not killed

    asyncio.run(main())


def test_a_child_that_cannot_load_names_the_problem(tmp_path: Path) -> None:
    from service.manifest import ArtifactError

    async def main() -> None:
        with pytest.raises(ArtifactError, match="manifest"):
            await InferenceProcess.start(Settings(artifact=tmp_path))

    asyncio.run(main())


def test_a_killed_child_fails_its_batch_and_is_replaced(artifact_dir: Path) -> None:
    async def main() -> None:
        slot = await ModelSlot.open(Settings(artifact=artifact_dir), in_process=False)
        try:
            first = slot.child
            assert first is not None
            before = restarts("ok")
            # batches queued on the child; killed once it has answered the first
            jobs = [
                asyncio.ensure_future(slot.score(windows(256, i))) for i in range(30)
            ]
            await asyncio.wait(jobs, return_when=asyncio.FIRST_COMPLETED)
            assert first.pid is not None
            os.kill(first.pid, signal.SIGKILL)
            out = await asyncio.gather(*jobs, return_exceptions=True)
            lost = [e for e in out if isinstance(e, BaseException)]
            assert lost and all(isinstance(e, InferenceUnavailable) for e in lost)
            assert "exited" in str(lost[0])
            assert all(len(o) == 256 for o in out if not isinstance(o, BaseException))
            assert slot.child is not None and slot.child is not first
            assert slot.child.pid != first.pid and first.proc.poll() is not None
            assert restarts("ok") == before + 1
            assert len(await slot.score(windows(3))) == 3  # the new child scores
        finally:
            await slot.close()

    asyncio.run(main())


def test_a_hung_child_is_killed_and_replaced(artifact_dir: Path) -> None:
    """Before: a child that stopped answering (SIGSTOP here; a stuck GPU) held its
    batches forever, scoring stopped and /readyz stayed 200. Now a batch unanswered
    for SCJEPA_INFER_TIMEOUT_S kills the child; a new one scores."""

    async def main() -> None:
        settings = Settings(artifact=artifact_dir, infer_timeout_s=1.0)
        slot = await ModelSlot.open(settings, in_process=False)
        try:
            hung = slot.child
            assert hung is not None and hung.pid is not None
            assert len(await slot.score(windows(2))) == 2
            before = restarts("ok")
            os.kill(hung.pid, signal.SIGSTOP)
            start = time.monotonic()
            with pytest.raises(InferenceUnavailable, match="did not answer in 1 s"):
                await slot.score(windows(2))
            assert time.monotonic() - start < 30
            assert hung.proc.poll() == -signal.SIGKILL
            assert slot.child is not hung and restarts("ok") == before + 1
            assert len(await slot.score(windows(3))) == 3  # the new child scores
        finally:
            await slot.close()

    asyncio.run(main())


def test_a_child_revived_on_a_newer_artifact_reports_it(
    artifact_dir: Path, tmp_path: Path
) -> None:
    """A child that dies after a new version was written to the folder (not yet
    reloaded) comes back with the new version: the slot's status, the model metrics
    and the log say so, as after a reload, instead of naming the old model."""
    art = copy_artifact(artifact_dir, tmp_path / "art")

    async def main() -> None:
        slot = await ModelSlot.open(Settings(artifact=art), in_process=False)
        try:
            first = slot.child
            assert first is not None and first.pid is not None
            set_version(art, "v2", threshold=0.9)
            os.kill(first.pid, signal.SIGKILL)
            with pytest.raises(InferenceUnavailable):
                await slot.score(windows(3))
            assert slot.child is not first
            assert slot.current.manifest.version == "v2"
            assert slot.status.outcome == "ok"
            assert slot.status.serving.version == "v2"
            assert slot.status.previous is not None
            assert slot.status.previous.version == "0.0.1"
            info = {"model": "tiny", "version": "v2"}
            got = REGISTRY.get_sample_value("scjepa_inference_info", info | {
                "provider": slot.current.provider,
                "precision": slot.current.precision,
            })  # fmt: skip
            assert got == 1.0
            assert REGISTRY.get_sample_value("scjepa_alert_threshold") == 0.9
        finally:
            await slot.close()

    asyncio.run(main())


def test_windows_of_a_child_killed_mid_batch_are_scored_exactly_once(
    artifact_dir: Path, redis_server: RedisServer
) -> None:
    """kill -9 of the inference child while it holds batches: their windows stay
    pending, are claimed again, and every window has exactly one record."""
    prefix = f"ip{os.getpid()}{time.monotonic_ns() % 10**6}"
    s = Settings(artifact=artifact_dir, redis_url=redis_server.url, key_prefix=prefix,
                 infer_in="process", claim_timeout_s=1.0, hop=100,
                 max_readings_per_request=200_000, max_body_bytes=64 << 20)  # fmt: skip
    r = redis.Redis.from_url(redis_server.url)
    streams = [f"k{i}" for i in range(40)]
    with TestClient(create_app(s)) as c:
        slot: ModelSlot = c.app.state.slot  # type: ignore[attr-defined]
        first = slot.child
        assert first is not None and first.pid != os.getpid()
        x = series(100 * 30)
        many = {"streams": [body(st, x) for st in streams]}  # 1,200 windows queued
        res = c.post("/ingest", json=many)
        assert res.status_code == 200, res.text
        deadline = time.monotonic() + 30
        while not first._waiting:  # a batch sent to the child, not answered yet
            assert time.monotonic() < deadline, "the child never held a batch"
            time.sleep(0.001)
        assert first.pid is not None
        os.kill(first.pid, signal.SIGKILL)
        want = completed_ends(0, 100 * 30, 100, 100)
        deadline = time.monotonic() + 120
        while any(len(records(r, prefix, st)) < len(want) for st in streams):
            assert time.monotonic() < deadline, "not every window was scored"
            time.sleep(0.1)
        for st in streams:  # exactly once: one record per window number
            assert records(r, prefix, st) == want, st
        assert slot.child is not None and slot.child.pid != first.pid
        assert c.get("/readyz").status_code == 200


def test_reload_swaps_the_child(
    artifact_dir: Path, tmp_path: Path, redis_server: RedisServer
) -> None:
    art = copy_artifact(artifact_dir, tmp_path / "art")
    s = settings(art, tmp_path, redis_url=redis_server.url, infer_in="process")
    with TestClient(create_app(s)) as c:
        slot: ModelSlot = c.app.state.slot  # type: ignore[attr-defined]
        old = slot.child
        assert old is not None
        res = c.post("/ingest?wait=20", json=body("a", series(100)), headers=TENANT)
        assert res.json()["results"][0]["model"]["version"] == "0.0.1"
        set_version(art, "0.0.2")
        status = c.post("/admin/reload", headers=ADMIN).json()
        assert status["model"]["outcome"] == "ok", status
        new = slot.child
        assert new is not None and new is not old and new.pid != old.pid
        assert old.proc.returncode == 0  # stopped after its batches, not killed
        later = body("a", series(100, start=100), 100)
        res = c.post("/ingest?wait=20", json=later, headers=TENANT)
        assert res.json()["results"][0]["model"]["version"] == "0.0.2"
        assert (
            c.get("/models", headers=TENANT).json()["models"][0]["manifest"]["version"]
            == "0.0.2"
        )
        # a refused artifact: the new child is stopped, the current one serves on
        set_version(art, "0.0.3", window=50)
        r = c.post("/admin/reload", headers=ADMIN)
        assert r.status_code == 422 and "window" in r.json()["model"]["error"]
        assert slot.child is new
        assert new.alive


@pytest.mark.parametrize(
    ("role", "infer_in", "child"),
    [
        ("scorer", "auto", True),
        ("all", "auto", False),
        ("all", "process", True),
        ("scorer", "thread", False),
        ("api", "process", False),
    ],
)
def test_where_inference_runs(role: Any, infer_in: Any, child: bool) -> None:
    assert uses_child(Settings(role=role, infer_in=infer_in)) is child


def test_an_api_process_loads_its_model_on_the_cpu(
    artifact_dir: Path, redis_server: Any
) -> None:
    """Role api only reads the model's layout: asked for CUDA (a GPU scorer's settings)
    on a machine without it, the API still starts, on the CPU, and stores readings."""
    settings = Settings(
        artifact=artifact_dir, redis_url=redis_server.url, role="api", provider="cuda"
    )
    with TestClient(create_app(settings)) as client:
        assert client.get("/readyz").status_code == 200
        model = client.app.state.model
        assert model.provider == "CPUExecutionProvider"
        readings = [
            {"ts": float(t), "values": [0.0] * model.n_channels} for t in range(3)
        ]
        r = client.post("/ingest", json={"stream": "s", "readings": readings})
        assert r.status_code == 200 and r.json()["results"][0]["accepted"] == 3


def test_a_child_revived_on_another_layout_is_stopped(
    artifact_dir: Path, tmp_path: Path
) -> None:
    """A child that dies while the folder holds a model of another layout (staged for
    a restart) cannot be revived: the new child that loaded it is stopped, not left
    running beside the scorer (before: one more process holding a model per failed
    batch, ~85 MB each here)."""
    art = copy_artifact(artifact_dir, tmp_path / "art")

    def children() -> list[int]:  # this process's live children (not zombies)
        out = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError):
                _, _, rest = stat.read_text().rpartition(")")
                state, ppid = rest.split()[:2]
                if int(ppid) == os.getpid() and state != "Z":
                    out.append(int(stat.parent.name))
        return out

    async def main() -> None:
        slot = await ModelSlot.open(Settings(artifact=art), in_process=False)
        try:
            first = slot.child
            assert first is not None and first.pid is not None
            build_artifact(art, channels=["a", "b", "c", "d", "flat"])
            os.kill(first.pid, signal.SIGKILL)
            first.proc.wait(10)
            others = children()  # earlier tests' (their apps', their collectors')
            before = restarts("failed")
            for _ in range(3):
                with pytest.raises(InferenceUnavailable):
                    await slot.score(windows(3))
            assert restarts("failed") == before + 3
            assert slot.child is first and not slot.current.warmed
            assert set(children()) <= set(others)
        finally:
            await slot.close()

    asyncio.run(main())
