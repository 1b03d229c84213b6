"""The scripted model that drives a pydantic-ai agent in the tests: pydantic-ai's own
``FunctionModel``, no network; and the helpers that write its responses and read its answers."""

from __future__ import annotations

from collections.abc import Callable
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
from pydantic_ai.toolsets import AbstractToolset

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
