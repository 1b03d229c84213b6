"""A tool that requires a plan before commit, loaded by every conformance engine (seed 002,
``requires_plan_before_commit``): the cases of ``surfaces/cases.py`` commit a transaction that
ran it without a preview (refused, ``PLAN_REQUIRED``) and with a preview's receipt."""

from __future__ import annotations

import agenttx


@agenttx.tool(name="plan.migrate", effect="state", requires_plan_before_commit=True)
async def migrate(ctx: agenttx.ToolContext, table: str) -> dict[str, str]:
    """Migrate a table: a change to be seen before it lands."""
    await ctx.state.put(f"migrated/{table}", True)
    return {"migrated": table}


TOOLS = [migrate]
