"""An agent loop on AgentTx: a model plans tool calls, each call is a step of one transaction,
a failed call comes back with its hint and the step to resume at, and the run commits when the
model is done.

    python examples/agent_loop.py                      # embedded engine, scripted model
    OPENAI_API_KEY=… python examples/agent_loop.py     # the same loop on OpenAI's chat API
    ANTHROPIC_API_KEY=… python examples/agent_loop.py  # … or on Anthropic's (pip install anthropic)
    python examples/agent_loop.py --server 127.0.0.1:50051   # against a running agenttx serve

With no key in the environment a scripted model stands in, so the example runs anywhere (the
test suite runs it so). Whatever the model, the loop does the same three things each turn:

- the system prompt carries the constraints the transaction learned so far (every failure's
  hint), so the model does not repeat a mistake the transaction already paid for;
- the prompt names the step the next call will be (``next_step_id``): after a rewind that is
  where the transaction resumes, and the calls the rewind undid must be made again;
- a failed call's tool result is AgentTx's own text (the hint, what was undone, where to
  resume), never the tool's raw exception.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import agenttx
from agenttx.integrations import AgentTransaction, ToolNames, ToolSpec

TASK = "Save customer 42 (Ada Lovelace) under customer/42, then read it back to confirm."
MAX_TURNS = 12  # a model that never finishes stops here; the block then rolls back

# A model turn: (system prompt, transcript, tools) -> the calls it wants (provider name,
# arguments, call id), or [] when it is done, with its text.
Model = Callable[
    [str, list[dict[str, Any]], list[ToolSpec], ToolNames],
    Awaitable[tuple[list[tuple[str, dict[str, Any], str]], str]],
]


def system_prompt(tx: AgentTransaction) -> str:
    lines = [
        "You carry out the user's task with the tools given. Each tool call is a step of one "
        "transaction; when you are done, answer in text and the transaction commits.",
        f"Your next call will be step {tx.next_step_id}.",
    ]
    if tx.to_redo():
        owed = ", ".join(f"{s} ({tx.shown(t)})" for s, t in sorted(tx.to_redo().items()))
        lines.append(f"A rewind undid steps {owed}: make those calls again before finishing.")
    prompt = tx.system_prompt()  # the constraints so far ("" while there are none)
    return "\n".join([*lines, prompt] if prompt else lines)


# --------------------------------------------------------------------------- the models


async def scripted(
    system: str, transcript: list[dict[str, Any]], tools: list[ToolSpec], names: ToolNames
) -> tuple[list[tuple[str, dict[str, Any], str]], str]:
    """A stand-in model: writes the record, reads back a mistyped key, and fixes the key from
    the hint it is given."""
    results = [m for m in transcript if m["role"] == "tool"]
    put, get = names.provider("kv.put"), names.provider("kv.get")
    if not results:
        record = {"name": "Ada Lovelace"}
        return [(put, {"key": "customer/42", "value": record}, "call-1")], ""
    if len(results) == 1:
        return [(get, {"key": "customer/24"}, "call-2")], ""  # the typo a model makes
    last = results[-1]["content"]
    if "does not exist" in last:  # the hint names the key it could not find: use ours
        return [(get, {"key": "customer/42"}, f"call-{len(results) + 1}")], ""
    return [], f"Saved and confirmed: {last}"


async def openai_model(
    system: str, transcript: list[dict[str, Any]], tools: list[ToolSpec], names: ToolNames
) -> tuple[list[tuple[str, dict[str, Any], str]], str]:
    from openai import AsyncOpenAI

    client = AsyncOpenAI()
    offered = [
        {
            "type": "function",
            "function": {
                "name": names.provider(t.name),
                "description": t.description,
                "parameters": t.input_schema,
            },
        }
        for t in tools
    ]
    messages: list[Any] = [{"role": "system", "content": system}, *transcript]
    r = await client.chat.completions.create(
        model=os.environ.get("AGENTTX_EXAMPLE_MODEL", "gpt-4.1-mini"),
        messages=messages,
        tools=offered,
    )
    message = r.choices[0].message
    transcript.append(message.model_dump(exclude_none=True))
    calls = [
        (c.function.name, json.loads(c.function.arguments or "{}"), c.id)
        for c in message.tool_calls or []
        if c.type == "function"
    ]
    return calls, message.content or ""


async def anthropic_model(
    system: str, transcript: list[dict[str, Any]], tools: list[ToolSpec], names: ToolNames
) -> tuple[list[tuple[str, dict[str, Any], str]], str]:
    import anthropic

    client = anthropic.AsyncAnthropic()
    offered = [
        {
            "name": names.provider(t.name),
            "description": t.description,
            "input_schema": t.input_schema,
        }
        for t in tools
    ]
    # Anthropic's transcript: the results of one turn's calls are one user turn of
    # tool_result blocks.
    messages: list[Any] = []
    for m in transcript:
        if m["role"] != "tool":
            messages.append(m)
            continue
        block = {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}
        if (
            messages
            and messages[-1]["role"] == "user"
            and isinstance(messages[-1]["content"], list)
        ):
            messages[-1]["content"].append(block)
        else:
            messages.append({"role": "user", "content": [block]})
    r = await client.messages.create(
        model=os.environ.get("AGENTTX_EXAMPLE_MODEL", "claude-sonnet-4-5"),
        max_tokens=1024,
        system=system,
        messages=messages,
        tools=offered,
    )
    transcript.append({"role": "assistant", "content": [b.model_dump() for b in r.content]})
    calls = [(b.name, dict(b.input), b.id) for b in r.content if b.type == "tool_use"]
    text = "".join(b.text for b in r.content if b.type == "text")
    return calls, text


def pick_model() -> tuple[str, Model]:
    if os.environ.get("OPENAI_API_KEY"):
        return "OpenAI", openai_model
    if os.environ.get("ANTHROPIC_API_KEY"):
        return "Anthropic", anthropic_model
    return "scripted", scripted


# --------------------------------------------------------------------------- the loop


async def run(service: agenttx.TransactionService, model: Model) -> AgentTransaction:
    transcript: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    async with AgentTransaction(service, agent_id="agent-loop") as tx:
        listed = await tx.tools()
        tools = [listed[n] for n in ("kv.put", "kv.get")]
        for t in tools:
            tx.names.add(t.name)
        for _ in range(MAX_TURNS):
            calls, text = await model(system_prompt(tx), transcript, tools, tx.names)
            if not calls:
                print(f"model: {text}")
                break
            if model is scripted:  # a real model's turn is already in the transcript
                transcript.append({"role": "assistant", "content": "", "calls": calls})
            for provider, arguments, call_id in calls:
                step = tx.next_step_id
                outcome = await tx.call(tx.names.tool(provider), arguments)
                failure = outcome.failure
                said = failure.text() if failure is not None else json.dumps(outcome.output)
                print(f"step {step}: {provider}({json.dumps(arguments)}) -> {said.splitlines()[0]}")
                transcript.append({"role": "tool", "tool_call_id": call_id, "content": said})
        else:
            raise RuntimeError(f"the model did not finish in {MAX_TURNS} turns")
    return tx


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", help="address of a running agenttx serve (default: embedded)")
    args = ap.parse_args()
    name, model = pick_model()
    print(f"model: {name}")
    if args.server:
        from agenttx.client import AsyncAgentTxClient

        async with AsyncAgentTxClient(args.server) as client:
            tx = await run(client, model)
    else:
        with tempfile.TemporaryDirectory() as d:
            data = Path(d)
            engine = await agenttx.Engine.open(
                f"sqlite:///{data / 'agenttx.db'}",
                fs_root=data / "files",
                outbox_path=data / "outbox.jsonl",
            )
            try:
                tx = await run(engine, model)
            finally:
                await engine.close()
    assert tx.result is not None
    print(f"{tx.transaction_id}: committed {tx.result.steps_committed} steps")


if __name__ == "__main__":
    asyncio.run(main())
