"""Every `scjepa bench` target: a bad option, a missing artifact or an unwritable
--json is one line naming the option before any work (not a traceback at the end of a
run); the JSON records the machine (CPU model, load, commit), the baseline and the
ratio; SIGTERM stops a bench as Ctrl-C does, its redis-server and service with it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.support.components import require
from tests.support.json_helpers import strict_loads
from training.bench import write_json
from training.bench.serve import probe_process
from training.cli import main

REPO = Path(__file__).resolve().parents[3]
TINY = {"d_model": 16, "n_layers": 1, "n_heads": 2, "n_codes": 16, "pred_dim": 16}


def machine_recorded(res: dict) -> None:
    assert res["cpu"] and res["cores"] >= 1
    assert len(res["load_before"]) == len(res["load_after"]) == 3
    assert res["commit"]


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["train", "--steps", "0"], "--steps"),
        (["train", "--warmup", "-1"], "--warmup"),
        (["train", "--threads", "-2"], "--threads"),
        (["infer", "--artifact", "A", "--seconds", "nan"], "--seconds"),
        (["infer", "--artifact", "A", "--seconds", "0"], "--seconds"),
        (["infer", "--artifact", "A", "--threads", "0"], "--threads"),
        (["serve", "--artifact", "A", "--streams", "0"], "--streams"),
        (["serve", "--artifact", "A", "--risk-seconds", "inf"], "--risk-seconds"),
        (["serve", "--artifact", "A", "--requests", "-1"], "--requests"),
        (["serve", "--artifact", "A", "--scoring-fraction", "0"], "--scoring-fraction"),
        (["soak", "--minutes", "0"], "--minutes"),
        (["soak", "--minutes", "nan"], "--minutes"),
        (["soak", "--sample-s", "-1"], "--sample-s"),
        (["soak", "--max-in-flight", "0"], "--max-in-flight"),
        (["streams", "--streams", "0"], "--streams"),
        (["streams", "--readings", "-3"], "--readings"),
        (["cv", "--cv-seeds", "0"], "--cv-seeds"),
        (["cv", "--fold", "-1"], "--fold"),
    ],
)
def test_bad_values_name_the_option(
    argv: list[str], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        main(["bench", *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}:" in err and "Traceback" not in err


@pytest.mark.parametrize("target", ["serve", "soak", "streams", "infer"])
def test_a_missing_artifact_is_one_line(
    target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope"
    assert main(["bench", target, "--artifact", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"--artifact {missing}: no manifest.json" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--artifact", "ART", "--service-env", "SCJEPA_X"],
        ["soak", "--artifact", "ART", "--service-env", "=1"],
        ["cv", "--cv-blocks", "2"],
        ["cv", "--checkpoint", "NOPE.pt"],
        ["train", "--config", "NOPE.yaml"],
        ["train", "--device", "gpu"],
    ],
)
def test_bad_requests_are_refused_before_any_work(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    art = tmp_path / "art"
    art.mkdir()
    (art / "manifest.json").write_text(json.dumps({"n_channels": 2, "window": 100}))
    argv = [str(art) if a == "ART" else str(tmp_path / a) if "NOPE" in a else a
            for a in argv]  # fmt: skip
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert argv[-2] in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("target", ["train", "serve", "soak", "streams", "cv"])
def test_an_unwritable_json_is_refused_before_the_run(
    target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run took minutes before a --json under a file (or a folder given as the
    file) failed with a traceback; now it is refused first, naming --json."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump({"model": TINY, "optim": {"batch_size": 8}}))
    cheap = {  # the smallest run, should the refusal come late
        "train": ["--config", str(cfg), "--device", "cpu", "--steps", "1"],
        "cv": ["--candidates", "stats (trees)", "--cv-seeds", "1"],
    }
    for bad in (blocker / "out.json", tmp_path):
        argv = ["bench", target, "--json", str(bad), *cheap.get(target, [])]
        if target in ("serve", "soak", "streams"):
            argv += ["--artifact", str(tmp_path / "whatever")]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"--json {bad}:" in err and len(err.strip().splitlines()) == 1


def test_a_figure_not_measured_is_null_in_the_json(tmp_path: Path) -> None:
    """A bench's NaN (no request of a kind timed, no CPU time read) was written as
    NaN, which JSON.parse, Go and dashboards refuse; strict JSON has null."""
    out = tmp_path / "bench.json"
    write_json(out, {"cpu_s": float("nan"), "p99_ms": [1.5, float("inf")], "ok": True})
    assert strict_loads(out.read_text()) == {
        "cpu_s": None,
        "p99_ms": [1.5, None],
        "ok": True,
    }


def test_bench_train_records_machine_baseline_and_ratio(tmp_path: Path) -> None:
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump({"model": TINY, "optim": {"batch_size": 8}}))
    out = tmp_path / "not" / "yet" / "train.json"  # its folder is made
    argv = ["bench", "train", "--config", str(cfg), "--device", "cpu"]
    assert main([*argv, "--threads", "1", "--steps", "2", "--warmup", "0",
                 "--json", str(out)]) == 0  # fmt: skip
    (r,) = json.loads(out.read_text())
    machine_recorded(r)
    assert "matmul" in r["baseline"] and r["baseline_gflop_per_s"] > 0
    assert r["gflop_per_step"] > 0
    assert r["share_of_baseline"] == pytest.approx(
        r["gflop_per_s"] / r["baseline_gflop_per_s"], rel=0.02
    )


def test_bench_infer_records_machine(tmp_path: Path) -> None:
    from tests.training.bench.test_bench_infer import tiny_artifact

    art = tiny_artifact(tmp_path / "art")
    out = tmp_path / "infer.json"
    argv = ["bench", "infer", "--artifact", str(art), "--batch-sizes", "1"]
    assert main([*argv, "--seconds", "0.02", "--threads", "1", "--devices", "cpu",
                 "--json", str(out)]) == 0  # fmt: skip
    res = json.loads(out.read_text())
    machine_recorded(res)
    assert res["cpu_model"] == res["cpu"]["model"]
    assert all(r["baseline"] and r["vs_baseline"] > 0 for r in res["rows"])


def test_bench_soak_records_machine_baseline_and_ratio(
    artifact_dir: Path, tmp_path: Path
) -> None:
    require("redis-server")
    out = tmp_path / "soak.json"
    argv = ["bench", "soak", "--artifact", str(artifact_dir), "--minutes", "0.05"]
    argv += ["--sample-s", "1", "--rate", "5", "--risk-rate", "5", "--streams", "2"]
    main([*argv, "--reload-every-s", "0", "--json", str(out)])
    res = json.loads(out.read_text())
    machine_recorded(res)
    s = res["summary"]
    assert "at half time" in s["baseline"]
    rss = s["service_rss_mb"]
    assert rss["last_vs_at_half"] == pytest.approx(
        rss["last"] / rss["at_half"], rel=1e-3
    )


def test_sigterm_stops_a_bench_as_ctrl_c_does() -> None:
    from training.bench.cli import stopped_as_interrupted

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), stopped_as_interrupted():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises first
    assert signal.getsignal(signal.SIGTERM) == before


def test_the_risk_probe_worker_leaves_ctrl_c_to_the_bench() -> None:
    """Ctrl-C reaches the whole process group: the probe worker printed a traceback
    of its own; the bench, which stops it, is the one to handle SIGINT."""
    with probe_process() as pool:
        got = pool.submit(signal.getsignal, signal.SIGINT).result()
    assert got == signal.SIG_IGN


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_sigterm_leaves_no_redis_server_or_service(
    artifact_dir: Path, tmp_path: Path
) -> None:
    """`kill` (or `timeout`) of a running bench left its redis-server and `scjepa
    serve` running, orphaned; now they stop with it."""
    require("redis-server")
    cmd = [sys.executable, "-m", "training.cli", "bench", "streams", "--artifact",
           str(artifact_dir), "--streams", "20", "--ttl-s", "60"]  # fmt: skip
    cmd = [sys.executable, "-c", "from training.cli import main; import sys; "
           "sys.exit(main(sys.argv[1:]))", *cmd[3:]]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)  # fmt: skip
    kids: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while len(_children(proc.pid)) < 2:  # redis-server and the service
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        kids = _children(proc.pid)
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        deadline = time.monotonic() + 10
        while any(_alive(k) for k in kids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [k for k in kids if _alive(k)]
        assert "interrupted" in proc.stderr.read().decode()
    finally:
        for pid in {*kids, *_children(proc.pid), proc.pid}:  # a failure leaves none
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.wait()
