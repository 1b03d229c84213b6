"""Agents SDK function tools on the engine's side (``as_agenttx_tools``): what each becomes,
the effect of one nobody declared, the declarations refused; a tool that aborts the
transaction; a function tool's own ``needs_approval`` kept by its wrapped twin; the approval
tool outside approval mode. The public surface of the module is exactly what docs name."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from agents import (
    Agent,
    RunConfig,
    Runner,
    ToolCallOutputItem,
    set_trace_processors,
    set_tracing_disabled,
)
from agents.exceptions import UserError
from agents.run_config import CallModelData, ModelInputData
from agents.tracing import FunctionSpanData, Span, Trace, TracingProcessor

import agenttx
import scenarios
from agenttx import FailedPrecondition, InvalidArgument, TransactionAborted, TxStatus
from agenttx.integrations import openai_agents as oax
from oa_model import ScriptedModel, Sent, call, raw_call, say
from oa_tools import ABORTING_TOOLS, APPROVED_TOOLS, TOOLS, book_room, cancel_room, order_lunch
from oa_tools import room_size as room_size_tool

pytestmark = pytest.mark.stores("sqlite")
OpenEngine = Callable[..., Awaitable[agenttx.Engine]]

set_tracing_disabled(True)  # the SDK would export traces to OpenAI; never in tests


def test_a_function_tool_becomes_an_agenttx_tool_of_its_name_schema_and_effect() -> None:
    described = {t.name: t.describe() for t in [*TOOLS, *APPROVED_TOOLS]}
    scenarios.check_described(described)
    assert oax.DEFAULT_EFFECT == "irreversible"
    assert described["room_size"]["input_schema"]["type"] == "object"


@pytest.mark.parametrize(
    ("kwargs", "words"),
    scenarios.refused_declarations(cancel_room, "an Agents SDK function tool", ["state", "staged"]),
)
def test_a_declaration_that_cannot_hold_is_refused_when_the_tools_are_made(
    kwargs: dict[str, Any], words: str
) -> None:
    with pytest.raises(InvalidArgument, match=words):
        oax.as_agenttx_tools([book_room], **kwargs)


def test_two_tools_of_one_name_and_a_plain_function_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="two tools are named 'room_size'"):
        oax.as_agenttx_tools([room_size_tool, room_size_tool])
    with pytest.raises(InvalidArgument, match="is not an Agents SDK function tool"):
        oax.as_agenttx_tools([len])  # type: ignore[list-item]


async def test_a_tool_that_aborts_the_transaction_raises_out_of_the_run(
    open_engine: OpenEngine,
) -> None:
    engine = await open_engine(tools=ABORTING_TOOLS)

    def plan(sent: Sent) -> list[Any]:
        return [call("close_account", "x1", account="acme")]

    tx = oax.transaction(engine, agent_id="closer")

    async def run() -> None:
        async with tx:
            closer = Agent(name="closer", model=ScriptedModel(plan), tools=await tx.tools())
            await Runner.run(closer, "Close acme.", run_config=tx.run_config())

    with pytest.raises(UserError) as failed:  # the SDK's wrapper of a tool's exception
        await run()
    aborted = failed.value.__cause__
    assert isinstance(aborted, TransactionAborted)
    assert "the provider closed account acme already" in str(aborted)
    assert tx.status is TxStatus.FAILED
    assert tx.result is None


async def test_a_function_tools_own_approval_policy_is_kept_by_its_wrapped_twin(
    open_engine: OpenEngine,
) -> None:
    engine = await open_engine(tools=APPROVED_TOOLS)

    def plan(sent: Sent) -> list[Any]:
        if sent.outputs():
            return [say("Lunch is ordered.")]
        return [call("order_lunch", "l1", people=6)]

    async with oax.transaction(engine, agent_id="lunch") as tx:
        [wrapped] = await tx.tools([order_lunch])
        assert wrapped.needs_approval is True
        luncher = Agent(name="lunch", model=ScriptedModel(plan), tools=[wrapped])
        result = await Runner.run(luncher, "Order lunch.", run_config=tx.run_config())
        [waiting] = result.interruptions
        assert waiting.tool_name == "order_lunch"
        assert tx.next_step_id == 1  # nothing was sent before the person decided
        state = result.to_state()
        state.approve(waiting)
        result = await Runner.run(luncher, state, run_config=tx.run_config())
        assert result.final_output == "Lunch is ordered."
    assert tx.result is not None
    assert tx.result.steps_committed == 1


async def test_the_approval_tool_outside_approval_mode_answers_at_once(
    open_engine: OpenEngine,
) -> None:
    engine = await open_engine(tools=TOOLS)

    def plan(sent: Sent) -> list[Any]:
        if sent.outputs():
            return [say("Done.")]
        return [call("kv--put", "p1", key="a", value=1), call("commit_changes", "ask1")]

    async with oax.transaction(engine, agent_id="plain") as tx:
        done = Agent(
            name="plain", model=ScriptedModel(plan), tools=[*await tx.tools(), tx.approval_tool()]
        )
        result = await Runner.run(done, "Put a.", run_config=tx.run_config())
        assert result.interruptions == []
    assert tx.result is not None
    assert tx.result.steps_committed == 1


async def test_arguments_that_are_not_a_json_object_are_told_and_nothing_is_sent(
    open_engine: OpenEngine,
) -> None:
    engine = await open_engine(tools=TOOLS)

    def plan(sent: Sent) -> list[Any]:
        if sent.outputs():
            return [say("Sorry.")]
        return [raw_call("kv--put", "x", "{oops"), raw_call("kv--put", "y", "[1]")]

    async with oax.transaction(engine, agent_id="sloppy") as tx:
        sloppy = Agent(name="sloppy", model=ScriptedModel(plan), tools=await tx.tools())
        result = await Runner.run(sloppy, "Put it.", run_config=tx.run_config())
        assert tx.next_step_id == 1
    told = [str(i.output) for i in result.new_items if isinstance(i, ToolCallOutputItem)]
    assert len(told) == 2
    for text in told:
        assert text.startswith("AgentTx: the arguments of kv--put are not a JSON object")
        assert "nothing was sent" in text


async def test_an_approval_given_to_the_sdk_alone_fails_the_run_and_rolls_back(
    open_engine: OpenEngine,
) -> None:
    engine = await open_engine(tools=TOOLS)

    def plan(sent: Sent) -> list[Any]:
        if sent.outputs():
            return [call("commit_changes", "ask1")]
        return [call("kv--put", "p1", key="price", value=100)]

    tx = oax.transaction(engine, agent_id="pricer", principal="agent-7", mode="approval_required")

    async def run() -> None:
        async with tx:
            pricer = Agent(
                name="pricer",
                model=ScriptedModel(plan),
                tools=[*await tx.tools(), tx.approval_tool()],
            )
            result = await Runner.run(pricer, "Set the price.", run_config=tx.run_config())
            state = result.to_state()
            state.approve(result.interruptions[0])  # the SDK's approval, not AgentTx's
            await Runner.run(pricer, state, run_config=tx.run_config())

    with pytest.raises(UserError) as failed:
        await run()
    assert isinstance(failed.value.__cause__, FailedPrecondition)
    assert "tx.approve(result, principal)" in str(failed.value)
    assert tx.status is TxStatus.ROLLED_BACK


async def test_the_callers_own_model_input_filter_runs_first_and_the_constraints_after(
    open_engine: OpenEngine,
) -> None:
    engine = await open_engine(tools=TOOLS)

    def plan(sent: Sent) -> list[Any]:
        if sent.outputs():
            return [say("No green room.")]
        return [call("room_size", "g", room="green", delay_s=0.0)]

    def house_rules(data: CallModelData[Any]) -> ModelInputData:
        given = data.model_data
        return ModelInputData(input=given.input, instructions=f"{given.instructions} Be brief.")

    model = ScriptedModel(plan)
    async with oax.transaction(engine, agent_id="rooms") as tx:
        rooms = Agent(name="rooms", instructions="Rooms.", model=model, tools=await tx.tools())
        config = tx.run_config(tx.run_config(RunConfig(call_model_input_filter=house_rules)))
        await Runner.run(rooms, "Green?", run_config=config)
    assert model.sent[0].instructions == "Rooms. Be brief."
    second = model.sent[1].instructions
    assert second.startswith("Rooms. Be brief.\n\nConstraints learned from failed steps")
    assert second.count("Be brief.") == 1  # a run_config of a run_config filters once
    assert "no room named 'green'" in second


class Spans(TracingProcessor):
    """Keeps every finished span in memory: tracing on, nothing exported."""

    def __init__(self) -> None:
        self.ended: list[Span[Any]] = []

    def on_trace_start(self, trace: Trace) -> None:
        pass

    def on_trace_end(self, trace: Trace) -> None:
        pass

    def on_span_start(self, span: Span[Any]) -> None:
        pass

    def on_span_end(self, span: Span[Any]) -> None:
        self.ended.append(span)

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


@pytest.fixture
def spans() -> Iterator[Spans]:
    kept = Spans()
    set_trace_processors([kept])  # in place of the exporter to OpenAI
    set_tracing_disabled(False)
    yield kept
    set_tracing_disabled(True)
    set_trace_processors([])


async def test_a_rewound_call_is_an_error_on_its_trace_span(
    open_engine: OpenEngine, spans: Spans
) -> None:
    engine = await open_engine(tools=TOOLS)

    def plan(sent: Sent) -> list[Any]:
        if sent.outputs():
            return [say("No green room.")]
        return [call("room_size", "g", room="green", delay_s=0.0), call("kv--put", "p", key="a")]

    async with oax.transaction(engine, agent_id="rooms") as tx:
        rooms = Agent(name="rooms", model=ScriptedModel(plan), tools=await tx.tools())
        await Runner.run(rooms, "Green?", run_config=tx.run_config())
    functions = [s for s in spans.ended if isinstance(s.span_data, FunctionSpanData)]
    assert [(s.span_data.name, s.error and s.error["message"]) for s in functions] == [
        ("room_size", "AgentTx step rewound"),
        ("kv--put", "AgentTx call not sent"),
    ]
    assert functions[0].error is not None
    assert functions[0].error["data"] == {"tool_name": "room_size", "step_id": 1, "resume_at": 1}


def test_the_public_surface_is_exactly_these() -> None:
    assert oax.__all__ == [
        "APPROVAL_TOOL",
        "DEFAULT_EFFECT",
        "OpenAIAgentsTransaction",
        "StepRewound",
        "as_agenttx_tools",
        "transaction",
    ]
