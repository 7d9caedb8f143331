"""POST /incidents, GET /incidents, DELETE /incidents/{id}: incidents the operator
reports, each judged against the stream's alerts (service/incidents.py)."""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response, status

from service import handlers
from service.deps import ModelDep, Refused, ScorerDep, StoreDep, TenantDep, errors
from service.incidents import OUTCOMES, SPAN_S, Outcome, judge
from service.ingest_body import parse_model
from service.manifest import serving_budget
from service.schemas import (
    INCIDENT_PATTERN,
    STREAM_PATTERN,
    Incident,
    IncidentList,
    IncidentReport,
    OperatingPoints,
    PointOnIncidents,
)
from service.store import INCIDENTS_KEPT, AlertLog, IncidentRow

router = APIRouter(tags=["incidents"])

# The body is read raw (parse_model: a 422 naming the field for any bad body, bytes
# that are not UTF-8 included), so its schema is named here; main.py puts it into the
# components.
BODY_DOC = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {"$ref": "#/components/schemas/IncidentReport"}
            }
        },
    }
}


@router.post(
    "/incidents",
    responses=errors(401, 404, 409, 422, 429, 503),
    openapi_extra=BODY_DOC,
)
async def report(
    request: Request,
    tenant: TenantDep,
    store: StoreDep,
    model: ModelDep,
    scorer: ScorerDep,
) -> Incident:
    """Report an incident on one of the tenant's streams (its onset, and its end once
    known); the answer says whether the service's alerts warned of it, and how early
    (`outcome`, `lead_s`), by the evaluation's rules. Decided now, from the stream's
    alert log: report an incident while the stream is still live (its readings sent
    within the idle TTL). The same id reported again replaces it."""
    body = parse_model(await request.body(), IncidentReport)
    log = await store.alert_log(tenant, body.stream)
    if log is None:
        raise Refused(handlers.detail(404, handlers.unknown_stream(body.stream)))
    if log.last_ts is None or body.start > log.last_ts:
        raise Refused(
            handlers.detail(
                409,
                f"stream {body.stream!r}'s readings reach {log.last_ts}, not the "
                f"onset {body.start}: report the incident once they do (its windows "
                "before the onset are not all scored yet)",
            )
        )
    m = model.manifest_for(tenant)
    threshold = m.eval_metrics.get("threshold") or {}
    lookback = int(threshold.get("lookback") or m.window)
    got = judge(
        log, body.start, body.end, lookback=lookback, window=m.window, hop=scorer.hop
    )
    now = time.time()
    incident = Incident(
        id=body.id or f"{body.stream}@{body.start!r}",
        stream=body.stream,
        start=body.start,
        lookback=lookback,
        reported_at=datetime.fromtimestamp(now, UTC),
        **asdict(got),  # the outcome, the end judged to, the lead or delay
    )
    record = incident.model_dump_json()
    row = IncidentRow(incident.id, now, record, got.outcome, got.lead_s)
    await store.put_incident(tenant, row)
    return incident


@router.get("/incidents", responses=errors(401, 422, 429, 503))
async def incidents(
    tenant: TenantDep,
    store: StoreDep,
    limit: Annotated[int, Query(ge=1, le=INCIDENTS_KEPT)] = 100,
    stream: Annotated[str | None, Query(pattern=STREAM_PATTERN)] = None,
    outcome: Outcome | None = None,
) -> IncidentList:
    """The tenant's incidents reported, newest reported first (the last 10,000 are
    kept): those of one ``stream``, of one ``outcome`` (the missed ones, say), or
    all."""
    if stream is None and outcome is None:
        raw = await store.incidents(tenant, limit)
        return IncidentList(incidents=[Incident.model_validate_json(r) for r in raw])
    out: list[Incident] = []
    for r in await store.incidents(tenant, INCIDENTS_KEPT):
        got = Incident.model_validate_json(r)
        if stream in (None, got.stream) and outcome in (None, got.outcome):
            out.append(got)
            if len(out) == limit:
                break
    return IncidentList(incidents=out)


@router.get("/operating-points", responses=errors(401, 422, 429, 503))
async def operating_points(
    tenant: TenantDep,
    store: StoreDep,
    model: ModelDep,
    scorer: ScorerDep,
    limit: Annotated[int, Query(ge=1, le=INCIDENTS_KEPT)] = 1000,
) -> OperatingPoints:
    """The loaded model's operating points, each with what it would have done about
    the tenant's incidents reported in the last 30 days (the newest ``limit``):
    every incident judged again at the point's threshold from its stream's alert
    log, beside what the evaluation's test split measured there. With the tenant's
    alarms at each point (scjepa_tenant_windows_at_point_total), what choosing
    another point for it (a fa_budget line of the key file) buys and costs on its
    own streams."""
    m = model.manifest_for(tenant)
    record = m.eval_metrics.get("threshold") or {}
    points = [
        p
        for p in record.get("operating_points") or []
        if p.get("threshold") is not None
    ]
    since = time.time() - SPAN_S
    reported = [
        i
        for i in map(Incident.model_validate_json, await store.incidents(tenant, limit))
        if i.reported_at.timestamp() >= since
    ]
    logs: dict[str, AlertLog | None] = {}
    streams = sorted({i.stream for i in reported})
    for k in range(0, len(streams), 32):  # a few reads in flight, not thousands
        part = streams[k : k + 32]
        got = await asyncio.gather(*(store.alert_log(tenant, s) for s in part))
        logs.update(zip(part, got, strict=True))
    served = serving_budget(m)

    def judged(point: dict[str, Any]) -> PointOnIncidents:
        threshold = float(point["threshold"])
        at = {s: log.at(threshold) for s, log in logs.items() if log is not None}
        counts = dict.fromkeys(OUTCOMES, 0)
        for i in reported:
            log = at.get(i.stream)
            outcome: Outcome = "unknown"
            if log is not None:
                outcome = judge(
                    log, i.start, i.end, lookback=i.lookback, window=m.window,
                    hop=scorer.hop,
                ).outcome  # fmt: skip
            counts[outcome] += 1
        n = counts["warned"] + counts["late"] + counts["missed"]
        budget = float(point["false_alarms_per_1000"])
        return PointOnIncidents(
            false_alarms_per_1000=budget,
            threshold=threshold,
            serving=served is not None and math.isclose(budget, served),
            exact=threshold >= m.threshold,
            incidents=counts,
            warned_share=counts["warned"] / n if n else None,
            test=point.get("test"),
        )

    def all_points() -> list[PointOnIncidents]:
        return [judged(p) for p in points]

    # judged off the event loop: thousands of incidents at several points
    out = await asyncio.to_thread(all_points)
    return OperatingPoints(
        threshold=m.threshold,
        incidents_since=datetime.fromtimestamp(since, UTC),
        incidents_judged=len(reported),
        points=sorted(out, key=lambda p: p.false_alarms_per_1000),
    )


@router.delete(
    "/incidents/{incident}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses={204: {"description": "deleted"}, **errors(401, 404, 422, 429, 503)},
)
async def delete_incident(
    incident: Annotated[str, Path(pattern=INCIDENT_PATTERN)],
    tenant: TenantDep,
    store: StoreDep,
) -> Response:
    """Forget one of the tenant's incidents (one reported by mistake)."""
    if not await store.delete_incident(tenant, incident):
        raise Refused(handlers.detail(404, f"unknown incident {incident!r}"))
    return Response(status_code=status.HTTP_204_NO_CONTENT)
