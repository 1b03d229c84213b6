"""``effect.stage``: queue an effect that is released only after commit."""

from __future__ import annotations

import uuid
from typing import Any, TypedDict

from agenttx.tools.builtin.args import as_object, identifier, optional_str, required_str
from agenttx.tools.context import ToolContext
from agenttx.tools.contract import tool


class EffectStaged(TypedDict):
    """What ``effect.stage`` returns; ``idempotency_key`` is the given one or a new uuid."""

    staged: bool
    channel: str
    idempotency_key: str


@tool(
    name="effect.stage",
    bounded=True,
    dry_run="full_simulation",  # state only: a dry run runs it and keeps nothing
    effect="staged",
    description="Stage an effect (email, webhook, …) released once after a durable commit.",
    schema={
        "type": "object",
        "properties": {
            "channel": {"type": "string", "pattern": "^[A-Za-z0-9_]{1,128}$"},
            "payload": {"description": "any JSON value"},
            "idempotency_key": {"type": "string"},
        },
        "required": ["channel"],
        "additionalProperties": False,
    },
    examples=[{"channel": "email", "payload": {"to": "a@example.com"}, "idempotency_key": "wf-5"}],
)
async def effect_stage(ctx: ToolContext, arguments: Any) -> EffectStaged:
    args = as_object(arguments)
    channel = identifier(required_str(args, "channel"), "channel")
    key = optional_str(args, "idempotency_key") or str(uuid.uuid4())
    ctx.stage_effect(channel, args.get("payload"), key)
    return {"staged": True, "channel": channel, "idempotency_key": key}
