"""``Gateway``: the downstream MCP servers of a gateway file, as AgentTx tools.

Made of named parts: the checked file (``config``), one ``DownstreamSession`` per server, the
tools built from each listing (``ForwardedTools``), the outbox channel of staged calls and
the undo handler of compensatable ones. The server opens it before the engine
(``start``: sessions connect, tools are listed), hands its tools, channel and undo handler
to ``Engine.open``, then ``attach``es the engine's registry so a ``tools/list_changed`` from
a server replaces that server's tools while the engine runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mcp_types as types

from agenttx.effects.channels import Channel
from agenttx.gateway.channel import CONNECT_WAIT_S, DeliveryJournal, GatewayChannel
from agenttx.gateway.config import GatewayConfig, Secrets
from agenttx.gateway.session import DownstreamSession
from agenttx.gateway.tools import (
    CHANNEL,
    UNDO_HANDLER,
    DownstreamToolError,
    ForwardedTools,
    output_of,
)
from agenttx.tools.contract import Tool
from agenttx.tools.registry import ToolRegistry

log = logging.getLogger("agenttx.gateway")


class Gateway:
    def __init__(self, config: GatewayConfig, journal_path: Path) -> None:
        self.config = config
        self.secrets: Secrets = config.secrets  # every ${env:…} value: masked on the way out
        # One session per server, by name; each restarts itself with backoff.
        self.sessions = {
            name: DownstreamSession(settings, config.secrets, self._listed)
            for name, settings in config.servers.items()
        }
        self._builders = {n: ForwardedTools(s, config.secrets) for n, s in self.sessions.items()}
        # The tools each server offers now, by server: what the registry holds of it.
        self.tools_by_server: dict[str, list[Tool]] = {name: [] for name in self.sessions}
        self.channel = GatewayChannel(self.sessions, DeliveryJournal(journal_path), self.secrets)
        self._registry: ToolRegistry | None = None  # the engine's, once attached
        # Guards of undo records that needed the call's output, cleared by the resolved record.
        self._cleared: set[str] = set()
        # Calls the server answered with a failure: their undo records do nothing.
        self._voided: set[str] = set()
        self._log_filter = _Redacting(self.secrets)

    # -------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Start every session and wait (each server up to its ``connect_timeout_ms``) for
        the first listing; a server that is not up by then joins when it is."""
        for handler in logging.getLogger().handlers:
            handler.addFilter(self._log_filter)
        for session in self.sessions.values():
            session.start()
        ready = await asyncio.gather(
            *(s.wait_ready(s.settings.connect_timeout_ms / 1000) for s in self.sessions.values())
        )
        for session, up in zip(self.sessions.values(), ready, strict=True):
            if not up:
                log.warning(
                    "downstream %s: not connected yet (%s); its tools appear when it is",
                    session.name,
                    session.last_error or "starting",
                )

    async def stop(self) -> None:
        await asyncio.gather(*(s.stop() for s in self.sessions.values()))
        for handler in logging.getLogger().handlers:
            handler.removeFilter(self._log_filter)

    def attach(self, registry: ToolRegistry) -> None:
        """From now on a changed listing updates ``registry`` (the open engine's)."""
        self._registry = registry
        for tools in self.tools_by_server.values():
            for t in tools:
                registry.replace(t)

    # -------------------------------------------------------------- what the engine gets

    def tools(self) -> list[Tool]:
        return [t for tools in self.tools_by_server.values() for t in tools]

    def channels(self) -> dict[str, Channel]:
        return {CHANNEL: self.channel}

    def undo_handlers(self) -> dict[str, Callable[..., Any]]:
        return {UNDO_HANDLER: self._undo}

    def _listed(self, server: str, listed: list[types.Tool]) -> None:
        built = self._builders[server].build(listed)
        old = self.tools_by_server.get(server, [])
        self.tools_by_server[server] = built
        if self._registry is not None:
            registry = self._registry
            # Never replace a tool that is not this server's (a user tool of the same name).
            built = [t for t in built if getattr(registry.get(t.name), "server", server) == server]
            self.tools_by_server[server] = built
            names = {t.name for t in built}
            for t in old:
                if t.name not in names:
                    registry.remove(t.name)
            for t in built:
                registry.replace(t)
        log.info("downstream %s: %d tools", server, len(built))

    # -------------------------------------------------------------- compensation

    async def _undo(
        self,
        ctx: Any,
        server: str,
        tool: str,
        arguments: dict[str, Any] | None = None,
        guard: str = "",
        clears: str = "",
        call: str = "",
        voids: str = "",
    ) -> None:
        """Run one recorded undo call; raises (and the rewinder retries) if it fails.
        ``voids`` marks the call ``voids`` as failed downstream (its undo does nothing);
        ``guard`` stands for an undo that needed the output, ``clears`` resolves one."""
        if voids:
            self._voided.add(voids)
            return
        if (call or guard) in self._voided:
            return
        if guard:
            if guard in self._cleared:
                return
            raise RuntimeError(
                f"the undo {server}.{tool} needs the call's output, which was never recorded "
                "(the call was interrupted); check the downstream system by hand"
            )
        session = self.sessions.get(server)
        if session is None:
            raise RuntimeError(f"no MCP server {server!r} in the gateway file")
        if not await session.wait_ready(CONNECT_WAIT_S):
            raise ConnectionError(f"MCP server {server!r} is not connected: {session.last_error}")
        result = await session.call(tool, dict(arguments or {}))
        try:
            output_of(result, self.secrets)
        except DownstreamToolError as exc:
            raise RuntimeError(f"{server}.{tool}: {exc}") from None
        if clears:
            self._cleared.add(clears)


class _Redacting(logging.Filter):
    """Masks the gateway file's secrets in every log line."""

    def __init__(self, secrets: Secrets) -> None:
        super().__init__()
        self.secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            message = record.getMessage()
            masked = self.secrets.redact(message)
            if masked != message:
                record.msg, record.args = masked, None
        return True


def journal_path(data_dir: Path) -> Path:
    return data_dir / "gateway-deliveries.jsonl"
