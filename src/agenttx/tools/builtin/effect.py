"""``effect.stage``: queue an effect that is released only after commit."""

from __future__ import annotations

import uuid
from typing import Any, TypedDict

from agenttx.tools.builtin.args import (
    SCHEMA_IDENTIFIER,
    as_object,
    identifier,
    optional_str,
    required_str,
)
from agenttx.tools.builtin.state import state_tool
from agenttx.tools.context import ToolContext


class EffectStaged(TypedDict):
    """What ``effect.stage`` returns; ``idempotency_key`` is the given one or a new uuid."""

    staged: bool
    channel: str
    idempotency_key: str


@state_tool(
    name="effect.stage",
    effect="staged",
    description="Stage an effect (email, webhook, …) released once after a durable commit.",
    schema={
        "type": "object",
        "properties": {
            "channel": SCHEMA_IDENTIFIER,
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
