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

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver

import agenttx
from agenttx import ApprovalRequired, FailedPrecondition, StepsNotRedone, TxStatus
from agenttx.integrations import PROVIDER_NAME, StepsOwed
from agenttx.integrations import langgraph as lgx
from agenttx.service import TransactionService
from lg_tools import TOOLS, book_room, cancel_room, journal
from scripted_model import ScriptedAgent, call, graph, tool_results

if TYPE_CHECKING:
    from served_engine import Served

pytest_plugins = ["served_engine"]
pytestmark = pytest.mark.stores("sqlite")


@pytest.fixture(params=["embedded", "remote"])
async def service(
    request: pytest.FixtureRequest,
    open_engine: Callable[..., Awaitable[agenttx.Engine]],
    serve: Callable[..., Awaitable[Served]],
) -> AsyncIterator[TransactionService]:
    """The engine itself, or the async client of a server in front of it: both load TOOLS."""
    if request.param == "embedded":
        yield await open_engine(tools=TOOLS)
    else:
        yield (await serve(tools=TOOLS)).client


async def committed_value(service: TransactionService, key: str) -> Any:
    """``key``'s committed value, as another agent reads it."""
    r = await service.begin(agent_id="reader")
    step = await service.execute_step(r.transaction_id, 1, "kv.get", {"key": key})
    await service.rollback(r.transaction_id)
    return step.output["value"] if step.output else None


# ------------------------------------------------------------------ a foreign-key failure


def fk_plan(messages: list[BaseMessage]) -> AIMessage:
    """Insert customer c-1, remember the customer id, write a draft named after it, insert an
    invoice for it. The first time it remembers c-404; told by the hint that c-404 is not a
    customer, it sends the steps the rewind undid again with c-1."""
    results = tool_results(messages)
    if not any(isinstance(m, ToolMessage) for m in messages):
        customer = "c-404"
        calls = [call("record--insert", "c1", table="customers", id="c-1")]
    elif any(r.status == "error" for r in results):
        [failed] = [r for r in results if r.status == "error"]
        text = str(failed.content)
        assert "resumes at step 2" in text
        wrong = re.search(r"customer '([\w-]+)' is not in customers", text)
        assert wrong is not None, text
        assert wrong[1] == "c-404"
        customer = "c-1"  # the customer step 1 inserted, instead of the one the hint names
        calls = []
    else:
        return AIMessage("The invoice is in.")
    calls += [
        call("kv--put", "c2", key="session/customer", value=customer),
        call("fs--write", "c3", path="drafts/${steps.2.value}.json", contents="{}"),
        call(
            "record--insert",
            "c4",
            table="invoices",
            id="i-1",
            fields={"customer": "${steps.2.value}"},
            references={"customer": "customers"},
        ),
    ]
    return AIMessage("", tool_calls=calls)


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
    assert text.startswith("AgentTx: record--insert (step 4) failed and was rolled back")
    assert "Undone by this rewind: steps 2 (kv--put), 3 (fs--write)." in text
    assert "c-404" in text
    # The next turn carried the constraint in its system message.
    assert any("c-404" in str(m.content) for m in agent.sent[1][:1])
    assert tx.result is not None
    assert tx.result.committed
    assert tx.result.steps_committed == 4
    assert tx.status is TxStatus.COMMITTED
    assert await committed_value(service, "session/customer") == "c-1"
    info = await service.get_transaction(tx.transaction_id)
    assert [s.tool_name for s in info.steps if s.live] == [
        "record.insert",
        "kv.put",
        "fs.write",
        "record.insert",
    ]


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
    """Three calls in one message, the first slow and the second failing; then the call the
    failure left out, alone."""
    turns = sum(isinstance(m, AIMessage) for m in messages)
    if turns == 0:
        return AIMessage(
            "",
            tool_calls=[
                call("room_size", "a", room="red", delay_s=0.05),
                call("kv--get", "b", key="no-such-key"),
                call("kv--put", "c", key="size", value="${steps.1}"),
            ],
        )
    if turns == 1:
        return AIMessage("", tool_calls=[call("kv--put", "d", key="size", value="${steps.1}")])
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
    assert "AgentTx: kv--get (step 2) failed" in str(first[1].content)
    assert "resumes at step 2" in str(first[1].content)
    assert str(first[2].content).startswith(
        "AgentTx: not run. An earlier call of the same message, kv--get (step 2), failed"
    )
    info = await service.get_transaction(tx.transaction_id)
    attempts = [(s.step_id, s.tool_name, str(s.status)) for s in info.steps]
    # The slow first call is step 1 all the same; the call after the failure was not sent.
    assert attempts == [
        (1, "room_size", "SUCCESS"),
        (2, "kv.get", "FAILED"),
        (2, "kv.put", "SUCCESS"),
    ]
    assert tx.result is not None
    assert tx.result.steps_committed == 2
    assert await committed_value(service, "size") == 12


