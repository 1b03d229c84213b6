"""ASGI middleware: every HTTP request carries ``Authorization: Bearer <key>``, resolved to its
``Caller`` before the app sees the request.

Reusable on any Starlette (ASGI) app: wrap it, then read the caller in a handler with
``caller_of(request.scope)`` (``grant_of``: the key's grant, for a stream that must end when
a reload revokes the key). Without keys (``keys=None``: a loopback-only server) requests
pass unchanged and ``caller_of`` is None, which the engine takes as the local operator. A
missing or unknown key is answered ``401`` with ``WWW-Authenticate: Bearer`` and a JSON body
in the shape of every other refusal (``{"error": {"code", "reason", "message", "details",
"continuation"}}``, ``docs/http.md``); the key itself is never echoed or logged.
``public_paths`` (exact paths, e.g. a health probe) skip the check.

A ``GET`` of one of the ``revocable_paths`` (MCP's standalone event stream at ``/mcp``) may
stay open for hours on the key it was opened with: it ends as soon as a reload of the key file
removes that key or changes what it resolves to (the client reconnects and is checked anew;
a revoked key gets 401 from then on). The ``/v1`` event streams end with an error event of
their own instead (``api/revocable.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterable, MutableMapping
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from agenttx.auth.keys import KeyGrant, KeyRing, bearer_token
from agenttx.errors import Unauthenticated
from agenttx.types import Caller

GRANT_SCOPE_KEY = "agenttx.grant"  # where the resolved KeyGrant sits in the ASGI scope


def grant_of(scope: MutableMapping[str, Any]) -> KeyGrant | None:
    """The grant ``BearerAuth`` resolved for this request's key (None: no keys configured)."""
    grant = scope.get(GRANT_SCOPE_KEY)
    return grant if isinstance(grant, KeyGrant) else None


def caller_of(scope: MutableMapping[str, Any]) -> Caller | None:
    """The caller ``BearerAuth`` resolved for this request (None: no keys configured)."""
    grant = grant_of(scope)
    return grant.caller if grant is not None else None


class BearerAuth:
    def __init__(
        self,
        app: ASGIApp,
        keys: KeyRing | None,
        *,
        public_paths: Iterable[str] = (),
        public_prefixes: Iterable[str] = (),
        revocable_paths: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.keys = keys  # None: no authentication (loopback-only server)
        self.public_paths = frozenset(public_paths)
        self.public_prefixes = tuple(public_prefixes)
        self.revocable_paths = frozenset(revocable_paths)  # a GET there ends with its key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self.keys is None:
            await self.app(scope, receive, send)
            return
        scope.pop(GRANT_SCOPE_KEY, None)  # only this middleware may set it
        path = str(scope.get("path", ""))
        if path in self.public_paths or path.startswith(self.public_prefixes):
            await self.app(scope, receive, send)
            return
        values = [v for k, v in scope.get("headers", ()) if k.lower() == b"authorization"]
        try:
            if len(values) > 1:
                raise Unauthenticated("the request carries Authorization twice; send one key")
            header = values[0].decode("latin-1") if values else None
            grant = self.keys.grant(bearer_token(header))
            scope[GRANT_SCOPE_KEY] = grant
        except Unauthenticated as exc:
            await _unauthorized(send, exc)
            return
        if scope.get("method") == "GET" and path in self.revocable_paths:
            await _while_granted(self.app, grant, scope, receive, send)
            return
        await self.app(scope, receive, send)


async def _any_caller(caller: Caller) -> None:
    raise Unauthenticated(
        "the key this stream was opened with was changed by a reload of the key file; "
        "open the stream again"
    )


async def _while_granted(
    app: ASGIApp, grant: KeyGrant, scope: Scope, receive: Receive, send: Send
) -> None:
    """Serve the request until it ends or ``grant`` stops holding, whichever comes first; in
    the second case the request's handler is cancelled and the response ended (a 401 if it
    had not started)."""
    started = False

    async def tracked(message: MutableMapping[str, Any]) -> None:
        nonlocal started
        if message["type"] == "http.response.start":
            started = True
        await send(message)

    served = asyncio.ensure_future(app(scope, receive, tracked))
    held = asyncio.ensure_future(grant.hold(_any_caller))
    try:
        await asyncio.wait({served, held}, return_when=asyncio.FIRST_COMPLETED)
        if served.done():
            served.result()
            return
        try:
            held.result()
        except Unauthenticated as exc:
            ended = exc
        served.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await served
        if not started:
            await _unauthorized(send, ended)
        else:
            with contextlib.suppress(Exception):  # the client may be gone already
                await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        held.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await held
        if not served.done():
            served.cancel()


# What a refused caller must do; the MCP adapter's continuation of an UNAUTHENTICATED
# refusal says the same (``api/continuations.py`` imports it from here).
UNAUTHENTICATED_INSTRUCTION = (
    "The server needs a valid API key (`Authorization: Bearer <key>`). Ask the user or the "
    "operator for one; retrying without a valid key cannot succeed."
)


def unauthorized_body(exc: Unauthenticated) -> bytes:
    """The 401's JSON body, in the one error shape of the HTTP API."""
    error = {
        "code": exc.code,
        "reason": exc.reason,
        "message": exc.message,
        "details": {},
        "continuation": {"kind": "ResolveExternally", "instruction": UNAUTHENTICATED_INSTRUCTION},
    }
    return json.dumps({"error": error}).encode()


async def _unauthorized(send: Send, exc: Unauthenticated) -> None:
    body = unauthorized_body(exc)
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer realm="agenttx"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
