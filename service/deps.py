"""Dependencies: what the lifespan put on ``app.state``, as Annotated aliases.

All ``async def``: FastAPI would run plain ``def`` dependencies in its thread pool, a
thread hop per dependency per request for what is an attribute read."""

from __future__ import annotations

import secrets
from typing import Annotated, cast

from fastapi import Depends, Header, HTTPException, Request, status

from service.config import Settings
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


def key_ok(settings: Settings, key: str | None) -> bool:
    """Open when no keys are configured; otherwise ``key`` must match one."""
    if not settings.api_keys:
        return True
    return key is not None and any(
        secrets.compare_digest(key.encode(), k.encode()) for k in settings.api_keys
    )


async def require_api_key(
    settings: SettingsDep,
    x_api_key: Annotated[
        str | None, Header(description="one of SCJEPA_API_KEYS")
    ] = None,
) -> None:
    """Open when no keys are configured; otherwise the X-API-Key header must match one."""
    if not key_ok(settings, x_api_key):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail="missing or unknown X-API-Key",
            headers={"WWW-Authenticate": "X-API-Key"},
        )


ApiKey = Depends(require_api_key)
