"""The calls of one model message become steps in the message's order however a framework
schedules them: started as concurrent tasks in any order, each waits for the calls before it;
after one rewinds the transaction the rest are not sent; a call that never comes is named
instead of holding the others for ever. Through the core, and LangGraph's own ``ToolNode``
with ``awrap_tool_call=tx.ordered_calls``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.prebuilt import ToolNode

import agenttx
import scenarios
from agenttx import FailedPrecondition
from agenttx.integrations import AgentTransaction
from agenttx.integrations import langgraph as lgx
from lg_tools import TOOLS
from scripted_model import ScriptedAgent, calling, graph

pytestmark = pytest.mark.stores("sqlite")
OpenEngine = Callable[..., Awaitable[agenttx.Engine]]


async def test_calls_started_in_reverse_are_sent_in_the_messages_order(
    engine: agenttx.Engine,
) -> None:
    async with AgentTransaction(engine, agent_id="order") as tx:
        tx.expect(["c1", "c2", "c3"])
        outcomes = await asyncio.gather(
            *(
                tx.call("kv.put", {"key": f"k{n}", "value": n}, call_id=f"c{n}")
                for n in (3, 2, 1)  # the scheduler starts the last call first
            )
        )
        assert all(o.ok for o in outcomes)
    info = await engine.get_transaction(tx.transaction_id)
    assert [(s.step_id, s.arguments["key"]) for s in info.steps] == [
        (1, "k1"),
        (2, "k2"),
        (3, "k3"),
    ]


async def test_after_a_call_rewinds_the_rest_of_its_message_is_not_sent(
    engine: agenttx.Engine,
) -> None:
    async with AgentTransaction(engine, agent_id="order") as tx:
        tx.expect(["a", "b", "c"])
        a, b, c = await asyncio.gather(
            tx.call("kv.put", {"key": "x", "value": 1}, call_id="a"),
            tx.call("kv.get", {"key": "missing"}, call_id="b"),
            tx.call("kv.put", {"key": "y", "value": 2}, call_id="c"),
        )
        assert a.ok
        assert b.failure is not None
        assert b.failure.step_id == 2
        assert c.failure is not None
        assert c.result is None  # never sent
        assert c.failure.after == ("kv.get", 2)
        tx.expect(["d"])  # the next message goes on as usual
        d = await tx.call("kv.put", {"key": "y", "value": 2}, call_id="d")
        assert d.ok
    assert tx.result is not None
    assert tx.result.steps_committed == 2


async def test_a_call_that_never_comes_is_named_instead_of_holding_the_rest(
    engine: agenttx.Engine,
) -> None:
    async with AgentTransaction(engine, agent_id="order") as tx:
        tx.order.arrival_s = 0.1
        tx.expect(["first", "second"])
        with pytest.raises(FailedPrecondition, match=r"waited 0\.1 s for first of the same"):
            await tx.call("kv.put", {"key": "k", "value": 1}, call_id="second")
        tx.expect(["third", "fourth"])
        await tx.order.skip("third")  # the framework will not run it
        assert (await tx.call("kv.put", {"key": "k", "value": 1}, call_id="fourth")).ok


def plan(messages: list[Any]) -> AIMessage:
    if isinstance(messages[-1], ToolMessage):
        return AIMessage("Done.")
    return calling(scenarios.sizing())


async def test_langgraphs_tool_node_with_ordered_calls_keeps_the_message_rule(
    open_engine: OpenEngine,
) -> None:
    engine = await open_engine(tools=TOOLS)
    async with lgx.transaction(engine, agent_id="plain") as tx:
        node = ToolNode(await tx.tools(), awrap_tool_call=tx.ordered_calls)
        out = await graph(ScriptedAgent(tx, plan), node).ainvoke({"messages": [HumanMessage("")]})
    answers = {m.tool_call_id: m for m in out["messages"] if isinstance(m, ToolMessage)}
    assert [answers[c].status for c in "abc"] == ["success", "error", "error"]
    assert str(answers["c"].content).startswith("AgentTx: not run.")
    info = await engine.get_transaction(tx.transaction_id)
    assert [(s.step_id, s.tool_name) for s in info.steps] == [(1, "room_size"), (2, "kv.get")]
