"""``kv.put``, ``kv.get``, ``kv.delete``: managed state under ``kv/<key>``."""

from __future__ import annotations

from typing import Any, TypedDict

from agenttx.tools.builtin.args import SCHEMA_KEY, as_object, required_str
from agenttx.tools.builtin.state import state_tool
from agenttx.tools.context import ToolContext


class KvEntry(TypedDict):
    """What ``kv.put`` and ``kv.get`` return (``value`` is null for a key never set)."""

    key: str
    value: Any


class KvDeleted(TypedDict):
    """What ``kv.delete`` returns: ``deleted`` is true iff the key existed."""

    key: str
    deleted: bool


_KEY_ONLY = {
    "type": "object",
    "properties": {"key": SCHEMA_KEY},
    "required": ["key"],
    "additionalProperties": False,
}


@state_tool(
    name="kv.put",
    effect="state",
    idempotent=True,
    description="Set a key in transactional key-value state (visible to others after commit).",
    schema={
        "type": "object",
        "properties": {"key": SCHEMA_KEY, "value": {"description": "any JSON value"}},
        "required": ["key"],
        "additionalProperties": False,
    },
    examples=[{"key": "session/customer", "value": "c-1"}],
)
async def kv_put(ctx: ToolContext, arguments: Any) -> KvEntry:
    args = as_object(arguments)
    key = required_str(args, "key")
    value = args.get("value")
    await ctx.state.put(f"kv/{key}", value)
    return {"key": key, "value": value}


@state_tool(
    name="kv.get",
    effect="read",
    idempotent=True,
    description="Read a key; this transaction's own writes first, then committed state.",
    schema=_KEY_ONLY,
    examples=[{"key": "session/customer"}],
)
async def kv_get(ctx: ToolContext, arguments: Any) -> KvEntry:
    key = required_str(as_object(arguments), "key")
    state_key = f"kv/{key}"
    if not await ctx.state.exists(state_key):
        raise LookupError(f'no row with key={key} in table "kv"')
    return {"key": key, "value": await ctx.state.get(state_key)}


@state_tool(
    name="kv.delete",
    effect="state",
    idempotent=True,
    description="Delete a key; reports whether it existed.",
    schema=_KEY_ONLY,
    examples=[{"key": "session/customer"}],
)
async def kv_delete(ctx: ToolContext, arguments: Any) -> KvDeleted:
    key = required_str(as_object(arguments), "key")
    return {"key": key, "deleted": await ctx.state.delete(f"kv/{key}")}
