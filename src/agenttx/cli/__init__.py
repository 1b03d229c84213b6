"""The ``agenttx`` command line: one module per command group, registered here.

``agenttx serve`` runs the server (serve.py), ``agenttx mcp`` an MCP server on stdio (mcp.py),
both opening the engine from the same flags (engine_options.py); ``tx`` and ``tools`` talk to
a running one over gRPC (``--server``, env ``AGENTTX_SERVER``) with the generated stub,
printing tables or, with ``--json``, JSON; ``audit`` verifies and exports audit chains, on a
store directly (``--store``) or on a running server; ``demo`` runs a scripted agent through
the server; ``connect`` writes the configuration that makes an agent app (Claude Code, Codex,
...) use AgentTx over MCP. Every ``serve`` flag has an ``AGENTTX_<NAME>`` environment
variable; out-of-range values stop it before it starts. What the commands share (options, the
stub, errors, wire-to-JSON) is in common.py. A new command group is a new module whose command
is added to ``main`` below.
"""

from __future__ import annotations

import click

from agenttx.cli.audit import audit
from agenttx.cli.common import to_dict
from agenttx.cli.connect import connect
from agenttx.cli.demo import demo
from agenttx.cli.mcp import mcp
from agenttx.cli.serve import serve
from agenttx.cli.tools import tools
from agenttx.cli.tx import tx

__all__ = ["main", "to_dict"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="agenttx")
def main() -> None:
    """AgentTx: transactional tool calls for AI agents."""


for _command in (serve, mcp, tx, tools, audit, demo, connect):
    main.add_command(_command)
