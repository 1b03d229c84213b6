"""The scenario tools (``scenario_tools``) as Agents SDK function tools, and those as AgentTx
tools (``TOOLS``), which the tests load into the engine (``Engine.open(tools=TOOLS)``) as a
user would, or serve. ``order_lunch`` here needs a person's approval of each call (the SDK's
own ``needs_approval``), so it is apart, in ``APPROVED_TOOLS``."""

from __future__ import annotations

from agents import function_tool

import scenario_tools as scenario
from agenttx.integrations.openai_agents import as_agenttx_tools

book_room = function_tool(scenario.book_room)
cancel_room = function_tool(scenario.cancel_room)
room_size = function_tool(scenario.room_size)
order_lunch = function_tool(scenario.order_lunch, needs_approval=True)
close_account = function_tool(scenario.close_account)

FUNCTION_TOOLS = [book_room, room_size]
TOOLS = as_agenttx_tools(FUNCTION_TOOLS, effects=scenario.EFFECTS, undo={"book_room": cancel_room})
APPROVED_TOOLS = as_agenttx_tools([order_lunch])
ABORTING_TOOLS = as_agenttx_tools([close_account], effects=scenario.ABORTING_EFFECTS)
