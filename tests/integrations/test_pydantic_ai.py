"""A pydantic-ai agent's run is one AgentTx transaction, against an embedded engine and against
a real gRPC server through the async client (the same test code, ``service``).

pydantic-ai's ``FunctionModel`` (scripted, no network) drives an agent whose toolset is
``tx.toolset()``: a foreign-key failure rewinds to its root cause and the model fixes the value
from the hint (a ``ModelRetry`` answer); a response's parallel calls are steps in the
response's order, one failing; a block that raises rolls back and runs the tools' undos; a
commit that needs approval is a deferred tool call, approved, or refused with a reason the
model reads. The store is not what these test, so SQLite only.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fastmcp.client import Client
from fastmcp.client.transports import StdioTransport
from pydantic_ai import RunContext
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.tools import DeferredToolRequests
from pydantic_ai.toolsets import FunctionToolset

import agenttx
import agenttx.integrations
import pai_tools
import scenarios
from agenttx import (
    ApprovalRequired,
    FailedPrecondition,
    InvalidArgument,
    TransactionAborted,
    TxStatus,
)
from agenttx.integrations import PROVIDER_NAME, StepsOwed
from agenttx.integrations import pydantic_ai as pax
from agenttx.service import TransactionService
from gateway_servers import gateway_engine, write_gateway
from pai_model import ScriptedModel, answers, calls, text, turns
from pai_tools import ABORTING_TOOLS, ROOMS, TOOLS
from paths import TESTS
from scenario_tools import book_room, cancel_room, close_account, journal, room_size
from scenarios import committed_value, live_steps

pytest_plugins = ["framework_service"]
pytestmark = pytest.mark.stores("sqlite")
OpenEngine = Callable[..., Awaitable[agenttx.Engine]]


@pytest.fixture(scope="module")
def framework_tools() -> ModuleType:
    return pai_tools


# ------------------------------------------------------------------ a foreign-key failure


def fk_plan(messages: list[ModelMessage]) -> ModelResponse:
    """``scenarios.invoicing``, reading the hint from the retried call's answer."""
    retried = [a for a in answers(messages) if a.outcome == "retried"]
    if turns(messages) == 0:
        return calls(*scenarios.invoicing(None))
    if retried:
        [hint] = retried
        return calls(*scenarios.invoicing(str(hint.content)))
    return text("The invoice is in.")


async def test_a_foreign_key_failure_rewinds_to_its_cause_and_the_fixed_redo_commits(
    service: TransactionService,
) -> None:
    model = ScriptedModel(fk_plan)
    async with pax.transaction(service, agent_id="billing") as tx:
        run = await model.agent(tx.toolset()).run("Invoice customer c-1.")
    retried = [
        p
        for m in run.all_messages()
        for p in getattr(m, "parts", [])
        if getattr(p, "outcome", None) == "retried"
    ]
    assert len(retried) == 1
    scenarios.check_the_invoice_failure(str(retried[0].content))
    # The turn after the failure had the constraint in its instructions; the first had none.
    assert "c-404" not in model.instructions[0]
    assert "Constraints learned from failed steps" in model.instructions[1]
    assert "c-404" in model.instructions[1]
    assert run.output == "The invoice is in."
    await scenarios.check_invoiced(service, tx)


async def test_the_tools_reach_the_model_under_names_providers_accept(
    service: TransactionService,
) -> None:
    model = ScriptedModel(lambda messages: text("Nothing to do."))
    async with pax.transaction(service, agent_id="names") as tx:
        await model.agent(tx.toolset()).run("")
    [offered] = model.tools
    names = {t.name for t in offered}
    assert {"kv--put", "record--insert", "book_room", "room_size"} <= names
    assert all(PROVIDER_NAME.match(n) for n in names)
    assert all(t.sequential for t in offered)  # a response's calls one after another
    booking = next(t for t in offered if t.name == "book_room")
    assert set(booking.parameters_json_schema["properties"]) == {"room", "log"}
    assert booking.description == "Book a meeting room."


# ------------------------------------------------------------------ parallel calls


def parallel_plan(messages: list[ModelMessage]) -> ModelResponse:
    """``scenarios.sizing``; then the call the failure left out, alone."""
    if turns(messages) == 0:
        return calls(*scenarios.sizing())
    if turns(messages) == 1:
        return calls(*scenarios.SIZING_AGAIN)
    return text("Red fits 12.")


