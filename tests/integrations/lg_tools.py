"""The scenario tools (``scenario_tools``) as LangChain tools, and those as AgentTx tools
(``TOOLS``), which the tests load into the engine (``Engine.open(tools=TOOLS)``) as a user
would, or serve."""

from __future__ import annotations

from langchain_core.tools import tool

import scenario_tools as scenario
from agenttx.integrations.langgraph import as_agenttx_tools

book_room = tool(scenario.book_room)
cancel_room = tool(scenario.cancel_room)
room_size = tool(scenario.room_size)
order_lunch = tool(scenario.order_lunch)
close_account = tool(scenario.close_account)

FRAMEWORK_TOOLS = [book_room, room_size, order_lunch]
TOOLS = as_agenttx_tools(FRAMEWORK_TOOLS, effects=scenario.EFFECTS, undo={"book_room": cancel_room})
ABORTING_TOOLS = as_agenttx_tools([close_account], effects=scenario.ABORTING_EFFECTS)
