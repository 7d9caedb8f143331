"""POST /ingest: readings for one stream or many."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from fastapi.exceptions import RequestValidationError

from service.deps import ApiKey, ScorerDep, SettingsDep
from service.jsonroute import FastJSONRoute
from service.schemas import ErrorResponse, IngestRequest, IngestResponse

router = APIRouter(
    prefix="/ingest", tags=["ingest"], dependencies=[ApiKey], route_class=FastJSONRoute
)


@router.post(
    "",
    responses={
        413: {"model": ErrorResponse, "description": "too many readings"},
        422: {"description": "a field is invalid; `detail[].loc` names it"},
        503: {"model": ErrorResponse, "description": "store unreachable"},
    },
)
async def ingest(
    body: IngestRequest, scorer: ScorerDep, settings: SettingsDep
) -> IngestResponse:
    """Store readings, score every window they complete, report counts per stream.

    Re-sending readings is safe: a timestamp already accepted counts as a duplicate.
    A reading older than the stream's newest is rejected (late). A request that fails
    validation (422) stores nothing.
    """
    items = body.items()
    n = sum(len(item.readings) for item in items)
    if n > settings.max_readings_per_request:
        raise HTTPException(
            413,
            detail=f"{n} readings in one request; the limit is "
            f"{settings.max_readings_per_request} (SCJEPA_MAX_READINGS_PER_REQUEST)",
        )
    arrays, problems = scorer.prepare(items, batch_form=body.streams is not None)
    if problems:
        raise RequestValidationError(problems)
    return IngestResponse(results=await scorer.ingest(items, arrays))
