"""POST /ingest, FastAPI adapter over service.handlers.ingest: the route that OpenAPI
documents, and the one that answers when ``SCJEPA_FAST_PATHS`` is off."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from service import handlers
from service.deps import ApiKeyHeader, DoorDep, ScorerDep, errors
from service.handlers import Meta
from service.schemas import STREAM_PATTERN, IngestResponse

router = APIRouter(prefix="/ingest", tags=["ingest"])

# The handler reads the body raw (service.ingest_body: no pydantic object per reading),
# so the body schema is named here; main.py puts IngestRequest into the components.
BODY_DOC = {
    # read raw by the handler, so that both adapters refuse a bad value alike
    "parameters": [
        {
            "name": "wait",
            "in": "query",
            "required": False,
            "schema": {"type": "number", "minimum": 0, "default": 0},
            "description": "seconds to wait for the scores of the windows this call "
            "queues (at most SCJEPA_MAX_INGEST_WAIT_S); 0: answer once stored",
        }
    ],
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {"$ref": "#/components/schemas/IngestRequest"}
            },
            "application/msgpack": {
                "schema": {
                    "description": "the readings as columns (docs/reference/api.md): "
                    "{stream, ts, values} or {streams: [those]}",
                    "type": "object",
                    "properties": {
                        "stream": {"type": "string", "pattern": STREAM_PATTERN},
                        "ts": {
                            "type": "string",
                            "format": "binary",
                            "description": "bin: little-endian float64 per reading",
                        },
                        "values": {
                            "type": "string",
                            "format": "binary",
                            "description": "bin: little-endian float32, readings x "
                            "channels, row-major; NaN = missing",
                        },
                        "streams": {"type": "array", "minItems": 1},
                    },
                    "additionalProperties": False,
                }
            },
        },
    },
}


@router.post(
    "",
    response_model=IngestResponse,
    openapi_extra=BODY_DOC,
    responses=errors(401, 403, 409, 413, 415, 422, 429, 503),
)
async def ingest(
    request: Request, scorer: ScorerDep, door: DoorDep, x_api_key: ApiKeyHeader = None
) -> Response:
    """Store readings and queue every window they complete for the scorers; report
    counts per stream. `?wait=S`: wait up to S seconds for those windows' risks.

    Body: `IngestRequest` as JSON, or the same readings as MessagePack columns
    (`application/msgpack`: per stream `ts` float64 and `values` float32 bytes, little
    endian, readings x channels). Re-sending readings is safe: a timestamp already accepted
    counts as a duplicate. A reading older than the stream's newest is rejected (late).
    A request that fails validation (4xx) stores nothing.
    """
    meta = Meta.of(request.scope["headers"])
    query = request.scope.get("query_string", b"")
    reply = await handlers.ingest(meta, request.body, scorer, door, query)
    request.state.streams = reply.streams
    return reply.response()
