"""The FastAPI app: ``create_app(settings)``; the lifespan loads and warms the model,
opens the store and starts the micro-batcher.

    scjepa serve --artifact artifacts/msl            # or:
    uvicorn service.main:create_app --factory --port 8000
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from service import alerting, auth, metrics, middleware, sched
from service.batcher import Batcher
from service.config import Settings
from service.handlers import Door
from service.inference import Model
from service.manifest import Budget
from service.reload import ModelSlot
from service.routes import docs, health, incidents, ingest, models, risk, ui
from service.schemas import IncidentReport, IngestRequest
from service.scoring import FLOAT32_MAX, Scorer
from service.store import layout_of, make_store
from service.worker import ScoredBus, ScoringWorker

log = logging.getLogger(__name__)


def say_budgets(
    slot: ModelSlot, table: auth.KeyTable, before: Mapping[str, Budget]
) -> None:
    """Log the tenants' operating points that ``table`` sets, and those it no longer
    sets, against ``before``."""
    for tenant, budget in table.budgets.items():
        if before.get(tenant) == budget:
            continue
        log.info(
            "tenant %s alerts at its own operating point: %g false alarms per "
            "1,000 windows, threshold %.6g (%s)",
            tenant,
            budget.per_1000,
            slot.current.manifest_for(tenant).threshold,
            budget.set_by,
        )
        if tenant not in table.tenants:
            log.warning(
                "%s names tenant %s, which no API key names (yet): its budget "
                "applies once a key of it is added",
                budget.set_by,
                tenant,
            )
    for tenant in before.keys() - table.budgets.keys():
        log.info(
            "tenant %s alerts at the model's operating point again, threshold %.6g",
            tenant,
            slot.current.manifest.threshold,
        )


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    # a bad file: fatal; it may hold tenants' operating points beside the setting's
    keys = auth.Keys(
        settings.api_keys, settings.api_keys_file, settings.tenant_fa_budget
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loop_slice = sched.set_slice_us(settings.loop_slice_us)
        log.info(
            "CPU slices: event loop %s, inference kernel default",
            sched.describe(settings.loop_slice_us, loop_slice),
        )
        loop = asyncio.get_running_loop()
        role = settings.role

        def swapped(new: Model) -> None:
            app.state.model = new

        # loaded, warmed and checked as a hot reload's model is (service/reload.py):
        # in a child process of its own, or on the inference thread (so onnxruntime's
        # threads inherit its priority and slice: batcher.inference_executor)
        slot = await ModelSlot.open(
            model_settings(settings),
            in_process=not uses_child(settings),
            budgets=keys.table.budgets,
            on_swap=swapped,
        )
        model = slot.current
        m = model.manifest
        metrics.set_model(model)
        where = f"process {slot.child.pid}" if slot.child else "this process"
        log.info("loaded %s %s on %s (%s)", m.name, m.version, model.provider, where)
        say_budgets(slot, keys.table, {})

        def budgets_changed(table: auth.KeyTable) -> None:  # a reloaded key file's
            before = slot.budgets
            slot.serve_budgets(table.budgets)  # or ArtifactError: the file refused
            say_budgets(slot, table, before)

        keys.on_budgets = budgets_changed
        store = make_store(
            settings.redis_url,
            prefix=settings.key_prefix,
            ttl_s=settings.stream_ttl_s,
            history_len=settings.history_len,
            dedupe_horizon=settings.dedupe_horizon,
            timeout_s=settings.redis_timeout_s,
            max_connections=settings.redis_max_connections,
            partitions=settings.work_partitions,
            layout=layout_of(m.channels, m.window),
            on_layout_change=settings.layout_change,
            lateness_s=settings.allowed_lateness_s,
        )
        bus = ScoredBus()  # this process's ?wait= calls, woken by scored windows
        # the alerter: the scorer's listener, and what closes a deleted stream's alert
        # (role api too: DELETE /streams/{stream} answers there)
        alerters = alerting.listeners(settings)
        batcher: Batcher | None = None
        worker: ScoringWorker | None = None
        if role != "api":  # this process scores the queued windows
            batcher = Batcher(
                infer=slot.score,  # reads the current model once per micro-batch
                max_batch=settings.max_batch,
                max_wait_s=settings.max_wait_ms / 1000,
                # a child process: the next batch waits in its socket while the last
                # one's scores are unpacked (it never idles on this process's GIL)
                in_flight=2 if slot.child is not None else 1,
            )
            batcher.start()
            worker = ScoringWorker(lambda: slot.current, store, batcher, settings, bus)
            worker.listeners.extend(alerters)
            worker.start()
        app.state.settings = settings
        app.state.role = role
        app.state.model = model
        app.state.slot = slot
        app.state.store = store
        app.state.worker = worker
        app.state.alerter = alerters[0] if alerters else None
        app.state.door = Door(keys, store, settings)
        app.state.scorer = Scorer(slot, store, settings, batcher, bus)
        tasks = [asyncio.create_task(keys.watch(), name="scjepa-keys")]
        if role != "scorer":  # news of windows scored by any process
            tasks.append(
                asyncio.create_task(store.listen_scored(bus.deliver), name="scored")
            )

        def hangup() -> None:  # SIGHUP: keys and model, as POST /admin/reload
            log.info("SIGHUP: reloading the API keys and the model")
            keys.reload()
            tasks.append(asyncio.create_task(_reload_quietly(slot)))

        hup = _on_signal(loop, signal.SIGHUP, hangup)
        # Everything loaded so far (FastAPI, onnxruntime, pydantic schemas) lives as
        # long as the process: frozen, a full collection no longer walks it and pauses
        # the event loop for that long (docs/notebook/benchmarks.md, Service).
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            if hup:
                loop.remove_signal_handler(signal.SIGHUP)
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=2.0)
            if worker is not None:
                await worker.stop()
            for alerter in alerters:  # its queued posts
                await alerter.close()
            if batcher is not None:
                await batcher.stop()
            await slot.close()
            await store.close()

    app = FastAPI(
        title="SC-JEPA risk service",
        summary="Per-stream risk that the next window of readings holds an anomaly.",
        version="1",
        lifespan=lifespan,
        docs_url=None,  # routes/docs.py serves it from the package (offline)
        redoc_url=None,
    )
    api = settings.role != "scorer"  # a scorer serves /healthz, /readyz, /metrics
    if api:
        docs.install(app)
    middleware.install(
        app,
        max_body_bytes=settings.max_body_bytes,
        fast_paths=settings.fast_paths and api,
    )
    routers = (
        ingest.router,
        risk.router,
        incidents.router,
        models.router,
        health.router,
        ui.router,
    )
    for r in routers if api else (health.router,):
        app.include_router(r)
    _document_bodies(app)
    return app


def model_settings(settings: Settings) -> Settings:
    """How this process loads its model. Role api scores nothing: its model only
    describes the layout (window, channels, names), so it is loaded on the CPU in fp32
    whatever the scorers use: an API process beside a GPU scorer opens no CUDA session
    and starts on a node without a GPU."""
    if settings.role != "api":
        return settings
    return settings.model_copy(update={"provider": "cpu", "precision": "fp32"})


def uses_child(settings: Settings) -> bool:
    """Whether onnxruntime runs in a child process (``SCJEPA_INFER_IN``): auto = for
    role scorer only. Role api scores nothing: its model only describes the layout."""
    if settings.role == "api":
        return False
    if settings.infer_in == "auto":
        return settings.role == "scorer"
    return settings.infer_in == "process"


def _document_values(reading: dict[str, Any], n_channels: int) -> None:
    """``values``: exactly the model's channel count, each within float32."""
    values = reading["properties"]["values"]
    values["minItems"] = values["maxItems"] = n_channels
    for option in values["items"]["anyOf"]:
        if option.get("type") == "number":
            option["minimum"], option["maximum"] = -FLOAT32_MAX, FLOAT32_MAX


