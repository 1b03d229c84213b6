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
command group is a new module whose command is added to ``main`` below. A command that fronts
one operation is declared by its row's ``cli`` binding (``api/operations/cli_bindings.py``:
group, name, help, arguments, options) and made by rows.py in its binding's group (a
``rows.TableGroup``: ``agenttx`` itself, ``tx``, ``effects``); what it does and prints beyond
sending the request is its action (actions.py, by the row's name), in the group's module.
"""

from __future__ import annotations

import click

from agenttx.cli.audit import audit
from agenttx.cli.common import to_dict
from agenttx.cli.connect import connect
from agenttx.cli.demo import demo
from agenttx.cli.effects import effects
from agenttx.cli.keys import keys
from agenttx.cli.mcp import mcp
from agenttx.cli.rows import TableGroup
from agenttx.cli.serve import serve
from agenttx.cli.tx import tx

__all__ = ["main", "to_dict"]


@click.group(
    cls=TableGroup,
    bound="",
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="agenttx")
def main() -> None:
    """AgentTx: transactional tool calls for AI agents."""


# `agenttx tools` and the commands of tx and effects that front one operation are their rows'
# bindings (cli/rows.py); these are the rest.
for _command in (serve, mcp, tx, audit, effects, demo, connect, keys):
    main.add_command(_command)
