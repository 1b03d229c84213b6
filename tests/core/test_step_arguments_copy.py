"""A tool gets its own copy of the arguments, with or without references: mutating them
touches neither the caller's dict nor what the transaction recorded."""

from __future__ import annotations

from typing import Any

import pytest

import agenttx
from agenttx import StepStatus


@agenttx.tool(name="test.scribble", effect="state", schema={"type": "object"})
async def scribble(ctx: agenttx.ToolContext, arguments: Any) -> dict[str, Any]:
    """Mutates every container it is given, then returns what it saw first."""
    seen = {"name": arguments["name"], "tags": list(arguments.get("tags", []))}
    arguments["name"] = "scribbled"
    arguments.get("tags", []).append("scribbled")
    arguments["added"] = True
    return seen


@pytest.mark.parametrize(
    "arguments",
    [{"name": "flat"}, {"name": "nested", "tags": ["a"]}, '{"name": "text", "tags": ["a"]}'],
)
async def test_a_tool_that_mutates_its_arguments_changes_nothing_outside(
    open_engine: Any, arguments: Any
) -> None:
    engine = await open_engine(tools=[scribble])
    tx = (await engine.begin()).transaction_id
    before = repr(arguments)
    r = await engine.execute_step(tx, 1, "test.scribble", arguments)
    assert r.status is StepStatus.SUCCESS
    assert repr(arguments) == before  # the caller's value is untouched
    step = (await engine.get_transaction(tx)).steps[0]
    assert step.arguments is not None
    assert "added" not in step.arguments
    assert step.arguments["name"] != "scribbled"
