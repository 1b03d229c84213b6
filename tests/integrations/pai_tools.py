"""pydantic-ai tools for the integration tests, the same tools as AgentTx tools (``TOOLS``),
which the tests load into the engine (``Engine.open(tools=TOOLS)``) as a user would, or serve;
and the scripted model that drives an agent (pydantic-ai's own ``FunctionModel``, no network).

``book_room`` stands for an outside system: each booking and each cancellation appends a JSON
line to the ``log`` file it is given, so a test sees which ran, in order."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests, ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset

import agenttx
from agenttx.integrations.pydantic_ai import as_agenttx_tools

SIZES = {"blue": 4, "red": 12}


def _note(log: str, what: str, room: str) -> None:
    with Path(log).open("a", encoding="utf-8") as f:
        f.write(json.dumps({"did": what, "room": room}) + "\n")


def journal(log: str | Path) -> list[tuple[str, str]]:
    """What the outside system did, oldest first."""
    path = Path(log)
    if not path.exists():
        return []
    return [(d["did"], d["room"]) for d in map(json.loads, path.read_text().splitlines())]


def book_room(room: str, log: str) -> dict[str, str]:
    """Book a meeting room."""
    _note(log, "book", room)
    return {"booked": room}


def cancel_room(room: str, log: str) -> None:
    """Cancel a booking of a meeting room."""
    _note(log, "cancel", room)


async def room_size(room: str, delay_s: float = 0.0) -> int:
    """How many people fit in a room (answers after ``delay_s``)."""
    await asyncio.sleep(delay_s)
    if room not in SIZES:
        raise KeyError(f"no room named {room!r}; the rooms are {', '.join(SIZES)}")
    return SIZES[room]


def order_lunch(people: int) -> str:
    """Order lunch (nobody declared what it does: it is taken as irreversible)."""
    return f"lunch for {people}"


ROOMS = FunctionToolset([book_room, room_size, order_lunch])
TOOLS = as_agenttx_tools(
    ROOMS,
    effects={"book_room": "compensatable", "room_size": "read"},
    undo={"book_room": cancel_room},
)


def close_account(account: str) -> None:
    """Close an account (the provider refuses beyond repair: the transaction is aborted)."""
    raise agenttx.FatalToolError(f"the provider closed account {account} already")


ABORTING_TOOLS = as_agenttx_tools([close_account], effects={"close_account": "irreversible"})

# ---------------------------------------------------------------------- the scripted model

Plan = Callable[[list[ModelMessage]], ModelResponse]


class ScriptedModel:
    """A ``FunctionModel`` answering from ``plan``, a function of the messages it was sent, so
    a scripted agent can read a tool's answer (the hint, the step to resume at) and answer from
    it as a real model would. ``instructions`` is what each turn was told besides them,
    ``tools`` the tools it was offered."""

    def __init__(self, plan: Plan) -> None:
        self.instructions: list[str] = []
        self.tools: list[list[ToolDefinition]] = []

        def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            self.instructions.append(info.instructions or "")
            self.tools.append(list(info.function_tools))
            return plan(messages)

        self.model = FunctionModel(answer)

    def agent(self, toolset: AbstractToolset[Any], *, approval: bool = False) -> Agent[None, Any]:
        output: Any = [str, DeferredToolRequests] if approval else str
        return Agent(self.model, toolsets=[toolset], output_type=output)


def calls(*made: tuple[str, str, dict[str, Any]]) -> ModelResponse:
    """A response of tool calls: (tool name, call id, arguments) each."""
    return ModelResponse(parts=[ToolCallPart(name, args, call_id) for name, call_id, args in made])


def text(said: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(said)])


def answers(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    """The answers to the model's last calls (the parts of the last request)."""
    last = messages[-1]
    if not isinstance(last, ModelRequest):
        return []
    return [p for p in last.parts if isinstance(p, ToolReturnPart)]


def turns(messages: list[ModelMessage]) -> int:
    """How many times the model answered before."""
    return sum(isinstance(m, ModelResponse) for m in messages)
