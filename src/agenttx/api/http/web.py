"""What the HTTP listener serves beside ``/mcp``: the JSON API at ``/v1``, its OpenAPI
document at ``/openapi.json`` and the dashboard at ``/`` (docs/http.md)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Mount, Route

from agenttx.api.dashboard import dashboard_routes
from agenttx.api.http.v1 import OPERATIONS, ApiSettings, api_app, openapi_document


def web_routes(
    engine: Any, version: str, api: ApiSettings | None = None, *, api_keys: bool = False
) -> list[BaseRoute]:
    """``api_keys``: every call needs a key (the document says so)."""
    api = api or ApiSettings()
    document = openapi_document(version, (*OPERATIONS, *api.extra_operations), api_keys=api_keys)

    async def openapi(request: Request) -> JSONResponse:
        return JSONResponse(document)

    return [
        Mount("/v1", app=api_app(engine, api)),
        Route("/openapi.json", openapi, methods=["GET"]),
        *dashboard_routes(),
    ]


def web_exception_handlers() -> dict[Any, Any]:
    """The whole app's answer to a path or method no route takes: the API's error shape."""
    from starlette.exceptions import HTTPException

    from agenttx.api.http.v1.routes import http_error

    return {HTTPException: http_error}
