"""A real ``agenttx serve`` loads LangChain tools made by ``as_agenttx_tools`` with
``--tools file.py:TOOLS``, as a user serves them, and a LangGraph run drives them through the
async client: a booking run that commits, one that raises and is rolled back by the server
running the tools' undos, and a framework tool the server has not loaded, refused by name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

import lg_tools
import scenarios
from agenttx import FailedPrecondition, TxStatus
from agenttx.client import AsyncAgentTxClient
from agenttx.integrations import langgraph as lgx
from lg_tools import book_room, cancel_room, room_size
from scripted_model import ScriptedAgent, calling, graph

pytest_plugins = ["framework_service"]


@pytest.fixture(scope="module")
def framework_tools() -> ModuleType:
    return lg_tools


def booking(log: str) -> Callable[[list[BaseMessage]], AIMessage]:
    def plan(messages: list[BaseMessage]) -> AIMessage:
        if any(isinstance(m, ToolMessage) for m in messages):
            return AIMessage("Booked.")
        return calling(scenarios.served_booking(log))

    return plan


async def test_a_served_run_commits_and_one_that_raises_runs_the_undos_on_the_server(
    served_client: AsyncAgentTxClient, tmp_path: Path
) -> None:
    log = str(tmp_path / "rooms.jsonl")
    async with lgx.transaction(served_client, agent_id="rooms") as tx:
        node = await tx.tool_node([room_size, book_room])
        await graph(ScriptedAgent(tx, booking(log)), node).ainvoke({"messages": [HumanMessage("")]})
    assert tx.result is not None
    assert tx.result.steps_committed == 2

    aborted = lgx.transaction(served_client, agent_id="rooms")

    async def run() -> None:
        async with aborted:
            node = await aborted.tool_node([room_size, book_room])
            agent = ScriptedAgent(aborted, booking(log))
            await graph(agent, node).ainvoke({"messages": [HumanMessage("")]})
            raise RuntimeError("the person stopped the run")

    with pytest.raises(RuntimeError, match="the person stopped the run"):
        await run()
    scenarios.check_the_served_undo(log)
    assert aborted.status is TxStatus.ROLLED_BACK


async def test_a_framework_tool_the_server_did_not_load_is_named(
    served_client: AsyncAgentTxClient,
) -> None:
    tx = lgx.transaction(served_client, agent_id="rooms")

    async def run() -> None:
        async with tx:
            await tx.tools([cancel_room])

    with pytest.raises(FailedPrecondition, match="tool 'cancel_room' is not loaded on the server"):
        await run()
