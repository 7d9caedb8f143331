"""Hot model reload: a new artifact version is loaded, checked, warmed and swapped in
while requests keep coming; every risk record names the model that scored it; a bad
artifact is refused and the old model keeps serving (log, metric, endpoint)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from served import key_line
from support.service_artifact import build_artifact
from test_api import body, series

from service.config import Settings
from service.main import _reload_quietly, create_app
from service.reload import ModelSlot

ADMIN = {"X-API-Key": "the-admin-key"}
TENANT = {"X-API-Key": "tenant-key"}


def copy_artifact(src: Path, dst: Path, version: str | None = None) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for f in ("model.onnx", "manifest.json"):
        shutil.copy(src / f, dst / f)
    if version is not None:
        set_version(dst, version)
    return dst


def set_version(art: Path, version: str, **more: Any) -> None:
    """Rewrite the manifest in place, atomically (the model file is unchanged, so its
    SHA-256 still matches)."""
    m = json.loads((art / "manifest.json").read_text())
    m |= {"version": version, **more}
    tmp = art / "manifest.json.tmp"
    tmp.write_text(json.dumps(m))
    os.replace(tmp, art / "manifest.json")


def settings(art: Path, tmp_path: Path, **more: Any) -> Settings:
    keys = tmp_path / "keys.txt"
    keys.write_text(
        key_line("@admin", ADMIN["X-API-Key"]) + key_line("t", TENANT["X-API-Key"])
    )
    return Settings(artifact=art, api_keys_file=keys, rate_limit_rps=0, max_wait_ms=1.0,
                    key_prefix=f"reload{os.getpid()}", **more)  # fmt: skip


def reloads(outcome: str) -> float:
    labels = {"what": "model", "outcome": outcome}
    return REGISTRY.get_sample_value("scjepa_reloads_total", labels) or 0.0


def test_swap_under_load(
    artifact_dir: Path, tmp_path: Path, store_url: str | None
) -> None:
    """24 streams send a window per request while the model is swapped: no request
    fails, each stream's records switch from 0.0.1 to 0.0.2 once, and every record
    scored after the swap is the new model's."""
    art = copy_artifact(artifact_dir, tmp_path / "art")
    app = create_app(settings(art, tmp_path, redis_url=store_url, hop=100))
    streams = [f"s{i}" for i in range(24)]
    x = series(100 * 12)
    codes: list[int] = []
    swapped = asyncio.Event()

    async def sender(c: httpx.AsyncClient, s: str) -> None:
        for k in range(12):
            chunk = x[100 * k : 100 * (k + 1)]
            r = await c.post(
                "/ingest?wait=20", json=body(s, chunk, 100 * k), headers=TENANT
            )
            codes.append(r.status_code)
            r2 = await c.get(f"/risk/{s}", headers=TENANT)
            codes.append(r2.status_code)
            if k == 4:
                await swapped.wait() if s == streams[0] else None

    async def swapper(c: httpx.AsyncClient) -> dict[str, Any]:
        while len(codes) < 24 * 4:  # a few windows scored by the old model first
            await asyncio.sleep(0.01)
        set_version(art, "0.0.2", threshold=0.9)
        r = await c.post("/admin/reload", headers=ADMIN)
        swapped.set()
        assert r.status_code == 200, r.text
        return dict(r.json())

    async def main() -> tuple[dict[str, Any], dict[str, list[Any]], dict[str, Any]]:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                out = await asyncio.gather(swapper(c), *(sender(c, s) for s in streams))
                hist = {
                    s: (
                        await c.get(f"/risk/{s}/history?limit=100", headers=TENANT)
                    ).json()["items"]
                    for s in streams
                }
                models = (await c.get("/models", headers=TENANT)).json()
        return out[0], hist, models

    before = reloads("ok")
    reply, hist, models = asyncio.run(main())
    assert set(codes) == {200}, sorted(set(codes))
    assert reply["model"]["outcome"] == "ok"
    assert reply["model"]["previous"]["version"] == "0.0.1"
    assert reply["model"]["serving"]["version"] == "0.0.2"
    assert reloads("ok") == before + 1
    old_times, new_times = [], []
    for s, items in hist.items():
        items = items[::-1]  # oldest first
        assert [h["n"] for h in items] == [100 * k for k in range(1, 13)]
        versions = [h["model"]["version"] for h in items]
        switch = versions.index("0.0.2")
        assert versions == ["0.0.1"] * switch + ["0.0.2"] * (12 - switch), (s, versions)
        for h in items:
            assert h["threshold"] == (0.9 if h["model"]["version"] == "0.0.2" else 0.5)
            assert h["alert"] == (h["risk"] >= h["threshold"])
            (new_times if h["model"]["version"] == "0.0.2" else old_times).append(
                h["computed_at"]
            )
    assert old_times and new_times and max(old_times) <= min(new_times)  # one point
    (m,) = models["models"]
    assert m["manifest"]["version"] == "0.0.2" and m["warmed"] is True
    assert models["last_reload"]["outcome"] == "ok"


