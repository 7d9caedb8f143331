"""Prometheus metrics, defined once at module level (prometheus_client conventions).

Seconds-based histograms with sub-millisecond buckets; no stream id as a label but in
``scjepa_top_stream_risk`` and ``scjepa_top_stream_novelty``, each bounded by
SCJEPA_TOP_STREAMS series (label cardinality must not grow with the number of
streams). A ``tenant`` label names one of the tenants the keys configure (``default``
in an open service), never a name a client chose. Metrics are per process: run one
uvicorn worker per container and scale with replicas.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
from collections.abc import Iterable, Iterator, Mapping
from math import nan
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter, Gauge, Histogram, Info, Summary

from service.incidents import Tally
from service.manifest import Manifest, served_point, serving_budget
from service.store import NOVELTY_SPAN

if TYPE_CHECKING:
    from service.inference import Model
    from service.store import QueueStats, Ranked

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
STORE_ERRORS = Counter(
    "scjepa_store_errors",
    "Store operations that failed (connection, timeout, refused: OOM at maxmemory), "
    "by op.",
    ["op"],
)
STORE_LATENCY = Histogram(
    "scjepa_store_duration_seconds",
    "Latency of one store operation.",
    ["op"],
    buckets=LATENCY_BUCKETS,
)
READINGS = Counter(
    "scjepa_readings",
    "Readings received, by outcome (accepted, duplicate, rejected: late) and tenant.",
    ["outcome", "tenant"],
)
WINDOWS_SCORED = Counter(
    "scjepa_windows_scored", "Windows scored by this process, by tenant.", ["tenant"]
)
WINDOWS_AT_POINT = Counter(
    "scjepa_tenant_windows_at_point",
    "Windows scored by this process at or above the threshold of each of the loaded "
    "model's operating points (budget: the false alarms per 1,000 windows it was set "
    "to keep), by tenant, whichever point the tenant is served at: per 1,000 windows "
    "scored (scjepa_windows_scored_total), the alarms each point raises on the "
    "tenant's streams, to set beside its budget when choosing the tenant's point.",
    ["budget", "tenant"],
)
WINDOWS_UNLIKE_TRAINING = Counter(
    "scjepa_windows_unlike_training",
    "Windows scored by this process whose novelty (the model's input-drift monitor) "
    "is at or above the manifest's novelty level: unlike the normal windows of the "
    "training data; by tenant. Stays 0 for a model without the monitor.",
    ["tenant"],
)
OUTCOMES = ("accepted", "duplicate", "rejected")
STREAM_ALERTS = Counter(
    "scjepa_stream_alerts",
    "Per-stream risk alert events (service/alerting.py), by event and tenant: fire (a "
    "stream entered alert: a page), refresh (posted again while firing), resolve (its "
    "risk fell below the threshold).",
    ["event", "tenant"],
)
ALERT_EVENTS = ("fire", "refresh", "resolve")  # service/alerting.py's steps, in order
WINDOW_NOVELTY = Histogram(
    "scjepa_window_novelty",
    "Novelty of each window scored by this process (the model's input-drift monitor): "
    "its rank among the training data's normal calibration windows, so spread evenly "
    "over 0-1 with a mean of 0.5 while the streams resemble them. No samples for a "
    "model without the monitor.",
    buckets=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99),
)
# per tenant, the mean alone (2 series a tenant; the histogram above has the spread)
TENANT_NOVELTY = Summary(
    "scjepa_tenant_window_novelty",
    "Novelty of each window scored by this process, by tenant: sum and count, for "
    "each tenant's mean (0.5 while its streams resemble the training data's normal "
    "calibration windows). No samples for a model without the monitor.",
    ["tenant"],
)
WINDOWS_SHED = Counter(
    "scjepa_windows_shed",
    "Completed windows never scored, by reason: backpressure (the work queue was past "
    "SCJEPA_MAX_QUEUED_WINDOWS: the call's newest window was queued, these not; the "
    "readings are kept), layout (queued for another model layout, of its shape or not).",
    ["reason"],
)
WINDOWS_CLAIMED = Counter(
    "scjepa_windows_claimed",
    "Windows this scorer took over from one that left them pending past "
    "SCJEPA_CLAIM_TIMEOUT_S (a scorer died or hangs).",
)
SCORER_BATCH = Histogram(
    "scjepa_scorer_batch_seconds",
    "One scorer batch: from the windows read off the work queue to their risk records "
    "written and acknowledged (inference included).",
    buckets=LATENCY_BUCKETS,
)
LISTENER_ERRORS = Counter(
    "scjepa_listener_errors",
    "Scored-window listeners (e.g. alerting) that raised; scoring went on.",
    ["listener"],
)
# The work queue, store-wide (any process reports the same; aggregate with max).
QUEUE_DEPTH = Gauge(
    "scjepa_work_queue_depth",
    "Windows queued for scoring or delivered to a scorer and not yet acknowledged.",
)
QUEUE_AGE = Gauge(
    "scjepa_work_queue_oldest_age_seconds",
    "Age of the oldest window in the work queue (0 when empty): the scoring lag.",
)
RELOADS = Counter(
    "scjepa_reloads",
    "Hot reloads by what was reloaded (keys, model, inference_process: a scorer's "
    "inference process that died, started again) and outcome (ok, failed: the "
    "previous keys or model stay in force; a process not restarted is tried again "
    "on the next batch).",
    ["what", "outcome"],
)
REFUSED = Counter(
    "scjepa_requests_refused",
    "Requests refused at the door, by reason (rate_limit, stream_quota, "
    "body_too_large, read_timeout, unsupported_media_type) and tenant (rate_limit and "
    "stream_quota; empty for the others, refused before the key is read).",
    ["reason", "tenant"],
)
TENANT_REFUSALS = ("rate_limit", "stream_quota")  # the refusals of a known tenant
TENANT_STREAMS = Gauge(
    "scjepa_tenant_streams",
    "Live streams of each tenant the keys name (sent readings within the idle TTL): "
    "what its stream quota counts. Store-wide: aggregate with max.",
    ["tenant"],
)
TENANT_IN_ALERT = Gauge(
    "scjepa_tenant_streams_in_alert",
    "Streams of each tenant the keys name whose latest risk is at or above threshold. "
    "Store-wide: aggregate with max.",
    ["tenant"],
)
TENANT_MAX_RISK = Gauge(
    "scjepa_tenant_max_risk",
    "Highest latest risk over the live streams of each tenant the keys name (0 when "
    "none was scored). Store-wide: aggregate with max.",
    ["tenant"],
)
STREAM_QUOTA = Gauge(
    "scjepa_stream_quota",
    "Live streams a tenant may have (SCJEPA_MAX_STREAMS_PER_TENANT): past it, a new "
    "stream is refused (403).",
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
# the gauges labelled by stream: at most SCJEPA_TOP_STREAMS series each, replaced on
# each refresh, so a stream that leaves the top N leaves the exposition (no stale value)
TOP_STREAM_RISK = Gauge(
    "scjepa_top_stream_risk",
    "Latest risk of the SCJEPA_TOP_STREAMS streams of highest latest risk.",
    ["tenant", "stream"],
)
TOP_STREAM_NOVELTY = Gauge(
    "scjepa_top_stream_novelty",
    "Recent novelty (the model's input-drift monitor: an exponentially weighted mean "
    f"over the stream's last ~{NOVELTY_SPAN} scored windows, 0.5 while they resemble "
    "the training data) of the SCJEPA_TOP_STREAMS streams of highest recent novelty: "
    "the streams least like the training data. Absent when the loaded model has no "
    "input-drift monitor.",
    ["tenant", "stream"],
)
# The loaded model's operating point (set at start-up and on a hot reload)
ALERT_THRESHOLD = Gauge(
    "scjepa_alert_threshold",
    "The loaded model's threshold: a stream alerts at a risk at or above it.",
)
ALERT_BUDGET = Gauge(
    "scjepa_alert_budget_per_1000",
    "False alarms per 1,000 scored windows the threshold was set to keep (the "
    "operating point served; NaN where the manifest records none).",
)

EVALUATED_PAGES = Gauge(
    "scjepa_alert_evaluated_false_pages_per_1000_windows",
    "False pages per 1,000 scored windows on the evaluation's test split at the "
    "operating point served, or a label-free model's on its calibration windows "
    "(estimate: mean over seeds, upper95 of its 95 % interval; NaN where the manifest "
    "records none).",
    ["estimate"],
)
# the same of each tenant served at an operating point of its own
# (SCJEPA_TENANT_FA_BUDGET, the key file's fa_budget lines): the others are at the
# ones above
TENANT_ALERT_THRESHOLD = Gauge(
    "scjepa_tenant_alert_threshold",
    "Threshold of each tenant served at an operating point of its own "
    "(SCJEPA_TENANT_FA_BUDGET, the key file's fa_budget lines): its streams alert at "
    "a risk at or above it. The other tenants alert at scjepa_alert_threshold.",
    ["tenant"],
)
TENANT_ALERT_BUDGET = Gauge(
    "scjepa_tenant_alert_budget_per_1000",
    "False alarms per 1,000 scored windows the threshold of each tenant served at an "
    "operating point of its own keeps.",
    ["tenant"],
)
TENANT_EVALUATED_PAGES = Gauge(
    "scjepa_tenant_alert_evaluated_false_pages_per_1000_windows",
    "scjepa_alert_evaluated_false_pages_per_1000_windows at the operating point of "
    "each tenant served at one of its own.",
    ["tenant", "estimate"],
)
EVALUATED_WARNED = Gauge(
    "scjepa_alert_evaluated_warned_rate",
    "Share of incidents warned of on the evaluation's test split at the operating "
    "point served (estimate: mean over seeds, lower95 of its 95 % interval; NaN where "
    "the manifest records none): what scjepa_tenant_incidents' warned share compares "
    "with.",
    ["estimate"],
)
TENANT_EVALUATED_WARNED = Gauge(
    "scjepa_tenant_alert_evaluated_warned_rate",
    "scjepa_alert_evaluated_warned_rate at the operating point of each tenant served "
    "at one of its own.",
    ["tenant", "estimate"],
)
# incidents the tenants reported (POST /incidents), judged against the alerts
TENANT_INCIDENTS = Gauge(
    "scjepa_tenant_incidents",
    "Incidents each tenant the keys name reported (POST /incidents) in the last 30 "
    "days, by outcome: warned (a window in alert ended before the onset, within the "
    "look-back), late, missed, unscored (no window scored before the onset), unknown "
    "(the alert log no longer reaches back). Store-wide: aggregate with max.",
    ["tenant", "outcome"],
)
TENANT_INCIDENT_LEAD = Gauge(
    "scjepa_tenant_incident_lead_seconds",
    "Quartiles of the lead (onset minus the end of the first window in alert of the "
    "run that warned; seconds of the readings' time) of each tenant's incidents "
    "warned of among those reported in the last 30 days; absent with none.",
    ["tenant", "quantile"],
)
# absent (no series) for a model without the monitor: no figure to compare with
NOVELTY_EXPECTED_SHARE = Gauge(
    "scjepa_novelty_expected_share",
    "Share of the training data's normal calibration windows whose novelty is at or "
    "above the level (the label): the share of scored windows unlike the training "
    "data to expect while the streams resemble it. Absent when the loaded model has "
    "no input-drift monitor.",
    ["level"],
)


def set_model(model: Model) -> None:
    """The loaded model's info metric (provider, name, version, precision) and its
    operating point: threshold, the budget it keeps (SCJEPA_FA_BUDGET's point, else
    the exported one; NaN for an F1 threshold or an older manifest) and the false
    pages per 1,000 scored windows the test split measured there, or for a label-free
    model its calibration windows (ScjepaPagingAboveEvaluation compares the live rate
    with them); the same of each tenant served at an operating point of its own
    (SCJEPA_TENANT_FA_BUDGET, the key file's fa_budget lines); and the share of
    windows unlike the training data its input-drift monitor expects
    (ScjepaInputsUnlikeTraining compares the live share with it)."""
    m = model.manifest
    PROVIDER.info(
        {
            "provider": model.provider,
            "model": m.name,
            "version": m.version,
            "precision": model.precision,
        }
    )
    ALERT_THRESHOLD.set(m.threshold)
    ALERT_BUDGET.set(_budget(m))
    for estimate, v in _evaluated_pages(m):
        EVALUATED_PAGES.labels(estimate).set(v)
    for estimate, v in _evaluated_warned(m):
        EVALUATED_WARNED.labels(estimate).set(v)
    own_gauges = (
        TENANT_ALERT_THRESHOLD,
        TENANT_ALERT_BUDGET,
        TENANT_EVALUATED_PAGES,
        TENANT_EVALUATED_WARNED,
    )
    for gauge in own_gauges:
        gauge.clear()  # exactly the tenants the loaded model serves at their own
    for tenant in model.tenants:
        own = model.manifest_for(tenant)
        TENANT_ALERT_THRESHOLD.labels(tenant).set(own.threshold)
        TENANT_ALERT_BUDGET.labels(tenant).set(_budget(own))
        for estimate, v in _evaluated_pages(own):
            TENANT_EVALUATED_PAGES.labels(tenant, estimate).set(v)
        for estimate, v in _evaluated_warned(own):
            TENANT_EVALUATED_WARNED.labels(tenant, estimate).set(v)
    NOVELTY_EXPECTED_SHARE.clear()  # a reload's model may have another level, or none
    if m.novelty is not None:
        level = f"{m.novelty.level:g}"
        NOVELTY_EXPECTED_SHARE.labels(level).set(m.novelty.expected_share)


def _budget(m: Manifest) -> float:
    """The false alarms per 1,000 windows ``m``'s threshold keeps; NaN for an F1
    threshold or an older manifest."""
    budget = serving_budget(m)
    rule_has_budget = (m.eval_metrics.get("threshold") or {}).get("rule") in (
        "budget",
        "cv-budget",
    )
    return budget if budget is not None and rule_has_budget else nan


def _evaluated(m: Manifest, key: str, bound: str) -> list[tuple[str, float]]:
    """(estimate, figure) of ``key`` the test split measured at ``m``'s operating
    point: its mean, and ``bound`` ("lower95" or "upper95") of its 95 % interval; for
    a label-free model its calibration windows' (which record no warned rate); NaN
    where the manifest records none."""
    point = served_point(m) or {}
    # a label-free model (scjepa calibrate) has no test figures: its calibration
    # windows' stand in, under the same keys
    test = point.get("test") or point.get("calibration") or {}
    ci = (test.get(f"{key}_ci95") or [None, None])[bound == "upper95"]
    got = (("mean", test.get(key)), (bound, ci))
    return [(estimate, nan if v is None else float(v)) for estimate, v in got]


def _evaluated_pages(m: Manifest) -> list[tuple[str, float]]:
    """False pages per 1,000 windows at ``m``'s point, and the upper end."""
    return _evaluated(m, "false_pages_per_1000", "upper95")


def _evaluated_warned(m: Manifest) -> list[tuple[str, float]]:
    """The share of incidents warned of at ``m``'s point, and the lower end."""
    return _evaluated(m, "warned_rate", "lower95")


def set_incidents(tenants: list[str], tallies: list[Tally]) -> None:
    """Each tenant's incidents reported in the last 30 days by outcome, and the
    quartiles of their lead where some were warned of; the series sets are exactly
    the tenants given."""
    TENANT_INCIDENTS.clear()
    TENANT_INCIDENT_LEAD.clear()
    for tenant, t in zip(tenants, tallies, strict=True):
        for outcome, n in t.counts.items():
            TENANT_INCIDENTS.labels(tenant, outcome).set(n)
        for q, v in zip(
            ("0.25", "0.5", "0.75"), t.lead_quartiles_s or (), strict=False
        ):
            TENANT_INCIDENT_LEAD.labels(tenant, q).set(v)


def set_summary(
    streams: int,
    in_alert: int,
    max_risk: float,
    top: Ranked = (),
    top_novelty: Ranked = (),
) -> None:
    """The store-wide stream gauges; ``top`` (tenant, stream, risk) and
    ``top_novelty`` (tenant, stream, recent novelty) replace the top streams' series
    wholesale: each series set is exactly the current top N."""
    STREAMS_TRACKED.set(streams)
    STREAMS_IN_ALERT.set(in_alert)
    MAX_RISK.set(max_risk)
    for gauge, ranked in ((TOP_STREAM_RISK, top), (TOP_STREAM_NOVELTY, top_novelty)):
        gauge.clear()
        for tenant, stream, value in ranked:
            gauge.labels(tenant, stream).set(value)


def set_tenant_streams(
    tenants: list[str],
    live: list[int],
    quota: int,
    in_alert: Mapping[str, int],
    max_risk: Mapping[str, float],
) -> None:
    """The tenants' live streams against the quota, their streams in alert and their
    highest latest risk; the series sets are exactly the tenants the keys name now (a
    tenant removed from them is gone from the next scrape)."""
    STREAM_QUOTA.set(quota)
    for gauge in (TENANT_STREAMS, TENANT_IN_ALERT, TENANT_MAX_RISK):
        gauge.clear()
    for tenant, n in zip(tenants, live, strict=True):
        TENANT_STREAMS.labels(tenant).set(n)
        TENANT_IN_ALERT.labels(tenant).set(in_alert.get(tenant, 0))
        TENANT_MAX_RISK.labels(tenant).set(max_risk.get(tenant, 0.0))


def set_queue(stats: QueueStats) -> None:
    """The work-queue gauges (a scorer refreshes them every second; call on a scrape
    to have them in an API-only process too)."""
    QUEUE_DEPTH.set(stats.depth)
    QUEUE_AGE.set(stats.oldest_age_s)


def _tenant_series(
    tenant: str,
) -> Iterator[tuple[Counter | Summary, tuple[str, ...]]]:
    """Each per-tenant counter (and summary), with the label values (``tenant`` last,
    as each declares its labels) of one of ``tenant``'s series."""
    for outcome in OUTCOMES:
        yield READINGS, (outcome, tenant)
    yield WINDOWS_SCORED, (tenant,)
    yield WINDOWS_UNLIKE_TRAINING, (tenant,)
    yield TENANT_NOVELTY, (tenant,)
    for event in ALERT_EVENTS:
        yield STREAM_ALERTS, (event, tenant)
    for reason in TENANT_REFUSALS:
        yield REFUSED, (reason, tenant)


@functools.cache
def tenant_readings(tenant: str) -> tuple[Any, ...]:
    """``tenant``'s READINGS series, one per outcome in OUTCOMES' order (looked up once
    per tenant, not per request; forgotten with the tenant's series)."""
    return tuple(READINGS.labels(o, tenant) for o in OUTCOMES)


# tenants a key reload removed and none has added back: counted nowhere (tenant_child)
_gone: set[str] = set()


class _Uncounted:
    """A series child that counts nothing (a tenant the keys no longer name)."""

    def inc(self, amount: float = 1.0) -> None:
        pass

    def observe(self, amount: float) -> None:
        pass


_UNCOUNTED = _Uncounted()


def tenant_child(metric: Counter | Summary, *values: str) -> Any:
    """``metric``'s series of these label values (the tenant last, as each per-tenant
    metric declares its labels); for a tenant a key reload removed, one that counts
    nothing: its windows still queued are scored, and would bring back for good the
    series the reload removed."""
    return _UNCOUNTED if values[-1] in _gone else metric.labels(*values)


_points_counted: set[str] = set()  # the budget labels WINDOWS_AT_POINT has had


def count_at_points(
    points: tuple[tuple[str, float], ...], tenants: list[str], risks: list[float]
) -> None:
    """Count a scored batch's windows (``risks[j]`` of ``tenants[j]``) at or above
    each operating point's threshold (``points``: (budget, threshold)), per tenant,
    compared as the records compare them; every tenant of the batch gets a series at
    every point, zero or not."""
    if not points:
        return
    _points_counted.update(b for b, _ in points)
    of: dict[str, list[float]] = {}
    for t, r in zip(tenants, risks, strict=True):
        of.setdefault(t, []).append(r)
    for t, rs in of.items():
        rs.sort()
        for budget, threshold in points:
            _at_point(budget, t).inc(len(rs) - bisect.bisect_left(rs, threshold))


@functools.cache
def _at_point(budget: str, tenant: str) -> Any:
    """WINDOWS_AT_POINT's series (looked up once, not per batch: a lookup costs more
    than the count; forgotten with the tenant's series)."""
    return tenant_child(WINDOWS_AT_POINT, budget, tenant)


def tenants_known(tenants: Iterable[str], gone: Iterable[str] = ()) -> None:
    """Export zeros for ``tenants``' per-tenant series from the start (at start-up and
    when the keys are reloaded), so that a tenant's rates read 0 before its first
    reading rather than nothing (NoReadingsIngested reads the accepted ones); drop
    the series of the tenants ``gone`` from the keys at a reload (Prometheus marks
    them stale) and count their work no more (:func:`tenant_child`)."""
    tenants = list(tenants)
    _gone.update(gone)
    _gone.difference_update(tenants)
    for t in gone:
        for counter, values in _tenant_series(t):
            counter.remove(*values)
        for budget in _points_counted:
            with contextlib.suppress(KeyError):
                WINDOWS_AT_POINT.remove(budget, t)
    tenant_readings.cache_clear()  # (a lookup of a removed series counts nowhere)
    _at_point.cache_clear()
    for t in tenants:
        for counter, values in _tenant_series(t):
            counter.labels(*values)


for reason in ("backpressure", "layout", "invalid"):
    WINDOWS_SHED.labels(reason=reason)
for what in ("keys", "model"):
    for outcome in ("ok", "failed"):
        RELOADS.labels(what=what, outcome=outcome)
for reason in ("body_too_large", "read_timeout", "unsupported_media_type"):
    REFUSED.labels(reason=reason, tenant="")
