"""One log line per HTTP request (``/v1``, ``/mcp``, every other path of the listener), as
gRPC logs one per call (``agenttx.api.metrics``): ``agenttx.access``, message
``<method> <path> <status>``, fields ``method``, ``path``, ``status``, ``duration_ms`` and
``principal`` (the API key's principal; empty without keys or before a key was accepted).

The line is written when the response ends, so a stream's line (server-sent events, MCP's
GET stream) comes when it closes and its ``duration_ms`` is its life. ``status`` is what
was sent, 0 if nothing was (the client left first). Level as for gRPC: ``INFO`` below 400,
``WARNING`` for 4xx, ``ERROR`` for 5xx; the dashboard's own files (``/``, ``/static/…``)
at ``DEBUG``, since a page load is many of them and none is a call. The path is the one the
client sent, without its query (which may carry a page token); like every field it is capped
by the formatter (``agenttx.logs.cap_field``), so a megabyte of path is a short line.

It sits outside every other middleware, so a request the Host/Origin guard or the key check
refuses has its line too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import MutableMapping
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from agenttx.auth.http_auth import caller_of
from agenttx.logs import cap_field

log = logging.getLogger("agenttx.access")

_ASSETS = ("/static/",)  # the dashboard's files: DEBUG (module doc)


class AccessLog:
    """ASGI middleware: one ``agenttx.access`` record per HTTP request (module doc)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0  # the response's status once its start is sent; 0: none was

        async def sent(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sent)
        except Exception:
            # Starlette answers an unhandled error 500 itself and then raises it again: the
            # line says what the client got (500 if nothing was sent yet).
            status = status or 500
            raise
        finally:
            _log(scope, status, time.perf_counter() - started)


def _log(scope: Scope, status: int, seconds: float) -> None:
    path = str(scope.get("path", ""))
    if path == "/" or path.startswith(_ASSETS):
        level = logging.DEBUG
    elif status >= 500:
        level = logging.ERROR
    elif status >= 400:
        level = logging.WARNING
    else:  # 0 too: the client left before an answer, nothing of ours failed
        level = logging.INFO
    if not log.isEnabledFor(level):
        return
    caller = caller_of(scope)
    # Capped here, once, rather than only by the formatter: the record then never holds
    # what a client may have sent megabytes of (a path, a method token).
    method, path = cap_field(str(scope.get("method", ""))), cap_field(path)
    log.log(
        level,
        "%s %s %s",
        method,
        path,
        status,
        extra={
            "method": method,
            "path": path,
            "status": status,
            "duration_ms": round(seconds * 1000, 3),
            "principal": cap_field(caller.principal) if caller is not None else "",
        },
    )