async def test_a_responses_parallel_calls_are_steps_in_the_responses_order(
    service: TransactionService,
) -> None:
    model = ScriptedModel(parallel_plan)
    async with pax.transaction(service, agent_id="rooms") as tx:
        run = await model.agent(tx.toolset()).run("How big is the red room?")
    first = answers(run.all_messages()[:3])
    assert [(a.tool_call_id, a.outcome) for a in first] == [
        ("a", "success"),
        ("b", "retried"),
        ("c", "failed"),  # not sent: ToolFailed, which spends none of the tool's retries
    ]
    assert first[0].content == 12
    scenarios.check_the_failed_and_the_unsent(str(first[1].content), [str(first[2].content)])
    # The slow first call is step 1 all the same; the call after the failure was not sent.
    await scenarios.check_sized(service, tx)


async def test_a_tool_failing_past_its_retries_ends_the_run_and_rolls_back(
    service: TransactionService,
) -> None:
    """A rewind is one of pydantic-ai's retries of the failing tool: past ``max_retries``
    failures in a row the run gives up, and so the block rolls back."""

    def plan(messages: list[ModelMessage]) -> ModelResponse:
        if turns(messages) == 0:
            return calls(("kv--put", "p", {"key": "a", "value": 1}))
        return calls(("kv--get", f"g{turns(messages)}", {"key": "no-such-key"}))

    tx = pax.transaction(service, agent_id="stubborn")

    async def run() -> None:
        async with tx:
            await ScriptedModel(plan).agent(tx.toolset(max_retries=2)).run("")

    with pytest.raises(UnexpectedModelBehavior, match="exceeded max retries count of 2"):
        await run()
    assert tx.status is TxStatus.ROLLED_BACK
    assert await committed_value(service, "a") is None


# ------------------------------------------------------------------ a block that raises


def booking_plan(log: str) -> Callable[[list[ModelMessage]], ModelResponse]:
    def plan(messages: list[ModelMessage]) -> ModelResponse:
        if turns(messages):
            return text("Both rooms are booked.")
        return calls(*scenarios.booking(log))

    return plan


async def test_a_block_that_raises_rolls_back_and_the_undos_run_newest_first(
    service: TransactionService, tmp_path: Path
) -> None:
    log = str(tmp_path / "rooms.jsonl")
    tx = pax.transaction(service, agent_id="rooms")

    async def run() -> None:
        async with tx:
            agent = ScriptedModel(booking_plan(log)).agent(tx.toolset(FunctionToolset([book_room])))
            await agent.run("Book blue and red.")
            assert journal(log) == [("book", "blue"), ("book", "red")]
            raise RuntimeError("the user changed their mind")

    with pytest.raises(RuntimeError, match="the user changed their mind"):
        await run()
    await scenarios.check_rolled_back_newest_first(service, tx, log)


async def test_a_wrapped_toolsets_calls_are_steps_sent_to_the_service(
    service: TransactionService, tmp_path: Path
) -> None:
    log = str(tmp_path / "rooms.jsonl")
    async with pax.transaction(service, agent_id="rooms") as tx:
        model = ScriptedModel(booking_plan(log))
        await model.agent(tx.toolset(ROOMS)).run("Book blue and red.")
    assert [t.name for t in model.tools[0]] == ["book_room", "room_size", "order_lunch"]
    assert journal(log) == [("book", "blue"), ("book", "red")]  # once each: in the engine
    assert await live_steps(service, tx.transaction_id) == ["book_room", "book_room"]
    assert tx.result is not None
    assert tx.result.steps_committed == 2


async def test_a_toolset_the_service_has_not_loaded_is_refused_at_its_first_listing(
    service: TransactionService,
) -> None:
    tx = pax.transaction(service, agent_id="rooms")

    async def run() -> None:
        async with tx:
            toolset = tx.toolset(FunctionToolset([cancel_room]))
            await ScriptedModel(lambda m: text("")).agent(toolset).run("")

    with pytest.raises(FailedPrecondition) as refused:
        await run()
    scenarios.check_refused_as_not_loaded(refused.value, tx)


