"""POST /ingest, FastAPI adapter over service.handlers.ingest: the route that OpenAPI
documents, and the one that answers when ``SCJEPA_FAST_PATHS`` is off."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from service import handlers
from service.deps import ApiKeyHeader, ScorerDep
from service.schemas import ErrorResponse, IngestResponse

router = APIRouter(prefix="/ingest", tags=["ingest"])

# The handler reads the body raw (service.ingest_body: no pydantic object per reading),
# so the body schema is named here; main.py puts IngestRequest into the components.
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
    request: Request, scorer: ScorerDep, x_api_key: ApiKeyHeader = None
) -> Response:
    """Store readings, score every window they complete, report counts per stream.

    Body: `IngestRequest`. Re-sending readings is safe: a timestamp already accepted
    counts as a duplicate. A reading older than the stream's newest is rejected (late).
    A request that fails validation (422) stores nothing.
    """
    reply = await handlers.ingest(await request.body(), x_api_key, scorer)
    return reply.response()
