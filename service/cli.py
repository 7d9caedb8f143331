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


def _refuse(why: str) -> int:
    """One line on stderr, exit status 2: how `scjepa serve` refuses to start."""
    print(f"scjepa serve: error: {why}", file=sys.stderr)
    return 2


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
        return _refuse(describe(e))
    except UnicodeDecodeError as e:  # the only file Settings reads: a traceback before
        env = Path(str(Settings.model_config.get("env_file"))).resolve()
        return _refuse(f"{env}: not UTF-8 text ({e.reason})")
    try:  # fail here, with one line, not in a worker
        manifest = load_manifest(settings.artifact)
    except (ArtifactError, OSError) as e:
        return _refuse(f"SCJEPA_ARTIFACT: {e}")
    try:
        at_budget(manifest, settings.fa_budget)
    except ArtifactError as e:  # it names SCJEPA_FA_BUDGET
        return _refuse(str(e))
    try:  # the settings' own keys are checked above: what fails here is the file
        keys = Keys(
            settings.api_keys, settings.api_keys_file, settings.tenant_fa_budget
        )
    except (KeyConfigError, OSError) as e:
        why = f"{e.filename}: {e.strerror}" if isinstance(e, OSError) else str(e)
        return _refuse(f"SCJEPA_API_KEYS_FILE: {why}")
    for tenant, budget in keys.table.budgets.items():  # in every role
        try:
            at_budget(manifest, budget.per_1000, tenant, budget.set_by)
        except ArtifactError as e:  # it names the setting, the tenant, the points
            return _refuse(str(e))
    if settings.ops_key_routes and not (keys.table.has(OPS) or keys.table.has(ADMIN)):
        # no key could open them: health checks and scrapes would get 401 for ever
        return _refuse(
            f"SCJEPA_OPS_KEY_ROUTES: {settings.ops_key_routes} need an {OPS} or "
            f"{ADMIN} key, and neither SCJEPA_API_KEYS nor SCJEPA_API_KEYS_FILE holds one"
        )
    if settings.role != "api":  # a process that scores: the model it will run
        from service.reload import load_checked

        try:  # precision, provider and graph checks, and a warm-up run
            load_checked(settings, None, keys.table.budgets).close()
        except Exception as e:  # onnxruntime raises its own types
            why = str(e) if isinstance(e, ArtifactError) else repr(e)
            return _refuse(why)
    if args.workers > 1 and not settings.redis_url:
        return _refuse("--workers > 1 needs --redis-url")
    if settings.role != "all" and not settings.redis_url:
        return _refuse(
            f"--role {settings.role} needs --redis-url (the work queue between API "
            "and scorer processes lives in Redis)"
        )

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
