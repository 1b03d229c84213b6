"""LangChain tools on the engine's side (``as_agenttx_tools``): what each becomes, the effect
of one nobody declared, the declarations refused; and the wrapped tools in LangGraph's own
``ToolNode``. The public surface of the integration modules is exactly what docs name."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.prebuilt import ToolNode

import agenttx
import agenttx.integrations
import scenarios
from agenttx import InvalidArgument, TransactionAborted, TxStatus
from agenttx.integrations import langgraph as lgx
from lg_tools import ABORTING_TOOLS, TOOLS, book_room, cancel_room, room_size
from scripted_model import ScriptedAgent, call, graph

pytestmark = pytest.mark.stores("sqlite")
OpenEngine = Callable[..., Awaitable[agenttx.Engine]]


def test_a_langchain_tool_becomes_an_agenttx_tool_of_its_name_schema_and_effect() -> None:
    described = {t.name: t.describe() for t in TOOLS}
    scenarios.check_described(described)
    assert lgx.DEFAULT_EFFECT == "irreversible"
    schema = described["room_size"]["input_schema"]
    assert schema["type"] == "object"
    assert schema["required"] == ["room"]


@pytest.mark.parametrize(
    ("kwargs", "words"),
    scenarios.refused_declarations(cancel_room, "a LangChain tool", ["state", "staged"]),
)
def test_a_declaration_that_cannot_hold_is_refused_when_the_tools_are_made(
    kwargs: dict[str, Any], words: str
) -> None:
    with pytest.raises(InvalidArgument, match=words):
        lgx.as_agenttx_tools([book_room], **kwargs)


def test_two_tools_of_one_name_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="two tools are named 'room_size'"):
        lgx.as_agenttx_tools([room_size, room_size])


async def test_a_tool_that_aborts_the_transaction_raises_out_of_the_graph(
    open_engine: OpenEngine,
) -> None:
    engine = await open_engine(tools=ABORTING_TOOLS)

    def plan(messages: list[Any]) -> AIMessage:
        return AIMessage("", tool_calls=[call("close_account", "x1", account="acme")])

    tx = lgx.transaction(engine, agent_id="closer")

    async def run() -> None:
        async with tx:
            node = await tx.tool_node(await tx.tools())
            await graph(ScriptedAgent(tx, plan), node).ainvoke({"messages": [HumanMessage("")]})

    with pytest.raises(TransactionAborted) as aborted:
        await run()
    assert "the provider closed account acme already" in str(aborted.value)
    assert tx.status is TxStatus.FAILED
    assert tx.result is None


async def test_the_wrapped_tools_work_in_langgraphs_own_tool_node(open_engine: OpenEngine) -> None:
    engine = await open_engine(tools=TOOLS)

    def plan(messages: list[Any]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage("Done.")
        return AIMessage(
            "",
            tool_calls=[
                call("kv--put", "p1", key="a", value=1),
                call("room_size", "s1", room="blue"),
            ],
        )

    async with lgx.transaction(engine, agent_id="plain") as tx:
        g = graph(ScriptedAgent(tx, plan), ToolNode(await tx.tools()))
        out = await g.ainvoke({"messages": [HumanMessage("")]})
        answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
        assert [m.status for m in answers] == ["success", "success"]
        assert tx.next_step_id == 3  # each call one step, never two on one step id
    assert tx.result is not None
    assert tx.result.steps_committed == 2


def test_the_public_surface_is_exactly_these() -> None:
    assert set(agenttx.integrations.__all__) == {
        "APPROVER",
        "PROVIDER_NAME",
        "AgentTransaction",
        "CallOutcome",
        "FailedCall",
        "NameCollision",
        "StepsOwed",
        "ToolNames",
        "ToolSpec",
        "constraints_prompt",
        "provider_name",
        "tool_name",
    }
    assert lgx.__all__ == [
        "DEFAULT_EFFECT",
        "LangGraphTransaction",
        "TransactionToolNode",
        "approve",
        "as_agenttx_tools",
        "refuse",
        "transaction",
    ]
