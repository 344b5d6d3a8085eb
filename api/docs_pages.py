"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) that work without internet.

FastAPI's own pages load their JavaScript and CSS from a CDN, so they are blank on a
machine that cannot reach it. Here every asset is served by the broker itself from
the files the ``fastapi-offline`` package ships (Swagger UI 5 and ReDoc standalone
builds, MIT and Apache-2.0), under :data:`ASSETS`; the HTML pages are FastAPI's, with
those same-origin URLs and no web fonts. Only FastAPI's hooks are used, not that
package's app class.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.staticfiles import StaticFiles
from starlette.responses import HTMLResponse

#: Where the packaged assets are served.
ASSETS = "/docs-assets"
_FILES = Path(fastapi_offline.__file__).parent / "static"


def install(app: FastAPI) -> None:
    """Mount the assets and the two pages on ``app`` (built with ``docs_url=None``
    and ``redoc_url=None``)."""
    app.mount(ASSETS, StaticFiles(directory=_FILES), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"
    oauth2_redirect = "/docs/oauth2-redirect"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=oauth2_redirect,
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon.png",
        )

    @app.get(oauth2_redirect, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS}/favicon.png",
            with_google_fonts=False,
        )