# ------------------------------------------------------------------ a block that raises


def booking_plan(log: str) -> Callable[[list[BaseMessage]], AIMessage]:
    def plan(messages: list[BaseMessage]) -> AIMessage:
        if any(isinstance(m, ToolMessage) for m in messages):
            return AIMessage("Both rooms are booked.")
        return AIMessage(
            "",
            tool_calls=[
                call("book_room", "b1", room="blue", log=log),
                call("book_room", "b2", room="red", log=log),
            ],
        )

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
    assert journal(log)[2:] == [("cancel", "red"), ("cancel", "blue")]
    assert tx.status is TxStatus.ROLLED_BACK
    assert tx.result is None
    info = await service.get_transaction(tx.transaction_id)
    assert info.status is TxStatus.ROLLED_BACK


async def test_a_framework_tool_the_service_has_not_loaded_is_refused_at_wrap_time(
    service: TransactionService,
) -> None:
    tx = lgx.transaction(service, agent_id="rooms")

    async def run() -> None:
        async with tx:
            await tx.tools([cancel_room])

    with pytest.raises(FailedPrecondition) as refused:
        await run()
    text = str(refused.value)
    assert "tool 'cancel_room' is not loaded on the server" in text
    assert "as_agenttx_tools" in text
    assert "--tools module:attr" in text
    assert tx.status is TxStatus.ROLLED_BACK


# ------------------------------------------------------------------ owed steps


def forgetful_plan(messages: list[BaseMessage]) -> AIMessage:
    """Puts two keys, then a read that fails and rewinds both (the read names the second
    key's value), then gives up without sending the undone steps again."""
    if any(isinstance(m, ToolMessage) for m in messages):
        return AIMessage("I give up.")
    return AIMessage(
        "",
        tool_calls=[
            call("kv--put", "p1", key="a", value="nope"),
            call("kv--get", "g1", key="${steps.1.value}"),
        ],
    )


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
    assert owed.value.steps == {1: "kv.put"}
    assert "step 1 (kv.put)" in str(owed.value)
    assert tx.status is TxStatus.ROLLED_BACK
    assert await committed_value(service, "a") is None


# ------------------------------------------------------------------ approval


def pricing_plan(messages: list[BaseMessage]) -> AIMessage:
    """Sets a price of 100; told by a refusal that the limit is 50, sets 50."""
    last = messages[-1]
    if isinstance(last, HumanMessage) and "refused" in str(last.content):
        limit = re.search(r"the limit is (\d+)", str(last.content))
        assert limit is not None
        return AIMessage("", tool_calls=[call("kv--put", "p2", key="price", value=int(limit[1]))])
    if isinstance(last, ToolMessage):
        return AIMessage("The price is set.")
    return AIMessage("", tool_calls=[call("kv--put", "p1", key="price", value=100)])


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
    assert tx.result is not None
    assert tx.result.committed
    assert await committed_value(service, "price") == 100
    info = await service.get_transaction(tx.transaction_id)
    assert info.receipts[0].status == "approved"
    assert info.receipts[0].receipt_id == shown["receipt_id"]


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
    assert [r.reason for r in tx.refusals] == ["the limit is 50, not 100"]
    assert tx.result is not None
    assert tx.result.committed
    assert await committed_value(service, "price") == 50


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
    assert tx.status is TxStatus.ROLLED_BACK
    assert await committed_value(service, "price") is None
