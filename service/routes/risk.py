"""GET /risk/{stream} (FastAPI adapter over service.handlers.risk), the stream's
history, the list of the tenant's streams, and DELETE of one."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response, status

from service import handlers
from service.deps import (
    ApiKeyHeader,
    DoorDep,
    ModelDep,
    Refused,
    ScorerDep,
    StoreDep,
    TenantDep,
    errors,
)
from service.handlers import Meta
from service.schemas import (
    STREAM_PATTERN,
    RiskHistory,
    RiskResponse,
    StreamRisk,
    StreamsResponse,
    TopStreamsResponse,
)

router = APIRouter(tags=["risk"])

StreamPath = Annotated[str, Path(pattern=STREAM_PATTERN)]
# Documented with the pattern but checked by the handler, after the key, as the fast
# path does: a bad name without a key is a 401 whichever adapter answers.
StreamDoc = Annotated[str, Path(json_schema_extra={"pattern": STREAM_PATTERN})]
MAX_PAGE = 10_000
MAX_TOP = 1000


@router.get(
    "/risk/{stream}",
    response_model=RiskResponse,
    responses=errors(401, 404, 422, 429, 503),
)
async def risk(
    request: Request,
    stream: StreamDoc,
    scorer: ScorerDep,
    door: DoorDep,
    x_api_key: ApiKeyHeader = None,
) -> Response:
    """Latest risk of a stream, or its warm-up progress before the first full window."""
    meta = Meta.of(request.scope["headers"])
    return (await handlers.risk(stream, meta, scorer, door)).response()


@router.get("/risk/{stream}/history", responses=errors(401, 404, 422, 429, 503))
async def history(
    stream: StreamPath,
    tenant: TenantDep,
    scorer: ScorerDep,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 50,
) -> RiskHistory:
    """The stream's most recent risk records, newest first."""
    out = await scorer.history(tenant, stream, limit)
    if out is None:
        raise Refused(handlers.detail(404, handlers.unknown_stream(stream)))
    return out


@router.get("/streams", responses=errors(401, 422, 429, 503))
async def streams(
    tenant: TenantDep,
    store: StoreDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 1000,
    after: Annotated[str | None, Query(pattern=STREAM_PATTERN)] = None,
) -> StreamsResponse:
    """The tenant's streams that sent readings within the idle TTL, by name, a page at
    a time: pass the answer's `next` as `after` for the next page."""
    names = await store.streams(tenant, after, limit)
    return StreamsResponse(
        streams=names, next=names[-1] if len(names) == limit else None
    )


@router.get("/streams/top", responses=errors(401, 422, 429, 503))
async def top_streams(
    tenant: TenantDep,
    store: StoreDep,
    model: ModelDep,
    limit: Annotated[int, Query(ge=1, le=MAX_TOP)] = 20,
) -> TopStreamsResponse:
    """The tenant's streams at highest risk now: its live streams of highest latest
    risk, highest first, each with whether it is in alert (at or above the loaded
    model's threshold at the tenant's operating point). Streams not scored yet are not
    listed."""
    threshold = model.manifest_for(tenant).threshold
    ranked = await store.top_streams(tenant, limit)
    return TopStreamsResponse(
        streams=[StreamRisk(stream=s, risk=r, alert=r >= threshold) for s, r in ranked],
        threshold=threshold,
    )


@router.delete(
    "/streams/{stream}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses={204: {"description": "deleted"}, **errors(401, 404, 422, 429, 503)},
)
async def delete_stream(
    request: Request, stream: StreamDoc, tenant: TenantDep, store: StoreDep
) -> Response:
    """Forget one of the tenant's streams now, as the idle TTL would: its readings
    (held ones too), risk history and alert state (a firing alert is resolved); it
    leaves GET /streams, the stream quota and the gauges. Windows of it still queued
    write nothing. Readings sent to the name afterwards start a new stream."""
    if problems := handlers.stream_errors(stream):
        raise Refused(handlers.invalid(problems))
    epoch = await store.delete(tenant, stream)
    if epoch is None:
        raise Refused(handlers.detail(404, handlers.unknown_stream(stream)))
    alerter = getattr(request.app.state, "alerter", None)
    if alerter is not None:
        await alerter.deleted(tenant, stream, epoch)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
