"""The gateway over ``@modelcontextprotocol/server-everything``: downstream progress is relayed
to the step's caller, a long-running call can be cancelled, a server killed mid-call is a
failure for a read and OUTCOME_UNKNOWN for a non-idempotent write (never a blind retry), the
session comes back by itself, a timeout of a non-idempotent write leaves OUTCOME_UNKNOWN, and
AgentTx's own environment (its API key) never reaches the downstream process."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agenttx.types import StepStatus
from gateway_servers import gateway_engine, npm_server, write_gateway

LONG = "trigger-long-running-operation"


@pytest.fixture
async def engine(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
    binary = npm_server("mcp-server-everything")
    monkeypatch.setenv("AGENTTX_API_KEY", "atx-secret-key-never-downstream")
    gateway = write_gateway(
        tmp_path / "gateway.toml",
        f"""
        [servers.every]
        command = "{binary}"

        [servers.slow]                      # the same server; its long call as a write
        command = "{binary}"
        include = ["{LONG}"]

        [servers.slow.tools.{LONG}]
        effect = "irreversible"
        idempotent = false
        """,
    )
    engine = await gateway_engine(store_url, tmp_path / "data", gateway)
    yield engine
    await engine.close()


def downstream_pids() -> list[int]:
    """The everything servers this test process started (node, our children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and "server-everything" in cmdline:
            found.append(int(entry.name))
    return found


def running_long_call(engine: Any, tx: str, tool: str) -> tuple[asyncio.Task[Any], asyncio.Event]:
    """Start a 30 s long-running operation; the event is set at its first progress
    notification, i.e. once the downstream server is running the call (a fixed 1 s sleep
    could cancel or kill before the call was sent on a busy machine)."""
    progressed = asyncio.Event()

    async def sink(done: float, total: float | None, message: str | None) -> None:
        progressed.set()

    running = asyncio.create_task(
        engine.execute_step(tx, 1, tool, {"duration": 30, "steps": 30}, progress=sink)
    )
    return running, progressed


async def downstream_runs(progressed: asyncio.Event, running: asyncio.Task[Any]) -> None:
    waiting = asyncio.ensure_future(progressed.wait())
    done, _ = await asyncio.wait({waiting, running}, timeout=60, return_when="FIRST_COMPLETED")
    waiting.cancel()
    assert progressed.is_set(), running.result() if running in done else "no progress in 60 s"


async def test_progress_is_relayed_to_the_caller(engine: Any) -> None:
    seen: list[tuple[float, float | None]] = []

    async def sink(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, total))

    tx = (await engine.begin()).transaction_id
    step = await engine.execute_step(
        tx, 1, f"every.{LONG}", {"duration": 1, "steps": 4}, progress=sink
    )
    assert step.status is StepStatus.SUCCESS, step
    assert len(seen) >= 3
    assert seen[-1][1] == 4


async def test_a_cancelled_step_cancels_the_downstream_call(engine: Any) -> None:
    tx = (await engine.begin()).transaction_id
    running, progressed = running_long_call(engine, tx, f"every.{LONG}")
    await downstream_runs(progressed, running)
    assert engine.cancel_step(tx, 1)
    step = await asyncio.wait_for(running, 30)
    assert step.status is not StepStatus.SUCCESS
    assert "cancel" in step.clean_hint.lower()
    # The session is still good for the next call.
    again = await engine.execute_step(tx, step.next_step_id, "every.get-sum", {"a": 2, "b": 3})
    assert again.status is StepStatus.SUCCESS
    assert "5" in str(again.output)


async def test_a_server_killed_mid_call_fails_a_read_and_comes_back(engine: Any) -> None:
    tx = (await engine.begin()).transaction_id
    pids = downstream_pids()
    assert len(pids) == 2
    running, progressed = running_long_call(engine, tx, f"every.{LONG}")
    await downstream_runs(progressed, running)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    step = await asyncio.wait_for(running, 30)
    assert step.status is StepStatus.ROLLBACK_TRIGGERED, step
    assert step.next_step_id == 1  # a read that lost its connection: retry it
    # The session is reopened with backoff; the retry waits for it.
    retry = await engine.execute_step(tx, 1, "every.get-sum", {"a": 1, "b": 1})
    assert retry.status is StepStatus.SUCCESS, retry.clean_hint
    assert set(downstream_pids()).isdisjoint(pids)


