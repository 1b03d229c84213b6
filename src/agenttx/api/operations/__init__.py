"""The operation table: every operation of ``agenttx.v1.AgentTxService`` once, and the
surfaces derived from it (docs/architecture.md, "The operation table").

model    what a row holds (``Row``), what a call brings (``CallContext``), a ``/v1`` route,
         an MCP tool (``McpTool``)
cli_bindings  a row as a CLI command (``CliCommand``), and each bound row's: light, as the
         CLI reads it on every run
table    the rows: each one's ``run`` (engine call → wire reply) and its data
replies  the wire replies built from the engine's values, shared by every surface
bodies   the ``/v1`` JSON request models the rows' routes validate with
filters  a listing's ``status`` query parameter, read and described from one place
mcp_bindings  each row's MCP tool (``McpTool``), and the order ``tools/list`` shows them in
mcp_schemas   the JSON Schema fragments those bindings share

It imports no adapter: the gRPC servicer (``api/grpc/server.py``), ``/v1`` (``api/http/v1``),
MCP (``api/mcp/catalog.py``, ``handlers.py``) and the CLI (``cli/rows.py``) import it.
"""

from typing import TYPE_CHECKING, Any

from agenttx.api.operations.cli_bindings import CliCommand, CliOption

if TYPE_CHECKING:
    from agenttx.api.operations.model import (
        Access,
        CallContext,
        Hints,
        HttpRoute,
        McpInput,
        McpTool,
        Retry,
        Row,
    )
    from agenttx.api.operations.table import ROWS, SAFETY_ROWS, TRANSACTION_ROWS

# The rest is imported when first named (PEP 562): the CLI imports this package for its
# bindings on every run, and the table (with the reply builders it imports) costs half a
# second, the model pydantic's import.
_LAZY = {
    **dict.fromkeys(("ROWS", "SAFETY_ROWS", "TRANSACTION_ROWS"), "table"),
    **dict.fromkeys(
        ("Access", "CallContext", "Hints", "HttpRoute", "McpInput", "McpTool", "Retry", "Row"),
        "model",
    ),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)


__all__ = [
    "ROWS",
    "SAFETY_ROWS",
    "TRANSACTION_ROWS",
    "Access",
    "CallContext",
    "CliCommand",
    "CliOption",
    "Hints",
    "HttpRoute",
    "McpInput",
    "McpTool",
    "Retry",
    "Row",
]
