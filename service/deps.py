"""FastAPI dependencies: what the lifespan put on ``app.state``, as Annotated aliases,
and the door of the routes that service.handlers does not answer (the tenant, the
@admin key, the @ops key), refusing with the same bytes as the hot routes.

All ``async def``: FastAPI runs a plain ``def`` dependency in its thread pool, a thread
hop per request for what is an attribute read.
"""

from __future__ import annotations

from typing import Annotated, Any, cast

from fastapi import Depends, Header, Request

from service.config import Settings
from service.handlers import Door, Meta, Reply
from service.inference import Model
from service.reload import ModelSlot
from service.schemas import ErrorResponse
from service.scoring import Scorer
from service.store import Store


class Refused(Exception):
    """A dependency's refusal; middleware.py answers with its reply."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.status)
        self.reply = reply


async def get_settings(request: Request) -> Settings:
    return cast(Settings, request.app.state.settings)


async def get_model(request: Request) -> Model:
    return cast(ModelSlot, request.app.state.slot).current


async def get_slot(request: Request) -> ModelSlot:
    return cast(ModelSlot, request.app.state.slot)


async def get_store(request: Request) -> Store:
    return cast(Store, request.app.state.store)


async def get_scorer(request: Request) -> Scorer:
    return cast(Scorer, request.app.state.scorer)


async def get_door(request: Request) -> Door:
    return cast(Door, request.app.state.door)


SettingsDep = Annotated[Settings, Depends(get_settings)]
ModelDep = Annotated[Model, Depends(get_model)]
SlotDep = Annotated[ModelSlot, Depends(get_slot)]
StoreDep = Annotated[Store, Depends(get_store)]
ScorerDep = Annotated[Scorer, Depends(get_scorer)]
DoorDep = Annotated[Door, Depends(get_door)]
ApiKeyHeader = Annotated[
    str | None,
    Header(description="a tenant's key (SCJEPA_API_KEYS, SCJEPA_API_KEYS_FILE)"),
]


async def tenant(
    request: Request, door: DoorDep, x_api_key: ApiKeyHeader = None
) -> str:
    """The tenant of the request's key (401 / 429 / 503 otherwise)."""
    who = await door.tenant(Meta.of(request.scope["headers"]).api_key)
    if isinstance(who, Reply):
        raise Refused(who)
    return who


async def admin(
    request: Request, door: DoorDep, x_api_key: ApiKeyHeader = None
) -> None:
    """An @admin key (401; 403 when none is configured)."""
    refused = door.admin(Meta.of(request.scope["headers"]).api_key)
    if refused is not None:
        raise Refused(refused)


async def ops(request: Request, door: DoorDep) -> None:
    """An @ops or @admin key when SCJEPA_OPS_KEY_ROUTES names this route (401): the
    route's own path, whatever prefix (uvicorn's --root-path, a mount) it is under."""
    route = request.scope.get("route")
    path = getattr(route, "path", None) or request.url.path
    refused = door.ops(path, Meta.of(request.scope["headers"]).api_key)
    if refused is not None:
        raise Refused(refused)


TenantDep = Annotated[str, Depends(tenant)]
AdminKey = Depends(admin)
OpsKey = Depends(ops)


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for the refusals a route can answer, each
    ``{"detail": ...}`` naming the field or the limit."""
    what = {
        401: "missing or unknown API key",
        403: "admin routes off, or the tenant's stream quota is full",
        404: "unknown stream (or another tenant's)",
        409: "a reload is already running, the stream was stored for another "
        "model layout (SCJEPA_LAYOUT_CHANGE=refuse), or an incident's onset is past "
        "its stream's newest reading",
        413: "body or reading count over its limit",
        415: "not application/json, or compressed",
        422: "a field is invalid; `detail[].loc` names it",
        429: "over the key's rate limit; retry after `Retry-After` s",
        503: "store unavailable; retry after `Retry-After` s",
    }
    return {c: {"model": ErrorResponse, "description": what[c]} for c in codes}