def test_a_bad_artifact_is_refused_and_the_old_model_serves(
    artifact_dir: Path, tmp_path: Path
) -> None:
    art = copy_artifact(artifact_dir, tmp_path / "art")
    other = tmp_path / "five"
    build_artifact(other, channels=["a", "b", "c", "d", "flat"])
    with TestClient(create_app(settings(art, tmp_path))) as client:
        assert (
            client.post(
                "/ingest", json=body("s", series(100)), headers=TENANT
            ).status_code
            == 200
        )
        failed = reloads("failed")
        original = (art / "model.onnx").read_bytes()
        cases = [
            (lambda: (art / "model.onnx").write_bytes(original + b"x"), "SHA-256"),
            (lambda: (art / "manifest.json").write_text("{not json"), "not valid JSON"),
            (lambda: copy_artifact(other, art), "n_channels"),
            (lambda: (art / "model.onnx").unlink(), "not found"),
            # a hand-written manifest the alerting cannot read: refused before the
            # swap (it was swapped in, then the reload answered 500)
            (
                lambda: set_version(art, "v2", eval_metrics={"threshold": 0.3}),
                "eval_metrics.threshold",
            ),
        ]
        for i, (break_it, word) in enumerate(cases, 1):
            break_it()
            r = client.post("/admin/reload", headers=ADMIN)
            assert r.status_code == 422, r.text
            out = r.json()
            assert out["model"]["outcome"] == "failed" and word in out["model"]["error"]
            assert "tiny 0.0.1 still serves" in out["detail"]
            # the old model answers, and records name it
            x = series(100, start=100 * i)
            res = client.post("/ingest?wait=20", json=body("s", x, 100 * i),
                              headers=TENANT).json()["results"][0]  # fmt: skip
            assert res["model"] == {"name": "tiny", "version": "0.0.1"}
            copy_artifact(artifact_dir, art)  # repaired for the next case
        assert reloads("failed") == failed + len(cases)
        status = client.get("/admin/reload", headers=ADMIN).json()
        assert status["outcome"] == "failed" and status["serving"]["version"] == "0.0.1"
        assert (
            client.get("/models", headers=TENANT).json()["last_reload"]["outcome"]
            == "failed"
        )
        assert client.get("/readyz").status_code == 200
        assert (
            'scjepa_reloads_total{outcome="failed",what="model"}'
            in client.get("/metrics").text
        )


def test_a_model_without_a_tenants_operating_point_is_refused(
    art_points: Path, tmp_path: Path
) -> None:
    """A tenant served at an operating point of its own (SCJEPA_TENANT_FA_BUDGET)
    keeps it across a reload; a new version without a threshold there is refused
    (422, naming the tenant) and the old model keeps serving the tenant at it."""
    art = copy_artifact(art_points, tmp_path / "art")
    setup = settings(art, tmp_path, tenant_fa_budget={"t": 3.0})
    with TestClient(create_app(setup)) as client:

        def threshold() -> float:
            (m,) = client.get("/models", headers=TENANT).json()["models"]
            return float(m["manifest"]["threshold"])

        assert threshold() == 0.25
        points = [{"false_alarms_per_1000": 3.0, "threshold": 0.3}]
        set_version(art, "v2", eval_metrics={"threshold": {"operating_points": points}})
        assert client.post("/admin/reload", headers=ADMIN).status_code == 200
        assert threshold() == 0.3
        set_version(art, "v3", eval_metrics={})  # an artifact without the points
        r = client.post("/admin/reload", headers=ADMIN)
        assert r.status_code == 422, r.text
        assert r.json()["model"]["error"].startswith("SCJEPA_TENANT_FA_BUDGET t=3: ")
        assert "tiny v2 still serves" in r.json()["detail"]
        assert threshold() == 0.3


