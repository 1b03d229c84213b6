"""Tools for the dry-run and undo/redo tests: one per fidelity level, an outside tool with an
undo, an irreversible one. ``CALLS`` records every real call and undo, so a test can prove a
dry run ran no tool and an undo ran its compensation."""

from __future__ import annotations

from typing import Any

import agenttx
from agenttx import ToolContext

CALLS: list[tuple[str, Any]] = []


@agenttx.tool(name="t.schema", effect="compensatable", dry_run="schema_only")
async def schema_tool(ctx: ToolContext, amount: int) -> dict[str, int]:
    CALLS.append(("t.schema", amount))
    return {"amount": amount}


@agenttx.tool(name="t.policy", effect="compensatable", dry_run="policy_and_schema")
async def policy_tool(ctx: ToolContext, amount: int) -> dict[str, int]:
    CALLS.append(("t.policy", amount))
    return {"amount": amount}


@agenttx.tool(name="t.validated", effect="compensatable", dry_run="downstream_validation")
async def validated_tool(ctx: ToolContext, amount: int) -> dict[str, int]:
    await ctx.register_undo({"amount": amount})
    CALLS.append(("t.validated", amount))
    return {"amount": amount}


@validated_tool.validate
async def validated_check(ctx: ToolContext, amount: int) -> dict[str, Any]:
    if amount < 0:
        raise ValueError(f"the provider refuses a negative amount {amount}")
    return {"provider": "accepts", "amount": amount}


@validated_tool.undo
async def validated_undo(ctx: Any, amount: int) -> None:
    CALLS.append(("t.validated#undo", amount))


@agenttx.tool(name="t.simulated", effect="compensatable", dry_run="full_simulation")
async def simulated_tool(ctx: ToolContext, amount: int) -> dict[str, int]:
    CALLS.append(("t.simulated", amount))
    return {"charged": amount}


@simulated_tool.validate
def simulated_check(ctx: Any, amount: int) -> None:  # a plain function: on a worker thread
    if amount > 1000:
        raise ValueError("over the card limit")


@simulated_tool.simulate
async def simulated_preview(ctx: ToolContext, amount: int) -> dict[str, Any]:
    await ctx.register_undo({"amount": amount}, handler="t.simulated#undo")
    await ctx.state.put("charges/last", amount)
    ctx.stage_effect("email", {"to": "a@example.com", "amount": amount}, "receipt-1")
    return {"charged": amount, "simulated": True}


@agenttx.tool(name="t.unvalidated", effect="compensatable", dry_run="downstream_validation")
async def unvalidated_tool(ctx: ToolContext, amount: int) -> dict[str, int]:
    CALLS.append(("t.unvalidated", amount))
    return {"amount": amount}


@agenttx.tool(name="t.legacy", effect="state", dry_run="read_only_preview")
async def legacy_tool(ctx: ToolContext, key: str) -> dict[str, str]:
    await ctx.state.put(key, "legacy")
    return {"key": key}


@agenttx.tool(name="t.irreversible", effect="irreversible")
async def irreversible_tool(ctx: ToolContext, to: str) -> dict[str, str]:
    CALLS.append(("t.irreversible", to))
    return {"sent": to}


@agenttx.tool(name="t.no_rollback", effect="compensatable", compensation="rollback_not_supported")
async def no_rollback_tool(ctx: ToolContext, n: int) -> dict[str, int]:
    CALLS.append(("t.no_rollback", n))
    return {"n": n}


TOOLS = [
    schema_tool,
    policy_tool,
    validated_tool,
    simulated_tool,
    unvalidated_tool,
    legacy_tool,
    irreversible_tool,
    no_rollback_tool,
]


async def trace(engine: agenttx.Engine, tx: str) -> dict[str, Any]:
    """Everything durable a call could leave behind: the row, every attempt, the undo log,
    the audit chain, the outbox and the stored replies' count is not reachable, so the row's
    revision stands for them."""
    store = engine.store
    row = await store.get_transaction(tx)
    assert row is not None
    steps = await store.load_steps(tx, live_only=False)
    return {
        "revision": row.revision,
        "status": row.status,
        "next_step_id": row.next_step_id,
        "body": row.body,
        "steps": [(s.seq, s.step_id, s.status, s.live, s.output_json) for s in steps],
        "undo": [(u.id, u.step_id, u.status) for u in await store.load_undo(tx)],
        "audit": [(r.seq, r.hash) for r in await store.load_audit(tx)],
        "outbox": [(o.id, o.status) for o in await store.list_outbox()],
    }
