"""GET /risk/{stream}, its history, and the list of streams."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Response, status

from service.deps import ApiKey, ScorerDep, StoreDep
from service.schemas import (
    STREAM_PATTERN,
    ErrorResponse,
    RiskHistory,
    RiskResponse,
    StreamsResponse,
)

router = APIRouter(tags=["risk"], dependencies=[ApiKey])

StreamPath = Annotated[str, Path(pattern=STREAM_PATTERN)]
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorResponse, "description": "unknown stream"}
}


def _unknown(stream: str) -> HTTPException:
    return HTTPException(
        status.HTTP_404_NOT_FOUND, detail=f"unknown stream {stream!r} (no readings yet)"
    )


@router.get("/risk/{stream}", response_model=RiskResponse, responses=NOT_FOUND)
async def risk(stream: StreamPath, scorer: ScorerDep) -> Response:
    """Latest risk of a stream, or its warm-up progress before the first full window."""
    out = await scorer.risk(stream)
    if out is None:
        raise _unknown(stream)
    return Response(out, media_type="application/json")


@router.get("/risk/{stream}/history", responses=NOT_FOUND)
async def history(
    stream: StreamPath,
    scorer: ScorerDep,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 50,
) -> RiskHistory:
    """The stream's most recent risk records, newest first."""
    out = await scorer.history(stream, limit)
    if out is None:
        raise _unknown(stream)
    return out


@router.get("/streams")
async def streams(store: StoreDep) -> StreamsResponse:
    """Streams that sent readings within the idle TTL."""
    return StreamsResponse(streams=await store.streams())
