"""`scjepa serve` as an operator starts it: a real uvicorn process whose start-up log
says which model it loaded, on which provider, and which CPU slices it got."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
from served import ServeFactory, key_line, scjepa_exe
from support.service_helpers import RedisServer, free_port
from test_api import body, series


def test_serve_logs_model_provider_and_slices(
    artifact_dir: Path, tmp_path: Path
) -> None:
    exe = scjepa_exe()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCJEPA_")}
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [exe, "serve", "--artifact", str(artifact_dir), "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, log.read_text()
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        finally:
            proc.terminate()
            proc.wait(10)
    text = log.read_text()
    # the service's own lines, timestamped (service/logs.py, SCJEPA_LOG_FORMAT=text)
    assert " INFO service.main: loaded " in text, text
    assert " on CPUExecutionProvider" in text, text
    assert " INFO service.main: CPU slices: event loop " in text, text
    assert "Traceback" not in text, text


def test_serve_refuses_a_budget_the_artifact_has_no_threshold_for(
    artifact_dir: Path, tmp_path: Path
) -> None:
    """`scjepa serve --fa-budget B` (SCJEPA_FA_BUDGET) without such an operating point
    in the manifest stops at start-up with one line saying so."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCJEPA_")}
    args = [scjepa_exe(), "serve", "--artifact", str(artifact_dir), "--fa-budget", "3"]
    done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("scjepa serve: error: SCJEPA_FA_BUDGET=3: ")
    assert "choose one of them, or export the model with --fa-budget" in done.stderr
    assert "Traceback" not in done.stderr


def test_serve_refuses_a_tenant_budget_the_artifact_has_no_threshold_for(
    art_points: Path, tmp_path: Path
) -> None:
    """SCJEPA_TENANT_FA_BUDGET with a budget that is none of the manifest's operating
    points stops `scjepa serve` at start-up, naming the tenant; one that does not
    parse, naming the entry."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCJEPA_")}
    args = [scjepa_exe(), "serve", "--artifact", str(art_points)]
    for value, says in (
        ("acme=3,globex=7", "SCJEPA_TENANT_FA_BUDGET globex=7: tiny 0.0.1 has a "
         "threshold at 1, 3 false alarms per 1,000 windows"),
        ("acme=3,globex", "SCJEPA_TENANT_FA_BUDGET: 'globex': expected TENANT=BUDGET"),
        ("acme=0", "'acme=0': the budget must be a number above 0"),
        ("acme=3,acme=1", "'acme' is given twice"),
    ):  # fmt: skip
        env["SCJEPA_TENANT_FA_BUDGET"] = value
        done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("scjepa serve: error: "), done.stderr
        assert says in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_serve_alerts_each_tenant_at_its_own_operating_point(
    serve: ServeFactory, art_points: Path
) -> None:
    """SCJEPA_TENANT_FA_BUDGET, onnxruntime in a child process: a tenant listed has
    its windows scored against its operating point's threshold (records, the top
    streams, GET /models, its streams in alert, the gauges Prometheus compares its
    pages with); another tenant against the model's."""
    keys = {"acme": "k-acme", "globex": "k-globex"}
    s = serve(
        artifact=art_points,
        api_keys=",".join(f"{t}:{k}" for t, k in keys.items()),
        tenant_fa_budget="acme=3,initech=3",
        infer_in="process",
    )
    zeros = np.zeros((100, 4))  # risk 0.5: over acme's 0.25, under the model's 0.9
    seen = {}
    with httpx.Client(base_url=s.url, timeout=30) as c:
        for tenant, key in keys.items():
            h = {"X-API-Key": key}
            res = c.post("/ingest?wait=20", json=body("pump", zeros), headers=h)
            assert res.json()["results"][0]["windows_scored"] == 1, res.text
            rec = c.get("/risk/pump", headers=h).json()
            (top,) = c.get("/streams/top", headers=h).json()["streams"]
            (m,) = c.get("/models", headers=h).json()["models"]
            serving = m["manifest"]["eval_metrics"]["threshold"].get("serving_at")
            seen[tenant] = (rec["threshold"], rec["alert"], top["alert"],
                            m["manifest"]["threshold"], serving)  # fmt: skip
        text = c.get("/metrics").text
    assert seen == {
        "acme": (0.25, True, True, 0.25, {"false_alarms_per_1000": 3.0,
                 "threshold": 0.25, "set_by": "SCJEPA_TENANT_FA_BUDGET"}),
        "globex": (0.9, False, False, 0.9, None),
    }  # fmt: skip
    assert '\nscjepa_tenant_streams_in_alert{tenant="acme"} 1.0\n' in text
    assert '\nscjepa_tenant_streams_in_alert{tenant="globex"} 0.0\n' in text
    assert "\nscjepa_streams_in_alert 1.0\n" in text
    assert "\nscjepa_alert_threshold 0.9\n" in text  # every other tenant's
    assert '\nscjepa_tenant_alert_budget_per_1000{tenant="acme"} 3.0\n' in text
    # each tenant's windows at or above every point's threshold, whichever it is at
    at_point = sorted(
        x for x in text.splitlines() if x.startswith("scjepa_tenant_windows_at_point_")
    )
    assert at_point == [
        'scjepa_tenant_windows_at_point_total{budget="1",tenant="acme"} 0.0',
        'scjepa_tenant_windows_at_point_total{budget="1",tenant="globex"} 0.0',
        'scjepa_tenant_windows_at_point_total{budget="3",tenant="acme"} 1.0',
        'scjepa_tenant_windows_at_point_total{budget="3",tenant="globex"} 1.0',
    ]
    pages = "scjepa_tenant_alert_evaluated_false_pages_per_1000_windows"
    assert f'\n{pages}{{estimate="upper95",tenant="acme"}} 1.3\n' in text
    own = [
        x for x in text.splitlines() if x.startswith("scjepa_tenant_alert_threshold")
    ]
    assert own == [  # the tenants listed, whether or not a key names them yet
        'scjepa_tenant_alert_threshold{tenant="acme"} 0.25',
        'scjepa_tenant_alert_threshold{tenant="initech"} 0.25',
    ]
    assert (
        "tenant acme alerts at its own operating point: 3 false alarms per 1,000 "
        "windows, threshold 0.25 (SCJEPA_TENANT_FA_BUDGET)"
    ) in s.log.read_text()
    # a tenant no key names: said at start-up (its budget waits for a key of it)
    assert (
        "WARNING service.main: SCJEPA_TENANT_FA_BUDGET names tenant initech, which no "
        "API key names (yet)"
    ) in s.log.read_text()
    assert "tenant acme, which no" not in s.log.read_text()


