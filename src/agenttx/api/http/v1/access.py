"""Who may call ``/v1``: the one place every API request passes before its operation runs.

``AccessCheck`` is the contract; ``open_access`` (the default) lets every request through,
since without API keys the server listens on loopback only and the Host/Origin guard of
``http.app`` stops web pages. Authentication (API keys, ``Authorization: Bearer``) plugs in
here: a check that returns a response refuses the request with it (401 in the error shape of
``errors.py``), ``None`` lets it through; a check may put the caller's principal on
``request.state`` for the operation.
"""

from __future__ import annotations

from typing import Protocol

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send


class AccessCheck(Protocol):
    async def __call__(self, request: Request) -> Response | None:
        """``None`` to let the request through, else the response that refuses it."""
        ...


async def open_access(request: Request) -> Response | None:
    return None


class AccessMiddleware:
    """ASGI middleware running ``check`` on every HTTP request of the app it wraps."""

    def __init__(self, app: ASGIApp, check: AccessCheck) -> None:
        self.app = app
        self.check = check

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = await self.check(Request(scope, receive))
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)
