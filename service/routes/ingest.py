"""POST /ingest: readings for one stream or many."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError

from service.deps import ApiKey, ScorerDep, SettingsDep
from service.ingest_body import parse_ingest
from service.schemas import ErrorResponse, IngestResponse

router = APIRouter(prefix="/ingest", tags=["ingest"], dependencies=[ApiKey])

# The body is read raw and validated by service.ingest_body (no pydantic object per
# reading); OpenAPI still documents IngestRequest as the body (see main.py).
BODY_DOC = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {"$ref": "#/components/schemas/IngestRequest"}
            }
        },
    }
}


@router.post(
    "",
    response_model=IngestResponse,
    openapi_extra=BODY_DOC,
    responses={
        413: {"model": ErrorResponse, "description": "too many readings"},
        422: {"description": "a field is invalid; `detail[].loc` names it"},
        503: {"model": ErrorResponse, "description": "store unreachable"},
    },
)
async def ingest(
    request: Request, scorer: ScorerDep, settings: SettingsDep
) -> Response:
    """Store readings, score every window they complete, report counts per stream.

    Body: `IngestRequest`. Re-sending readings is safe: a timestamp already accepted
    counts as a duplicate. A reading older than the stream's newest is rejected (late).
    A request that fails validation (422) stores nothing.
    """
    items, batch_form = parse_ingest(await request.body())
    n = sum(len(item.ts) for item in items)
    if n > settings.max_readings_per_request:
        raise HTTPException(
            413,
            detail=f"{n} readings in one request; the limit is "
            f"{settings.max_readings_per_request} (SCJEPA_MAX_READINGS_PER_REQUEST)",
        )
    arrays, problems = scorer.prepare(items, batch_form=batch_form)
    if problems:
        raise RequestValidationError(problems)
    results = await scorer.ingest([item.stream for item in items], arrays)
    return Response(
        IngestResponse(results=results).model_dump_json(),
        media_type="application/json",
    )
