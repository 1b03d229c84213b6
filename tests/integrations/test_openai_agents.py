"""An OpenAI Agents SDK run is one AgentTx transaction, against an embedded engine and against
a real gRPC server through the async client (the same test code, ``service``).

A scripted ``Model`` of our own drives ``Runner.run``: a foreign-key failure rewinds to its
root cause and the model fixes the value from the hint; a response's parallel calls are steps
in the response's order, one failing; a block that raises rolls back and runs the function
tools' undos; a commit that needs approval interrupts the run at the approval tool and is
approved, or refused with a reason the model reads. No network, no API key, tracing off. The
store is not what these test, so SQLite only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from agents import Agent, FunctionTool, Runner, ToolCallOutputItem, set_tracing_disabled
from agents.exceptions import UserError

import oa_tools
import scenarios
from agenttx import ApprovalRequired, FailedPrecondition, StepsNotRedone, TxStatus
from agenttx.integrations import PROVIDER_NAME, StepsOwed
from agenttx.integrations import openai_agents as oax
from agenttx.service import TransactionService
from oa_model import ScriptedModel, Sent, call, calling, say
from oa_tools import book_room, cancel_room
from scenario_tools import journal

pytest_plugins = ["framework_service"]
pytestmark = pytest.mark.stores("sqlite")

set_tracing_disabled(True)  # the SDK would export traces to OpenAI; never in tests


@pytest.fixture(scope="module")
def framework_tools() -> ModuleType:
    return oa_tools


def agent(model: ScriptedModel, tools: list[FunctionTool]) -> Agent[Any]:
    return Agent(name="scripted", instructions="You do the task.", model=model, tools=tools)


def outputs(result: Any) -> list[tuple[str, str]]:
    """Every tool output of the run: (call id, the text the model read), in order."""
    return [
        (str(item.raw_item["call_id"]), str(item.output))
        for item in result.new_items
        if isinstance(item, ToolCallOutputItem)
    ]


# ------------------------------------------------------------------ a foreign-key failure


def fk_plan(sent: Sent) -> list[Any]:
    """``scenarios.invoicing``, reading the hint from the failed call's output (each call id
    once per run: the redo's ids are its own)."""
    results = sent.outputs()
    failed = [t for t in results.values() if "failed and was rolled back" in t]
    if not results:
        return calling(scenarios.invoicing(None, turn="first-"))
    if failed:
        [hint] = failed
        return calling(scenarios.invoicing(hint, turn="redo-"))
    return [say("The invoice is in.")]


async def test_a_foreign_key_failure_rewinds_to_its_cause_and_the_fixed_redo_commits(
    service: TransactionService,
) -> None:
    model = ScriptedModel(fk_plan)
    async with oax.transaction(service, agent_id="billing") as tx:
        result = await Runner.run(
            agent(model, await tx.tools()), "Invoice customer c-1.", run_config=tx.run_config()
        )
    assert result.final_output == "The invoice is in."
    failed = [text for _, text in outputs(result) if "failed" in text]
    assert len(failed) == 1
    scenarios.check_the_invoice_failure(failed[0])
    # The next model call carried the constraint in its instructions, after the agent's own.
    assert model.sent[1].instructions.startswith("You do the task.")
    assert "c-404" in model.sent[1].instructions
    assert "c-404" not in model.sent[0].instructions
    await scenarios.check_invoiced(service, tx)


async def test_the_tools_reach_the_model_under_names_providers_accept(
    service: TransactionService,
) -> None:
    async with oax.transaction(service, agent_id="names") as tx:
        tools = await tx.tools()
        approval = tx.approval_tool()
    names = {t.name for t in [*tools, approval]}
    assert {"kv--put", "record--insert", "book_room", "room_size", "commit_changes"} <= names
    assert all(PROVIDER_NAME.match(n) for n in names)
    [booking] = [t for t in tools if t.name == "book_room"]
    assert set(booking.params_json_schema["properties"]) == {"room", "log"}
    assert booking.description == "Book a meeting room."


# ------------------------------------------------------------------ parallel calls


