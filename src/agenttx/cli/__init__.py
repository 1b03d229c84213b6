"""The ``agenttx`` command line: one module per command group, registered here.

``agenttx serve`` runs the server (serve.py), ``agenttx mcp`` an MCP server on stdio (mcp.py),
both opening the engine from the same flags (engine_options.py); ``tx`` and ``tools`` talk to
a running one over gRPC (``--server``, env ``AGENTTX_SERVER``) with the generated stub,
printing tables or, with ``--json``, JSON (``tx begin``, ``tx step`` and ``tx commit`` run a
whole transaction from a shell); ``effects`` lists the outbox and retries dead
letters on a running server; ``audit`` verifies and exports audit chains, on a
store directly (``--store``) or on a running server; ``demo`` runs a scripted agent through
the server; ``keys`` makes API keys; ``connect`` writes the configuration that makes an agent
app (Claude Code, Codex, ...) use AgentTx over MCP. Every ``serve`` flag has an
``AGENTTX_<NAME>`` environment variable; out-of-range values stop it before it starts. What the
commands share (options, the stub, errors, wire-to-JSON) is in common.py, and how they print
(rich tables on a terminal, plain tab-separated rows anywhere else) in output.py. A new
command group is a new module whose command is added to ``main`` below; an operation table
row with a ``cli`` binding gets its command from rows.py, in its binding's group (a
``rows.TableGroup``).
"""

from __future__ import annotations

import click

from agenttx.cli.audit import audit
from agenttx.cli.common import to_dict
from agenttx.cli.compensation import COMMANDS as COMPENSATION_COMMANDS
from agenttx.cli.connect import connect
from agenttx.cli.demo import demo
from agenttx.cli.effects import effects
from agenttx.cli.keys import keys
from agenttx.cli.mcp import mcp
from agenttx.cli.reconcile import COMMANDS as RECONCILE_COMMANDS
from agenttx.cli.serve import serve
from agenttx.cli.tools import tools
from agenttx.cli.tx import tx
from agenttx.cli.tx_receipts import COMMANDS as RECEIPT_COMMANDS
from agenttx.cli.tx_step import COMMANDS as STEP_COMMANDS
from agenttx.cli.tx_undo import tx_redo, tx_undo

__all__ = ["main", "to_dict"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="agenttx")
def main() -> None:
    """AgentTx: transactional tool calls for AI agents."""


for _command in (serve, mcp, tx, tools, audit, effects, demo, connect, keys):
    main.add_command(_command)
# tx begin|step|commit|preview|approve|refuse|undo|redo|reconcile|resolve|compensate|
# approve-compensation|refuse-compensation
for _command in (
    *STEP_COMMANDS,
    *RECEIPT_COMMANDS,
    tx_undo,
    tx_redo,
    *RECONCILE_COMMANDS,
    *COMPENSATION_COMMANDS,
):
    tx.add_command(_command)
