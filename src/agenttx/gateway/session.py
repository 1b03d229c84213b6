"""One long-lived SDK client session per downstream MCP server, restarted with backoff.

``DownstreamSession`` owns a task that opens the official SDK ``Client`` (stdio: the
configured command as a subprocess; or streamable HTTP with the configured headers, nothing
else — AgentTx's own credentials never go downstream), lists the tools, and then watches the
session: a failed probe every ``PING_INTERVAL_S`` (``ping``, or ``tools/list`` in the
2026-07-28 era) or a tool call that lost its transport ends it, and it is opened again after
a backoff (0.5 s doubling to 30 s). A
``notifications/tools/list_changed`` lists the tools again. Every call from a step goes
through ``call``; the SDK client is entered and left in the session's own task (anyio
requires it), and other tasks only send requests on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import warnings
from collections.abc import AsyncIterator, Callable
from typing import Any

import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types.jsonrpc import CONNECTION_CLOSED
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agenttx.gateway.config import Secrets, ServerSettings

log = logging.getLogger("agenttx.gateway")

PING_INTERVAL_S = 5.0
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 30.0
RECONNECT_WAIT_S = 10.0  # how long a call waits for a session being reopened
_LIST_PAGES = 100  # a paginator that never ends cannot hang a (re)listing

ToolsListener = Callable[[str, list[types.Tool]], None]
Progress = ProgressFnT


class NotConnected(ConnectionError):
    """The server's session is down; nothing was sent (safe to retry)."""


class CallLost(ConnectionError):
    """The session broke while a call was in flight: it may or may not have run."""


class DownstreamError(Exception):
    """The server answered the call with a JSON-RPC error (it did not run the tool)."""


class DownstreamSession:
    def __init__(self, settings: ServerSettings, secrets: Secrets, on_tools: ToolsListener) -> None:
        self.settings = settings
        self.name = settings.name
        self._secrets = secrets
        self._on_tools = on_tools
        self._client: Client | None = None  # set iff the session is up and listed
        self._ready = asyncio.Event()  # set iff ``_client`` is usable
        self._broken = asyncio.Event()  # a call saw the transport fail: reopen
        self._relist = asyncio.Event()  # the server said its tools changed
        self._task: asyncio.Task[None] | None = None
        self.last_error = ""  # why the last session ended or failed to open (redacted)
        self._opened = False  # true iff the current session got as far as ready

    # -------------------------------------------------------------- lifecycle

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"gateway:{self.name}")

    async def wait_ready(self, timeout_s: float) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._ready.wait()
        return self._ready.is_set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    @property
    def connected(self) -> bool:
        return self._ready.is_set()

    async def _run(self) -> None:
        failures = 0  # sessions in a row that failed before they were ever ready
        while True:
            self._opened = False
            try:
                await self._session()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # an SDK task group raises groups: any ends the session
                self.last_error = self._secrets.redact(_describe(exc))
                # A session that was up and then died starts the backoff over.
                failures = 1 if self._opened else failures + 1
            finally:
                self._ready.clear()
                self._client = None
            delay = min(BACKOFF_BASE_S * 2 ** max(failures - 1, 0), BACKOFF_MAX_S)
            log.warning(
                "downstream %s: session ended (%s); reopening in %.1f s",
                self.name,
                self.last_error or "closed",
                delay,
            )
            await asyncio.sleep(delay)

    async def _session(self) -> None:
        self._broken.clear()
        async with self._open() as client:
            await self._list(client)
            self._client = client
            self._opened = True
            self.last_error = ""
            self._ready.set()
            log.info("downstream %s: connected (%s)", self.name, client.protocol_version)
            listener = asyncio.create_task(self._listen(client))
            try:
                await self._watch(client)
            finally:
                listener.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await listener

    async def _listen(self, client: Client) -> None:
        """In the 2026-07-28 era a changed tool list comes on a ``subscriptions/listen``
        stream (the handshake era sends a notification, ``_on_message``)."""
        if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return
        tools = client.server_capabilities.tools
        if tools is None or not tools.list_changed:
            return
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self._relist.set()
        except Exception as exc:  # no refresh then; calls still work
            log.warning("downstream %s: cannot listen for tool changes: %s", self.name, exc)

    async def _watch(self, client: Client) -> None:
        while True:
            waits = [
                asyncio.ensure_future(self._broken.wait()),
                asyncio.ensure_future(self._relist.wait()),
            ]
            try:
                await asyncio.wait(
                    waits, timeout=PING_INTERVAL_S, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                for w in waits:
                    w.cancel()
            if self._broken.is_set():
                self.last_error = self.last_error or "a call lost its connection"
                return
            if self._relist.is_set():
                self._relist.clear()
                await self._list(client)
                continue
            async with asyncio.timeout(PING_INTERVAL_S):
                await self._probe(client)

    async def _probe(self, client: Client) -> None:
        """Is the server still there? ``ping`` in the handshake era; the 2026-07-28 era
        removed it, so one page of ``tools/list`` (answered from the server's memory)."""
        if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
            await client.list_tools(cache_mode="refresh")
        else:
            with warnings.catch_warnings():
                # The SDK flags ping as removed in 2026-07-28; this is the handshake era.
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await client.send_ping()

    def _open(self) -> Client:
        s = self.settings
        server: Any
        if s.command is not None:
            server = StdioServerParameters(
                command=s.command, args=list(s.args), env=dict(s.env) or None, cwd=s.cwd
            )
        else:
            assert s.url is not None
            server = _http_transport(s.url, dict(s.headers))
        return Client(
            server,
            mode="auto",  # either era: discover, falling back to the initialize handshake
            message_handler=self._on_message,
            cache=None,  # tools/list must reach the server when it says they changed
        )

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._relist.set()

    async def _list(self, client: Client) -> None:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(_LIST_PAGES):
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        self._on_tools(self.name, tools)

    # -------------------------------------------------------------- calls

    async def call(
        self, tool: str, arguments: dict[str, Any], progress: Progress | None = None
    ) -> types.CallToolResult:
        """Call ``tool``; raises ``NotConnected`` (nothing sent), ``DownstreamError`` (the
        server refused it), or ``CallLost`` (the transport failed mid-call). A timeout is the
        caller's (the step's), and cancelling the caller cancels the downstream request."""
        if not self._ready.is_set():
            # Reopening (a restart after the process died): a call made meanwhile waits a
            # little for it, within the step's own timeout, rather than fail at once.
            await self.wait_ready(RECONNECT_WAIT_S)
        client = self._client
        if client is None or not self._ready.is_set():
            why = f": {self.last_error}" if self.last_error else ""
            raise NotConnected(f"MCP server {self.name!r} is not connected{why}; try again shortly")
        try:
            return await client.call_tool(tool, arguments, progress_callback=progress)
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:  # the SDK's code for a transport that closed
                raise DownstreamError(self._secrets.redact(exc.error.message)) from None
            raise self._lost(tool, exc) from None
        except (asyncio.CancelledError, TimeoutError):
            raise
        except Exception as exc:
            raise self._lost(tool, exc) from None

    def _lost(self, tool: str, exc: BaseException) -> CallLost:
        # Not ready from now on, before the session's task gets to reopen it: the next call
        # waits for the new session instead of failing on the dead one.
        self._ready.clear()
        self._broken.set()
        return CallLost(
            f"MCP server {self.name!r} connection lost during {tool}: "
            f"{self._secrets.redact(_describe(exc))}"
        )


@contextlib.asynccontextmanager
async def _http_transport(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    """Streamable HTTP with exactly the configured headers; the HTTP client is ours to close."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0)) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
