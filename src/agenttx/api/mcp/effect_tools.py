"""The operator's MCP tools for the outbox: ``list_effects`` and ``retry_effect``.

They are not among the agent's tools by default: retrying a dead letter sends an email or a
webhook again, which is an operator's decision, not a step of an agent's task. ``agenttx mcp
--effect-tools`` (and ``agenttx serve --mcp-effect-tools``) add them, through the adapter's
``add_served_tool``, on the embedded engine or on a running server alike (``served.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import mcp_types as types

from agenttx.api import effects_wire
from agenttx.api.fields import message_fields
from agenttx.api.mcp.results import ok
from agenttx.errors import InvalidArgument
from agenttx.plural import plural

if TYPE_CHECKING:
    from agenttx.api.mcp.served import Served
    from agenttx.api.mcp.server import AgentTxMCP

STATUSES = ["pending", "delivering", "delivered", "dead"]


_EFFECT = {
    "type": "object",
    "description": "effect_id, transaction_id, channel, status, attempts, last_error, payload …",
}

LIST_EFFECTS = types.Tool(
    name="list_effects",
    title="List the outbox's effects",
    description="Effects (emails, webhooks …) released by committed transactions, oldest "
    "first, each with its status (pending, delivering, delivered, dead), attempts and last "
    'error. Filter with status (e.g. ["dead"]) and transaction_id; continue a page with '
    "after_id = next_after_id.",
    input_schema={
        "type": "object",
        "properties": {
            "status": {"type": "array", "items": {"enum": STATUSES}},
            "transaction_id": {"type": "string", "maxLength": 128},
            "after_id": {"type": "integer", "minimum": 0},
            "page_size": {"type": "integer", "minimum": 1, "maximum": effects_wire.MAX_EFFECTS},
        },
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {
            "ok": {"type": "boolean"},
            "effects": {"type": "array", "items": _EFFECT},
            "next_after_id": {"type": "integer"},
        },
    },
    annotations=types.ToolAnnotations(
        title="List the outbox's effects",
        read_only_hint=True,
        destructive_hint=False,
        idempotent_hint=True,
        open_world_hint=False,
    ),
)

RETRY_EFFECT = types.Tool(
    name="retry_effect",
    title="Retry a dead effect",
    description="Requeue one dead effect (see list_effects) and try to deliver it once now; "
    "the reply shows it after that attempt: delivered, pending (failed again, retried later) "
    "or dead (refused again, with last_error). Sends the email or webhook again.",
    input_schema={
        "type": "object",
        "properties": {"effect_id": {"type": "integer", "minimum": 1}},
        "required": ["effect_id"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "effect": _EFFECT},
    },
    annotations=types.ToolAnnotations(
        title="Retry a dead effect",
        read_only_hint=False,
        destructive_hint=False,
        idempotent_hint=False,
        open_world_hint=True,
    ),
)


def add_effect_tools(mcp: AgentTxMCP) -> None:
    """Offer ``list_effects`` and ``retry_effect`` on ``mcp`` (their arguments read by
    ``arguments.py``)."""

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
        effect_id = args["effect_id"]
        if effect_id is None:
            raise InvalidArgument("effect_id is required: the id list_effects shows")
        e = await served.service.retry_effect(effect_id)
        text = f"effect {e.effect_id} ({e.channel}) is {e.status}" + (
            f": {e.last_error}" if e.status != "delivered" and e.last_error else ""
        )
        return ok({"effect": message_fields(effects_wire.record(e))}, text)

    # Over HTTP with keys each call is the request's caller's: its tenant, its transactions.
    mcp.add_served_tool(LIST_EFFECTS, list_effects)
    mcp.add_served_tool(RETRY_EFFECT, retry_effect)
