"""The MCP gateway: other MCP servers' tools as transactional AgentTx tools ``<server>.<tool>``.

``config`` reads the gateway file (TOML, a contract: ``docs/gateway.md``), ``session`` keeps
one SDK client session per server, ``tools`` turns each downstream tool into an AgentTx tool
with its effect class, ``mapping`` resolves undo and ``before`` arguments, ``channel`` makes
staged calls after commit exactly once, and ``gateway`` composes them for the server.

Layering: the gateway sits beside the adapters. It imports the tool contract, the effects
channel contract, errors and types — never the engine (``core``), a store backend or an
adapter (the rule in ``agenttx/__init__.py``); the server hands its tools, channel and undo
handler to ``Engine.open``.
"""

from agenttx.gateway.config import GatewayConfig, load_gateway
from agenttx.gateway.gateway import Gateway, journal_path

__all__ = ["Gateway", "GatewayConfig", "journal_path", "load_gateway"]
