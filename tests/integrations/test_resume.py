"""A crash of the agent's process mid-run, and a resume, in each framework.

A real subprocess (``resume_worker.py``) runs the agent with its framework and a scripted
model: it books blue, has a read fail and retried, sizes up red, and is killed with SIGKILL
when the model is asked to book red. A second process goes on with the same transaction
(``transaction(service, resume=transaction_id)``) and runs the agent again from the start: the
four calls made before the crash are answered with what they got then (the service's stored
replies, found by each call's request id), none runs again (blue is booked once), and the run
goes on to book red and commit. Embedded (the engine dies with the process and is opened again
on the same file), and remote (the server lives on; the client process dies). LangGraph also
with its durable checkpointer: the resumed graph goes on from its last checkpoint, asking
the model for its next answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

import agenttx
import lg_tools
import oa_tools
import pai_tools
import scenarios
from agenttx import NotActive
from agenttx.client import AsyncAgentTxClient, RetryPolicy
from agenttx.integrations import pydantic_ai as pax
from server_process import start_server

pytestmark = pytest.mark.stores("sqlite")

WORKER = Path(__file__).with_name("resume_worker.py")
TOOLS = {"langgraph": lg_tools, "openai_agents": oa_tools, "pydantic_ai": pai_tools}


async def worker(*args: str) -> tuple[int, dict[str, Any]]:
    """Run the worker to its end: its exit code, and what it printed (``{}`` if nothing)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(WORKER),
        *args,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode in (0, -signal.SIGKILL), err.decode()
    assert proc.returncode is not None
    return proc.returncode, json.loads(out) if out.strip() else {}


async def crash_and_resume(
    framework: str, where: str, tmp_path: Path, *checkpoint: str
) -> dict[str, Any]:
    """The crashed run, then the resumed one: what the resumed one said of its end."""
    log, tx_file = str(tmp_path / "rooms.jsonl"), str(tmp_path / "tx.txt")
    code, _ = await worker(framework, where, log, tx_file, "crash", *checkpoint)
    assert code == -signal.SIGKILL
    scenarios.check_crashed(log)
    code, said = await worker(framework, where, log, tx_file, "resume", *checkpoint)
    assert code == 0
    assert said["transaction_id"] == Path(tx_file).read_text()
    assert said["committed"]
    return said


@pytest.mark.parametrize("framework", sorted(TOOLS))
async def test_a_run_killed_mid_way_resumes_embedded_without_running_a_step_twice(
    framework: str, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'agenttx.db'}"
    said = await crash_and_resume(framework, url, tmp_path)
    assert said["replayed"] == scenarios.REPLAYED
    engine = await agenttx.Engine.open(
        url,
        tools=TOOLS[framework].TOOLS,
        fs_root=tmp_path / "files",
        outbox_path=tmp_path / "outbox.jsonl",
    )
    try:
        await scenarios.check_resumed(engine, said["transaction_id"], str(tmp_path / "rooms.jsonl"))
    finally:
        await engine.close()


async def test_a_client_process_killed_mid_way_resumes_on_the_same_server(
    tmp_path: Path,
) -> None:
    """The server keeps the transaction; the stored replies come back over gRPC (one
    framework: the integration's code is the same for each, as the embedded runs show)."""
    framework = "pydantic_ai"
    tools = TOOLS[framework]
    server = start_server(tmp_path / "data", "--tools", f"{tools.__file__}:TOOLS")
    try:
        said = await crash_and_resume(framework, f"grpc:{server.address}", tmp_path)
        assert said["replayed"] == scenarios.REPLAYED
        async with AsyncAgentTxClient(
            server.address, retry=RetryPolicy(max_attempts=1), timeout=30
        ) as client:
            await scenarios.check_resumed(
                client, said["transaction_id"], str(tmp_path / "rooms.jsonl")
            )
    finally:
        server.terminate()


async def test_a_langgraph_run_resumes_from_its_durable_checkpoint(tmp_path: Path) -> None:
    """The checkpoint holds the messages up to the crash, so nothing is made again: the
    resumed graph asks the model for its next answer, which is the next step."""
    url = f"sqlite:///{tmp_path / 'agenttx.db'}"
    checkpoint = str(tmp_path / "checkpoints.db")
    said = await crash_and_resume("langgraph", url, tmp_path, checkpoint)
    assert said["replayed"] == 0
    engine = await agenttx.Engine.open(
        url, tools=lg_tools.TOOLS, fs_root=tmp_path / "files", outbox_path=tmp_path / "o.jsonl"
    )
    try:
        await scenarios.check_resumed(engine, said["transaction_id"], str(tmp_path / "rooms.jsonl"))
    finally:
        await engine.close()


async def test_resuming_an_ended_transaction_is_refused(tmp_path: Path) -> None:
    engine = await agenttx.Engine.open(
        f"sqlite:///{tmp_path / 'agenttx.db'}", fs_root=tmp_path / "files"
    )
    try:
        r = await engine.begin(agent_id="rooms")
        await engine.rollback(r.transaction_id)
        with pytest.raises(NotActive, match="ROLLED_BACK"):
            async with pax.transaction(engine, resume=r.transaction_id):
                pass
    finally:
        await engine.close()