async def test_a_tool_that_aborts_the_transaction_raises_out_of_the_run(
    open_engine: OpenEngine,
) -> None:
    engine = await open_engine(tools=ABORTING_TOOLS)
    tx = pax.transaction(engine, agent_id="closer")

    def plan(messages: list[ModelMessage]) -> ModelResponse:
        return calls(("close_account", "x1", {"account": "acme"}))

    async def run() -> None:
        async with tx:
            await ScriptedModel(plan).agent(tx.toolset()).run("")

    with pytest.raises(TransactionAborted) as aborted:
        await run()
    assert "the provider closed account acme already" in str(aborted.value)
    assert tx.status is TxStatus.FAILED
    assert tx.result is None


# ------------------------------------------------------------------ owed steps


def forgetful_plan(messages: list[ModelMessage]) -> ModelResponse:
    """``scenarios.FORGETTING``, then gives up."""
    if turns(messages):
        return text("I give up.")
    return calls(*scenarios.FORGETTING)


async def test_a_run_that_ends_owing_rewound_steps_rolls_back_and_names_them(
    service: TransactionService,
) -> None:
    tx = pax.transaction(service, agent_id="forgetful")

    async def run() -> None:
        async with tx:
            await ScriptedModel(forgetful_plan).agent(tx.toolset()).run("Look it up.")

    with pytest.raises(StepsOwed) as owed:
        await run()
    await scenarios.check_owed(service, tx, owed.value)


# ------------------------------------------------------------------ approval


def pricing_plan(messages: list[ModelMessage]) -> ModelResponse:
    """Sets a price of 100 and asks for approval; told by a refusal that the limit is 50, sets
    50 and asks again; once approved, finishes."""
    got = answers(messages)
    if turns(messages) == 0:
        return calls(*scenarios.PRICING)
    if any(a.outcome == "denied" for a in got):
        [denied] = got
        return calls(*scenarios.repricing(str(denied.content)))
    if got and got[0].tool_name == "kv--put":
        return calls(("agenttx--request_approval", f"ask{turns(messages)}", {}))
    assert "was approved" in str(got[0].content)
    return text("The price is set.")


async def test_an_approved_commit_commits_exactly_the_change_shown(
    service: TransactionService,
) -> None:
    model = ScriptedModel(pricing_plan)
    async with pax.transaction(
        service, agent_id="pricer", principal="agent-7", mode="approval_required"
    ) as tx:
        agent = model.agent(tx.toolset(), approval=True)
        run = await agent.run("Set the price.")
        assert isinstance(run.output, DeferredToolRequests)
        shown = tx.shown(run.output)
        assert shown["agenttx"] == "approve_commit"
        assert shown["transaction_id"] == tx.transaction_id
        assert [c["key"] for c in shown["changes"]["state"]] == ["kv/price"]
        assert shown["changes"]["state"][0]["after"] == 100
        decided = await tx.approve(run.output, "alice")
        run = await agent.run(message_history=run.all_messages(), deferred_tool_results=decided)
        assert run.output == "The price is set."
    assert "call agenttx--request_approval" in model.instructions[0]
    await scenarios.check_approved(service, tx, shown["receipt_id"])


async def test_a_refused_commit_tells_the_model_why_and_its_change_is_approved_next(
    service: TransactionService,
) -> None:
    async with pax.transaction(
        service, agent_id="pricer", principal="agent-7", mode="approval_required"
    ) as tx:
        agent = ScriptedModel(pricing_plan).agent(tx.toolset(), approval=True)
        run = await agent.run("Set the price.")
        assert isinstance(run.output, DeferredToolRequests)
        first = tx.shown(run.output)
        decided = await tx.refuse(run.output, "alice", "the limit is 50, not 100")
        run = await agent.run(message_history=run.all_messages(), deferred_tool_results=decided)
        assert isinstance(run.output, DeferredToolRequests)
        second = tx.shown(run.output)
        assert second["receipt_id"] != first["receipt_id"]
        assert second["changes"]["state"][0]["after"] == 50
        denied = [
            p
            for m in run.all_messages()
            for p in getattr(m, "parts", [])
            if getattr(p, "outcome", None) == "denied"
        ]
        assert "refused by 'alice': the limit is 50, not 100" in str(denied[0].content)
        decided = await tx.approve(run.output, "alice")
        await agent.run(message_history=run.all_messages(), deferred_tool_results=decided)
    await scenarios.check_approved_after_a_refusal(service, tx)


