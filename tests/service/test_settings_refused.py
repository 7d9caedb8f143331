"""Bad SCJEPA_* values stop `scjepa serve` at start-up in one line naming the variable
and why (exit 2): before, pydantic's block per error named the field, a bad Redis URL,
a hold not past the resend interval or a binary key file failed inside start-up with a
traceback, and inf or a URL without a scheme was taken and misbehaved later."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError
from served import scjepa_exe
from support.service_helpers import free_port

from service.config import Settings, describe


def refusal(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> str:
    """describe() of the error these variables raise (none raised: the test fails)."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValidationError) as err:
        Settings()
    return describe(err.value)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no .env file
    for k in [k for k in os.environ if k.startswith("SCJEPA_")]:
        monkeypatch.delenv(k)


@pytest.mark.parametrize(
    "var", ["MAX_WAIT_MS", "ALLOWED_LATENESS_S", "CLAIM_TIMEOUT_S", "ALERT_HOLD_S"]
)
def test_inf_is_refused(monkeypatch: pytest.MonkeyPatch, var: str) -> None:
    """max_wait_ms=inf left every window unscored, allowed_lateness_s=inf held every
    reading for ever: a finite number is asked for, 1e400 (inf when parsed) too."""
    for value in ("inf", "1e400"):
        why = refusal(monkeypatch, {f"SCJEPA_{var}": value})
        assert why == f"SCJEPA_{var}: Input should be a finite number"


def test_urls_need_their_scheme(monkeypatch: pytest.MonkeyPatch) -> None:
    """An Alertmanager URL without http:// was taken and every alert post failed; a
    Redis URL without its scheme failed inside the app's start-up."""
    why = refusal(monkeypatch, {"SCJEPA_ALERTMANAGER_URL": "alertmanager:9093"})
    assert why.startswith("SCJEPA_ALERTMANAGER_URL: must be an http:// or https:// URL")
    monkeypatch.delenv("SCJEPA_ALERTMANAGER_URL")
    why = refusal(monkeypatch, {"SCJEPA_REDIS_URL": "localhost:6379"})
    assert why.startswith("SCJEPA_REDIS_URL: must start with one of redis://")
    for url in ("redis://r:6379/0", "rediss://r", "unix:///r.sock", "redis+cluster://r:7000"):  # fmt: skip
        monkeypatch.setenv("SCJEPA_REDIS_URL", url)
        assert Settings().redis_url == url
    monkeypatch.setenv("SCJEPA_ALERTMANAGER_URL", "https://am:9093")
    assert Settings().alertmanager_url == "https://am:9093"


