"""One agent run of ``scenarios.RESUMING`` in a process of its own, for the crash-and-resume
tests (``test_resume.py``)::

    python resume_worker.py FRAMEWORK SERVICE LOG TX_FILE MODE [CHECKPOINT]

FRAMEWORK: ``langgraph``, ``openai_agents`` or ``pydantic_ai``. SERVICE: a store URL (an
embedded engine on it, with the framework's ``TOOLS``) or ``grpc:HOST:PORT`` (the async client
of a server). MODE: ``crash`` begins the transaction, writes its id to TX_FILE and is killed
(SIGKILL, by itself) when the model is asked for its ``CRASH_TURN``-th answer; ``resume`` goes
on with the transaction TX_FILE names and prints what became of it as JSON. CHECKPOINT
(LangGraph only): a SQLite file for a durable checkpointer, so the resumed graph goes on from
its last checkpoint instead of from the start.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import agenttx
import scenarios
from agenttx.client import AsyncAgentTxClient, RetryPolicy
from agenttx.service import TransactionService

Run = Callable[[TransactionService, str, Path, str, bool, str], Awaitable[dict[str, Any]]]


def model_turn(turn: int, crash: bool) -> None:
    """Where the scripted model is asked for its ``turn``-th answer: the crash, if it is due."""
    if crash and turn == scenarios.CRASH_TURN:
        os.kill(os.getpid(), signal.SIGKILL)


def began(tx_file: Path, transaction_id: str) -> None:
    tx_file.write_text(transaction_id)


def ended(tx: Any) -> dict[str, Any]:
    return {
        "transaction_id": tx.transaction_id,
        "status": str(tx.status),
        "replayed": tx.replayed,
        "committed": bool(tx.result and tx.result.committed),
    }


async def langgraph(
    service: TransactionService, log: str, tx_file: Path, resume: str, crash: bool, saver: str
) -> dict[str, Any]:
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from agenttx.integrations import langgraph as lgx
    from scripted_model import ScriptedAgent, calling, graph

    def plan(messages: list[BaseMessage]) -> AIMessage:
        turn = sum(isinstance(m, AIMessage) for m in messages)
        model_turn(turn, crash)
        made = scenarios.resuming(log, turn)
        return calling(made) if made else AIMessage("Both rooms are booked.")

    config = {"configurable": {"thread_id": "rooms"}}
    async with lgx.transaction(service, agent_id="rooms", resume=resume) as tx:
        began(tx_file, tx.transaction_id)
        node = await tx.tool_node(await tx.tools())
        if not saver:
            run = graph(ScriptedAgent(tx, plan), node)
            await run.ainvoke({"messages": [HumanMessage("Book blue and red.")]})
        else:
            async with AsyncSqliteSaver.from_conn_string(saver) as checkpointer:
                run = graph(ScriptedAgent(tx, plan), node, checkpointer=checkpointer)
                # A new run starts with the request; a resumed one goes on from its checkpoint
                # ("sync": each step's checkpoint is written before the next step runs).
                start = None if resume else {"messages": [HumanMessage("Book blue and red.")]}
                await run.ainvoke(start, config, durability="sync")
    return ended(tx)


async def openai_agents(
    service: TransactionService, log: str, tx_file: Path, resume: str, crash: bool, _: str
) -> dict[str, Any]:
    from agents import Agent, Runner, set_tracing_disabled

    from agenttx.integrations import openai_agents as oax
    from oa_model import ScriptedModel, Sent, calling, say

    set_tracing_disabled(True)
    turns = 0

    def plan(sent: Sent) -> list[Any]:
        nonlocal turns
        turn, turns = turns, turns + 1
        model_turn(turn, crash)
        made = scenarios.resuming(log, turn)
        return calling(made) if made else [say("Both rooms are booked.")]

    async with oax.transaction(service, agent_id="rooms", resume=resume) as tx:
        began(tx_file, tx.transaction_id)
        agent = Agent(name="rooms", model=ScriptedModel(plan), tools=await tx.tools())
        await Runner.run(agent, "Book blue and red.", run_config=tx.run_config())
    return ended(tx)


async def pydantic_ai(
    service: TransactionService, log: str, tx_file: Path, resume: str, crash: bool, _: str
) -> dict[str, Any]:
    from pydantic_ai.messages import ModelMessage, ModelResponse

    from agenttx.integrations import pydantic_ai as pax
    from pai_model import ScriptedModel, calls, text, turns

    def plan(messages: list[ModelMessage]) -> ModelResponse:
        turn = turns(messages)
        model_turn(turn, crash)
        made = scenarios.resuming(log, turn)
        return calls(*made) if made else text("Both rooms are booked.")

    async with pax.transaction(service, agent_id="rooms", resume=resume) as tx:
        began(tx_file, tx.transaction_id)
        await ScriptedModel(plan).agent(tx.toolset()).run("Book blue and red.")
    return ended(tx)


RUNS: dict[str, tuple[Run, str]] = {
    "langgraph": (langgraph, "lg_tools"),
    "openai_agents": (openai_agents, "oa_tools"),
    "pydantic_ai": (pydantic_ai, "pai_tools"),
}


async def main(framework: str, where: str, log: str, tx_file: Path, mode: str, saver: str) -> None:
    run, tools_module = RUNS[framework]
    resume = tx_file.read_text() if mode == "resume" else ""
    if where.startswith("grpc:"):
        async with AsyncAgentTxClient(
            where.removeprefix("grpc:"), retry=RetryPolicy(max_attempts=1), timeout=30
        ) as client:
            said = await run(client, log, tx_file, resume, mode == "crash", saver)
    else:
        data = Path(log).parent
        engine = await agenttx.Engine.open(
            where,
            tools=__import__(tools_module).TOOLS,
            fs_root=data / "files",
            outbox_path=data / "outbox.jsonl",
        )
        try:
            said = await run(engine, log, tx_file, resume, mode == "crash", saver)
        finally:
            await engine.close()
    print(json.dumps(said), flush=True)


if __name__ == "__main__":
    framework, where, log, tx_file, mode, *rest = sys.argv[1:]
    asyncio.run(main(framework, where, log, Path(tx_file), mode, rest[0] if rest else ""))
