"""`scjepa serve`: run the risk service with uvicorn.

    scjepa serve --artifact artifacts/msl --redis-url redis://localhost:6379/0 --port 8000

Every option also reads from its SCJEPA_* variable (see service/config.py); options given
here win. Without a Redis URL state is in memory, so only one worker is allowed; with
Redis prefer one worker per container and more replicas (metrics are per process).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from service.manifest import ArtifactError, at_budget, load_manifest


def int_in(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: an integer in [lo, hi]. uvicorn takes any: --port 70000
    listened on 4464 (70000 mod 65536) while its log said 70000, and --workers 0 or
    -1 ran one worker."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= n <= hi:
            raise argparse.ArgumentTypeError(f"{n} is not in {lo}..{hi}")
        return n

    return parse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--artifact", type=Path, help="folder with model.onnx + manifest.json"
    )
    p.add_argument("--redis-url", help="redis://host:6379/0 (default: in-memory state)")
    p.add_argument(
        "--host", default="127.0.0.1", help="bind address (0.0.0.0 in a container)"
    )
    p.add_argument("--port", type=int_in(0, 65535), default=8000)
    p.add_argument(
        "--role",
        choices=["api", "scorer", "all"],
        help="api: HTTP, ingest queues windows; scorer: scores queued windows (needs "
        "--redis-url; HTTP /healthz, /readyz, /metrics only); all: both in this "
        "process (default; SCJEPA_ROLE)",
    )
    p.add_argument(
        "--hop", type=int, help="readings between scored windows (default: manifest)"
    )
    p.add_argument(
        "--fa-budget",
        type=float,
        help="alert at this operating point of the artifact: false alarms per 1,000 "
        "windows, one of its manifest's operating points (default: the threshold it "
        "was exported with; SCJEPA_FA_BUDGET)",
    )
    p.add_argument("--provider", choices=["auto", "cpu", "cuda"])
    p.add_argument("--precision", choices=["fp32", "int8", "fp16"])
    p.add_argument(
        "--workers",
        type=int_in(1, 1024),
        default=1,
        help="uvicorn worker processes (needs Redis; metrics stay per process)",
    )
    p.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug", "trace"],
        help="uvicorn's and the service's own log level",
    )


def run(args: argparse.Namespace) -> int:
    overrides = {
        "SCJEPA_ARTIFACT": args.artifact,
        "SCJEPA_REDIS_URL": args.redis_url,
        "SCJEPA_HOP": args.hop,
        "SCJEPA_FA_BUDGET": args.fa_budget,
        "SCJEPA_PROVIDER": args.provider,
        "SCJEPA_PRECISION": args.precision,
        "SCJEPA_ROLE": args.role,
    }
    for key, value in overrides.items():
        if value is not None:
            os.environ[key] = str(value)  # worker processes read the same settings

    from pydantic import ValidationError

    from service.auth import ADMIN, OPS, KeyConfigError, Keys
    from service.config import Settings, describe

    try:
        settings = Settings()
    except ValidationError as e:
        print(f"scjepa serve: error: {describe(e)}", file=sys.stderr)
        return 2
    except UnicodeDecodeError as e:  # the only file Settings reads: a traceback before
        env = Path(str(Settings.model_config.get("env_file"))).resolve()
        print(
            f"scjepa serve: error: {env}: not UTF-8 text ({e.reason})", file=sys.stderr
        )
        return 2
    try:  # fail here, with one line, not in a worker
        manifest = load_manifest(settings.artifact)
    except (ArtifactError, OSError) as e:
        print(f"scjepa serve: error: SCJEPA_ARTIFACT: {e}", file=sys.stderr)
        return 2
    try:
        at_budget(manifest, settings.fa_budget)
    except ArtifactError as e:  # it names SCJEPA_FA_BUDGET
        print(f"scjepa serve: error: {e}", file=sys.stderr)
        return 2
    try:  # the settings' own keys are checked above: what fails here is the file
        keys = Keys(settings.api_keys, settings.api_keys_file)
    except (KeyConfigError, OSError) as e:
        why = f"{e.filename}: {e.strerror}" if isinstance(e, OSError) else str(e)
        print(f"scjepa serve: error: SCJEPA_API_KEYS_FILE: {why}", file=sys.stderr)
        return 2
    if settings.ops_key_routes and not (keys.table.has(OPS) or keys.table.has(ADMIN)):
        # no key could open them: health checks and scrapes would get 401 for ever
        print(
            f"scjepa serve: error: SCJEPA_OPS_KEY_ROUTES: {settings.ops_key_routes} "
            f"need an {OPS} or {ADMIN} key, and neither SCJEPA_API_KEYS nor "
            "SCJEPA_API_KEYS_FILE holds one",
            file=sys.stderr,
        )
        return 2
    if settings.role != "api":  # a process that scores: the model it will run
        from service.reload import load_checked

        try:  # precision, provider and graph checks, and a warm-up run
            load_checked(settings, None).close()
        except Exception as e:  # onnxruntime raises its own types
            why = str(e) if isinstance(e, ArtifactError) else repr(e)
            print(f"scjepa serve: error: {why}", file=sys.stderr)
            return 2
    if args.workers > 1 and not settings.redis_url:
        print("scjepa serve: error: --workers > 1 needs --redis-url", file=sys.stderr)
        return 2
    if settings.role != "all" and not settings.redis_url:
        print(
            f"scjepa serve: error: --role {settings.role} needs --redis-url (the work "
            "queue between API and scorer processes lives in Redis)",
            file=sys.stderr,
        )
        return 2

    import uvicorn

    from service import logs
    from service.http import GuardedHttpToolsProtocol

    uvicorn.run(
        "service.main:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
        log_config=logs.config(settings.log_format, args.log_level),
        access_log=False,  # the middleware writes the access line (service/logs.py)
        http=GuardedHttpToolsProtocol,  # deadlines for slow clients (service/http.py)
    )
    return 0
