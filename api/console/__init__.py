"""The web console at ``/console``: one page, its assets, and the JSON it reads.

The page (``static/index.html``), its script modules and its style sheet ship inside
the package and are served by the broker itself from ``/console/assets`` (no CDN: the
console works offline). The browser builds every view from the gateway's public API
-- v3, ``/v1``, the Redpanda-style fetch and ``/v1/console/...``
(:mod:`laketail.api.console.routes`) -- through one ``api()`` helper that adds the
signed-in user's ``Authorization`` header, so once authentication and ACLs are on,
the console sees and may do exactly what that principal may.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.responses import FileResponse, RedirectResponse

from laketail.api.console.routes import router

#: Where the console's script modules, style sheet and images are served.
ASSETS = "/console/assets"
STATIC = Path(__file__).parent / "static"

__all__ = ["ASSETS", "STATIC", "install", "router"]


def install(app: FastAPI) -> None:
    """Mount the page, its assets and the ``/v1/console`` endpoints on ``app``."""
    app.include_router(router)
    app.mount(ASSETS, StaticFiles(directory=STATIC), name="console-assets")

    @app.get("/console", include_in_schema=False)
    async def console() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.get("/console/", include_in_schema=False)
    async def console_slash() -> RedirectResponse:
        return RedirectResponse("/console")
