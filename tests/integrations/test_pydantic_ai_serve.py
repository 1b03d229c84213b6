"""A real ``agenttx serve`` loads pydantic-ai tools made by ``as_agenttx_tools`` with
``--tools file.py:TOOLS``, as a user serves them, and a pydantic-ai agent drives them through
the async client: a booking run that commits, one that raises and is rolled back by the server
running the tools' undos, and a toolset the server has not loaded, refused by name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.toolsets import FunctionToolset

import pai_tools
import scenarios
from agenttx import FailedPrecondition, TxStatus
from agenttx.client import AsyncAgentTxClient
from agenttx.integrations import pydantic_ai as pax
from pai_model import ScriptedModel, calls, text, turns
from pai_tools import ROOMS
from scenario_tools import cancel_room

pytest_plugins = ["framework_service"]


@pytest.fixture(scope="module")
def framework_tools() -> ModuleType:
    return pai_tools


def booking(log: str) -> Callable[[list[ModelMessage]], ModelResponse]:
    def plan(messages: list[ModelMessage]) -> ModelResponse:
        if turns(messages):
            return text("Booked.")
        return calls(*scenarios.served_booking(log))

    return plan


async def test_a_served_run_commits_and_one_that_raises_runs_the_undos_on_the_server(
    served_client: AsyncAgentTxClient, tmp_path: Path
) -> None:
    log = str(tmp_path / "rooms.jsonl")
    async with pax.transaction(served_client, agent_id="rooms") as tx:
        await ScriptedModel(booking(log)).agent(tx.toolset(ROOMS)).run("Book red.")
    assert tx.result is not None
    assert tx.result.steps_committed == 2

    aborted = pax.transaction(served_client, agent_id="rooms")

    async def run() -> None:
        async with aborted:
            await ScriptedModel(booking(log)).agent(aborted.toolset(ROOMS)).run("Book red.")
            raise RuntimeError("the person stopped the run")

    with pytest.raises(RuntimeError, match="the person stopped the run"):
        await run()
    scenarios.check_the_served_undo(log)
    assert aborted.status is TxStatus.ROLLED_BACK


async def test_a_toolset_the_server_did_not_load_is_named(
    served_client: AsyncAgentTxClient,
) -> None:
    tx = pax.transaction(served_client, agent_id="rooms")

    async def run() -> None:
        async with tx:
            toolset = tx.toolset(FunctionToolset([cancel_room]))
            await ScriptedModel(lambda m: text("")).agent(toolset).run("")

    with pytest.raises(FailedPrecondition, match="tool 'cancel_room' is not loaded on the server"):
        await run()
    assert tx.status is TxStatus.ROLLED_BACK
