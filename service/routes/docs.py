"""GET /docs: Swagger UI served from the package, so it works offline (a plant network
without internet): its JS and CSS come from the ``fastapi-offline`` package's static
files (Swagger UI 5, which reads OpenAPI 3.1), mounted at /docs/assets, never a CDN."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs/assets"


def assets_dir() -> Path:
    return Path(str(files("fastapi_offline") / "static"))


def install(app: FastAPI) -> None:
    """/docs and its assets (create the app with ``docs_url=None``)."""
    app.mount(ASSETS, StaticFiles(directory=assets_dir()), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - API",
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon.png",
            swagger_ui_parameters={"validatorUrl": None},  # no call out for a badge
        )
