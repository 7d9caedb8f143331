"""Prometheus metrics, defined once at module level (prometheus_client conventions).

Seconds-based histograms with sub-millisecond buckets; no stream id as a label anywhere
(label cardinality must not grow with the number of streams). Metrics are per process:
run one uvicorn worker per container and scale with replicas.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, Info

LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)

REQUEST_LATENCY = Histogram(
    "scjepa_http_request_duration_seconds",
    "HTTP request latency by route template.",
    ["method", "route", "status"],
    buckets=LATENCY_BUCKETS,
)
INFERENCE_LATENCY = Histogram(
    "scjepa_inference_duration_seconds",
    "onnxruntime latency of one micro-batch.",
    buckets=LATENCY_BUCKETS,
)
BATCH_SIZE = Histogram(
    "scjepa_inference_batch_size",
    "Windows per onnxruntime call.",
    buckets=BATCH_BUCKETS,
)
STORE_LATENCY = Histogram(
    "scjepa_store_duration_seconds",
    "Latency of one store operation.",
    ["op"],
    buckets=LATENCY_BUCKETS,
)
READINGS = Counter(
    "scjepa_readings",
    "Readings received, by outcome (accepted, duplicate, rejected: late).",
    ["outcome"],
)
WINDOWS_SCORED = Counter("scjepa_windows_scored", "Windows scored.")
WINDOWS_SKIPPED = Counter(
    "scjepa_windows_skipped",
    "Completed windows not scored (more than max_windows_per_ingest in one call).",
)
RELOADS = Counter(
    "scjepa_reloads",
    "Hot reloads by what was reloaded (keys, model) and outcome (ok, failed: the "
    "previous one stays in force).",
    ["what", "outcome"],
)
REFUSED = Counter(
    "scjepa_requests_refused",
    "Requests refused at the door, by reason (rate_limit, stream_quota, "
    "body_too_large, read_timeout, unsupported_media_type).",
    ["reason"],
)
PROVIDER = Info("scjepa_inference", "Loaded model and the ACTIVE execution provider.")
# Store-wide (every replica reports the same numbers; aggregate with max, not sum).
# Refreshed from the store on each scrape of GET /metrics.
STREAMS_TRACKED = Gauge(
    "scjepa_streams_tracked", "Streams that sent readings within the idle TTL."
)
STREAMS_IN_ALERT = Gauge(
    "scjepa_streams_in_alert", "Streams whose latest risk is at or above threshold."
)
MAX_RISK = Gauge("scjepa_max_risk", "Highest latest risk over the tracked streams.")


def set_summary(streams: int, in_alert: int, max_risk: float) -> None:
    STREAMS_TRACKED.set(streams)
    STREAMS_IN_ALERT.set(in_alert)
    MAX_RISK.set(max_risk)


for outcome in ("accepted", "duplicate", "rejected"):
    READINGS.labels(outcome=outcome)  # export zeros from the start
for what in ("keys", "model"):
    for outcome in ("ok", "failed"):
        RELOADS.labels(what=what, outcome=outcome)
for reason in ("rate_limit", "stream_quota", "body_too_large", "read_timeout",
               "unsupported_media_type"):  # fmt: skip
    REFUSED.labels(reason=reason)