async def test_a_block_that_ends_while_the_commit_waits_for_approval_rolls_back(
    service: TransactionService,
) -> None:
    tx = pax.transaction(service, agent_id="pricer", principal="agent-7", mode="approval_required")

    async def run() -> None:
        async with tx:
            await ScriptedModel(pricing_plan).agent(tx.toolset(), approval=True).run("Set it.")

    with pytest.raises(ApprovalRequired):
        await run()
    await scenarios.check_rolled_back_unapproved(service, tx)


# ------------------------------------------------------------------ the engine side


def test_a_pydantic_ai_tool_becomes_an_agenttx_tool_of_its_name_schema_and_effect() -> None:
    described = {t.name: t.describe() for t in TOOLS}
    scenarios.check_described(described)
    assert described["room_size"]["input_schema"]["required"] == ["room"]


@pytest.mark.parametrize(
    ("kwargs", "words"),
    scenarios.refused_declarations(cancel_room, "a pydantic-ai tool", ["state"]),
)
def test_a_declaration_that_cannot_hold_is_refused_when_the_tools_are_made(
    kwargs: dict[str, Any], words: str
) -> None:
    with pytest.raises(InvalidArgument, match=words):
        pax.as_agenttx_tools([book_room], **kwargs)


def test_a_tool_that_takes_a_run_context_is_refused() -> None:
    toolset = FunctionToolset[None]()

    @toolset.tool
    def who(ctx: RunContext[None]) -> str:
        """Who runs this."""
        return str(ctx)

    with pytest.raises(InvalidArgument, match="takes a RunContext"):
        pax.as_agenttx_tools(toolset)
    assert [t.name for t in pax.as_agenttx_tools([room_size, close_account])] == [
        "room_size",
        "close_account",
    ]


def test_the_public_surface_is_exactly_these() -> None:
    assert "pydantic_ai" not in agenttx.integrations.__all__
    assert pax.__all__ == [
        "APPROVAL_TOOL",
        "DEFAULT_EFFECT",
        "PydanticAITransaction",
        "ServiceToolset",
        "TransactionToolset",
        "as_agenttx_tools",
        "transaction",
    ]


# ------------------------------------------------------------------ a gateway server's tools


async def test_an_mcp_toolset_of_a_gateway_server_steps_through_the_gateway(
    store_url: str, tmp_path: Path
) -> None:
    """``server=``: pydantic-ai's own ``MCPToolset`` of a real MCP server lists ``put``; the
    wrapped call is the step ``store.put``, which the engine's gateway calls on that server
    (a process of its own), with the undo the gateway's config declares."""
    kv_file = tmp_path / "store.json"
    kv_file.write_text(json.dumps({"color": "red"}))
    server = [str(TESTS / "gateway_downstream.py")]
    gateway = write_gateway(
        tmp_path / "gateway.toml",
        f"""
        [servers.store]
        command = "{sys.executable}"
        args = ["{server[0]}"]
        env = {{ KV_FILE = "{kv_file}" }}

        [servers.store.tools.put.before]
        tool = "get"
        arguments = {{ key = "${{args.key}}" }}

        [servers.store.tools.put.undo]
        tool = "put"
        arguments = {{ key = "${{args.key}}", value = "${{before.value}}" }}
        """,
    )

    def mcp_toolset() -> MCPToolset[Any]:
        """The model's view of the server: pydantic-ai's MCP toolset over stdio."""
        transport = StdioTransport(sys.executable, server, env={"KV_FILE": str(kv_file)})
        return MCPToolset(Client(transport))

    def painting(color: str) -> Callable[[list[ModelMessage]], ModelResponse]:
        def plan(messages: list[ModelMessage]) -> ModelResponse:
            if turns(messages):
                return text(f"It is {color} now.")
            return calls(("put", "p1", {"key": "color", "value": color}))

        return plan

    def color() -> Any:
        return json.loads(kv_file.read_text())["color"]

    engine = await gateway_engine(store_url, tmp_path / "data", gateway)
    try:
        async with pax.transaction(engine, agent_id="painter") as tx:
            toolset = tx.toolset(mcp_toolset(), server="store")
            model = ScriptedModel(painting("blue"))
            await model.agent(toolset).run("Paint it blue.")
            assert {"get", "put"} <= {t.name for t in model.tools[0]}  # the server's own listing
            assert color() == "blue"  # ran at its step, through the gateway
        assert tx.result is not None
        assert await live_steps(engine, tx.transaction_id) == ["store.put"]

        async def change_of_mind() -> None:
            async with pax.transaction(engine, agent_id="painter") as again:
                toolset = again.toolset(mcp_toolset(), server="store")
                await ScriptedModel(painting("green")).agent(toolset).run("Paint it green.")
                assert color() == "green"
                raise RuntimeError("changed my mind")

        with pytest.raises(RuntimeError, match="changed my mind"):
            await change_of_mind()
        assert color() == "blue"  # the gateway's undo ran on the rollback
    finally:
        await engine.close()


