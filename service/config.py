"""Service settings, read once from ``SCJEPA_*`` environment variables (or a .env file).

    SCJEPA_ARTIFACT=artifacts/msl SCJEPA_REDIS_URL=redis://localhost:6379/0 scjepa serve

Without ``SCJEPA_REDIS_URL`` the service keeps its state in memory (one process only).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from service import auth, sched
from service.inference import CPU_CHUNK_TOKENS

ENV_PREFIX = "SCJEPA_"
# what redis-py's from_url takes, and the store's own Redis Cluster scheme
REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+cluster")
MAX_TTL_S = 10 * 365 * 24 * 3600  # SCJEPA_STREAM_TTL_S: 10 years
MAX_HISTORY_LEN = 1_000_000  # SCJEPA_HISTORY_LEN: about 540 MB of Redis per stream
MAX_DEDUPE_HORIZON = 10_000_000  # SCJEPA_DEDUPE_HORIZON: 80 MB (100 MB) per stream
MIN_RPS = 1e-6  # SCJEPA_RATE_LIMIT_RPS above 0: one request per 11.6 days
MAX_BURST = 1_000_000  # SCJEPA_RATE_LIMIT_BURST: a full bucket of 1e18 µs at MIN_RPS


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=".env",
        env_ignore_empty=True,  # compose's `SCJEPA_HOP:` (empty) means "the default"
        extra="ignore",
        hide_input_in_errors=True,  # an error must not print an API key
        # inf is no "never": a batch would wait for ever (max_wait_ms), readings would
        # be held for ever (allowed_lateness_s), endsAt would overflow (alert_hold_s)
        allow_inf_nan=False,
    )

    # --- model
    artifact: Path = Path("artifacts/latest")  # folder: model.onnx + manifest.json
    provider: Literal["auto", "cpu", "cuda"] = "auto"  # auto: CUDA if it is active
    precision: Literal["fp32", "int8", "fp16"] = (
        "fp32"  # int8: model.int8.onnx (CPU), fp16: model.fp16.onnx (CUDA)
    )
    # CPU threads for one batch: > 1 runs the CPU chunks of a batch side by side, one
    # thread each (a one-chunk batch uses intra-op threads); 0 = onnxruntime's choice
    intra_op_threads: Annotated[int, Field(ge=0)] = 1
    inter_op_threads: Annotated[int, Field(ge=0)] = 1
    # nice steps of the inference thread below the event loop's own niceness (Linux;
    # relative, so under `nice -n 10 scjepa serve` 5 means 15; capped at 19): reads
    # and ingest are not queued behind a batch on a small machine; 0 = same priority
    infer_nice: Annotated[int, Field(ge=0, le=19)] = 0
    # CPU time slice the event loop's thread asks for (Linux 6.12+, service/sched.py):
    # a request preempts a running batch on arrival; 0 = the kernel's default
    loop_slice_us: Annotated[int, AfterValidator(sched.check_us)] = 100
    # alert at this operating point of the artifact (false alarms per 1,000 scored
    # windows: one of the manifest's eval_metrics.threshold.operating_points) instead
    # of the threshold it was exported with; None = the manifest's threshold
    fa_budget: Annotated[float | None, Field(gt=0)] = None
    # tenants alerting at an operating point of their own: comma-separated
    # TENANT=BUDGET (false alarms per 1,000 windows, each one of the manifest's
    # operating points), e.g. "acme=0.3,globex=3"; the others alert as above
    tenant_fa_budget: Annotated[dict[str, float], NoDecode] = {}
    # --- windows and batching
    # readings between scored windows (100 = the window: non-overlapping); None = the
    # manifest's hop (scjepa export: the stride its threshold was set on)
    hop: Annotated[int | None, Field(ge=1)] = None
    max_batch: Annotated[int, Field(ge=1)] = 64  # windows per batch (one worker job)
    # CPU: a batch runs in onnxruntime runs of about this many encoder tokens
    # (windows x kept channels x patches), which keeps activations in cache; 0 = off
    cpu_chunk_tokens: Annotated[int, Field(ge=0)] = CPU_CHUNK_TOKENS
    # 0: a batch takes what queued while the previous one ran, adding no delay
    max_wait_ms: Annotated[float, Field(ge=0)] = 0.0
    # --- the scorer tier (service/worker.py)
    # what `scjepa serve` runs: api (HTTP: ingest queues windows, reads), scorer
    # (scores queued windows; HTTP /healthz, /readyz, /metrics only), all (both)
    role: Literal["api", "scorer", "all"] = "all"
    # the work queue's partitions (Redis: one stream key each, hash-tagged with the
    # streams they serve; spreads a Redis Cluster). Changing it orphans stored state.
    work_partitions: Annotated[int, Field(ge=1, le=1024)] = 16
    # back-pressure: past this many queued windows an ingest call queues only its
    # newest window per stream; the others are shed (counted, readings kept)
    max_queued_windows: Annotated[int, Field(ge=1)] = 100_000
    # a window delivered to a scorer and not acknowledged this long is claimed by
    # another (the first scorer died or hangs)
    claim_timeout_s: Annotated[float, Field(gt=0)] = 30.0
    # queue readers per scorer process (one reads while the other's batch scores)
    scorer_concurrency: Annotated[int, Field(ge=1, le=64)] = 2
    # where a scorer runs onnxruntime: process = a child process of its own (no GIL
    # shared with the event loop; restarted if it dies), thread = an inference thread
    # of this process; auto = process for role scorer, thread for role all
    infer_in: Literal["auto", "process", "thread"] = "auto"
    # an inference child that has not answered a batch in this many seconds (hung:
    # a stopped process, a stuck GPU) is killed and restarted; its windows are
    # claimed again
    infer_timeout_s: Annotated[float, Field(gt=0)] = 60.0
    # POST /ingest?wait=S waits at most S seconds for its windows' scores; the bound
    max_ingest_wait_s: Annotated[float, Field(ge=0)] = 60.0
    # out-of-order arrival: readings up to this many seconds older than the stream's
    # newest are held and merged in timestamp order before windows are cut (windows
    # then complete this much later); older ones are rejected as late. 0 = none
    allowed_lateness_s: Annotated[float, Field(ge=0)] = 0.0
    # --- alerting (service/alerting.py): per-stream risk alerts to Alertmanager
    # Alertmanager's base URL, e.g. http://alertmanager:9093; None = no stream alerts
    alertmanager_url: str | None = None
    # consecutive scored windows at/above the threshold that put a stream in alert;
    # 1 = every such window, as the event figures count (more warned of fewer incidents
    # on held-out data: results-notes.md, 2026-11-27, eighth session)
    alert_windows: Annotated[int, Field(ge=1)] = 1
    # consecutive scored windows below the threshold that resolve a firing alert; more
    # keep a risk hovering at the threshold from flapping (the event figures count
    # windows at/above the threshold, so they do not depend on it)
    alert_clear_windows: Annotated[int, Field(ge=1)] = 1
    # a firing stream's alert is posted again this often (on its next window) ...
    alert_resend_s: Annotated[float, Field(gt=0)] = 60.0
    # ... with endsAt this far ahead (must exceed alert_resend_s): a stream that stops
    # sending while in alert is resolved by Alertmanager after it
    alert_hold_s: Annotated[float, Field(gt=0)] = 600.0
    alert_timeout_s: Annotated[float, Field(gt=0)] = 2.0  # one POST to Alertmanager
    # --- logs (service/logs.py): text lines or JSON lines (one object per line)
    log_format: Literal["text", "json"] = "text"
    # a stream stored for another model layout (window, channels): fresh = it starts
    # over (its readings and risk history are dropped), refuse = its ingest is 409
    layout_change: Literal["fresh", "refuse"] = "fresh"
    # --- state
    redis_url: str | None = None  # None: in-memory store (single process)
    key_prefix: str = "scjepa"
    redis_timeout_s: Annotated[float, Field(gt=0)] = 1.0
    # connections per process; beyond it a request WAITS (up to redis_timeout_s) for one
    redis_max_connections: Annotated[int, Field(ge=1)] = 64
    # idle streams expire. The bounds below are what Redis takes: past about 9e15 s
    # EXPIRE answered "invalid expire time" (every ingest 503), a history past 1e16
    # made the record script's trim fail after its write (every window scored and
    # never acknowledged), a horizon past 5e7 outgrows a Redis string (512 MB)
    stream_ttl_s: Annotated[int, Field(ge=1, le=MAX_TTL_S)] = 7 * 24 * 3600
    # risk records kept per stream
    history_len: Annotated[int, Field(ge=1, le=MAX_HISTORY_LEN)] = 500
    # timestamps kept per stream
    dedupe_horizon: Annotated[int, Field(ge=1, le=MAX_DEDUPE_HORIZON)] = 10_000
    # --- API: tenants and keys (service/auth.py)
    # comma-separated [TENANT:]KEY or [TENANT:]sha256:HEX entries (@admin / @ops for
    # the admin and operations keys); plain keys are hashed here, at load; empty and
    # no file = open, one tenant
    api_keys: Annotated[list[str], NoDecode] = []
    # a file of "TENANT sha256:HEX" lines, re-read when it changes and on SIGHUP
    api_keys_file: Path | None = None
    # which of /healthz, /readyz, /metrics need an @ops (or @admin) key; empty = open
    ops_key_routes: Annotated[list[str], NoDecode] = []
    # requests per second per API key (a token bucket in the store, so it holds across
    # replicas) and the burst it allows; 0 = off. Only with keys configured.
    rate_limit_rps: Annotated[float, Field(ge=0)] = 100.0
    rate_limit_burst: Annotated[int, Field(ge=1, le=MAX_BURST)] = 200
    # --- API: limits
    max_body_bytes: Annotated[int, Field(ge=1024)] = 4 * 1024 * 1024
    max_readings_per_request: Annotated[int, Field(ge=1)] = 10_000
    max_streams_per_tenant: Annotated[int, Field(ge=1)] = 10_000  # live streams
    # a reading's ts may be at most this far ahead of the service's clock (seconds)
    max_future_s: Annotated[float, Field(gt=0)] = 86_400.0
    # a request's headers, and then its body, must arrive within this many seconds
    # (scjepa serve's HTTP protocol; idle keep-alive connections close after 5 s)
    read_timeout_s: Annotated[float, Field(gt=0)] = 15.0
    top_channels: Annotated[int, Field(ge=1)] = 5  # contributing channels reported
    # GET /metrics exports the latest risk of this many streams, those of highest
    # risk (scjepa_top_stream_risk, labelled tenant and stream), and the recent
    # novelty of as many, those of highest recent novelty (scjepa_top_stream_novelty,
    # with the input-drift monitor): N series each at most, so the cap keeps
    # Prometheus' cardinality bounded; 0 = none
    top_streams: Annotated[int, Field(ge=0, le=1000)] = 20
    # POST /ingest and GET /risk/{stream} answered ahead of FastAPI's routing
    # (service/fastpaths.py), through the same handlers; off = the FastAPI routes
    fast_paths: bool = True

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, v: str | None) -> str | None:
        """Another scheme made redis-py raise inside the app's start-up (a traceback)."""
        if v is not None and urlsplit(v).scheme not in REDIS_SCHEMES:
            schemes = ", ".join(f"{s}://" for s in REDIS_SCHEMES)
            raise ValueError(f"must start with one of {schemes}")
        return v

    @model_validator(mode="after")
    def _no_hash_tag(self) -> Settings:
        """The keys carry their own hash tags ({p3}, {tenant}): a brace in the prefix
        comes first and takes over, so on a Redis Cluster "a{}" split a stream's keys
        over slots (every ingest 500) and "{x}" put every partition in one slot. One
        redis-server has no slots: a deployment keyed so there runs on (refused, its
        upgrade stopped, and another prefix orphaned every stream stored)."""
        cluster = urlsplit(self.redis_url or "").scheme == "redis+cluster"
        if cluster and ("{" in self.key_prefix or "}" in self.key_prefix):
            raise ValueError(
                f"{ENV_PREFIX}KEY_PREFIX: must not contain {{ or }} on a Redis Cluster "
                "(the keys' own hash tags place them)"
            )
        return self

    @field_validator("alertmanager_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        """Without http(s):// and a host every alert post failed, logged, never sent."""
        if v is not None:
            url = urlsplit(v)
            if url.scheme not in ("http", "https") or not url.netloc:
                raise ValueError(
                    "must be an http:// or https:// URL with a host, e.g. "
                    "http://alertmanager:9093"
                )
        return v

    @field_validator("rate_limit_rps")
    @classmethod
    def _rate_in_range(cls, v: float) -> float:
        """The bucket's period (1/rps, µs) and expiry pass through the store's script:
        at 1e-12 a key's second request got through, at 1e-300 every keyed request
        was a 503 (Redis refused the expiry), as was a bucket (burst / rps) past
        about 9e12 s once full (MAX_BURST keeps it within 1e12); a burst past 1e308
        raised, a 500."""
        if 0 < v < MIN_RPS:
            raise ValueError(f"must be 0 (off) or at least {MIN_RPS:g}")
        return v

    @model_validator(mode="after")
    def _hold_past_resend(self) -> Settings:
        """A firing alert's endsAt must outlast its next post, or Alertmanager resolves
        it between posts (alerting.Policy refused it inside the app's start-up)."""
        if self.alert_hold_s <= self.alert_resend_s:
            raise ValueError(
                f"{ENV_PREFIX}ALERT_HOLD_S ({self.alert_hold_s:g}) must be more than "
                f"{ENV_PREFIX}ALERT_RESEND_S ({self.alert_resend_s:g})"
            )
        return self

    @field_validator("api_keys", "ops_key_routes", mode="before")
    @classmethod
    def _split(cls, v: object) -> object:
        if isinstance(v, str):
            return [k.strip() for k in v.split(",") if k.strip()]
        return v

    @field_validator("tenant_fa_budget", mode="before")
    @classmethod
    def _tenant_budgets(cls, v: object) -> object:
        """``TENANT=BUDGET,...``: each tenant once, a tenant's name as in the keys,
        a budget above 0 (whether the model has an operating point there is checked
        when it is loaded)."""
        if not isinstance(v, str):
            return v
        out: dict[str, float] = {}
        for entry in (e.strip() for e in v.split(",")):
            if not entry:
                continue
            tenant, eq, budget = (x.strip() for x in entry.partition("="))
            if not eq or not re.fullmatch(auth.TENANT_PATTERN, tenant):
                raise ValueError(
                    f"{entry!r}: expected TENANT=BUDGET (a tenant name of "
                    "[A-Za-z0-9._-], 1-64 characters, and false alarms per 1,000 "
                    "windows), e.g. acme=0.3"
                )
            if tenant in out:
                raise ValueError(f"{tenant!r} is given twice")
            try:
                out[tenant] = float(budget)
            except ValueError:
                raise ValueError(f"{entry!r}: {budget!r} is not a number") from None
            if not (math.isfinite(out[tenant]) and out[tenant] > 0):
                raise ValueError(f"{entry!r}: the budget must be a number above 0")
        return out

    @field_validator("api_keys")
    @classmethod
    def _hash_keys(cls, v: list[str]) -> list[str]:
        """Keep hashes only: a plain key becomes ``PRINCIPAL:sha256:HEX`` here."""
        return [auth.normalise_entry(e) for e in v]

    @field_validator("ops_key_routes")
    @classmethod
    def _known_ops_routes(cls, v: list[str]) -> list[str]:
        unknown = sorted(set(v) - set(auth.OPS_ROUTES))
        if unknown:
            raise ValueError(f"{unknown}: only {list(auth.OPS_ROUTES)} can need a key")
        return v


def describe(error: ValidationError) -> str:
    """One line naming each bad variable and why, for ``scjepa serve`` to print: the
    error's own text is a block per error naming the field, not the variable."""
    parts = []
    for e in error.errors(include_url=False, include_input=False):
        why = e["msg"].removeprefix("Value error, ")
        var = f"{ENV_PREFIX}{str(e['loc'][0]).upper()}" if e["loc"] else ""
        parts.append(f"{var}: {why}" if var and not why.startswith(var) else why)
    return "; ".join(parts)
