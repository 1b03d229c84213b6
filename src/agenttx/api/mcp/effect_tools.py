"""The operator's MCP tools for the outbox: ``list_effects`` and ``retry_effect``, their
results in the MCP's words (their declarations are their rows' bindings, opt-in).

They are not among the agent's tools by default: retrying a dead letter sends an email or a
webhook again, which is an operator's decision, not a step of an agent's task. ``agenttx mcp
--effect-tools`` (and ``agenttx serve --mcp-effect-tools``) add them (``add_effect_tools``),
on the embedded engine or on a running server alike (``served.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import mcp_types as types

from agenttx.api import effects_wire
from agenttx.api.fields import message_fields
from agenttx.api.mcp.results import ok
from agenttx.plural import plural

if TYPE_CHECKING:
    from agenttx.api.mcp.served import Served
    from agenttx.api.mcp.server import AgentTxMCP

# The rows of the outbox's tools, offered together.
EFFECT_ROWS = ("list_effects", "retry_effect")


def add_effect_tools(mcp: AgentTxMCP) -> None:
    """Offer ``list_effects`` and ``retry_effect`` on ``mcp``; over HTTP with keys each call
    is the request's caller's: its tenant, its transactions."""
    for name in EFFECT_ROWS:
        mcp.offer(name)


async def list_effects(served: Served, args: dict[str, Any]) -> types.CallToolResult:
    page = await served.listings.effects(
        args["status"], args["transaction_id"], args["after_id"] or 0, args["page_size"] or 0
    )
    wire = effects_wire.effects_page(page.effects, page.next_after_id)
    fields = message_fields(wire)
    dead = sum(e.status == "dead" for e in page.effects)
    text = f"{plural(len(page.effects), 'effect')}, {dead} dead" + (
        f"; more after_id={wire.next_after_id}" if wire.next_after_id else ""
    )
    return ok({"effects": fields.get("effects", []), "next_after_id": wire.next_after_id}, text)


async def retry_effect(served: Served, args: dict[str, Any]) -> types.CallToolResult:
    e = await served.service.retry_effect(args["effect_id"])  # read as required
    text = f"effect {e.effect_id} ({e.channel}) is {e.status}" + (
        f": {e.last_error}" if e.status != "delivered" and e.last_error else ""
    )
    return ok({"effect": message_fields(effects_wire.record(e))}, text)
