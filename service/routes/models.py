"""GET /models: the loaded artifact's manifest, how it runs and its last reload;
POST /admin/reload and GET /admin/reload: hot model reload (service/reload.py)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from service import handlers
from service.deps import AdminKey, DoorDep, Refused, SlotDep, TenantDep, errors
from service.manifest import Manifest
from service.reload import ReloadBusy
from service.schemas import ReloadStatus

router = APIRouter(tags=["models"])


class LoadedModel(BaseModel):
    manifest: Manifest
    provider: str  # the ACTIVE onnxruntime execution provider
    precision: str
    warmed: bool
    max_batch: int  # windows per batch
    windows_per_run: int  # windows per onnxruntime run (CPU: chunks of a batch)
    parallel_runs: int  # CPU: chunk runs of one batch at a time, one thread each


class ModelsResponse(BaseModel):
    models: list[LoadedModel]
    last_reload: ReloadStatus


class ReloadResponse(BaseModel):
    model: ReloadStatus
    keys: str  # "ok", "unchanged" (no key file) or why the key file was refused
    detail: str | None = None  # a refused reload: why, and what still serves


@router.get("/models", responses=errors(401, 429, 503))
async def models(tenant: TenantDep, slot: SlotDep) -> ModelsResponse:
    """Manifests of the loaded artifacts, each with the threshold the caller's tenant
    is served at (``eval_metrics.threshold.serving_at``: its operating point)."""
    model = slot.current
    return ModelsResponse(
        models=[
            LoadedModel(
                manifest=model.manifest_for(tenant),
                provider=model.provider,
                precision=model.precision,
                warmed=model.warmed,
                max_batch=model.max_batch,
                windows_per_run=model.run_size,
                parallel_runs=model.parallel_runs,
            )
        ],
        last_reload=slot.status,
    )


@router.post(
    "/admin/reload",
    dependencies=[AdminKey],
    responses={
        **errors(401, 403, 409),
        422: {"model": ReloadResponse, "description": "refused; the old model serves"},
    },
)
async def reload(slot: SlotDep, door: DoorDep) -> JSONResponse:
    """Re-read the artifact folder (SCJEPA_ARTIFACT) and the key file: the new model
    is checked (manifest, SHA-256, shapes, window and channels as the loaded one's),
    warmed and swapped in; if anything fails the old model keeps serving (422 with
    the reason). SIGHUP does the same."""
    keys = door.keys
    keys_out = "unchanged" if keys.path is None else "ok"
    if keys.path is not None and not keys.reload():
        keys_out = keys.error or "failed"
    try:
        status = await slot.reload()
    except ReloadBusy as e:
        raise Refused(handlers.detail(409, str(e))) from None
    body = ReloadResponse(model=status, keys=keys_out)
    if status.outcome == "failed":
        s = status.serving
        body.detail = (
            f"reload refused, {s.name} {s.version} still serves: {status.error}"
        )
    code = 200 if status.outcome == "ok" else 422
    return JSONResponse(body.model_dump(mode="json"), status_code=code)


@router.get("/admin/reload", dependencies=[AdminKey], responses=errors(401, 403))
async def reload_status(slot: SlotDep) -> ReloadStatus:
    """The last model reload: outcome, the model serving, the error of a refused one."""
    return slot.status
