"""FastAPI dependencies: what the lifespan put on ``app.state``, as Annotated aliases,
and the X-API-Key check of the routes that service.handlers does not answer.

All ``async def``: FastAPI runs a plain ``def`` dependency in its thread pool, a thread
hop per request for what is an attribute read.
"""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import Depends, Header, HTTPException, Request

from service.config import Settings
from service.handlers import AUTH_DETAIL, AUTH_HEADERS, key_ok
from service.inference import Model
from service.scoring import Scorer
from service.store import Store


async def get_settings(request: Request) -> Settings:
    return cast(Settings, request.app.state.settings)


async def get_model(request: Request) -> Model:
    return cast(Model, request.app.state.model)


async def get_store(request: Request) -> Store:
    return cast(Store, request.app.state.store)


async def get_scorer(request: Request) -> Scorer:
    return cast(Scorer, request.app.state.scorer)


SettingsDep = Annotated[Settings, Depends(get_settings)]
ModelDep = Annotated[Model, Depends(get_model)]
StoreDep = Annotated[Store, Depends(get_store)]
ScorerDep = Annotated[Scorer, Depends(get_scorer)]
ApiKeyHeader = Annotated[str | None, Header(description="one of SCJEPA_API_KEYS")]


async def require_api_key(
    settings: SettingsDep, x_api_key: ApiKeyHeader = None
) -> None:
    """401 unless no keys are configured or the X-API-Key header matches one."""
    if not key_ok(settings, x_api_key):
        raise HTTPException(401, detail=AUTH_DETAIL, headers=dict(AUTH_HEADERS))


ApiKey = Depends(require_api_key)