def test_key_prefix_takes_no_hash_tag_on_a_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A brace in the prefix takes over the keys' own hash tags: on a Redis Cluster
    "a{}" spread a stream's keys over slots, and every ingest answered 500. One
    redis-server has no slots: a prefix with braces that a deployment stored its
    streams under there still starts (refused, its upgrade stopped short, and
    another prefix orphaned every stream)."""
    monkeypatch.setenv("SCJEPA_REDIS_URL", "redis+cluster://r:7000")
    for prefix in ("a{}", "{x}", "a}"):
        why = refusal(monkeypatch, {"SCJEPA_KEY_PREFIX": prefix})
        assert why == (
            "SCJEPA_KEY_PREFIX: must not contain { or } on a Redis Cluster (the keys' "
            "own hash tags place them)"
        )
    for url in ("redis://r:6379/0", "unix:///r.sock"):
        monkeypatch.setenv("SCJEPA_REDIS_URL", url)
        assert Settings().key_prefix == "a}"
    monkeypatch.delenv("SCJEPA_REDIS_URL")
    assert Settings().key_prefix == "a}"


def test_hold_must_outlast_resend(monkeypatch: pytest.MonkeyPatch) -> None:
    why = refusal(monkeypatch, {"SCJEPA_ALERT_HOLD_S": "60"})
    assert (
        why == "SCJEPA_ALERT_HOLD_S (60) must be more than SCJEPA_ALERT_RESEND_S (60)"
    )
    monkeypatch.setenv("SCJEPA_ALERT_RESEND_S", "59.5")
    assert Settings().alert_hold_s == 60.0


@pytest.mark.parametrize(
    ("var", "top"),
    [("STREAM_TTL_S", 315_360_000), ("HISTORY_LEN", 1_000_000),
     ("DEDUPE_HORIZON", 10_000_000)],
)  # fmt: skip
def test_what_reaches_redis_is_bounded(
    monkeypatch: pytest.MonkeyPatch, var: str, top: int
) -> None:
    """Past what Redis takes, SCJEPA_STREAM_TTL_S=99999999999999999 made every
    ingest 503 ("invalid expire time"), SCJEPA_HISTORY_LEN=10**20 every window's
    record write fail (scored, never acknowledged, claimed again for ever): refused
    at start-up; the bound itself is taken."""
    for value in (str(top + 1), "99999999999999999", "100000000000000000000"):
        why = refusal(monkeypatch, {f"SCJEPA_{var}": value})
        assert why == f"SCJEPA_{var}: Input should be less than or equal to {top}"
    monkeypatch.setenv(f"SCJEPA_{var}", str(top))
    assert getattr(Settings(), var.lower()) == top


def test_the_rate_limit_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GCRA bucket's period (1/rps) and expiry run through Redis' script: a rate
    of 1e-300 made every keyed request a 503, a burst of 10**400 every one a 500
    (float overflow); 0 stays "off"."""
    for rps in ("1e-300", "1e-7"):
        why = refusal(monkeypatch, {"SCJEPA_RATE_LIMIT_RPS": rps})
        assert why == "SCJEPA_RATE_LIMIT_RPS: must be 0 (off) or at least 1e-06"
    why = refusal(
        monkeypatch,
        {"SCJEPA_RATE_LIMIT_RPS": "1", "SCJEPA_RATE_LIMIT_BURST": "1" + "0" * 400},
    )
    assert (
        why == "SCJEPA_RATE_LIMIT_BURST: Input should be less than or equal to 1000000"
    )
    for rps in ("0", "1e-6"):
        monkeypatch.setenv("SCJEPA_RATE_LIMIT_RPS", rps)
        monkeypatch.setenv("SCJEPA_RATE_LIMIT_BURST", "1000000")
        assert Settings().rate_limit_rps == float(rps)


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ({"SCJEPA_HOP": "abc"}, "SCJEPA_HOP: Input should be a valid integer"),
        (
            {"SCJEPA_STREAM_TTL_S": "99999999999999999"},
            "SCJEPA_STREAM_TTL_S: Input should be less than or equal to 315360000",
        ),
        (
            {"SCJEPA_MAX_BATCH": "0", "SCJEPA_PROVIDER": "gpu"},
            "SCJEPA_PROVIDER: Input should be 'auto', 'cpu' or 'cuda'; "
            "SCJEPA_MAX_BATCH: Input should be greater than or equal to 1",
        ),
        ({"SCJEPA_REDIS_URL": "abc"}, "SCJEPA_REDIS_URL: must start with one of"),
        (
            {"SCJEPA_ALERTMANAGER_URL": "http://127.0.0.1:9", "SCJEPA_ALERT_HOLD_S": "30"},
            "SCJEPA_ALERT_HOLD_S (30) must be more than SCJEPA_ALERT_RESEND_S (60)",
        ),
        ({"SCJEPA_API_KEYS_FILE": "BINARY"}, "SCJEPA_API_KEYS_FILE: BINARY: not UTF-8 text"),
        ({"SCJEPA_API_KEYS_FILE": "MISSING"}, "SCJEPA_API_KEYS_FILE: MISSING: No such file"),
        # no key could open them: /healthz answered 401 for ever
        (
            {"SCJEPA_OPS_KEY_ROUTES": "/healthz", "SCJEPA_API_KEYS": "t:k"},
            "SCJEPA_OPS_KEY_ROUTES: ['/healthz'] need an @ops or @admin key, and neither "
            "SCJEPA_API_KEYS nor SCJEPA_API_KEYS_FILE holds one",
        ),
    ],
)  # fmt: skip
def test_serve_refuses_in_one_line(
    artifact_dir: Path, tmp_path: Path, env: dict[str, str], line: str
) -> None:
    """The real command: exit 2, one stderr line naming the variable, no traceback
    (uvicorn never starts: the port is free and unused)."""
    names = {
        "BINARY": str(artifact_dir / "model.onnx"),
        "MISSING": str(tmp_path / "no"),
    }
    env = {k: names.get(v, v) for k, v in env.items()}
    line = line.replace("BINARY", names["BINARY"]).replace("MISSING", names["MISSING"])
    base = {k: v for k, v in os.environ.items() if not k.startswith("SCJEPA_")}
    args = [scjepa_exe(), "serve", "--artifact", str(artifact_dir), "--port", str(free_port())]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, env=base | env, cwd=tmp_path, timeout=30)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"scjepa serve: error: {line}"), done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr


@pytest.mark.parametrize(
    ("arg", "line"),
    [
        (["--port", "70000"], "argument --port: 70000 is not in 0..65535"),
        (["--workers", "0"], "argument --workers: 0 is not in 1..1024"),
    ],
)
def test_serve_refuses_a_port_or_worker_count_out_of_range(
    artifact_dir: Path, tmp_path: Path, arg: list[str], line: str
) -> None:
    """uvicorn took --port 70000 and listened on 4464 (70000 mod 65536) while its log
    said 70000; --workers 0 ran one worker: both are argparse errors now."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SCJEPA_")}
    args = [scjepa_exe(), "serve", "--artifact", str(artifact_dir), *arg]
    done = subprocess.run(args, capture_output=True, text=True, env=base, cwd=tmp_path, timeout=30)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == f"scjepa serve: error: {line}"


def test_serve_names_the_artifact_given_as_a_file(
    artifact_dir: Path, tmp_path: Path
) -> None:
    """--artifact (SCJEPA_ARTIFACT) naming model.onnx, not its folder: the line said
    ".../model.onnx/manifest.json: file not found", and no variable."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SCJEPA_")}
    onnx = artifact_dir / "model.onnx"
    args = [scjepa_exe(), "serve", "--artifact", str(onnx), "--port", str(free_port())]
    done = subprocess.run(args, capture_output=True, text=True, env=base, cwd=tmp_path, timeout=30)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"scjepa serve: error: SCJEPA_ARTIFACT: {onnx}: a file, not the artifact's "
        "folder\n"
    )


def test_serve_refuses_a_dotenv_that_is_not_text(
    artifact_dir: Path, tmp_path: Path
) -> None:
    """The .env file of the working directory, not UTF-8: a traceback, exit 1."""
    (tmp_path / ".env").write_bytes(b"SCJEPA_HOP=\xff\xfe\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith("SCJEPA_")}
    args = [scjepa_exe(), "serve", "--artifact", str(artifact_dir), "--port", str(free_port())]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, env=base, cwd=tmp_path, timeout=30)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"scjepa serve: error: {tmp_path.resolve() / '.env'}: not UTF-8 text "
        "(invalid start byte)\n"
    )
