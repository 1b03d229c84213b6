"""A real ``agenttx serve`` loads pydantic-ai tools made by ``as_agenttx_tools`` with
``--tools file.py:TOOLS``, as a user serves them, and a pydantic-ai agent drives them through
the async client: a booking run that commits, one that raises and is rolled back by the server
running the tools' undos, and a toolset the server has not loaded, refused by name."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.toolsets import FunctionToolset

from agenttx import FailedPrecondition, TxStatus
from agenttx.client import AsyncAgentTxClient, RetryPolicy
from agenttx.integrations import pydantic_ai as pax
from pai_tools import ROOMS, ScriptedModel, calls, cancel_room, journal, text, turns
from server_process import ServerProcess, start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("pai") / "data"
    proc = start_server(data, "--tools", "integrations/pai_tools.py:TOOLS")  # cwd: tests/
    yield proc
    proc.terminate()


@pytest.fixture
async def client(server: ServerProcess) -> AsyncIterator[AsyncAgentTxClient]:
    async with AsyncAgentTxClient(
        server.address, retry=RetryPolicy(max_attempts=1), timeout=30
    ) as c:
        yield c


def booking(log: str) -> Callable[[list[ModelMessage]], ModelResponse]:
    def plan(messages: list[ModelMessage]) -> ModelResponse:
        if turns(messages):
            return text("Booked.")
        return calls(
            ("room_size", "s", {"room": "red"}),
            ("book_room", "b", {"room": "red", "log": log}),
        )

    return plan


async def test_a_served_run_commits_and_one_that_raises_runs_the_undos_on_the_server(
    client: AsyncAgentTxClient, tmp_path: Path
) -> None:
    log = str(tmp_path / "rooms.jsonl")
    async with pax.transaction(client, agent_id="rooms") as tx:
        await ScriptedModel(booking(log)).agent(tx.toolset(ROOMS)).run("Book red.")
    assert tx.result is not None
    assert tx.result.steps_committed == 2

    aborted = pax.transaction(client, agent_id="rooms")

    async def run() -> None:
        async with aborted:
            await ScriptedModel(booking(log)).agent(aborted.toolset(ROOMS)).run("Book red.")
            raise RuntimeError("the person stopped the run")

    with pytest.raises(RuntimeError, match="the person stopped the run"):
        await run()
    assert journal(log) == [("book", "red"), ("book", "red"), ("cancel", "red")]
    assert aborted.status is TxStatus.ROLLED_BACK


async def test_a_toolset_the_server_did_not_load_is_named(client: AsyncAgentTxClient) -> None:
    tx = pax.transaction(client, agent_id="rooms")

    async def run() -> None:
        async with tx:
            toolset = tx.toolset(FunctionToolset([cancel_room]))
            await ScriptedModel(lambda m: text("")).agent(toolset).run("")

    with pytest.raises(FailedPrecondition, match="tool 'cancel_room' is not loaded on the server"):
        await run()
    assert tx.status is TxStatus.ROLLED_BACK
