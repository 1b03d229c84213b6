"""The HTTP listener of ``agenttx serve --http-addr``: one Starlette app, served by uvicorn in
the server's own event loop, sharing its engine with gRPC.

Today it serves MCP's streamable HTTP at ``/mcp`` (both protocol eras). It is built to take
more: ``build_http_app(routes=...)`` adds routes beside ``/mcp`` (the HTTP/JSON API under
``/v1`` and the dashboard will), and every route is behind the same guard.

The guard: the Host header must be one of ``allowed_hosts`` and an Origin header, when sent,
one of ``allowed_origins`` (loopback by default), so a web page cannot reach a local AgentTx
through DNS rebinding; the SDK's own matching rules (``host:*`` matches any port) are used,
applied app-wide. ``"*"`` in either list turns that check off. A bad Host is answered 421, a
bad Origin 403. Bodies over ``max_body_bytes`` are refused with 413 before they are parsed.
With ``keys``, every request then needs ``Authorization: Bearer <key>`` (``BearerAuth``, 401
otherwise); handlers read the caller with ``agenttx.auth.http_auth.caller_of(scope)``.

MCP's standalone ``GET /mcp`` stream (server-to-client messages, open as long as the client
likes) is counted with every other event stream (``api.stream_slots``, ``settings.slots``):
past a limit it is answered 503 ``TOO_MANY_SUBSCRIBERS`` with ``Retry-After`` before the SDK
sees it, and its slot is given back when the request ends, however it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import uvicorn
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from agenttx.api.http.access_log import AccessLog
from agenttx.api.http.heads import HEADER_TIMEOUT_S, MAX_WAITING, heads_protocol
from agenttx.api.http.v1.errors import refusal_response
from agenttx.api.stream_slots import StreamSlots
from agenttx.auth.http_auth import BearerAuth, grant_of
from agenttx.auth.keys import KeyRing
from agenttx.auth.tls import TlsFiles
from agenttx.errors import TooManySubscribers

if TYPE_CHECKING:  # the listener serves the MCP adapter it is given; it imports none
    from agenttx.api.mcp.server import AgentTxMCP

log = logging.getLogger("agenttx.http")

LOOPBACK_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*")
LOOPBACK_ORIGINS = ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*")
# The gRPC message cap, for the same reason: an MCP request holds at most arguments (1 MiB)
# and reasoning (1 MiB) plus framing.
MAX_BODY_BYTES = 4 << 20
KEEP_ALIVE_S = 5  # an idle keep-alive connection's life after its last response


@dataclass(frozen=True)
class HttpSettings:
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    allowed_origins: tuple[str, ...] = LOOPBACK_ORIGINS
    max_body_bytes: int = MAX_BODY_BYTES
    # An idle MCP session (no request for this long) is closed; the client starts a new one.
    session_idle_secs: float = 30 * 60
    routes: Sequence[BaseRoute] = field(default_factory=tuple)  # more routes beside /mcp
    # The API keys every request must carry (``Authorization: Bearer``); None: none needed.
    keys: KeyRing | None = None
    # Starlette exception handlers of the whole app (the API's JSON 404 and 405 for paths no
    # route matches).
    exception_handlers: Mapping[Any, Any] = field(default_factory=dict)
    # The server's one count of open event streams (gRPC and /v1 share it); None: a count of
    # the app's own.
    slots: StreamSlots | None = None


class HostOriginGuard:
    """ASGI middleware: refuse requests whose Host or Origin is not allowed (module doc)."""

    def __init__(self, app: ASGIApp, hosts: Sequence[str], origins: Sequence[str]) -> None:
        self.app = app
        any_host, any_origin = "*" in hosts, "*" in origins
        # The SDK's checker, one per header so "*" can switch either off alone.
        self._hosts = None if any_host else _checker(hosts, [])
        self._origins = None if any_origin else _checker([], origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = Request(scope).headers
            if self._hosts is not None and not self._hosts._validate_host(headers.get("host")):
                await _plain(send, 421, "Invalid Host header")
                return
            if self._origins is not None and not self._origins._validate_origin(
                headers.get("origin")
            ):
                await _plain(send, 403, "Invalid Origin header")
                return
        await self.app(scope, receive, send)


def _checker(hosts: Sequence[str], origins: Sequence[str]) -> TransportSecurityMiddleware:
    return TransportSecurityMiddleware(
        TransportSecuritySettings(allowed_hosts=list(hosts), allowed_origins=list(origins))
    )


async def _plain(send: Send, status: int, text: str) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class CountedStreams:
    """ASGI wrapper of ``/mcp``: each GET (the standalone stream) holds a slot of ``slots``
    while it is served; one past a limit is answered 503 with ``Retry-After``, in the API's
    error shape. POSTs (a request and its reply) and DELETEs pass uncounted."""

    def __init__(self, app: ASGIApp, slots: StreamSlots) -> None:
        self.app = app
        self.slots = slots

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "GET":
            await self.app(scope, receive, send)
            return
        try:
            slot = self.slots.admit(grant_of(scope))
        except TooManySubscribers as exc:
            await refusal_response(exc, {})(scope, receive, send)
            return
        # The SDK serves the stream inside this call, so it returns when the stream ends: the
        # client left, the session was deleted, the key was revoked (``BearerAuth``
        # cancels it), or an error.
        with slot:
            await self.app(scope, receive, send)


def build_http_app(mcp: AgentTxMCP, settings: HttpSettings) -> ASGIApp:
    """The whole HTTP app: ``/mcp`` plus ``settings.routes``, behind the guard."""
    sessions = StreamableHTTPSessionManager(
        app=mcp.server,
        # The guard above checks Host and Origin for every route; the SDK's own copy of
        # the check (per MCP request) is off so it is made once.
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        max_request_body_size=settings.max_body_bytes,
        session_idle_timeout=settings.session_idle_secs,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with sessions.run():
            yield

    slots = settings.slots if settings.slots is not None else StreamSlots()
    mcp_endpoint = CountedStreams(StreamableHTTPASGIApp(sessions), slots)
    app = Starlette(
        routes=[Route("/mcp", endpoint=mcp_endpoint), *settings.routes],
        lifespan=lifespan,
        exception_handlers=dict(settings.exception_handlers),
    )
    # Host/Origin first (a rebinding page is refused before it can probe keys), then the key.
    # The dashboard's files and the API's description hold no data: a browser loads them
    # without a key, and the page then sends the key the user gives it with every call.
    authed = BearerAuth(
        app,
        settings.keys,
        public_paths=("/", "/openapi.json"),
        public_prefixes=("/static/",),
        revocable_paths=("/mcp",),  # MCP's standalone event stream ends with its key
    )
    # The access line outside everything: a request the guard or the key check refuses has one.
    return AccessLog(HostOriginGuard(authed, settings.allowed_hosts, settings.allowed_origins))


class HttpListener:
    """The app served by uvicorn on a socket bound before start (so a taken port fails the
    start, and port 0 is resolved), in the running event loop, without uvicorn's own signal
    handling: the server's drain on SIGTERM stays the only one."""

    def __init__(
        self,
        app: ASGIApp,
        sock: socket.socket,
        *,
        tls: TlsFiles | None = None,
        on_stop: Callable[[], None] | None = None,
        header_timeout_s: float = HEADER_TIMEOUT_S,
        max_waiting: int = MAX_WAITING,
    ) -> None:
        self.sock = sock
        self._on_stop = on_stop  # called first on stop: ends the open event streams
        config = uvicorn.Config(
            app,
            lifespan="on",
            log_config=None,  # our logging set-up stands; uvicorn logs under its own names
            access_log=False,
            timeout_graceful_shutdown=5,
            # A connection idle after a response closes after this; one that has not sent a
            # whole request head within header_timeout_s closes too (``api.http.heads``).
            timeout_keep_alive=KEEP_ALIVE_S,
            http=heads_protocol(header_timeout_s, max_waiting),
            ws="none",
            **(tls.uvicorn_options() if tls is not None else {}),
        )
        config.load()
        self._server = uvicorn.Server(config)
        self._server.lifespan = config.lifespan_class(config)
        self._ticks: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    async def start(self) -> None:
        await self._server.startup(sockets=[self.sock])
        if self._server.should_exit:  # the app's lifespan failed to start
            raise RuntimeError("the HTTP app failed to start")
        # uvicorn's once-a-second housekeeping (the Date header) and its exit check.
        self._ticks = asyncio.create_task(self._server.main_loop())

    async def stop(self) -> None:
        if self._on_stop is not None:
            self._on_stop()
        self._server.should_exit = True
        if self._ticks is not None:
            await self._ticks
        await self._server.shutdown(sockets=[self.sock])


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (OSError if it cannot be had)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto named, not 0: asyncio sets TCP_NODELAY only on accepted sockets whose proto is
    # IPPROTO_TCP, and without it every response waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