def test_a_tenants_operating_point_changes_with_the_key_file(
    art_points: Path, tmp_path: Path
) -> None:
    """A ``TENANT fa_budget:B`` line of the key file serves the tenant at that
    operating point from the next window scored, no restart (records, GET /models
    with its setting, the gauges); a budget the model has no threshold for refuses
    the whole file (its new key too) and the previous point stays; the line removed,
    the tenant is back at the model's; a model reloaded keeps the file's budget."""
    art = copy_artifact(art_points, tmp_path / "art")
    setup = settings(art, tmp_path)
    keys = setup.api_keys_file
    assert keys is not None
    lines = keys.read_text()
    zeros = np.zeros((100, 4))  # risk 0.5: over the 3-per-1,000 point's 0.25, under 0.9
    with TestClient(create_app(setup)) as client:

        def served() -> tuple[float, dict[str, Any] | None]:
            (m,) = client.get("/models", headers=TENANT).json()["models"]
            at = m["manifest"]["eval_metrics"]["threshold"].get("serving_at")
            return float(m["manifest"]["threshold"]), at

        def scored(start: int) -> tuple[float, bool]:
            r = client.post("/ingest?wait=20", json=body("s", zeros, start),
                            headers=TENANT)  # fmt: skip
            assert r.json()["results"][0]["windows_scored"] == 1, r.text
            rec = client.get("/risk/s", headers=TENANT).json()
            return rec["threshold"], rec["alert"]

        def edit(text: str) -> None:  # the way operations.md says: mv over it
            tmp = keys.with_suffix(".new")
            tmp.write_text(text)
            os.replace(tmp, keys)
            client.post("/admin/reload", headers=ADMIN)  # or within a second

        assert served() == (0.9, None) and scored(0) == (0.9, False)
        edit(lines + "t fa_budget:3   # the plant's point\n")
        point = {"false_alarms_per_1000": 3.0, "threshold": 0.25,
                 "set_by": "SCJEPA_API_KEYS_FILE"}  # fmt: skip
        assert served() == (0.25, point) and scored(100) == (0.25, True)
        text = client.get("/metrics").text
        assert '\nscjepa_tenant_alert_threshold{tenant="t"} 0.25\n' in text
        assert '\nscjepa_tenant_alert_budget_per_1000{tenant="t"} 3.0\n' in text
        # no threshold at 7: the file refused whole, its new key with it
        edit(lines + "t fa_budget:7\n" + key_line("u", "u-key"))
        r = client.post("/admin/reload", headers=ADMIN)
        assert "SCJEPA_API_KEYS_FILE t=7: tiny 0.0.1 has a threshold at 1, 3 false " \
            "alarms per 1,000 windows" in r.json()["keys"], r.text  # fmt: skip
        assert client.get("/streams", headers={"X-API-Key": "u-key"}).status_code == 401
        assert served() == (0.25, point) and scored(200) == (0.25, True)
        # a model reloaded keeps the file's point, at its own threshold there
        points = [{"false_alarms_per_1000": 3.0, "threshold": 0.3}]
        set_version(art, "v2", eval_metrics={"threshold": {"operating_points": points}})
        assert client.post("/admin/reload", headers=ADMIN).status_code == 200
        assert served()[0] == 0.3 and scored(300) == (0.3, True)
        edit(lines)  # the line removed: the model's point again
        assert served() == (0.9, None) and scored(400) == (0.9, False)
        text = client.get("/metrics").text
        assert "scjepa_tenant_alert_threshold{" not in text


def test_admin_routes_need_the_admin_key(
    artifact_dir: Path, tmp_path: Path, make_client: Any
) -> None:
    art = copy_artifact(artifact_dir, tmp_path / "art")
    with TestClient(create_app(settings(art, tmp_path))) as client:
        for headers in ({}, TENANT, {"X-API-Key": "nope"}):
            assert client.post("/admin/reload", headers=headers).status_code == 401
            assert client.get("/admin/reload", headers=headers).status_code == 401
        assert client.get("/admin/reload", headers=ADMIN).json()["outcome"] == "none"
    open_app = make_client()  # no @admin key configured: the admin routes are off
    r = open_app.post("/admin/reload")
    assert r.status_code == 403 and "@admin" in r.json()["detail"]


def test_one_reload_at_a_time(artifact_dir: Path, tmp_path: Path) -> None:
    art = copy_artifact(artifact_dir, tmp_path / "art", version="0.0.2")
    app = create_app(settings(art, tmp_path))

    async def main() -> list[int]:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                rs = await asyncio.gather(
                    *(c.post("/admin/reload", headers=ADMIN) for _ in range(3))
                )
        return sorted(r.status_code for r in rs)

    codes = asyncio.run(main())
    assert codes[0] == 200 and set(codes[1:]) <= {200, 409} and 409 in codes


def test_records_name_their_model(client: TestClient) -> None:
    res = client.post("/ingest?wait=20", json=body("s", series(100)))
    res = res.json()["results"][0]
    assert res["model"] == {"name": "tiny", "version": "0.0.1"}
    rec = client.get("/risk/s/history").json()["items"][0]
    assert rec["model"] == res["model"]
    assert np.isfinite(rec["risk"])


@pytest.mark.parametrize("hups", [1, 5])
def test_sighups_during_a_reload_reload_once_after_it(
    artifact_dir: Path, tmp_path: Path, hups: int
) -> None:
    """SIGHUP has no 409 to answer with: one that comes while a reload runs (the
    folder written again since that reload read it) reloads once that one ends (it
    was dropped with nothing but its log line, the version the first reload read
    kept serving); several reload once more, not once each (five were five full
    reloads, each loading, checking and warming the model), reading the folder as the
    last left it."""
    art = copy_artifact(artifact_dir, tmp_path / "art")
    versions = [f"0.0.{3 + i}" for i in range(hups)]

    async def main() -> tuple[str, float]:
        before = reloads("ok")
        slot = await ModelSlot.open(settings(art, tmp_path), in_process=True)
        try:
            set_version(art, "0.0.2")
            first = asyncio.create_task(slot.reload())
            await asyncio.sleep(0)  # running: loading on its thread
            assert not first.done()
            waiting = []
            for version in versions:
                set_version(art, version)
                waiting.append(asyncio.create_task(_reload_quietly(slot)))  # SIGHUP's
                await asyncio.sleep(0)
            await asyncio.gather(first, *waiting)
            return slot.current.manifest.version, reloads("ok") - before
        finally:
            await slot.close()

    assert asyncio.run(main()) == (versions[-1], 2)
