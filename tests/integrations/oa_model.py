"""A scripted Agents SDK model for the OpenAI Agents tests: a ``Model`` of our own.

What it answers comes from ``plan``, a function of what it was sent (the transcript and the
instructions), so a scripted agent can read a tool-error output (the hint, the step to resume
at) or a refusal and answer from it, as a real model would. No network, no API key."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents import Model, ModelResponse, Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

if TYPE_CHECKING:
    from scenarios import Call


@dataclass(frozen=True)
class Sent:
    """One model call: the instructions and the input items, as plain dicts."""

    instructions: str
    items: list[dict[str, Any]]

    def outputs(self) -> dict[str, str]:
        """The tool outputs after the model's last response, by call id, in order."""
        out: dict[str, str] = {}
        for item in reversed(self.items):
            if item.get("type") != "function_call_output":
                if out:
                    break
                continue
            out[str(item["call_id"])] = str(item["output"])
        return dict(reversed(out.items()))


Plan = Callable[[Sent], list[Any]]


def call(name: str, call_id: str, **args: Any) -> ResponseFunctionToolCall:
    return raw_call(name, call_id, json.dumps(args))


def raw_call(name: str, call_id: str, arguments: str) -> ResponseFunctionToolCall:
    """A function call whose arguments are this text, JSON or not (as a model may send)."""
    return ResponseFunctionToolCall(
        type="function_call",
        id=f"fc_{call_id}",
        call_id=call_id,
        name=name,
        arguments=arguments,
        status="completed",
    )


def say(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        type="message",
        id="msg_final",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def _plain(item: Any) -> dict[str, Any]:
    if isinstance(item, dict):
        return item
    dumped: dict[str, Any] = item.model_dump(exclude_unset=True)
    return dumped


class ScriptedModel(Model):
    """Answers each call with ``plan(Sent(...))``; keeps what it was sent, call by call."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.sent: list[Sent] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else input
        sent = Sent(system_instructions or "", [_plain(i) for i in items])
        self.sent.append(sent)
        return ModelResponse(output=self.plan(sent), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the scripted model answers Runner.run, not run_streamed")


def calling(made: Sequence[Call]) -> list[Any]:
    """The model's function calls of these (a scenario's, ``scenarios.Call`` each)."""
    return [call(name, call_id, **args) for name, call_id, args in made]