async def _reload_quietly(slot: ModelSlot) -> None:
    """SIGHUP's reload: after the one running, if any (no 409 to answer it with)."""
    with contextlib.suppress(Exception):  # the slot logs and reports the outcome
        await slot.reload(wait=True)


def _on_signal(
    loop: asyncio.AbstractEventLoop, sig: signal.Signals, handler: Any
) -> bool:
    """Handle ``sig`` on the loop; False where that cannot be (not the main thread,
    e.g. under a test client, or no such signal on the platform)."""
    try:
        loop.add_signal_handler(sig, handler)
    except (ValueError, RuntimeError, NotImplementedError):
        return False
    return True


def _document_bodies(app: FastAPI) -> None:
    """Put the bodies read raw (POST /ingest's IngestRequest, POST /incidents'
    IncidentReport) into the OpenAPI components."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            comps = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in (IngestRequest, IncidentReport):
                body = model.model_json_schema(
                    ref_template="#/components/schemas/{model}"
                )
                comps.update(body.pop("$defs", {}))
                comps[model.__name__] = body
            slot = getattr(app.state, "slot", None)
            if slot is not None:  # the model's channels (a reload keeps them)
                _document_values(comps["Reading"], slot.current.n_channels)
        return app.openapi_schema or {}

    # FastAPI documents replacing app.openapi; its type declares a method
    app.openapi = openapi  # type: ignore[method-assign]
