"""A LangGraph run is one AgentTx transaction, against an embedded engine and against a real
gRPC server through the async client (the same test code, ``service``).

A scripted LangChain chat model drives a graph of agent → ``tx.tool_node()`` → agent: a
foreign-key failure rewinds to its root cause and the model fixes the value from the hint; a
message's parallel calls are steps in the message's order, one failing; a block that raises
rolls back and runs the framework tools' undos; a commit that needs approval waits in
LangGraph's ``interrupt`` and is approved, or refused with a reason the model reads. The store
is not what these test, so SQLite only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver

import lg_tools
import scenarios
from agenttx import ApprovalRequired, FailedPrecondition, StepsNotRedone
from agenttx.integrations import PROVIDER_NAME, StepsOwed
from agenttx.integrations import langgraph as lgx
from agenttx.service import TransactionService
from lg_tools import book_room, cancel_room
from scenario_tools import journal
from scripted_model import ScriptedAgent, calling, graph, tool_results

pytest_plugins = ["framework_service"]
pytestmark = pytest.mark.stores("sqlite")


@pytest.fixture(scope="module")
def framework_tools() -> ModuleType:
    return lg_tools


# ------------------------------------------------------------------ a foreign-key failure


def fk_plan(messages: list[BaseMessage]) -> AIMessage:
    """``scenarios.invoicing``, reading the hint from the failed call's result."""
    failed = [r for r in tool_results(messages) if r.status == "error"]
    if not any(isinstance(m, ToolMessage) for m in messages):
        return calling(scenarios.invoicing(None))
    if failed:
        [hint] = failed
        return calling(scenarios.invoicing(str(hint.content)))
    return AIMessage("The invoice is in.")


async def test_a_foreign_key_failure_rewinds_to_its_cause_and_the_fixed_redo_commits(
    service: TransactionService,
) -> None:
    async with lgx.transaction(service, agent_id="billing") as tx:
        tools = await tx.tools()
        agent = ScriptedAgent(tx, fk_plan)
        out = await graph(agent, await tx.tool_node(tools)).ainvoke(
            {"messages": [HumanMessage("Invoice customer c-1.")]}
        )
    failed = [m for m in out["messages"] if isinstance(m, ToolMessage) and m.status == "error"]
    assert len(failed) == 1
    text = str(failed[0].content)
    scenarios.check_the_invoice_failure(text)
    assert "c-404" in text
    # The next turn carried the constraint in its system message.
    assert any("c-404" in str(m.content) for m in agent.sent[1][:1])
    await scenarios.check_invoiced(service, tx)


async def test_the_tools_reach_the_model_under_names_providers_accept(
    service: TransactionService,
) -> None:
    async with lgx.transaction(service, agent_id="names") as tx:
        tools = await tx.tools()
    names = {convert_to_openai_tool(t)["function"]["name"] for t in tools}
    assert {"kv--put", "record--insert", "book_room", "room_size"} <= names
    assert all(PROVIDER_NAME.match(n) for n in names)
    schema = next(convert_to_openai_tool(t) for t in tools if t.name == "book_room")
    assert set(schema["function"]["parameters"]["properties"]) == {"room", "log"}


# ------------------------------------------------------------------ parallel calls


def parallel_plan(messages: list[BaseMessage]) -> AIMessage:
    """``scenarios.sizing``; then the call the failure left out, alone."""
    turns = sum(isinstance(m, AIMessage) for m in messages)
    if turns == 0:
        return calling(scenarios.sizing())
    if turns == 1:
        return calling(scenarios.SIZING_AGAIN)
    return AIMessage("Red fits 12.")


async def test_a_messages_parallel_calls_are_steps_in_the_messages_order(
    service: TransactionService,
) -> None:
    async with lgx.transaction(service, agent_id="rooms") as tx:
        agent = ScriptedAgent(tx, parallel_plan)
        out = await graph(agent, await tx.tool_node(await tx.tools())).ainvoke(
            {"messages": [HumanMessage("How big is the red room?")]}
        )
    first = [m for m in out["messages"] if isinstance(m, ToolMessage)][:3]
    assert [(m.tool_call_id, m.status) for m in first] == [
        ("a", "success"),
        ("b", "error"),
        ("c", "error"),
    ]
    assert first[0].content == "12"
    assert first[0].artifact == 12
    scenarios.check_the_failed_and_the_unsent(str(first[1].content), [str(first[2].content)])
    # The slow first call is step 1 all the same; the call after the failure was not sent.
    await scenarios.check_sized(service, tx)


# ------------------------------------------------------------------ a block that raises


def booking_plan(log: str) -> Callable[[list[BaseMessage]], AIMessage]:
    def plan(messages: list[BaseMessage]) -> AIMessage:
        if any(isinstance(m, ToolMessage) for m in messages):
            return AIMessage("Both rooms are booked.")
        return calling(scenarios.booking(log))

    return plan