def parallel_plan(first_delay: float, second_delay: float) -> Callable[[Sent], list[Any]]:
    """Three calls in one response, the second failing; then the call the failure left out,
    alone. The delays say which of the first two would finish first if they ran together."""

    def plan(sent: Sent) -> list[Any]:
        results = sent.outputs()
        if not results:
            return [
                *calling(scenarios.sizing(first_delay)),
                call("room_size", "e", room="blue", delay_s=second_delay),
            ]
        if "a" in results:
            return calling(scenarios.SIZING_AGAIN)
        return [say("Red fits 12.")]

    return plan


@pytest.mark.parametrize(("first_delay", "second_delay"), [(0.05, 0.0), (0.0, 0.05)])
async def test_a_responses_parallel_calls_are_steps_in_the_responses_order(
    service: TransactionService, first_delay: float, second_delay: float
) -> None:
    model = ScriptedModel(parallel_plan(first_delay, second_delay))
    async with oax.transaction(service, agent_id="rooms") as tx:
        result = await Runner.run(
            agent(model, await tx.tools()), "How big is the red room?", run_config=tx.run_config()
        )
    first = outputs(result)[:4]
    assert [call_id for call_id, _ in first] == ["a", "b", "c", "e"]
    assert first[0][1] == "12"
    scenarios.check_the_failed_and_the_unsent(first[1][1], [text for _, text in first[2:]])
    # The same steps whichever call would finish first: the calls after the failure unsent.
    await scenarios.check_sized(service, tx)


async def test_a_function_tools_exception_is_the_steps_failure_not_an_answer(
    service: TransactionService,
) -> None:
    def plan(sent: Sent) -> list[Any]:
        if not sent.outputs():
            return [call("room_size", "g", room="green", delay_s=0.0)]
        return [say("There is no green room.")]

    async with oax.transaction(service, agent_id="rooms") as tx:
        result = await Runner.run(
            agent(ScriptedModel(plan), await tx.tools()), "Green?", run_config=tx.run_config()
        )
    [(_, text)] = outputs(result)
    assert text.startswith("AgentTx: room_size (step 1) failed and was rolled back")
    assert "no room named 'green'" in text
    assert "An error occurred while running the tool" not in text  # the SDK's default


async def test_a_run_without_the_transactions_run_config_is_refused_and_rolled_back(
    service: TransactionService,
) -> None:
    def plan(sent: Sent) -> list[Any]:
        return [call("kv--put", "p", key="k", value=1)]

    tx = oax.transaction(service, agent_id="careless")

    async def run() -> None:
        async with tx:
            await Runner.run(agent(ScriptedModel(plan), await tx.tools()), "Put it.")

    with pytest.raises(UserError) as refused:
        await run()
    assert isinstance(refused.value.__cause__, FailedPrecondition)
    assert "run_config=tx.run_config()" in str(refused.value)
    assert tx.status is TxStatus.ROLLED_BACK
    info = await service.get_transaction(tx.transaction_id)
    assert info.steps == []


# ------------------------------------------------------------------ a block that raises


def booking_plan(log: str) -> Callable[[Sent], list[Any]]:
    def plan(sent: Sent) -> list[Any]:
        if sent.outputs():
            return [say("Both rooms are booked.")]
        return calling(scenarios.booking(log))

    return plan


async def test_a_block_that_raises_rolls_back_and_the_undos_run_newest_first(
    service: TransactionService, tmp_path: Path
) -> None:
    log = str(tmp_path / "rooms.jsonl")
    tx = oax.transaction(service, agent_id="rooms")

    async def run() -> None:
        async with tx:
            tools = await tx.tools([book_room])
            await Runner.run(
                agent(ScriptedModel(booking_plan(log)), tools),
                "Book blue and red.",
                run_config=tx.run_config(),
            )
            assert journal(log) == [("book", "blue"), ("book", "red")]
            raise RuntimeError("the user changed their mind")

    with pytest.raises(RuntimeError, match="the user changed their mind"):
        await run()
    await scenarios.check_rolled_back_newest_first(service, tx, log)


async def test_a_function_tool_the_service_has_not_loaded_is_refused_at_wrap_time(
    service: TransactionService,
) -> None:
    tx = oax.transaction(service, agent_id="rooms")

    async def run() -> None:
        async with tx:
            await tx.tools([cancel_room])

    with pytest.raises(FailedPrecondition) as refused:
        await run()
    scenarios.check_refused_as_not_loaded(refused.value, tx)