def test_a_key_file_budget_reaches_every_process_without_a_restart(
    serve: ServeFactory, art_points: Path, redis_server: RedisServer, tmp_path: Path
) -> None:
    """An API process and a scorer (onnxruntime in a child process) share a key
    file: a ``TENANT fa_budget:B`` line added to it is read by both within seconds,
    no reload asked for: the scorer's records alert at the tenant's point, the API
    answers it (GET /models, top streams); one without a threshold there is refused
    by each, and it says so at start-up too."""
    keys = tmp_path / "keys.txt"
    keys.write_text(key_line("acme", "k-acme"))
    common = {"artifact": art_points, "api_keys_file": keys,
              "redis_url": redis_server.url, "key_prefix": f"kb{os.getpid()}"}  # fmt: skip
    api = serve(role="api", **common)
    scorer = serve(role="scorer", infer_in="process", **common)
    zeros = np.zeros((100, 4))  # risk 0.5: over the 3-per-1,000 point's 0.25
    h = {"X-API-Key": "k-acme"}
    with httpx.Client(base_url=api.url, timeout=30, headers=h) as c:

        def scored(start: int) -> tuple[float, bool]:
            res = c.post("/ingest?wait=20", json=body("pump", zeros, start))
            assert res.json()["results"][0]["windows_scored"] == 1, res.text
            rec = c.get("/risk/pump").json()
            return rec["threshold"], rec["alert"]

        assert scored(0) == (0.9, False)
        tmp = tmp_path / "keys.new"
        tmp.write_text(key_line("acme", "k-acme") + "acme fa_budget:3\n")
        os.replace(tmp, keys)
        deadline = time.monotonic() + 20
        n = 100
        while scored(n) != (0.25, True):  # the scorer's watcher, within a second
            assert time.monotonic() < deadline, scorer.log.read_text()
            n += 100
            time.sleep(0.3)

        def manifest() -> dict:  # type: ignore[type-arg]
            (m,) = c.get("/models").json()["models"]
            return m["manifest"]  # type: ignore[no-any-return]

        # the API process's own watcher (it may read the file a moment after)
        wait_for(lambda: manifest()["threshold"] == 0.25, 20)
        assert manifest()["eval_metrics"]["threshold"]["serving_at"]["set_by"] == (
            "SCJEPA_API_KEYS_FILE"
        )
        (top,) = c.get("/streams/top").json()["streams"]
        assert top["alert"] is True
        tmp.write_text(key_line("acme", "k-acme") + "acme fa_budget:7\n")
        os.replace(tmp, keys)
        refused = "SCJEPA_API_KEYS_FILE acme=7: tiny 0.0.1 has a threshold at 1, 3 "
        for s in (api, scorer):
            wait_for(lambda s=s: refused in s.log.read_text(), 20)
        assert scored(n + 100) == (0.25, True)  # the previous point stays
    for s in (api, scorer):
        assert (
            "tenant acme alerts at its own operating point: 3 false alarms per 1,000 "
            "windows, threshold 0.25 (SCJEPA_API_KEYS_FILE)"
        ) in s.log.read_text()
    # a process started on that file stops at once, naming it
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCJEPA_")}
    env["SCJEPA_API_KEYS_FILE"] = str(keys)
    args = [scjepa_exe(), "serve", "--artifact", str(art_points)]
    done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("scjepa serve: error: " + refused), done.stderr


