"""The dashboard: plain HTML, CSS and JavaScript modules in this package (``static/``), served
as they are at ``/`` — no build step, no CDN, so it works offline. It reads the ``/v1`` API
and its event streams like any other client (``static/api.js`` is its one client module).
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"


def dashboard_routes() -> list[BaseRoute]:
    async def index(request: Request) -> Response:
        # One page for every screen: the fragment (#/tx/<id>) picks it, so a reload or a
        # shared link lands on the same screen.
        return FileResponse(STATIC / "index.html", headers={"cache-control": "no-cache"})

    return [
        Route("/", index, methods=["GET"]),
        Mount("/static", app=StaticFiles(directory=STATIC), name="dashboard"),
    ]