async def test_a_write_whose_server_dies_mid_call_is_outcome_unknown(engine: Any) -> None:
    tx = (await engine.begin()).transaction_id
    running, progressed = running_long_call(engine, tx, f"slow.{LONG}")
    await downstream_runs(progressed, running)
    for pid in downstream_pids():
        os.kill(pid, signal.SIGKILL)
    step = await asyncio.wait_for(running, 30)
    assert step.status is StepStatus.OUTCOME_UNKNOWN, step


async def test_a_timed_out_write_is_outcome_unknown_and_a_timed_out_read_a_failure(
    store_url: str, tmp_path: Path
) -> None:
    binary = npm_server("mcp-server-everything")
    gateway = write_gateway(
        tmp_path / "slow.toml",
        f"""
        [servers.slow]
        command = "{binary}"

        [servers.slow.tools.{LONG}]
        effect = "irreversible"
        idempotent = false
        timeout_s = 0.5

        [servers.reader]
        command = "{binary}"
        include = ["{LONG}"]

        [servers.reader.tools.{LONG}]
        timeout_s = 0.5
        """,
    )
    engine = await gateway_engine(store_url, tmp_path / "data2", gateway)
    try:
        tx = (await engine.begin()).transaction_id
        step = await engine.execute_step(tx, 1, f"slow.{LONG}", {"duration": 5, "steps": 5})
        assert step.status is StepStatus.OUTCOME_UNKNOWN, step
        # The hint is one line of at most 240 characters: with this long tool name the cause
        # is cut short, but it still says what happened and what to do.
        assert "timed out" in step.clean_hint, step.clean_hint
        assert "reconcile" in step.clean_hint, step.clean_hint
        # A read that times out is an ordinary failure: it is retried, nothing is unknown.
        tx = (await engine.begin()).transaction_id
        read = await engine.execute_step(tx, 1, f"reader.{LONG}", {"duration": 5, "steps": 5})
        assert read.status is StepStatus.ROLLBACK_TRIGGERED, read
        assert read.next_step_id == 1
    finally:
        await engine.close()


async def test_agenttx_api_key_never_reaches_the_downstream_server(engine: Any) -> None:
    tx = (await engine.begin()).transaction_id
    step = await engine.execute_step(tx, 1, "every.get-env", {})
    assert step.status is StepStatus.SUCCESS
    text = str(step.output)
    assert "PATH" in text  # it did print its environment
    assert "atx-secret-key-never-downstream" not in text
    assert "AGENTTX_API_KEY" not in text


async def test_a_staged_call_that_times_out_at_delivery_is_never_retried_blindly(
    store_url: str, tmp_path: Path
) -> None:
    binary = npm_server("mcp-server-everything")
    gateway = write_gateway(
        tmp_path / "staged.toml",
        f"""
        [servers.later]
        command = "{binary}"
        include = ["{LONG}"]

        [servers.later.tools.{LONG}]
        effect = "staged"
        idempotent = false
        timeout_s = 0.3
        """,
    )
    engine = await gateway_engine(store_url, tmp_path / "data3", gateway)
    try:
        engine.dispatcher.backoff_base_s = 0.0
        tx = (await engine.begin()).transaction_id
        await engine.execute_step(tx, 1, f"later.{LONG}", {"duration": 3, "steps": 3})
        committed = await engine.commit(tx)
        assert committed.effects_dispatched == 0
        assert "TimeoutError" in committed.dispatch_errors[0]
        dead: list[Any] = []
        for _ in range(200):  # the next try finds the call started and unanswered
            await engine.dispatcher.run_once()
            dead = await engine.store.list_outbox(statuses=["dead"])
            if dead:
                break
            await asyncio.sleep(0.05)
        assert "outcome unknown" in dead[0].last_error
    finally:
        await engine.close()