async def test_two_toolsets_of_one_transaction_say_its_instructions_and_offer_approval_once(
    service: TransactionService,
) -> None:
    model = ScriptedModel(lambda messages: text("Nothing to do."))
    tx = pax.transaction(service, agent_id="two", principal="agent-7", mode="approval_required")

    async def run() -> None:
        async with tx:
            first = tx.toolset(FunctionToolset([room_size]))
            second = tx.toolset(FunctionToolset([book_room]))
            await model.agent(first, approval=True).run("", toolsets=[second])

    with pytest.raises(ApprovalRequired):  # the model finished without asking: rolled back
        await run()
    [offered] = model.tools
    names = sorted(t.name for t in offered)
    assert names == ["agenttx--request_approval", "book_room", "room_size"]
    assert model.instructions[0].count("call agenttx--request_approval") == 1


async def test_approval_asked_after_a_rewinding_call_of_the_same_response_is_not_asked(
    service: TransactionService,
) -> None:
    def plan(messages: list[ModelMessage]) -> ModelResponse:
        if turns(messages) == 0:
            return calls(
                ("kv--get", "g", {"key": "no-such-key"}),
                ("agenttx--request_approval", "ask1", {}),
            )
        if turns(messages) == 1:
            return calls(("kv--put", "p", {"key": "price", "value": 10}))
        return calls(("agenttx--request_approval", "ask2", {}))

    tx = pax.transaction(service, agent_id="hasty", principal="agent-7", mode="approval_required")

    async def run() -> None:
        async with tx:
            done = await ScriptedModel(plan).agent(tx.toolset(), approval=True).run("")
            assert isinstance(done.output, DeferredToolRequests)
            [asked] = done.output.approvals
            assert asked.tool_call_id == "ask2"  # the first was planned on a rewound step
            first = answers(done.all_messages()[:3])
            assert [(a.tool_call_id, a.outcome) for a in first] == [
                ("g", "retried"),
                ("ask1", "failed"),
            ]
            assert str(first[1].content).startswith("AgentTx: not run.")

    with pytest.raises(ApprovalRequired):  # never approved: the block rolls back
        await run()
    assert tx.status is TxStatus.ROLLED_BACK


async def test_pydantic_ais_own_approval_of_a_call_wraps_the_transactions_toolset(
    service: TransactionService, tmp_path: Path
) -> None:
    """``tx.toolset(ROOMS).approval_required(...)``: pydantic-ai defers the call for a person;
    once approved it is the next step; denied, it never reaches the service."""
    log = str(tmp_path / "rooms.jsonl")
    async with pax.transaction(service, agent_id="careful") as tx:
        toolset = tx.toolset(ROOMS).approval_required(lambda ctx, d, args: d.name == "book_room")
        agent = ScriptedModel(booking_plan(log)).agent(toolset, approval=True)
        run = await agent.run("Book blue and red.")
        assert isinstance(run.output, DeferredToolRequests)
        assert [c.tool_call_id for c in run.output.approvals] == ["b1", "b2"]
        assert journal(log) == []  # nothing ran while the person decides
        decided = run.output.build_results(approvals={"b1": True, "b2": False})
        run = await agent.run(message_history=run.all_messages(), deferred_tool_results=decided)
        assert run.output == "Both rooms are booked."
    assert journal(log) == [("book", "blue")]
    assert await live_steps(service, tx.transaction_id) == ["book_room"]
