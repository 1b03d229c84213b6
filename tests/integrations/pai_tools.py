"""The scenario tools (``scenario_tools``) as a pydantic-ai toolset (``ROOMS``), and those as
AgentTx tools (``TOOLS``), which the tests load into the engine (``Engine.open(tools=TOOLS)``)
as a user would, or serve. pydantic-ai takes the plain functions as they are, so the tests use
``scenario_tools``' own functions as its tools."""

from __future__ import annotations

from pydantic_ai.toolsets import FunctionToolset

import scenario_tools as scenario
from agenttx.integrations.pydantic_ai import as_agenttx_tools

ROOMS = FunctionToolset([scenario.book_room, scenario.room_size, scenario.order_lunch])
TOOLS = as_agenttx_tools(ROOMS, effects=scenario.EFFECTS, undo={"book_room": scenario.cancel_room})
ABORTING_TOOLS = as_agenttx_tools([scenario.close_account], effects=scenario.ABORTING_EFFECTS)
