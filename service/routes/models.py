"""GET /models: the loaded artifact's manifest and how it runs."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from service.deps import ApiKey, ModelDep
from service.manifest import Manifest

router = APIRouter(prefix="/models", tags=["models"], dependencies=[ApiKey])


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


@router.get("")
async def models(model: ModelDep) -> ModelsResponse:
    """Manifests of the loaded artifacts."""
    return ModelsResponse(
        models=[
            LoadedModel(
                manifest=model.manifest,
                provider=model.provider,
                precision=model.precision,
                warmed=model.warmed,
                max_batch=model.max_batch,
                windows_per_run=model.run_size,
                parallel_runs=model.parallel_runs,
            )
        ]
    )
