"""A real ``agenttx serve`` loads LangChain tools made by ``as_agenttx_tools`` with
``--tools file.py:TOOLS``, as a user serves them, and a LangGraph run drives them through the
async client: a booking run that commits, one that raises and is rolled back by the server
running the tools' undos, and a framework tool the server has not loaded, refused by name."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from agenttx import FailedPrecondition, TxStatus
from agenttx.client import AsyncAgentTxClient, RetryPolicy
from agenttx.integrations import langgraph as lgx
from lg_tools import book_room, cancel_room, journal, room_size
from scripted_model import ScriptedAgent, call, graph
from server_process import ServerProcess, start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("lg") / "data"
    proc = start_server(data, "--tools", "integrations/lg_tools.py:TOOLS")  # cwd: tests/
    yield proc
    proc.terminate()


@pytest.fixture
async def client(server: ServerProcess) -> AsyncIterator[AsyncAgentTxClient]:
    async with AsyncAgentTxClient(
        server.address, retry=RetryPolicy(max_attempts=1), timeout=30
    ) as c:
        yield c


def booking(log: str) -> Callable[[list[BaseMessage]], AIMessage]:
    def plan(messages: list[BaseMessage]) -> AIMessage:
        if any(isinstance(m, ToolMessage) for m in messages):
            return AIMessage("Booked.")
        return AIMessage(
            "",
            tool_calls=[
                call("room_size", "s", room="red"),
                call("book_room", "b", room="red", log=log),
            ],
        )

    return plan


async def test_a_served_run_commits_and_one_that_raises_runs_the_undos_on_the_server(
    client: AsyncAgentTxClient, tmp_path: Path
) -> None:
    log = str(tmp_path / "rooms.jsonl")
    async with lgx.transaction(client, agent_id="rooms") as tx:
        node = await tx.tool_node([room_size, book_room])
        await graph(ScriptedAgent(tx, booking(log)), node).ainvoke({"messages": [HumanMessage("")]})
    assert tx.result is not None
    assert tx.result.steps_committed == 2

    aborted = lgx.transaction(client, agent_id="rooms")

    async def run() -> None:
        async with aborted:
            node = await aborted.tool_node([room_size, book_room])
            agent = ScriptedAgent(aborted, booking(log))
            await graph(agent, node).ainvoke({"messages": [HumanMessage("")]})
            raise RuntimeError("the person stopped the run")

    with pytest.raises(RuntimeError, match="the person stopped the run"):
        await run()
    assert journal(log) == [("book", "red"), ("book", "red"), ("cancel", "red")]
    assert aborted.status is TxStatus.ROLLED_BACK


async def test_a_framework_tool_the_server_did_not_load_is_named(
    client: AsyncAgentTxClient,
) -> None:
    tx = lgx.transaction(client, agent_id="rooms")

    async def run() -> None:
        async with tx:
            await tx.tools([cancel_room])

    with pytest.raises(FailedPrecondition, match="tool 'cancel_room' is not loaded on the server"):
        await run()