# ------------------------------------------------------------------ owed steps


def forgetful_plan(sent: Sent) -> list[Any]:
    """``scenarios.FORGETTING``, then gives up."""
    if sent.outputs():
        return [say("I give up.")]
    return calling(scenarios.FORGETTING)


async def test_a_run_that_ends_owing_rewound_steps_rolls_back_and_names_them(
    service: TransactionService,
) -> None:
    tx = oax.transaction(service, agent_id="forgetful")

    async def run() -> None:
        async with tx:
            await Runner.run(
                agent(ScriptedModel(forgetful_plan), await tx.tools()),
                "Look it up.",
                run_config=tx.run_config(),
            )

    with pytest.raises(StepsOwed) as owed:
        await run()
    assert isinstance(owed.value, StepsNotRedone)  # the client helper's rule and error
    await scenarios.check_owed(service, tx, owed.value)


# ------------------------------------------------------------------ approval


def pricing_plan(sent: Sent) -> list[Any]:
    """Sets a price of 100 and asks for the commit; told by a refusal that the limit is 50,
    sets 50 and asks again; once approved, finishes."""
    results = sent.outputs()
    if not results:
        return calling(scenarios.PRICING)
    last = list(results.values())[-1]
    if "refused by" in last:
        return calling(scenarios.repricing(last))
    if "was approved" in last:
        return [say("The price is set.")]
    asked = sum(i.get("name") == "commit_changes" for i in sent.items)
    return [call("commit_changes", f"ask{asked + 1}")]


async def test_an_approved_commit_commits_exactly_the_change_shown(
    service: TransactionService,
) -> None:
    async with oax.transaction(
        service, agent_id="pricer", principal="agent-7", mode="approval_required"
    ) as tx:
        pricer = agent(ScriptedModel(pricing_plan), [*await tx.tools(), tx.approval_tool()])
        result = await Runner.run(pricer, "Set the price.", run_config=tx.run_config())
        [waiting] = result.interruptions
        assert waiting.tool_name == "commit_changes"
        shown = tx.pending_preview
        assert shown is not None
        assert shown.approval_required
        assert [(c.key, c.after) for c in shown.changes.state] == [("kv/price", 100)]
        state = await tx.approve(result, "alice")
        result = await Runner.run(pricer, state, run_config=tx.run_config())
        assert result.interruptions == []
        assert result.final_output == "The price is set."
    await scenarios.check_approved(service, tx, shown.receipt_id)


async def test_a_refused_commit_tells_the_model_why_and_its_change_is_approved_next(
    service: TransactionService,
) -> None:
    async with oax.transaction(
        service, agent_id="pricer", principal="agent-7", mode="approval_required"
    ) as tx:
        pricer = agent(ScriptedModel(pricing_plan), [*await tx.tools(), tx.approval_tool()])
        result = await Runner.run(pricer, "Set the price.", run_config=tx.run_config())
        first = tx.pending_preview
        assert first is not None
        state = await tx.refuse(result, "alice", "the limit is 50, not 100")
        result = await Runner.run(pricer, state, run_config=tx.run_config())
        assert [i.tool_name for i in result.interruptions] == ["commit_changes"]
        second = tx.pending_preview
        assert second is not None
        assert second.receipt_id != first.receipt_id
        assert [(c.key, c.after) for c in second.changes.state] == [("kv/price", 50)]
        told = dict(outputs(result))["ask1"]
        assert "refused by 'alice': the limit is 50, not 100" in told
        state = await tx.approve(result, "alice")
        result = await Runner.run(pricer, state, run_config=tx.run_config())
        assert result.final_output == "The price is set."
    await scenarios.check_approved_after_a_refusal(service, tx)


async def test_a_block_that_ends_while_the_commit_waits_for_approval_rolls_back(
    service: TransactionService,
) -> None:
    tx = oax.transaction(service, agent_id="pricer", principal="agent-7", mode="approval_required")

    async def run() -> None:
        async with tx:
            pricer = agent(ScriptedModel(pricing_plan), [*await tx.tools(), tx.approval_tool()])
            result = await Runner.run(pricer, "Set the price.", run_config=tx.run_config())
            assert result.interruptions

    with pytest.raises(ApprovalRequired):
        await run()
    await scenarios.check_rolled_back_unapproved(service, tx)