def wait_for(check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_serve_refuses_a_model_it_cannot_run_in_one_line(
    artifact_dir: Path, tmp_path: Path
) -> None:
    """Checks past the manifest (a precision the artifact has no file for, a graph
    onnxruntime cannot load) stop `scjepa serve` before uvicorn starts: one line,
    exit 2, no traceback (they failed inside the app's start-up, exit 3, 50 lines)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCJEPA_")}
    art = tmp_path / "art"
    shutil.copytree(artifact_dir, art)
    (art / "model.int8.onnx").unlink()
    # never listens: each run stops before uvicorn starts
    args = [scjepa_exe(), "serve", "--artifact", str(art), "--port", str(free_port())]
    done = subprocess.run([*args, "--precision", "int8"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("scjepa serve: error: ")
    assert "model.int8.onnx" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
    # a graph that is not ONNX, its manifest hash updated to match
    (art / "model.onnx").write_bytes(b"not a graph")
    m = json.loads((art / "manifest.json").read_text())
    m["onnx_sha256"] = hashlib.sha256(b"not a graph").hexdigest()
    (art / "manifest.json").write_text(json.dumps(m))
    done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("scjepa serve: error: ")
    assert "Traceback" not in done.stderr


def test_serve_alerts_at_the_budget_asked_for(
    serve: ServeFactory, artifact_dir: Path, tmp_path: Path
) -> None:
    """SCJEPA_FA_BUDGET with onnxruntime in a child process: the windows are scored
    against the manifest's threshold at that operating point, and GET /models says
    which point serves."""
    art = tmp_path / "art"
    shutil.copytree(artifact_dir, art)
    raw = json.loads((art / "manifest.json").read_text())
    test = {
        "false_pages_per_1000": 0.27,
        "false_pages_per_1000_ci95": [0.12, 0.47],
        "false_pages_per_day": 0.49,  # for people; the rate-free figure is served
        "false_pages_per_day_ci95": [0.22, 0.84],
    }
    points = [
        {"false_alarms_per_1000": 1.0, "threshold": 0.5},
        {"false_alarms_per_1000": 3.0, "threshold": 0.0123, "test": test},
    ]
    raw["eval_metrics"]["threshold"] = {"rule": "cv-budget", "operating_points": points}
    (art / "manifest.json").write_text(json.dumps(raw))
    s = serve(artifact=art, fa_budget=3, infer_in="process")
    with httpx.Client(base_url=s.url, timeout=30) as c:
        (m,) = c.get("/models").json()["models"]
        assert m["manifest"]["threshold"] == 0.0123
        assert m["manifest"]["eval_metrics"]["threshold"]["serving_at"] == {
            "false_alarms_per_1000": 3.0,
            "threshold": 0.0123,
            "set_by": "SCJEPA_FA_BUDGET",
        }
        res = c.post("/ingest?wait=20", json=body("s", series(100))).json()
        assert res["results"][0]["windows_completed"] == 1
        rec = c.get("/risk/s").json()
        assert rec["status"] == "ok" and rec["threshold"] == 0.0123
        assert rec["alert"] == (rec["risk"] >= 0.0123)
        # and Prometheus has the operating point (Grafana draws the threshold)
        text = c.get("/metrics").text
        assert "\nscjepa_alert_threshold 0.0123\n" in text
        assert "\nscjepa_alert_budget_per_1000 3.0\n" in text
        # and what the test split measured there (ScjepaPagingAboveEvaluation)
        pages = "scjepa_alert_evaluated_false_pages_per_1000_windows"
        assert f'\n{pages}{{estimate="mean"}} 0.27\n' in text
        assert f'\n{pages}{{estimate="upper95"}} 0.47\n' in text
    plain = serve()  # the test artifact records no operating point
    text = httpx.get(f"{plain.url}/metrics", timeout=30).text
    threshold = json.loads((artifact_dir / "manifest.json").read_text())["threshold"]
    assert f"\nscjepa_alert_threshold {float(threshold)}\n" in text
    assert "\nscjepa_alert_budget_per_1000 NaN\n" in text
    pages = "scjepa_alert_evaluated_false_pages_per_1000_windows"
    assert f'\n{pages}{{estimate="upper95"}} NaN\n' in text
