"""GET /risk/{stream} (FastAPI adapter over service.handlers.risk), the stream's
history, and the list of streams."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Response

from service import handlers
from service.deps import ApiKey, ApiKeyHeader, ScorerDep, StoreDep
from service.schemas import (
    STREAM_PATTERN,
    ErrorResponse,
    RiskHistory,
    RiskResponse,
    StreamsResponse,
)

router = APIRouter(tags=["risk"])

StreamPath = Annotated[str, Path(pattern=STREAM_PATTERN)]
# Documented with the pattern but checked by the handler, after the key, as the fast
# path does: a bad name without a key is a 401 whichever adapter answers.
StreamDoc = Annotated[str, Path(json_schema_extra={"pattern": STREAM_PATTERN})]
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorResponse, "description": "unknown stream"}
}


@router.get("/risk/{stream}", response_model=RiskResponse, responses=NOT_FOUND)
async def risk(
    stream: StreamDoc, scorer: ScorerDep, x_api_key: ApiKeyHeader = None
) -> Response:
    """Latest risk of a stream, or its warm-up progress before the first full window."""
    return (await handlers.risk(stream, x_api_key, scorer)).response()


@router.get("/risk/{stream}/history", responses=NOT_FOUND, dependencies=[ApiKey])
async def history(
    stream: StreamPath,
    scorer: ScorerDep,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 50,
) -> RiskHistory:
    """The stream's most recent risk records, newest first."""
    out = await scorer.history(stream, limit)
    if out is None:
        raise HTTPException(404, detail=handlers.unknown_stream(stream))
    return out


@router.get("/streams", dependencies=[ApiKey])
async def streams(store: StoreDep) -> StreamsResponse:
    """Streams that sent readings within the idle TTL."""
    return StreamsResponse(streams=await store.streams())