async def test_a_block_that_raises_rolls_back_and_the_undos_run_newest_first(
    service: TransactionService, tmp_path: Path
) -> None:
    log = str(tmp_path / "rooms.jsonl")
    tx = lgx.transaction(service, agent_id="rooms")

    async def run() -> None:
        async with tx:
            agent = ScriptedAgent(tx, booking_plan(log))
            await graph(agent, await tx.tool_node([book_room])).ainvoke(
                {"messages": [HumanMessage("Book blue and red.")]}
            )
            assert journal(log) == [("book", "blue"), ("book", "red")]
            raise RuntimeError("the user changed their mind")

    with pytest.raises(RuntimeError, match="the user changed their mind"):
        await run()
    await scenarios.check_rolled_back_newest_first(service, tx, log)


async def test_a_framework_tool_the_service_has_not_loaded_is_refused_at_wrap_time(
    service: TransactionService,
) -> None:
    tx = lgx.transaction(service, agent_id="rooms")

    async def run() -> None:
        async with tx:
            await tx.tools([cancel_room])

    with pytest.raises(FailedPrecondition) as refused:
        await run()
    scenarios.check_refused_as_not_loaded(refused.value, tx)
    assert "--tools module:attr" in str(refused.value)


# ------------------------------------------------------------------ owed steps


def forgetful_plan(messages: list[BaseMessage]) -> AIMessage:
    """``scenarios.FORGETTING``, then gives up."""
    if any(isinstance(m, ToolMessage) for m in messages):
        return AIMessage("I give up.")
    return calling(scenarios.FORGETTING)


async def test_a_run_that_ends_owing_rewound_steps_rolls_back_and_names_them(
    service: TransactionService,
) -> None:
    tx = lgx.transaction(service, agent_id="forgetful")

    async def run() -> None:
        async with tx:
            agent = ScriptedAgent(tx, forgetful_plan)
            await graph(agent, await tx.tool_node(await tx.tools())).ainvoke(
                {"messages": [HumanMessage("Look it up.")]}
            )

    with pytest.raises(StepsOwed) as owed:
        await run()
    assert isinstance(owed.value, StepsNotRedone)  # the client helper's rule and error
    assert "step 1 (kv.put)" in str(owed.value)
    await scenarios.check_owed(service, tx, owed.value)


# ------------------------------------------------------------------ approval


def pricing_plan(messages: list[BaseMessage]) -> AIMessage:
    """Sets a price of 100; told by a refusal that the limit is 50, sets 50."""
    last = messages[-1]
    if isinstance(last, HumanMessage) and "refused" in str(last.content):
        return calling(scenarios.repricing(str(last.content)))
    if isinstance(last, ToolMessage):
        return AIMessage("The price is set.")
    return calling(scenarios.PRICING)


async def approval_graph(tx: lgx.LangGraphTransaction) -> tuple[Any, dict[str, Any]]:
    agent = ScriptedAgent(tx, pricing_plan)
    g = graph(
        agent,
        await tx.tool_node(await tx.tools()),
        tx.approval_node(agent="agent"),
        checkpointer=InMemorySaver(),
    )
    return g, {"configurable": {"thread_id": tx.transaction_id}}


async def test_an_approved_commit_commits_exactly_the_change_shown(
    service: TransactionService,
) -> None:
    async with lgx.transaction(
        service, agent_id="pricer", principal="agent-7", mode="approval_required"
    ) as tx:
        g, config = await approval_graph(tx)
        out = await g.ainvoke({"messages": [HumanMessage("Set the price.")]}, config)
        [asked] = out["__interrupt__"]
        shown = asked.value
        assert shown["agenttx"] == "approve_commit"
        assert shown["transaction_id"] == tx.transaction_id
        assert [c["key"] for c in shown["changes"]["state"]] == ["kv/price"]
        assert shown["changes"]["state"][0]["after"] == 100
        out = await g.ainvoke(lgx.approve("alice"), config)
        assert "__interrupt__" not in out
    await scenarios.check_approved(service, tx, shown["receipt_id"])


async def test_a_refused_commit_tells_the_model_why_and_its_change_is_approved_next(
    service: TransactionService,
) -> None:
    async with lgx.transaction(
        service, agent_id="pricer", principal="agent-7", mode="approval_required"
    ) as tx:
        g, config = await approval_graph(tx)
        out = await g.ainvoke({"messages": [HumanMessage("Set the price.")]}, config)
        first = out["__interrupt__"][0].value
        out = await g.ainvoke(lgx.refuse("alice", "the limit is 50, not 100"), config)
        second = out["__interrupt__"][0].value
        assert second["receipt_id"] != first["receipt_id"]
        assert second["changes"]["state"][0]["after"] == 50
        told = [m for m in out["messages"] if isinstance(m, HumanMessage)][-1]
        assert "refused by 'alice': the limit is 50, not 100" in str(told.content)
        await g.ainvoke(lgx.approve("alice"), config)
    await scenarios.check_approved_after_a_refusal(service, tx)


async def test_a_block_that_ends_while_the_commit_waits_for_approval_rolls_back(
    service: TransactionService,
) -> None:
    tx = lgx.transaction(service, agent_id="pricer", principal="agent-7", mode="approval_required")

    async def run() -> None:
        async with tx:
            g, config = await approval_graph(tx)
            await g.ainvoke({"messages": [HumanMessage("Set the price.")]}, config)

    with pytest.raises(ApprovalRequired):
        await run()
    await scenarios.check_rolled_back_unapproved(service, tx)
